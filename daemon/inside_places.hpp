#pragma once
// Where `--via inside` sessions live (issue 23, part 2): each target namespace shaped from inside
// has a session manager of its own, since its interfaces' names and indexes are those of that
// namespace (its eth0 is not jitterd's eth0). The dispatcher asks for the place of a resolved
// target; InsideTargets (inside_targets.hpp) is the real one, built on sockets created inside.

#include <vector>

#include "sessions.hpp"
#include "target_resolver.hpp"

namespace jitterd {

class InsidePlaces {
 public:
  virtual ~InsidePlaces() = default;
  // The sessions of the namespace of `target` (resolved with via inside, `target.inside` set),
  // opened if no session is there yet. A refusal when that namespace cannot be shaped from inside
  // (it is jitterd's own, another jitterd runs in it); environment failures are thrown.
  virtual Outcome<SessionManager*> open(ResolvedTarget& target) = 0;
  // The sessions of that namespace when it has any, else nullptr.
  virtual SessionManager* find(const ResolvedTarget& target) = 0;
  // Every place's sessions (status and clear of everything, the metrics).
  virtual std::vector<SessionManager*> all() = 0;
  // What every place counted (transitions, lateness, leases...) since jitterd started: the open
  // places' and the closed ones', so that a counter never goes down when a place closes.
  virtual SessionMetrics metrics() const = 0;
  // Places left without a session are closed soon (after the request or event being handled), so
  // that jitterd holds nothing of a namespace it no longer shapes.
  virtual void release_idle_soon() = 0;
};

}  // namespace jitterd
