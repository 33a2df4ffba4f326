#pragma once
// One jitterd per network namespace. Every jitterd marks its qdiscs with the same reserved handle
// (1a7e:), and a starting jitterd removes what carries it as a crash's leftovers; a second jitterd
// in the namespace, even with a state folder and socket of its own, would take the first one's
// shaping for leftovers and remove it. So each jitterd binds the abstract Unix socket
// "@jitterd/netns" (abstract names belong to the network namespace, and the kernel frees them when
// the process dies, kill -9 included) and keeps it for its life; a second one finds the name taken
// and refuses before recovery. Any user may bind an abstract name, so a holder that is neither root
// nor jitterd's own user cannot stop jitterd from starting: the check is skipped with a warning
// instead.

#include <string>

#include "shaper/expected.hpp"
#include "shaper/files.hpp"

namespace jitterd {

class NamespaceClaim {
 public:
  // The name in the abstract namespace, without its leading NUL.
  static constexpr const char* kName = "jitterd/netns";

  // Throws shaper::SystemError naming the jitterd that holds the claim (its pid, from the socket's
  // peer credentials) with a hint, or the failing system call. A holder of another user (not root,
  // not this process's) leaves the claim unheld, with a warning saying so. Always a value.
  static shaper::Expected<NamespaceClaim> acquire();

 private:
  explicit NamespaceClaim(shaper::UniqueFd fd) : fd_(std::move(fd)) {}
  shaper::UniqueFd fd_;
};

}  // namespace jitterd
