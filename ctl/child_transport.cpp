#include "child_transport.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control_client.hpp"
#include "shaper/errors.hpp"

extern char** environ;

namespace jitterctl {

namespace {

using shaper::check_syscall;
using shaper::UniqueFd;

// How long the child (ssh, kubectl) gets to end by itself after the client closed its end: the EOF
// travels to the remote proxy, which half-closes jitterd's socket; jitterd closes a finished
// connection and the proxy and the child exit within a round trip. A subscriber's connection is
// kept open by jitterd after a half close, so that one ends by SIGTERM (ssh closes the session; the
// remote proxy sees its stdout's reader leave). The conversation is over either way, so the wait is
// short.
constexpr auto kChildExitGrace = std::chrono::milliseconds(500);
// After SIGTERM, before SIGKILL.
constexpr auto kChildTermGrace = std::chrono::seconds(2);
// How much of the child's stderr is read for its last line: ssh's and kubectl's messages are one
// line each.
constexpr off_t kStderrTail = 4096;
// ssh's own failures (connect, auth, host key) exit 255; a remote shell that cannot find the
// command exits 127; `jitterctl proxy` exits 4 when it cannot reach jitterd.
constexpr int kSshFailed = 255;
constexpr int kCommandNotFound = 127;
// A container runtime that finds the command but cannot execute it; kubectl passes the code on.
constexpr int kCommandNotExecutable = 126;
constexpr int kProxyEnvironment = 4;
// kubectl exec ends with the remote command's code and says so on its own last line, after the
// command's message, which is the one worth quoting.
constexpr std::string_view kKubectlExitLine = "command terminated with exit code";

// posix_spawn's attributes and file actions as owners.
struct SpawnSetup {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnSetup() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

// The child gets `in_fd` as stdin, `out_fd` as stdout and the memfd as stderr; default signal
// handling with nothing blocked (jitterctl blocks SIGINT and SIGTERM while it waits, and the mask
// is inherited); a process group of its own, so that Ctrl-C reaches jitterctl only, which ends the
// child itself.
void prepare_spawn(SpawnSetup& s, int in_fd, int out_fd, int stderr_fd) {
  posix_spawn_file_actions_adddup2(&s.actions, in_fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&s.actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&s.actions, stderr_fd, STDERR_FILENO);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (const int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);
  posix_spawnattr_setpgroup(&s.attr, 0);
  posix_spawnattr_setflags(&s.attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
}

std::string how_to_check(const RemoteHost& remote) {
  std::string check = "ssh -o BatchMode=yes";
  if (remote.port) check += " -p " + std::to_string(*remote.port);
  if (!remote.user.empty()) check += " -l " + remote.user;
  return check + " " + remote.host + " " + remote_proxy_command(remote) + " </dev/null";
}

UniqueFd new_memfd(const char* name, const std::string& what) {
  return UniqueFd(
      static_cast<int>(check_syscall(::memfd_create(name, MFD_CLOEXEC), "memfd_create", what)));
}

// Spawns argv with the given stdio; throws ConnectError (with `install_hint`) when it cannot run.
ChildProcess spawn_child(const RemoteHost& remote, std::vector<std::string> argv, int in_fd,
                         int out_fd, int stderr_fd, const std::string& install_hint) {
  SpawnSetup setup;
  prepare_spawn(setup, in_fd, out_fd, stderr_fd);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &setup.actions, &setup.attr, args.data(), environ);
  if (rc != 0) {
    throw ConnectError("cannot reach jitterd on " + remote.url() + ": cannot run \"" + argv[0] +
                           "\": " + std::strerror(rc) + " — " + install_hint,
                       rc);
  }
  return ChildProcess(pid);
}

// The bytes of a memfd from `from` to its end, at most `max` of them.
std::string read_memfd(int fd, off_t from, std::size_t max, bool* truncated) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= from) return {};
  const auto wanted = static_cast<std::size_t>(size - from);
  if (truncated) *truncated = wanted > max;
  std::string text(std::min(wanted, max), '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), from);
  text.resize(static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  return text;
}

// The last line of a child's stderr worth quoting: kubectl's closing "command terminated with exit
// code N" is passed over for the remote command's own line before it.
std::string last_stderr_line(int fd) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::string text = read_memfd(fd, size > kStderrTail ? size - kStderrTail : 0,
                                static_cast<std::size_t>(kStderrTail), nullptr);
  for (;;) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
      text.pop_back();
    const auto newline = text.find_last_of('\n');
    std::string line = newline == std::string::npos ? text : text.substr(newline + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.starts_with(kKubectlExitLine) || newline == std::string::npos) return line;
    text.resize(newline);
  }
}

bool mentions(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

// What to do about ssh's own failure (exit 255), by its last line.
std::string ssh_failure_hint(const RemoteHost& remote, const std::string& line) {
  if (mentions(line, "Permission denied") || mentions(line, "Too many authentication")) {
    return "authentication failed: jitterctl runs ssh with BatchMode=yes, so a key must log in "
           "without a prompt (ssh-add, or IdentityFile in ~/.ssh/config)";
  }
  if (mentions(line, "Host key verification failed") || mentions(line, "HOST IDENTIFICATION")) {
    return "the host key is unknown or changed: connect once with ssh to check and accept it";
  }
  if (mentions(line, "Could not resolve")) return "check the host name";
  if (mentions(line, "Connection refused") || mentions(line, "No route") ||
      mentions(line, "timed out") || mentions(line, "unreachable")) {
    return "is sshd running on " + remote.host + " and reachable" +
           (remote.port ? " on port " + std::to_string(*remote.port) : std::string()) + "?";
  }
  return "try it by hand";
}

}  // namespace

ChildProcess::~ChildProcess() {
  if (pid_ < 0 || status_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) == -1 && errno == EINTR) {
  }
}

std::optional<int> ChildProcess::wait_for(shaper::Nanoseconds limit) {
  if (status_ || pid_ < 0) return status_;
  // A poll of waitpid: the child ends within milliseconds of its stream's end, and this runs once
  // per connection, so a pidfd would buy nothing here.
  constexpr auto kPollInterval = std::chrono::milliseconds(5);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == -1 && errno == EINTR) continue;
    check_syscall(r, "waitpid", "transport child (pid " + std::to_string(pid_) + ")");
    if (r == pid_) return status_ = status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
}

void ChildProcess::signal(int signal_number) const {
  if (pid_ >= 0 && !status_) ::kill(pid_, signal_number);
}

ChildCommand ssh_child_command(const RemoteHost& remote, const RemoteCommands& commands) {
  return {ssh_argv(remote, commands.ssh), remote.host, how_to_check(remote),
          "install openssh-client, or name the ssh program in $JITTERD_SSH"};
}

ChildCommand kubectl_child_command(const RemoteHost& remote, const RemoteCommands& commands,
                                   const std::string& pod) {
  std::vector<std::string> argv = kubectl_exec_argv(remote, commands, pod);
  std::string check = command_line_for_people(argv) + " </dev/null";
  return {std::move(argv), "pod " + pod + " on node " + remote.host, std::move(check),
          "install kubectl, or name the kubectl command in $JITTERD_KUBECTL"};
}

std::pair<UniqueFd, std::unique_ptr<ChildTransport>> ChildTransport::start(const RemoteHost& remote,
                                                                           ChildCommand command) {
  int pair[2];
  check_syscall(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), "socketpair",
                remote.url());
  UniqueFd ours(pair[0]), theirs(pair[1]);
  UniqueFd stderr_file = new_memfd("jitterctl-transport-stderr", "the transport's stderr");
  ChildProcess child = spawn_child(remote, command.argv, theirs.get(), theirs.get(),
                                   stderr_file.get(), command.install_hint);
  auto transport = std::unique_ptr<ChildTransport>(
      new ChildTransport(remote, std::move(command), std::move(child), std::move(stderr_file)));
  return {std::move(ours), std::move(transport)};
}

ChildTransport::~ChildTransport() {
  try {
    if (child_.wait_for(kChildExitGrace)) return;
    child_.signal(SIGTERM);
    child_.wait_for(kChildTermGrace);
  } catch (const std::exception&) {
    // waitpid failed: ChildProcess's destructor still kills and reaps.
  }
}

void ChildTransport::explain_end(shaper::Nanoseconds limit) {
  const std::optional<int> status = child_.wait_for(limit);
  if (!status) return;  // still running: the stream's end speaks for itself
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return;
  const std::string line = last_stderr_line(stderr_file_.get());
  throw ConnectError(remote_.transport == Transport::kKubernetes
                         ? kubectl_failure_message(remote_, command_, *status, line)
                         : ssh_failure_message(remote_, *status, line),
                     ECONNABORTED);
}

ChildRun run_child(const RemoteHost& remote, const std::vector<std::string>& argv,
                   const std::string& install_hint, shaper::Nanoseconds limit,
                   std::size_t max_out) {
  const UniqueFd null_in(static_cast<int>(
      check_syscall(::open("/dev/null", O_RDONLY | O_CLOEXEC), "open", "/dev/null")));
  const UniqueFd out_file = new_memfd("jitterctl-child-stdout", argv[0] + "'s stdout");
  const UniqueFd err_file = new_memfd("jitterctl-child-stderr", argv[0] + "'s stderr");
  ChildProcess child =
      spawn_child(remote, argv, null_in.get(), out_file.get(), err_file.get(), install_hint);
  ChildRun run;
  run.status = child.wait_for(limit);
  // Not ended in time: ChildProcess's destructor kills and reaps it; its output so far is read.
  run.out = read_memfd(out_file.get(), 0, max_out, &run.out_truncated);
  run.last_error_line = last_stderr_line(err_file.get());
  return run;
}

std::string ssh_failure_message(const RemoteHost& remote, int status,
                                const std::string& last_line) {
  const std::string said = last_line.empty() ? "" : ": " + last_line;
  const std::string where = "cannot reach jitterd on " + remote.url() + ": ";
  if (WIFSIGNALED(status)) {
    return where + "ssh was killed by signal " + std::to_string(WTERMSIG(status)) + said;
  }
  const int code = WEXITSTATUS(status);
  if (code == kSshFailed) {
    return where + "ssh failed" + said + " — " + ssh_failure_hint(remote, last_line) +
           "; check with: " + how_to_check(remote);
  }
  if (code == kCommandNotFound) {
    return where + "jitterctl was not found there" + said + " — install jitterctl on " +
           remote.host + " in the PATH that ssh sessions get (e.g. /usr/bin or /usr/local/bin)";
  }
  if (code == kProxyEnvironment) {
    // The remote proxy's own message (with its hint) is the last line.
    return where + "the remote jitterctl proxy could not reach jitterd" + said;
  }
  return where + "ssh " + remote.host + " " + remote_proxy_command(remote) +
         " ended with exit code " + std::to_string(code) + said;
}

std::string kubectl_failure_message(const RemoteHost& remote, const ChildCommand& command,
                                    int status, const std::string& last_line) {
  const std::string said = last_line.empty() ? "" : ": " + last_line;
  const std::string where = "cannot reach jitterd on " + remote.url() + ": ";
  if (WIFSIGNALED(status)) {
    return where + "kubectl was killed by signal " + std::to_string(WTERMSIG(status)) + said;
  }
  const int code = WEXITSTATUS(status);
  if (code == kProxyEnvironment) {
    return where + "the jitterctl proxy in " + command.where + " could not reach jitterd" + said;
  }
  if (code == kCommandNotFound || code == kCommandNotExecutable ||
      mentions(last_line, "executable file not found")) {
    return where + "jitterctl was not found in " + command.where + said +
           " — the image must hold jitterctl in its PATH (/usr/bin from the Debian package; "
           "docs/operations.md, \"Kubernetes\")";
  }
  std::string hint;
  if (mentions(last_line, "forbidden") || mentions(last_line, "Forbidden"))
    hint = "your Kubernetes user needs \"create\" on pods/exec in the namespace; ";
  return where + "kubectl exec into " + command.where + " failed (exit code " +
         std::to_string(code) + ")" + said + " — " + hint + "check with: " + command.check;
}

}  // namespace jitterctl
