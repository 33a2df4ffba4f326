#include "proxy.hpp"

#include <cerrno>
#include <csignal>
#include <optional>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control_client.hpp"
#include "exit_codes.hpp"
#include "shaper/errors.hpp"

namespace jitterctl {

namespace {

using shaper::check_syscall;

// Bytes copied at a time; a reply is at most kMaxLineBytes, taken in several of these.
constexpr std::size_t kChunk = 64 * 1024;

// Blocks SIGPIPE while it lives, so that writing to a stdout whose reader left is EPIPE (the end
// of the conversation) rather than death by signal. The previous mask is restored.
class BlockSigpipe {
 public:
  BlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &set, &previous_);
  }
  ~BlockSigpipe() {
    // A SIGPIPE raised meanwhile is discarded: unblocked, it would kill the process.
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      int sig = 0;
      sigwait(&set, &sig);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  sigset_t previous_;
};

// Reads what `from` has; 0 at its end (EOF, or a reset socket). Throws SystemError otherwise.
std::size_t read_some(int from, char* buffer, const char* what) {
  for (;;) {
    const ssize_t n = ::read(from, buffer, kChunk);
    if (n == -1 && errno == EINTR) continue;
    if (n == -1 && errno == ECONNRESET) return 0;
    return static_cast<std::size_t>(check_syscall(n, "read", what));
  }
}

// Writes all of it; false when the reader is gone (EPIPE, ECONNRESET). Throws SystemError
// otherwise.
bool write_all(int to, const char* data, std::size_t size, const char* what) {
  while (size > 0) {
    const ssize_t n = ::write(to, data, size);
    if (n == -1 && errno == EINTR) continue;
    if (n == -1 && (errno == EPIPE || errno == ECONNRESET)) return false;
    check_syscall(n, "write", what);
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// The copy loop. Stdin's end is passed on as a half close (jitterd answers what it has, then
// closes; a subscriber keeps receiving events); the socket's end, or stdout's reader leaving, ends
// the conversation.
void bridge(int socket_fd, int in_fd, int out_fd) {
  std::string buffer(kChunk, '\0');
  bool in_open = true;
  for (;;) {
    // stdout is watched for its reader leaving (POLLERR on a pipe, POLLHUP on a socket): a
    // subscriber's client that went away (ssh killed, sshd closing the session) ends the proxy
    // now, not at the next event, and jitterd drops the subscription.
    pollfd fds[3] = {{socket_fd, POLLIN, 0}, {in_open ? in_fd : -1, POLLIN, 0}, {out_fd, 0, 0}};
    const int n = ::poll(fds, 3, -1);
    if (n == -1 && errno == EINTR) continue;
    check_syscall(n, "poll", "stdin, stdout and jitterd's socket");
    if (fds[2].revents & (POLLERR | POLLHUP)) return;
    if (fds[0].revents != 0) {
      const std::size_t got = read_some(socket_fd, buffer.data(), "jitterd's socket");
      if (got == 0 || !write_all(out_fd, buffer.data(), got, "stdout")) return;
    }
    if (fds[1].revents != 0) {
      const std::size_t got = read_some(in_fd, buffer.data(), "stdin");
      if (got == 0) {
        in_open = false;
        check_syscall(::shutdown(socket_fd, SHUT_WR), "shutdown", "jitterd's socket");
      } else if (!write_all(socket_fd, buffer.data(), got, "jitterd's socket")) {
        return;
      }
    }
  }
}

}  // namespace

int run_proxy(const std::string& socket_path, shaper::Nanoseconds timeout, int in_fd, int out_fd,
              std::ostream& err) {
  try {
    const BlockSigpipe no_sigpipe;
    const UniqueFd socket = connect_unix_socket(socket_path, timeout);
    // The connect timeout is not one for the conversation: a subscriber waits for hours.
    const timeval none{};
    check_syscall(::setsockopt(socket.get(), SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none),
                  "setsockopt SO_SNDTIMEO", socket_path);
    bridge(socket.get(), in_fd, out_fd);
    return kExitOk;
  } catch (const std::exception& e) {
    err << "jitterctl proxy: " << e.what() << std::endl;
    return kExitEnvironment;
  }
}

}  // namespace jitterctl

namespace jitterctl {

int proxy_command(const Invocation& inv) {
  inv.args.operands(0);
  const std::string socket = inv.args.text("--socket").value_or(inv.default_socket);
  const shaper::Nanoseconds timeout = inv.args.duration("--timeout").value_or(kDefaultTimeout);
  return run_proxy(socket, timeout, STDIN_FILENO, STDOUT_FILENO, inv.err);
}

}  // namespace jitterctl
