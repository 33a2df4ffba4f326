#include "unix_peer.hpp"

#include <cerrno>
#include <fstream>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"

namespace jitterd {

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

std::string describe_pid(pid_t pid) {
  if (pid <= 0) return "";
  const std::string name = process_name(pid);
  return " (pid " + std::to_string(pid) + (name.empty() ? "" : ", " + name) + ")";
}

ListenerProbe probe_listener(const sockaddr_un& address, socklen_t size,
                             const std::string& object) {
  const shaper::UniqueFd probe(static_cast<int>(
      shaper::check_syscall(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
                            "socket AF_UNIX", "probe of " + object)));
  ListenerProbe out;
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), size) != 0 &&
      errno != EAGAIN) {
    out.error = errno;
    return out;
  }
  out.listening = true;
  socklen_t length = sizeof out.listener;
  if (::getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &out.listener, &length) != 0)
    out.listener = ucred{};
  return out;
}

}  // namespace jitterd
