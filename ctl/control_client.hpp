#pragma once
// The client side of jitterd's control protocol (docs/protocol.md): a blocking connection to the
// Unix socket that sends one request line at a time and reads reply and event lines back. It knows
// the envelope only; what a method's `result` means is for online_commands.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <signal.h>

#include "child_transport.hpp"
#include "protocol/errors.hpp"
#include "remote_host.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

inline constexpr const char* kDefaultSocketPath = "/run/jitterd/jitterd.sock";
// How long a reply may take by default: jitterd answers in milliseconds unless the kernel or the
// daemon is stuck, and a script should find out rather than hang.
inline constexpr shaper::Nanoseconds kDefaultTimeout = std::chrono::seconds(10);
// The longest line accepted from jitterd: a `status` with every session's 32 recent transitions or
// a `profiles` listing with long error lists stays far below this; anything longer is a broken
// peer, and reading it would only exhaust memory.
inline constexpr std::size_t kMaxLineBytes = 16 * 1024 * 1024;

// The failures of talking to jitterd are jitterctl's environment, so they are
// shaper::EnvironmentError (a std::system_error) like libshaper's: code() is the errno where there
// is one, std::errc::timed_out for a timeout, shaper::Errc::kProtocolBroken otherwise; what() is
// the message alone.

// jitterd could not be reached; the message says what to try (start it, --socket, the socket
// group).
class ConnectError : public shaper::EnvironmentError {
 public:
  ConnectError(const std::string& message, int error_number)
      : EnvironmentError(std::error_code(error_number, std::system_category()), message) {}
  int error_number() const { return code().value(); }
};

// jitterd broke the protocol or the connection: a line that is not JSON, a line too long, a reply
// to another request, no reply in time, or the connection closed early.
class ProtocolError : public shaper::EnvironmentError {
 public:
  explicit ProtocolError(const std::string& message,
                         std::error_code code = make_error_code(shaper::Errc::kProtocolBroken))
      : EnvironmentError(code, message) {}
};

// No reply within the timeout.
class TimeoutError : public ProtocolError {
 public:
  explicit TimeoutError(const std::string& message)
      : ProtocolError(message, std::make_error_code(std::errc::timed_out)) {}
};

// jitterd closed the connection; `mid_line` when it did so in the middle of a line.
class ConnectionClosed : public ProtocolError {
 public:
  ConnectionClosed(const std::string& message, bool mid_line)
      : ProtocolError(message), mid_line_(mid_line) {}
  bool mid_line() const { return mid_line_; }

 private:
  bool mid_line_;
};

// The interrupt descriptor became readable (SIGINT or SIGTERM arrived) while waiting.
class Interrupted : public shaper::EnvironmentError {
 public:
  Interrupted() : EnvironmentError(std::make_error_code(std::errc::interrupted), "interrupted") {}
};

using shaper::UniqueFd;

// Blocks SIGINT and SIGTERM for the calling thread while it lives and delivers them through a
// readable descriptor instead, so a long wait can stop cleanly without a global flag set by a
// signal handler. The previous signal mask is restored on destruction. Signals that arrived
// meanwhile stay pending, so it must outlive only code that consumes them (Ctrl-C ends the waiting
// command).
class InterruptSignals {
 public:
  InterruptSignals();
  InterruptSignals(const InterruptSignals&) = delete;
  InterruptSignals& operator=(const InterruptSignals&) = delete;
  ~InterruptSignals();

  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  sigset_t previous_mask_;
};

// An error reply's `error` object (docs/protocol.md, "Error codes").
using ErrorReply = jitterd::protocol::Error;

// One reply line: either `result` (ok) or `error`.
struct Reply {
  bool ok = false;
  nlohmann::json result;  // the method's result; converted to typed structs by its command
  ErrorReply error;       // meaningful when !ok
};

struct ClientOptions {
  std::string socket_path = kDefaultSocketPath;
  shaper::Nanoseconds timeout = kDefaultTimeout;  // for connecting, sending and each reply
  int interrupt_fd = -1;  // when >= 0 and readable, every wait throws Interrupted
  // Set: jitterd on another host, through `ssh HOST jitterctl proxy` or `kubectl exec POD --
  // jitterctl proxy` (socket_path is unused; the remote socket is the URL's path). commands: the
  // ssh and kubectl command words and the Kubernetes namespace ($JITTERD_SSH, $JITTERD_KUBECTL,
  // $JITTERD_K8S_NAMESPACE).
  std::optional<RemoteHost> remote;
  RemoteCommands commands;
  // Told what is worth knowing but no failure (which of several pods a k8s:// URL took); unset:
  // nothing is said.
  std::function<void(const std::string&)> note;
};

// A stream socket connected to jitterd's Unix socket at `path`, sends bounded by `timeout`
// (SO_SNDTIMEO). Throws ConnectError with a message that says what to do.
UniqueFd connect_unix_socket(const std::string& path, shaper::Nanoseconds timeout);

// A connection to jitterd. Requests are sent one at a time; `call` returns the matching reply and
// queues any event lines that arrive first, for `next_event`.
class ControlClient {
 public:
  using Clock = std::chrono::steady_clock;

  // A request sent whose reply is still to be read (`receive`); one at a time per connection.
  struct Sent {
    std::int64_t id = 0;
    std::string method;
    Clock::time_point deadline;  // the timeout from when it was sent
    std::string send_failure;    // EPIPE or ECONNRESET: a line jitterd sent before closing says why
  };

  // Connects or throws ConnectError with a message that says what to do.
  static ControlClient connect(const ClientOptions& options);

  // Sends {"id":N,"method":...,"params":...} and waits up to the timeout for its reply. Throws
  // TimeoutError, ConnectionClosed or ProtocolError when there is no usable reply.
  Reply call(const std::string& method, const nlohmann::json& params);
  // `call` in two halves, so that requests to many hosts are in flight together (a fleet's stage
  // and commit cost one round trip, not one per host). Throw as `call` does.
  Sent send(const std::string& method, const nlohmann::json& params);
  Reply receive(const Sent& sent);
  // To wait on many connections at once: the descriptor to poll for POLLIN, the interrupt
  // descriptor (-1: none; readable means Interrupted), and whether a whole line is read already
  // (then `receive` needs no wait).
  int fd() const { return fd_.get(); }
  int interrupt_fd() const { return options_.interrupt_fd; }
  bool line_buffered() const {
    return buffer_.find('\n', std::max(scanned_, consumed_)) != std::string::npos;
  }

  // The next event line, queued or read; waits until `deadline` (forever when nullopt). nullopt
  // when the deadline passed. Throws ConnectionClosed when jitterd closes the connection.
  std::optional<nlohmann::json> next_event(std::optional<Clock::time_point> deadline);

  // Where jitterd is, for people: the socket path, or the ssh:// or k8s:// URL.
  std::string endpoint() const;

 private:
  ControlClient(UniqueFd fd, ClientOptions options,
                std::unique_ptr<ChildTransport> tunnel = nullptr)
      : tunnel_(std::move(tunnel)), fd_(std::move(fd)), options_(std::move(options)) {}
  // The stream ended: over ssh or kubectl, says why when the child or the remote proxy failed
  // (ConnectError).
  void explain_end();

  void send_line(const std::string& line);
  // One line without its newline; nullopt when `deadline` passed first.
  std::optional<std::string> read_line(std::optional<Clock::time_point> deadline);
  // Whether the socket became readable before `deadline`.
  bool wait_readable(std::optional<Clock::time_point> deadline);
  void queue_event(nlohmann::json event);

  // Declared before fd_ so that it is destroyed after it: the child sees the stream's end first.
  std::unique_ptr<ChildTransport> tunnel_;
  UniqueFd fd_;
  ClientOptions options_;
  std::string buffer_;        // bytes read but not yet returned as lines
  std::size_t consumed_ = 0;  // buffer_[0, consumed_) was returned already
  std::size_t scanned_ = 0;   // buffer_[consumed_, scanned_) holds no newline
  std::int64_t next_id_ = 1;
  std::deque<nlohmann::json> pending_events_;  // events that arrived while waiting for a reply
};

}  // namespace jitterctl
