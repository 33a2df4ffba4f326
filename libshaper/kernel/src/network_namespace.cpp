#include "shaper/network_namespace.hpp"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>

#include "shaper/errors.hpp"

namespace shaper {

namespace {

constexpr std::string_view kNetnsDirectory = "/run/netns/";

NamespaceIdentity identity_of(int fd, const std::string& path) {
  struct stat status {};
  check_syscall(::fstat(fd, &status), "fstat", path);
  return NamespaceIdentity{status.st_dev, status.st_ino};
}

// The hint for a namespace file that cannot be opened, by errno; `named`: an `ip netns` name.
std::string open_hint(int error, bool named) {
  switch (error) {
    case ENOENT:
      return named ? "there is no such namespace: `ip netns list` shows the named ones"
                   : "there is no such file (or process): check the path or the PID";
    case EACCES:
    case EPERM:
      return "opening another process's network namespace needs ptrace access to that process "
             "(CAP_SYS_PTRACE, or the same user)";
    default:
      return {};
  }
}

// The namespace file `path`, checked to be a network namespace.
UniqueFd open_network_namespace(const std::string& path, const std::string& description,
                                bool named = false) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw SystemError("open network namespace " + description, path, error,
                      open_hint(error, named));
  }
  UniqueFd owned(fd);
  const int type = ::ioctl(owned.get(), NS_GET_NSTYPE);
  if (type < 0) {
    const int error = errno;
    throw SystemError("open network namespace " + description, path,
                      error == ENOTTY ? EINVAL : error,
                      error == ENOTTY ? "it is not a namespace file: name an `ip netns` name, a "
                                        "/proc/PID/ns/net or a container runtime's netns bind mount"
                                      : std::string{});
  }
  if (type != CLONE_NEWNET) {
    throw SystemError("open network namespace " + description, path, EINVAL,
                      "it is another kind of namespace, not a network one");
  }
  return owned;
}

}  // namespace

std::string NamespaceIdentity::to_string() const {
  return "net:[" + std::to_string(inode) + "]";
}

std::optional<std::string> netns_name_problem(std::string_view name) {
  if (name.empty()) return "a network namespace name cannot be empty";
  if (name == "." || name == "..") return "\"" + std::string(name) + "\" is not a namespace name";
  if (name.find('/') != std::string_view::npos)
    return "a network namespace name cannot contain '/': give a path with --netns-path instead";
  if (name.find('\0') != std::string_view::npos)
    return "a network namespace name cannot contain a NUL byte";
  if (name.size() > NAME_MAX)
    return "a network namespace name is at most " + std::to_string(NAME_MAX) + " bytes";
  return std::nullopt;
}

NetworkNamespace::NetworkNamespace(UniqueFd fd, std::string path, std::string description)
    : fd_(std::move(fd)),
      path_(std::move(path)),
      description_(std::move(description)),
      identity_(identity_of(fd_.get(), path_)) {}

NetworkNamespace NetworkNamespace::own() {
  const std::string path = "/proc/thread-self/ns/net";
  return NetworkNamespace(open_network_namespace(path, "own namespace"), path, "own namespace");
}

NetworkNamespace NetworkNamespace::named(std::string_view name) {
  if (const auto problem = netns_name_problem(name)) {
    throw SystemError("open network namespace", std::string(name), EINVAL, *problem);
  }
  const std::string path = std::string(kNetnsDirectory) + std::string(name);
  const std::string description = "netns " + std::string(name);
  return NetworkNamespace(open_network_namespace(path, description, true), path, description);
}

NetworkNamespace NetworkNamespace::of_process(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  const std::string description = "pid " + std::to_string(pid);
  return NetworkNamespace(open_network_namespace(path, description), path, description);
}

NetworkNamespace NetworkNamespace::at_path(const std::string& path) {
  return NetworkNamespace(open_network_namespace(path, path), path, path);
}

bool NetworkNamespace::is_current() const {
  struct stat status {};
  check_syscall(::stat("/proc/thread-self/ns/net", &status), "stat", "/proc/thread-self/ns/net");
  return NamespaceIdentity{status.st_dev, status.st_ino} == identity_;
}

void NetworkNamespace::enter_from_this_thread() const {
  if (::setns(fd_.get(), CLONE_NEWNET) == 0) return;
  const int error = errno;
  throw SystemError(
      "setns (enter network namespace)", description_, error,
      error == EPERM ? "entering another network namespace needs CAP_SYS_ADMIN" : std::string{});
}

}  // namespace shaper
