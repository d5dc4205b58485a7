// SHA-256 and HMAC-SHA256 against published vectors: FIPS 180-2 Appendix B and RFC 4231 section 4.
#include "probes/net/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fw::net {
namespace {

std::string Hex(std::span<const uint8_t> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> Repeat(uint8_t b, size_t n) { return std::vector<uint8_t>(n, b); }

// FIPS 180-2, Appendix B.1, B.2 and B.3, plus the well-known empty-string digest.
TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(Hex(Sha256::Hash(Bytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256::Hash(Bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256::Hash(Repeat('a', 1'000'000))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(Hex(Sha256::Hash({})),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, IncrementalUpdatesMatchOneShotAcrossBlockBoundaries) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  Sha256Digest one_shot = Sha256::Hash(data);
  for (size_t chunk : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u}) {
    Sha256 h;
    for (size_t pos = 0; pos < data.size(); pos += chunk) {
      h.Update(std::span(data).subspan(pos, std::min(chunk, data.size() - pos)));
    }
    EXPECT_EQ(Hex(h.Final()), Hex(one_shot)) << "chunk " << chunk;
  }
}

struct HmacVector {
  const char* name;
  std::vector<uint8_t> key;
  std::vector<uint8_t> data;
  const char* mac_hex;  // possibly truncated (test case 5)
};

// RFC 4231 section 4.2 to 4.8 (test cases 1 to 7), HMAC-SHA-256 rows.
TEST(HmacSha256Test, Rfc4231Vectors) {
  std::vector<uint8_t> key25;
  for (uint8_t i = 1; i <= 25; ++i) key25.push_back(i);
  const std::vector<HmacVector> vectors = {
      {"case1", Repeat(0x0b, 20), Bytes("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"case2", Bytes("Jefe"), Bytes("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"case3", Repeat(0xaa, 20), Repeat(0xdd, 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"case4", key25, Repeat(0xcd, 50),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"case5_truncated_128", Repeat(0x0c, 20), Bytes("Test With Truncation"),
       "a3b6167473100ee06e0c796c2955552b"},
      {"case6", Repeat(0xaa, 131), Bytes("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {"case7", Repeat(0xaa, 131),
       Bytes("This is a test using a larger than block-size key and a larger than block-size "
             "data. The key needs to be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const HmacVector& v : vectors) {
    HmacSha256 hmac(std::span<const uint8_t>(v.key));
    std::string mac = Hex(hmac.Mac(v.data));
    std::string want = v.mac_hex;
    EXPECT_EQ(mac.substr(0, want.size()), want) << v.name;
  }
}

TEST(HmacSha256Test, ConstantTimeEqualComparesContentAndLength) {
  std::vector<uint8_t> a = {1, 2, 3}, b = {1, 2, 3}, c = {1, 2, 4}, d = {1, 2};
  EXPECT_TRUE(ConstantTimeEqual(a, b));
  EXPECT_FALSE(ConstantTimeEqual(a, c));
  EXPECT_FALSE(ConstantTimeEqual(a, d));
}

}  // namespace
}  // namespace fw::net
