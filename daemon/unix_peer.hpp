#pragma once
// Who is at the other end of a Unix socket: the process names jitterd puts in its refusals
// ("another jitterd (pid 1234, jitterd) ...") and the probe that finds a listener without blocking.

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <string>

namespace jitterd {

// The command name of `pid` from /proc (empty when /proc does not say).
std::string process_name(pid_t pid);
// " (pid 1234, jitterd)", or " (pid 1234)" without a name; "" for no pid.
std::string describe_pid(pid_t pid);

struct ListenerProbe {
  bool listening = false;  // something accepts connections there (a full backlog counts)
  ucred listener{};        // its credentials when listening (pid 0 when the kernel did not say)
  int error = 0;  // connect's errno when not listening (ECONNREFUSED: a socket file nobody holds)
};
// Connects to `address` without blocking; SO_PEERCRED then names the process that called listen().
// Throws shaper::SystemError when no socket can be made; `object` names the probe in it.
ListenerProbe probe_listener(const sockaddr_un& address, socklen_t size, const std::string& object);

}  // namespace jitterd
