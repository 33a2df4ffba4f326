#pragma once
// Changes that `stage` checked and that wait for `commit` or `abort` (docs/protocol.md, "Two-phase
// changes"): each one the request as it was sent, under a random token, until it expires. Nothing
// is held in the kernel meanwhile: staging checks what the request would do, a commit does it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "clock.hpp"
#include "protocol/methods.hpp"
#include "sessions.hpp"

namespace jitterd {

// At most this many changes wait at once (a fleet stages one per host, and a harness a few): more
// is a client that stages and never commits, whose oldest changes are dropped.
inline constexpr std::size_t kMaxStagedChanges = 64;
// How long a staged change stays valid unless the request says (a fleet stages, then commits
// after every host answered: seconds over SSH).
inline constexpr Nanoseconds kDefaultStageTtl = std::chrono::seconds(30);
// The longest validity a request may ask for: longer is a change nobody is waiting to commit.
inline constexpr Nanoseconds kMaxStageTtl = std::chrono::minutes(10);

class StagedChanges {
 public:
  struct Change {
    protocol::Method method = protocol::Method::kApply;  // apply, switch or clear
    nlohmann::json params;  // as sent (checked); the commit adds its deadline
    MonotonicTime expires;
    std::uint32_t uid = 0;  // who staged it: only they may commit or abort it
  };

  // Keeps `change` and returns its token (32 hex digits from getrandom(2), which is thrown as a
  // shaper::SystemError when it fails). Expired changes go first; beyond kMaxStagedChanges the one
  // that expires soonest goes too.
  std::string add(Change change, MonotonicTime now);
  // Removes and returns the change of `token` staged by `uid`; not-found when there is none (never
  // staged, committed, aborted or expired) or it is someone else's.
  Outcome<Change> take(const std::string& token, std::uint32_t uid, MonotonicTime now);
  std::size_t size() const { return changes_.size(); }

 private:
  void drop_expired(MonotonicTime now);

  std::map<std::string, Change> changes_;
};

}  // namespace jitterd
