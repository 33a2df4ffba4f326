#pragma once
// SHA-256 (FIPS 180-4), for capture and profile digests, computed by OpenSSL's libcrypto: its
// SHA-256 uses the CPU's SHA extensions where there are any (about 6x our former portable code on
// this project's machines, which made hashing a 195 MiB capture a third of `jitterctl compile`;
// docs/benchmarks.md).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // EVP_MD_CTX, from <openssl/types.h>; kept out of this header

namespace shaper {

// One digest being computed: update() any number of times, then finish() once. Move-only: it owns
// libcrypto's context. A failing libcrypto call throws CryptoError (errors.hpp).
class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> data);
  void update(std::string_view text) { update(std::as_bytes(std::span(text.data(), text.size()))); }
  std::array<std::uint8_t, 32> finish();
  // Lower-case hex of the digest.
  std::string finish_hex();

 private:
  struct ContextDeleter {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, ContextDeleter> context_;
};

std::string sha256_hex(std::string_view text);

}  // namespace shaper
