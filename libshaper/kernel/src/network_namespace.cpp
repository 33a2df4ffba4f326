#include "shaper/network_namespace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <memory>

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

std::optional<NetworkNamespace> NetworkNamespace::find(const NamespaceIdentity& identity,
                                                       const std::string& first) {
  // A cheap stat first: opening every process's namespace file would need ptrace access to each.
  const auto at = [&](const std::string& path) -> std::optional<NetworkNamespace> {
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) return std::nullopt;
    if (NamespaceIdentity{status.st_dev, status.st_ino} != identity) return std::nullopt;
    try {
      NetworkNamespace ns(open_network_namespace(path, path), path, path);
      if (ns.identity() == identity) return ns;  // still the one after opening it
    } catch (const SystemError&) {
      // Gone between the stat and the open, or not ours to open: look further.
    }
    return std::nullopt;
  };
  if (!first.empty()) {
    if (auto ns = at(first)) return ns;
  }
  for (const std::string& folder : {std::string(kNetnsDirectory), std::string("/proc/")}) {
    const bool processes = folder == "/proc/";
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(folder.c_str()), &::closedir);
    if (!dir) continue;
    while (const dirent* entry = ::readdir(dir.get())) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (processes && name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (auto ns = at(folder + name + (processes ? "/ns/net" : ""))) return ns;
    }
  }
  return std::nullopt;
}

bool NetworkNamespace::is_current() const {
  struct stat status {};
  check_syscall(::stat("/proc/thread-self/ns/net", &status), "stat", "/proc/thread-self/ns/net");
  return NamespaceIdentity{status.st_dev, status.st_ino} == identity_;
}

std::optional<std::uint64_t> NetworkNamespace::cookie() const {
  const UniqueFd socket = create_inside([this] {
    return UniqueFd(static_cast<int>(check_syscall(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0),
                                                   "socket AF_UNIX", description_)));
  });
  std::uint64_t cookie = 0;
  socklen_t size = sizeof cookie;
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &size) == 0) return cookie;
  if (errno == ENOPROTOOPT) return std::nullopt;  // before Linux 5.14
  check_syscall(-1, "getsockopt SO_NETNS_COOKIE", description_);
  return std::nullopt;
}

void NetworkNamespace::enter_from_this_thread() const {
  if (::setns(fd_.get(), CLONE_NEWNET) == 0) return;
  const int error = errno;
  throw SystemError(
      "setns (enter network namespace)", description_, error,
      error == EPERM ? "entering another network namespace needs CAP_SYS_ADMIN" : std::string{});
}

}  // namespace shaper
