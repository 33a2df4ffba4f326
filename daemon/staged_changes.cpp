#include "staged_changes.hpp"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "shaper/errors.hpp"

namespace jitterd {
namespace {

// 128 bits: a token nobody guesses (a peer could otherwise commit another's staged change, were
// the uid check not there) and that two stages never share.
constexpr std::size_t kTokenBytes = 16;

std::string random_token() {
  std::array<unsigned char, kTokenBytes> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t got = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw shaper::SystemError("getrandom", "a stage token", errno);
    }
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 0xf];
  }
  return token;
}

}  // namespace

void StagedChanges::drop_expired(MonotonicTime now) {
  std::erase_if(changes_, [&](const auto& entry) { return entry.second.expires <= now; });
}

std::string StagedChanges::add(Change change, MonotonicTime now) {
  drop_expired(now);
  while (changes_.size() >= kMaxStagedChanges) {
    changes_.erase(std::min_element(
        changes_.begin(), changes_.end(),
        [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; }));
  }
  std::string token = random_token();
  changes_.emplace(token, std::move(change));
  return token;
}

Outcome<StagedChanges::Change> StagedChanges::take(const std::string& token, std::uint32_t uid,
                                                   MonotonicTime now) {
  drop_expired(now);
  const auto it = changes_.find(token);
  if (it == changes_.end() || it->second.uid != uid) {
    return RequestError{ErrorCode::kNotFound, "no staged change with token \"" + token + "\"",
                        "/params/token",
                        "a token is good for one commit or abort, by whoever staged it, until it "
                        "expires; stage the change again"};
  }
  Change out = std::move(it->second);
  changes_.erase(it);
  return out;
}

}  // namespace jitterd
