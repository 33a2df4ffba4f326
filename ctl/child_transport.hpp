#pragma once
// The transport of `jitterctl --host ssh://...` and `--host k8s://...`: a child process whose stdin
// and stdout are one end of a Unix socket pair and which runs `jitterctl proxy` next to the remote
// jitterd (`ssh HOST jitterctl proxy`, or `kubectl exec --stdin POD -- jitterctl proxy`:
// remote_host.hpp builds either argv). ControlClient speaks the protocol over the other end exactly
// as over jitterd's own socket (send with MSG_NOSIGNAL, SO_SNDTIMEO, poll, read), so every command
// works unchanged. What the child says on stderr goes to a memfd, read when the stream ends: its
// last line is what the user needs (auth failure, no route, command not found, RBAC refusal).

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

// The command line of a transport child, with what the messages about it need.
struct ChildCommand {
  std::vector<std::string> argv;
  // Where the remote proxy runs, for messages: the ssh host, or "pod POD on node NODE".
  std::string where;
  // The command to try by hand ("check with: ..."), stdin from /dev/null.
  std::string check;
  // What to do when argv[0] cannot be run at all.
  std::string install_hint;
};

// The ssh child for an ssh:// URL; the kubectl child for a k8s:// URL whose pod is `pod`.
ChildCommand ssh_child_command(const RemoteHost& remote, const RemoteCommands& commands);
ChildCommand kubectl_child_command(const RemoteHost& remote, const RemoteCommands& commands,
                                   const std::string& pod);

class ChildTransport {
 public:
  // Spawns the child (posix_spawnp, no shell) and returns the client's end of the socket pair with
  // the transport that owns the child. Throws ConnectError when the child cannot be started.
  static std::pair<shaper::UniqueFd, std::unique_ptr<ChildTransport>> start(
      const RemoteHost& remote, ChildCommand command);
  ChildTransport(const ChildTransport&) = delete;
  ChildTransport& operator=(const ChildTransport&) = delete;
  // The client's end is closed first (ControlClient's member order), so the child sees EOF and
  // ends; it gets a moment for that, then SIGTERM, then SIGKILL.
  ~ChildTransport();

  // The stream from the child ended. Waits up to `limit` for it to exit and throws ConnectError
  // naming the host, what failed (the child's last line on stderr) and how to fix it when the child
  // or the remote proxy failed; returns when it ended well (jitterd closed the connection).
  void explain_end(shaper::Nanoseconds limit);

  const RemoteHost& remote() const { return remote_; }

 private:
  ChildTransport(RemoteHost remote, ChildCommand command, ChildProcess child,
                 shaper::UniqueFd stderr_file)
      : remote_(std::move(remote)),
        command_(std::move(command)),
        child_(std::move(child)),
        stderr_file_(std::move(stderr_file)) {}

  RemoteHost remote_;
  ChildCommand command_;
  ChildProcess child_;
  shaper::UniqueFd stderr_file_;  // a memfd: the child's stderr
};

// What a finished child (run to its end, stdin from /dev/null) printed, and how it ended.
struct ChildRun {
  std::optional<int> status;  // its wait status; nullopt: killed after `limit`
  std::string out;            // its stdout, at most `max_out` bytes
  bool out_truncated = false;
  std::string last_error_line;  // its stderr's last line
};

// Runs `argv` (posix_spawnp, no shell) to its end within `limit` (SIGKILL after it). Throws
// ConnectError naming `remote` and `install_hint` when argv[0] cannot be run.
ChildRun run_child(const RemoteHost& remote, const std::vector<std::string>& argv,
                   const std::string& install_hint, shaper::Nanoseconds limit, std::size_t max_out);

// The message for a transport child that ended with `status` (a wait status), given its last
// stderr line: exposed for tests.
std::string ssh_failure_message(const RemoteHost& remote, int status, const std::string& last_line);
std::string kubectl_failure_message(const RemoteHost& remote, const ChildCommand& command,
                                    int status, const std::string& last_line);

}  // namespace jitterctl
