#pragma once
// Knowing when a target namespace has gone (issue 23, "Lifetimes"). A namespace jitterd holds open
// (NetworkNamespace, or a socket created inside it) does not go away while it is held, so the end
// of a target is watched where it happens instead:
//  - a process's or container's namespace ends with the process: a pidfd (pidfd_open(2), Linux 5.3)
//    becomes readable when the process exits, and cannot be fooled by a reused PID;
//  - an `ip netns` name ends when `ip netns del` unmounts and removes /run/netns/NAME: an inotify
//    watch on the folder sees the name go (or be replaced by another namespace).
// Each watch has one file descriptor for an event loop to wait on (readable: look at gone()), and
// gone() to ask without waiting.

#include <sys/types.h>

#include <string>

#include "shaper/files.hpp"
#include "shaper/network_namespace.hpp"

namespace shaper {

class TargetWatch {
 public:
  // The process `pid` (a container's first process): gone when it exits. Throws SystemError
  // (ESRCH: no such process).
  static TargetWatch process(pid_t pid);
  // The named namespace `ns` was opened from (/run/netns/NAME): gone when the name is removed or
  // names another namespace.
  static TargetWatch named(const NetworkNamespace& ns);

  TargetWatch(TargetWatch&&) noexcept = default;
  TargetWatch& operator=(TargetWatch&&) noexcept = default;
  TargetWatch(const TargetWatch&) = delete;
  TargetWatch& operator=(const TargetWatch&) = delete;
  ~TargetWatch() = default;

  // Readable when something happened (for poll, epoll or an Asio descriptor); read nothing from it.
  int fd() const { return fd_.get(); }
  // Whether the target has gone; never blocks. For a named namespace it also drains the inotify
  // events that made fd() readable.
  bool gone();
  // "pid 4242", "netns blue".
  const std::string& description() const { return description_; }

 private:
  enum class Kind { kProcess, kNamed };
  TargetWatch(Kind kind, UniqueFd fd, std::string description, std::string path,
              NamespaceIdentity identity);

  Kind kind_;
  UniqueFd fd_;
  std::string description_;
  std::string path_;            // kNamed: /run/netns/NAME
  NamespaceIdentity identity_;  // kNamed: the namespace the name must still give
};

}  // namespace shaper
