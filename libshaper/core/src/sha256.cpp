#include "shaper/sha256.hpp"

#include <openssl/evp.h>

#include <cstdlib>

#include "shaper/errors.hpp"

namespace shaper {

namespace {

// What a failure names as the object: the digest, since a context holds no file or name of its own.
constexpr std::string_view kObject = "SHA-256";

}  // namespace

void Sha256::ContextDeleter::operator()(evp_md_ctx_st* context) const {
  EVP_MD_CTX_free(context);
}

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  // EVP_MD_CTX_new returns null only when it cannot allocate; libcrypto queues the reason.
  check_openssl(context_ ? 1 : 0, "EVP_MD_CTX_new", kObject);
  check_openssl(EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr), "EVP_DigestInit_ex",
                kObject);
}

void Sha256::update(std::span<const std::byte> data) {
  check_openssl(EVP_DigestUpdate(context_.get(), data.data(), data.size()), "EVP_DigestUpdate",
                kObject);
}

std::array<std::uint8_t, 32> Sha256::finish() {
  std::array<std::uint8_t, 32> out{};
  unsigned int length = 0;
  check_openssl(EVP_DigestFinal_ex(context_.get(), out.data(), &length), "EVP_DigestFinal_ex",
                kObject);
  if (length != out.size())
    std::abort();  // EVP_sha256 always gives 32 bytes; anything else is a broken libcrypto
  return out;
}

std::string Sha256::finish_hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (std::uint8_t byte : finish()) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view text) {
  Sha256 hash;
  hash.update(text);
  return hash.finish_hex();
}

}  // namespace shaper
