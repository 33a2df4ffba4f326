#pragma once
// The two halves of the systemd service protocol that jitterd speaks, by hand (libsystemd is not a
// dependency; the wire formats are small and stable):
//  - sd_notify(3): "READY=1", "STOPPING=1", "STATUS=...", "WATCHDOG=1" datagrams to $NOTIFY_SOCKET;
//  - sd_listen_fds(3): the listening sockets systemd hands over from fd 3 on (socket activation).
// Both take the environment values as parameters, so tests never touch the real environment; the
// *from_environment() functions read getenv() and unset the variables so that children do not
// inherit them. Those two change the environment: call them from main() before any thread starts.
//
// A malformed value (systemd never sets one; a person starting jitterd by hand might) is a
// shaper::EnvironmentError naming the variable (code() std::errc::invalid_argument); a failed
// system call is shaper::SystemError.

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitterd {

// The variables sd_notify(3) and sd_watchdog_enabled(3) read. Unset and empty mean the same.
struct NotifyEnvironment {
  // $NOTIFY_SOCKET: "/path" or "@abstract-name".
  std::optional<std::string> notify_socket = std::nullopt;
  // $WATCHDOG_USEC: WatchdogSec= in microseconds.
  std::optional<std::string> watchdog_usec = std::nullopt;
  // $WATCHDOG_PID: the one process that must send WATCHDOG=1.
  std::optional<std::string> watchdog_pid = std::nullopt;
};

// Tells the service manager about jitterd's state over $NOTIFY_SOCKET (an AF_UNIX datagram socket).
// Disabled, with every call a no-op, when NOTIFY_SOCKET is unset: jitterd then runs outside systemd
// or under a Type= other than notify.
class SystemdNotifier {
 public:
  // Opens the datagram socket (SOCK_CLOEXEC). Throws shaper::EnvironmentError for a malformed
  // value and shaper::SystemError when the socket cannot be created.
  explicit SystemdNotifier(const NotifyEnvironment& environment);
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, then unsets them.
  static SystemdNotifier from_environment();

  SystemdNotifier(SystemdNotifier&& other) noexcept;
  SystemdNotifier& operator=(SystemdNotifier&& other) noexcept;
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;
  ~SystemdNotifier();

  bool enabled() const { return fd_ >= 0; }

  // Sends `state` ("KEY=value" lines joined by '\n') as one datagram. The kernel has queued it on
  // the manager's socket when this returns. Throws shaper::SystemError naming the socket when
  // sendto fails.
  void notify(std::string_view state);

  // "READY=1" (plus "STATUS=<status>"): startup is complete; systemd starts units ordered after us.
  void ready(std::string_view status = {});
  // "STOPPING=1" (plus "STATUS=<status>"): shutdown has begun.
  void stopping(std::string_view status = {});
  // "STATUS=<text>": one line for `systemctl status`. Newlines in `text` become spaces, so a status
  // built from user data (an interface name, an error message) cannot add assignments of its own.
  void status(std::string_view text);

  // How often the manager expects "WATCHDOG=1" (WatchdogSec=); send it every half of this, as
  // sd_watchdog_enabled(3) advises. Empty when no watchdog is set, when WATCHDOG_PID names another
  // process, or when the notifier is disabled (nobody to send to).
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_interval_; }
  // "WATCHDOG=1" when watchdog_interval() is set; nothing otherwise.
  void watchdog();

 private:
  int fd_ = -1;
  sockaddr_un address_{};
  socklen_t address_length_ = 0;
  std::string socket_name_;  // NOTIFY_SOCKET as given, for error messages
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

// The variables sd_listen_fds(3) reads. Unset and empty mean the same.
struct ListenEnvironment {
  // $LISTEN_PID: the process the sockets are meant for.
  std::optional<std::string> listen_pid = std::nullopt;
  // $LISTEN_FDS: how many sockets, from fd 3 on.
  std::optional<std::string> listen_fds = std::nullopt;
  // $LISTEN_FDNAMES: the FileDescriptorName= of each, joined by ':'.
  std::optional<std::string> listen_fdnames = std::nullopt;
};

// The file descriptors socket activation passed to this process: 3, 4, ... LISTEN_FDS of them, with
// FD_CLOEXEC now set on each. Empty when LISTEN_PID or LISTEN_FDS is unset, or LISTEN_PID is not
// getpid() (the sockets were meant for another process; they are left alone). `names`, when given,
// receives one name per fd: LISTEN_FDNAMES, or "unknown" for each when it is unset.
// The caller owns the fds (hands one to an acceptor, closes the others). Every value is checked
// before any fd is touched. Throws shaper::EnvironmentError for a malformed value or a
// LISTEN_FDNAMES count that differs from LISTEN_FDS, and shaper::SystemError when an fd is not
// open.
std::vector<int> listen_fds(const ListenEnvironment& environment,
                            std::vector<std::string>* names = nullptr);

// Reads LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES, unsets them, and calls listen_fds().
std::vector<int> listen_fds_from_environment(std::vector<std::string>* names = nullptr);

// Whether `fd` is an AF_UNIX SOCK_STREAM socket in the listening state: the only kind of handed
// socket jitterd serves its protocol on. When it is and `path` is given, `path` receives its
// address: the file name, or "@name" in the abstract namespace. False for anything else, including
// an fd that is not a socket; throws shaper::SystemError when `fd` is not open.
bool is_unix_stream_listener(int fd, std::string* path = nullptr);

}  // namespace jitterd
