// Probe wire format: round trips, every drop cause, auth, and the no-amplification rewrite.
#include "probes/net/probe_packet.h"

#include <gtest/gtest.h>

#include <vector>

namespace fw::net {
namespace {

std::vector<uint8_t> Packet(const ProbeHeader& h, const HmacSha256* key) {
  std::vector<uint8_t> buf(kHeaderSize + kMacSize + h.payload_len, 0xab);
  size_t n = WriteHeader(h, key, buf);
  EXPECT_GT(n, 0u);
  buf.resize(n + h.payload_len);
  return buf;
}

ProbeHeader Request() {
  ProbeHeader h;
  h.type = PacketType::kEchoRequest;
  h.flow_id = 0x00020007;
  h.payload_len = 100;
  h.seq = 0x0102030405060708ull;
  h.send_ts_ns = 123456789012345;
  return h;
}

TEST(ProbePacketTest, RoundTripsEveryField) {
  std::vector<uint8_t> p = Packet(Request(), nullptr);
  ASSERT_EQ(p.size(), kHeaderSize + 100);
  ProbeHeader got;
  ASSERT_TRUE(ParseProbe(p, nullptr, &got).ok());
  EXPECT_EQ(got.type, PacketType::kEchoRequest);
  EXPECT_EQ(got.flow_id, 0x00020007u);
  EXPECT_EQ(got.payload_len, 100u);
  EXPECT_EQ(got.seq, 0x0102030405060708ull);
  EXPECT_EQ(got.send_ts_ns, 123456789012345);
  EXPECT_EQ(got.flags, 0);
}

TEST(ProbePacketTest, HeaderIsBigEndianWithMagicFirst) {
  std::vector<uint8_t> p = Packet(Request(), nullptr);
  EXPECT_EQ(std::vector<uint8_t>(p.begin(), p.begin() + 6),
            (std::vector<uint8_t>{'F', 'W', 'P', 'B', 1, 1}));
  EXPECT_EQ(p[16], 0x01);  // seq, most significant byte first
  EXPECT_EQ(p[23], 0x08);
}

TEST(ProbePacketTest, EachMalformationHasItsOwnCause) {
  const std::vector<uint8_t> good = Packet(Request(), nullptr);
  ProbeHeader h;
  auto parse = [&](std::vector<uint8_t> p) { return ParseDatagram(p, nullptr, &h); };

  EXPECT_EQ(parse({}), DropReason::kTruncated);
  EXPECT_EQ(parse(std::vector<uint8_t>(good.begin(), good.begin() + 31)), DropReason::kTruncated);
  auto bad = good;
  bad[0] = 'X';
  EXPECT_EQ(parse(bad), DropReason::kBadMagic);
  bad = good;
  bad[4] = 2;
  EXPECT_EQ(parse(bad), DropReason::kBadVersion);
  bad = good;
  bad[5] = 9;
  EXPECT_EQ(parse(bad), DropReason::kBadType);
  bad = good;
  bad[5] = static_cast<uint8_t>(PacketType::kBulkRequest);  // bulk is TCP-only
  EXPECT_EQ(parse(bad), DropReason::kBadType);
  bad = good;
  bad[6] = 0x80;
  EXPECT_EQ(parse(bad), DropReason::kBadFlags);
  bad = good;
  bad.pop_back();  // payload length no longer matches the datagram
  EXPECT_EQ(parse(bad), DropReason::kBadLength);
  bad = good;
  bad.push_back(0);
  EXPECT_EQ(parse(bad), DropReason::kBadLength);
  bad = good;
  bad[12] = 0x7f;  // a huge payload length
  EXPECT_EQ(parse(bad), DropReason::kBadLength);
  bad = good;
  bad[7] |= kFlagAuth;  // says a MAC follows, but the datagram is only a header
  bad.resize(kHeaderSize + 4);
  EXPECT_EQ(parse(bad), DropReason::kTruncated);
}

TEST(ProbePacketTest, ParseProbeExplainsTheDrop) {
  std::vector<uint8_t> p = Packet(Request(), nullptr);
  p[4] = 7;
  ProbeHeader h;
  Status s = ParseProbe(p, nullptr, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad_version"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("version 1"), std::string::npos) << s.message();
}

TEST(ProbePacketTest, AuthenticatedPacketsNeedTheSameKey) {
  HmacSha256 key("shared-secret"), other("other-secret");
  std::vector<uint8_t> signed_packet = Packet(Request(), &key);
  ASSERT_EQ(signed_packet.size(), kHeaderSize + kMacSize + 100);
  ProbeHeader h;
  EXPECT_EQ(ParseDatagram(signed_packet, &key, &h), DropReason::kNone);
  EXPECT_EQ(ParseDatagram(signed_packet, &other, &h), DropReason::kBadAuth);
  EXPECT_EQ(ParseDatagram(signed_packet, nullptr, &h), DropReason::kNone);  // keyless: skipped
  EXPECT_EQ(ParseDatagram(Packet(Request(), nullptr), &key, &h), DropReason::kMissingAuth);

  // The MAC covers the header: changing the sequence number breaks it.
  std::vector<uint8_t> tampered = signed_packet;
  tampered[23] ^= 1;
  EXPECT_EQ(ParseDatagram(tampered, &key, &h), DropReason::kBadAuth);
}

TEST(ProbePacketTest, ReplyIsNeverLargerThanRequest) {
  HmacSha256 key("k");
  for (const HmacSha256* req_key :
       {static_cast<const HmacSha256*>(nullptr), static_cast<const HmacSha256*>(&key)}) {
    for (const HmacSha256* reply_key :
         {static_cast<const HmacSha256*>(nullptr), static_cast<const HmacSha256*>(&key)}) {
      std::vector<uint8_t> p = Packet(Request(), req_key);
      const size_t request_len = p.size();
      ProbeHeader h;
      ASSERT_EQ(ParseDatagram(p, nullptr, &h), DropReason::kNone);
      // Ask for more payload than the request had: it is clamped.
      size_t n = RewriteAsReply(h, PacketType::kEchoReply, 5000, reply_key, p);
      if (reply_key && !req_key) {
        EXPECT_EQ(n, 0u) << "an unauthenticated request must get no signed reply";
        continue;
      }
      EXPECT_GT(n, 0u);
      EXPECT_LE(n, request_len);
      ProbeHeader r;
      ASSERT_EQ(ParseDatagram(std::span(p).first(n), reply_key, &r), DropReason::kNone);
      EXPECT_EQ(r.type, PacketType::kEchoReply);
      EXPECT_EQ(r.seq, h.seq);
      EXPECT_EQ(r.send_ts_ns, h.send_ts_ns);
      EXPECT_EQ(r.flow_id, h.flow_id);
    }
  }
}

TEST(ProbePacketTest, WriteHeaderRefusesASmallBuffer) {
  uint8_t small[kHeaderSize - 1];
  EXPECT_EQ(WriteHeader(Request(), nullptr, small), 0u);
  HmacSha256 key("k");
  uint8_t no_room_for_mac[kHeaderSize];
  EXPECT_EQ(WriteHeader(Request(), &key, no_room_for_mac), 0u);
}

TEST(ProbePacketTest, DropReasonNamesAreStableLabels) {
  EXPECT_EQ(DropReasonName(DropReason::kTruncated), "truncated");
  EXPECT_EQ(DropReasonName(DropReason::kBadAuth), "bad_auth");
  EXPECT_EQ(DropReasonName(DropReason::kMissingAuth), "missing_auth");
}

}  // namespace
}  // namespace fw::net
