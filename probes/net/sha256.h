// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained so probes need no OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fw::net {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Not thread-safe; cheap to copy (the HMAC keeps precomputed states).
class Sha256 {
 public:
  Sha256();
  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data) {
    Update(std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  // Finishes the hash. The object must not be updated afterwards.
  Sha256Digest Final();

  static Sha256Digest Hash(std::span<const uint8_t> data);

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// HMAC-SHA256 with the key's inner and outer pad states computed once, so each MAC costs two
// compressions plus the message. Immutable after construction: safe to share across threads.
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  explicit HmacSha256(std::string_view key)
      : HmacSha256(std::span(reinterpret_cast<const uint8_t*>(key.data()), key.size())) {}

  Sha256Digest Mac(std::span<const uint8_t> message) const;

 private:
  Sha256 inner_;
  Sha256 outer_;
};

// Compares two byte ranges in time that depends only on their length.
bool ConstantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace fw::net
