#pragma once
// SHA-256 (FIPS 180-4), for capture and profile digests. Our own small implementation: the project's
// fixed dependencies include no crypto library, and a digest for integrity needs nothing more.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace shaper {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> data);
  void update(std::string_view text) { update(std::as_bytes(std::span(text.data(), text.size()))); }
  std::array<std::uint8_t, 32> finish();
  // Lower-case hex of the digest.
  std::string finish_hex();

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;
};

std::string sha256_hex(std::string_view text);

}  // namespace shaper
