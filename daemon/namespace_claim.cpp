#include "namespace_claim.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "shaper/errors.hpp"
#include "unix_peer.hpp"

namespace jitterd {

shaper::Expected<NamespaceClaim> NamespaceClaim::acquire() {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::size_t length = std::strlen(kName);
  std::memcpy(address.sun_path + 1, kName, length);  // sun_path[0] = '\0': the abstract namespace
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
  const std::string object = std::string("@") + kName;

  shaper::UniqueFd fd(static_cast<int>(shaper::check_syscall(
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket AF_UNIX", object)));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), size) == 0) {
    // Listening lets a second jitterd connect and learn this one's pid (SO_PEERCRED); nobody
    // accepts.
    shaper::check_syscall(::listen(fd.get(), 1), "listen", object);
    return NamespaceClaim(std::move(fd));
  }
  const int error = errno;
  if (error != EADDRINUSE) {
    throw shaper::SystemError("claim the network namespace (bind)", object, error);
  }
  const ucred cred = probe_listener(address, size, object).listener;
  const pid_t holder = cred.pid;
  if (holder > 0 && cred.uid != 0 && cred.uid != ::geteuid()) {
    return {NamespaceClaim(shaper::UniqueFd()),
            shaper::Diagnostics{
                {"", object + " is held by uid " + std::to_string(cred.uid) + describe_pid(holder) +
                         ", which is not a jitterd: another jitterd in this network namespace "
                         "cannot be detected (it would lose its shaping to this one's recovery)"}}};
  }
  throw shaper::SystemError(
      "another jitterd" + describe_pid(holder) + " runs in this network namespace", object, error,
      "one jitterd per network namespace: all of them mark their qdiscs with the handle 1a7e:, so "
      "this one "
      "would take the other's shaping for a crash's leftovers and remove it. Stop the other one "
      "first (" +
          (holder > 0 ? "kill " + std::to_string(holder) + ", or " : std::string()) +
          "systemctl stop jitterd), or start this one in another network namespace (ip netns exec "
          "NAME jitterd ...)");
}

}  // namespace jitterd
