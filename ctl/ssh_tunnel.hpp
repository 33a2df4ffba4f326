#pragma once
// The transport of `jitterctl --host ssh://...`: an `ssh HOST jitterctl proxy` child whose stdin
// and stdout are one end of a Unix socket pair; ControlClient speaks the protocol over the other
// end exactly as over jitterd's own socket (send with MSG_NOSIGNAL, SO_SNDTIMEO, poll, read), so
// every command works unchanged. What ssh says on stderr goes to a memfd, read when the stream
// ends: its last line is what the user needs (auth failure, no route, command not found).

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "remote_host.hpp"
#include "shaper/files.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

// Owns a child process: destroying one that still runs kills (SIGKILL) and reaps it.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();

  // Its wait status once it ended within `limit` (reaped then); nullopt while it still runs.
  std::optional<int> wait_for(shaper::Nanoseconds limit);
  void signal(int signal_number) const;

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

class SshTunnel {
 public:
  // Spawns ssh (posix_spawnp, no shell) and returns the client's end of the socket pair with the
  // tunnel that owns the child. Throws ConnectError when ssh cannot be started.
  static std::pair<shaper::UniqueFd, std::unique_ptr<SshTunnel>> start(
      const RemoteHost& remote, const std::vector<std::string>& ssh_command);
  SshTunnel(const SshTunnel&) = delete;
  SshTunnel& operator=(const SshTunnel&) = delete;
  // The client's end is closed first (ControlClient's member order), so ssh sees EOF and ends;
  // it gets a moment for that, then SIGTERM, then SIGKILL.
  ~SshTunnel();

  // The stream from ssh ended. Waits up to `limit` for ssh to exit and throws ConnectError naming
  // the host, what failed (ssh's last line on stderr) and how to fix it when ssh or the remote
  // proxy failed; returns when it ended well (jitterd closed the connection).
  void explain_end(shaper::Nanoseconds limit);

  const RemoteHost& remote() const { return remote_; }

 private:
  SshTunnel(RemoteHost remote, std::vector<std::string> argv, ChildProcess child,
            shaper::UniqueFd stderr_file)
      : remote_(std::move(remote)),
        argv_(std::move(argv)),
        child_(std::move(child)),
        stderr_file_(std::move(stderr_file)) {}
  std::string last_stderr_line() const;
  std::string failure_message(int status) const;

  RemoteHost remote_;
  std::vector<std::string> argv_;
  ChildProcess child_;
  shaper::UniqueFd stderr_file_;  // a memfd: ssh's stderr
};

// The message for an ssh that ended with `status` (a wait status), given its last stderr line:
// exposed for tests.
std::string ssh_failure_message(const RemoteHost& remote, int status, const std::string& last_line);

}  // namespace jitterctl
