#include "shaper/target_watch.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "shaper/errors.hpp"

namespace shaper {

TargetWatch::TargetWatch(Kind kind, UniqueFd fd, std::string description, std::string path,
                         NamespaceIdentity identity)
    : kind_(kind),
      fd_(std::move(fd)),
      description_(std::move(description)),
      path_(std::move(path)),
      identity_(identity) {}

TargetWatch TargetWatch::process(pid_t pid) {
  const std::string description = "pid " + std::to_string(pid);
  // The raw system call: Debian 12's <sys/pidfd.h> declares pidfd_open without extern "C".
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    const int error = errno;
    throw SystemError("pidfd_open (watch the target's process)", description, error,
                      error == ESRCH ? "the process has already exited" : std::string{});
  }
  return TargetWatch(Kind::kProcess, UniqueFd(fd), description, {}, {});
}

TargetWatch TargetWatch::named(const NetworkNamespace& ns) {
  const std::string& path = ns.path();
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
  UniqueFd fd(static_cast<int>(check_syscall(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC),
                                             "inotify_init1 (watch the target's name)", folder)));
  check_syscall(::inotify_add_watch(fd.get(), folder.c_str(),
                                    IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE |
                                        IN_DELETE_SELF | IN_UNMOUNT),
                "inotify_add_watch (watch the target's name)", folder);
  return TargetWatch(Kind::kNamed, std::move(fd), ns.description(), path, ns.identity());
}

bool TargetWatch::gone() {
  if (kind_ == Kind::kProcess) {
    pollfd p{fd_.get(), POLLIN, 0};
    return check_syscall(::poll(&p, 1, 0), "poll (target's process)", description_) > 0;
  }
  // Drain what made the descriptor readable; the name itself is the truth.
  std::array<char, 4096> events{};
  while (::read(fd_.get(), events.data(), events.size()) > 0) {
  }
  struct stat status {};
  if (::stat(path_.c_str(), &status) != 0) {
    if (errno == ENOENT) return true;
    check_syscall(-1, "stat (target's name)", path_);
  }
  return NamespaceIdentity{status.st_dev, status.st_ino} != identity_;
}

}  // namespace shaper
