#include "control_client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <grp.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "k8s_pods.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"

namespace jitterctl {

namespace {

using shaper::check_syscall;
using Json = nlohmann::json;

// Bytes asked of read() at a time: replies are usually a few hundred bytes, a full status or a
// profiles listing some tens of KiB.
constexpr std::size_t kReadChunk = 64 * 1024;
// How much of a broken line goes into an error message.
constexpr std::size_t kExcerptBytes = 80;

std::string excerpt(const std::string& line) {
  return shaper::text_excerpt(line, kExcerptBytes);
}

timeval to_timeval(shaper::Nanoseconds d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  // A zero timeval means "no timeout" to the kernel; a sub-microsecond timeout is not that.
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
  return tv;
}

// The group that owns the socket, for the EACCES hint. Best effort: the hint is extra, so a socket
// we cannot stat or a group without a name just gives the generic advice.
std::string socket_group(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  // Single-threaded command-line use: getgrgid's static buffer is fine.
  const group* g = ::getgrgid(st.st_gid);
  return g && g->gr_name ? g->gr_name : std::to_string(st.st_gid);
}

std::string connect_message(const std::string& path, int error_number) {
  std::string message = "cannot connect to jitterd at " + path + ": " + std::strerror(error_number);
  switch (error_number) {
    case ENOENT:
    case ECONNREFUSED:
      return message + " — is jitterd running? (systemctl start jitterd, or --socket PATH)";
    case EACCES:
    case EPERM: {
      const std::string group = socket_group(path);
      if (group.empty())
        return message + " — add yourself to the group that owns the socket, then log in again";
      return message + " — add yourself to the group that owns the socket (" + group +
             "): sudo usermod -aG " + group + " $USER, then log in again";
    }
    case EAGAIN:
      // A Unix-socket connect waits for room in the listener's backlog; SO_SNDTIMEO ended the wait.
      return message +
             " — jitterd is not accepting connections (overloaded or stuck); see journalctl -u "
             "jitterd";
    default:
      return message;
  }
}

ErrorReply read_error(const Json& message) {
  ErrorReply error;
  const auto e = message.find("error");
  if (e == message.end() || !e->is_object()) {
    error.code = jitterd::protocol::ErrorCode::kInternalError;
    error.message = "jitterd sent an error reply without an error object";
    return error;
  }
  auto text = [&](const char* key) {
    const auto v = e->find(key);
    return v != e->end() && v->is_string() ? v->get<std::string>() : std::string();
  };
  const std::string code = text("code");
  error.code = jitterd::protocol::error_code_from_string(code);
  error.message = text("message");
  error.where = text("where");
  error.hint = text("hint");
  if (error.message.empty()) error.message = code.empty() ? "unspecified error" : code;
  return error;
}

// Event lines have "event" and never "ok" (docs/protocol.md, "Envelope").
bool is_event(const Json& message) {
  return message.contains("event") && !message.contains("ok");
}

Json parse_line(const std::string& line) {
  // Bounded like every JSON jitterctl reads: the socket may not be jitterd's.
  shaper::JsonDocument doc = shaper::parse_json_bounded(line);
  if (doc.problem != shaper::JsonProblem::kNone)
    throw ProtocolError("jitterd sent a line that is not JSON: " + excerpt(line));
  Json message = std::move(doc.value);
  if (!message.is_object())
    throw ProtocolError("jitterd sent a line that is not a JSON object: " + excerpt(line));
  if (!is_event(message)) {
    const auto ok = message.find("ok");
    if (ok == message.end() || !ok->is_boolean()) {
      throw ProtocolError("jitterd sent a line that is neither a reply nor an event: " +
                          excerpt(line));
    }
  }
  return message;
}

}  // namespace

InterruptSignals::InterruptSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // pthread_sigmask returns the error number instead of setting errno.
  const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  if (rc != 0) throw shaper::SystemError("pthread_sigmask", "block SIGINT SIGTERM", rc);
  try {
    fd_ = UniqueFd(static_cast<int>(check_syscall(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK),
                                                  "signalfd", "SIGINT SIGTERM")));
  } catch (...) {
    ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    throw;
  }
}

InterruptSignals::~InterruptSignals() {
  // Take the signals that arrived out of the queue first: unblocking them would run their default
  // action and kill the process that just stopped cleanly.
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
  }
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

UniqueFd connect_unix_socket(const std::string& path, shaper::Nanoseconds timeout) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    throw ConnectError("cannot connect to jitterd at \"" + path + "\": a socket path has 1 to " +
                           std::to_string(sizeof address.sun_path - 1) + " bytes",
                       ENAMETOOLONG);
  }
  std::memcpy(address.sun_path, path.data(), path.size());

  UniqueFd fd(static_cast<int>(
      check_syscall(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket", path)));
  // SO_SNDTIMEO bounds both connect() (which waits while the listener's backlog is full) and
  // send().
  const timeval tv = to_timeval(timeout);
  check_syscall(::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv),
                "setsockopt SO_SNDTIMEO", path);
  try {
    check_syscall(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address),
                  "connect", path);
  } catch (const shaper::SystemError& e) {
    throw ConnectError(connect_message(path, e.error_number()), e.error_number());
  }
  return fd;
}

ControlClient ControlClient::connect(const ClientOptions& options) {
  if (!options.remote) {
    return ControlClient(connect_unix_socket(options.socket_path, options.timeout), options);
  }
  // Over ssh or kubectl exec nothing is known until the first reply: the child's failures show as
  // the stream's end, which explain_end turns into a message. A k8s:// URL first needs its pod.
  const RemoteHost& remote = *options.remote;
  ChildCommand command =
      remote.transport == Transport::kKubernetes
          ? kubectl_child_command(
                remote, options.commands,
                find_jitterd_pod(remote, options.commands, options.timeout, options.note))
          : ssh_child_command(remote, options.commands);
  auto [fd, tunnel] = ChildTransport::start(remote, std::move(command));
  const timeval tv = to_timeval(options.timeout);
  check_syscall(::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv),
                "setsockopt SO_SNDTIMEO", options.remote->url());
  return ControlClient(std::move(fd), options, std::move(tunnel));
}

std::string ControlClient::endpoint() const {
  return options_.remote ? options_.remote->url() : options_.socket_path;
}

void ControlClient::explain_end() {
  if (tunnel_) tunnel_->explain_end(options_.timeout);
}

Reply ControlClient::call(const std::string& method, const Json& params) {
  return receive(send(method, params));
}

ControlClient::Sent ControlClient::send(const std::string& method, const Json& params) {
  Sent sent{next_id_++, method, Clock::now() + options_.timeout, ""};
  const Json request = {{"id", sent.id}, {"method", method}, {"params", params}};
  try {
    send_line(request.dump() + "\n");
  } catch (const shaper::SystemError& e) {
    // jitterd may have answered the connection with one line ("busy") and closed it before reading
    // the request: that line says more than EPIPE, so read it before giving up.
    if (e.error_number() != EPIPE && e.error_number() != ECONNRESET) throw;
    sent.send_failure = e.what();
  }
  return sent;
}

Reply ControlClient::receive(const Sent& sent) {
  for (;;) {
    std::optional<std::string> line;
    try {
      line = read_line(sent.deadline);
    } catch (const ConnectionClosed& closed) {
      if (closed.mid_line()) {
        throw ConnectionClosed("jitterd closed the connection in the middle of its reply to " +
                                   sent.method + " (" + closed.what() + ")",
                               true);
      }
      throw ConnectionClosed("jitterd closed the connection without replying to " + sent.method +
                                 (sent.send_failure.empty() ? "" : " (" + sent.send_failure + ")"),
                             false);
    }
    if (!line) {
      throw TimeoutError("no reply from jitterd to " + sent.method + " within " +
                         shaper::format_duration(options_.timeout) + "; try a longer --timeout");
    }
    Json message = parse_line(*line);
    if (is_event(message)) {
      queue_event(std::move(message));
      continue;
    }
    // A reply without an id answers a request jitterd could not read far enough to find one (a line
    // that is not JSON, too long, or "busy" sent before reading anything): with one request in
    // flight it is ours.
    const auto reply_id = message.find("id");
    if (reply_id != message.end() && !reply_id->is_null() && *reply_id != Json(sent.id)) {
      throw ProtocolError("jitterd replied to request " + reply_id->dump() +
                          " while jitterctl waited for request " + std::to_string(sent.id));
    }
    Reply reply;
    reply.ok = message["ok"].get<bool>();
    if (reply.ok) {
      const auto result = message.find("result");
      if (result != message.end()) reply.result = std::move(*result);
    } else {
      reply.error = read_error(message);
    }
    return reply;
  }
}

std::optional<Json> ControlClient::next_event(std::optional<Clock::time_point> deadline) {
  if (!pending_events_.empty()) {
    Json event = std::move(pending_events_.front());
    pending_events_.pop_front();
    return event;
  }
  const std::optional<std::string> line = read_line(deadline);
  if (!line) return std::nullopt;
  Json message = parse_line(*line);
  if (!is_event(message))
    throw ProtocolError("jitterd sent a reply nobody asked for: " + excerpt(*line));
  return message;
}

void ControlClient::queue_event(Json event) {
  // jitterd disconnects a subscriber with more than 4096 queued events (docs/protocol.md); keeping
  // more than that here would only hide a client that reads too slowly.
  constexpr std::size_t kMaxPendingEvents = 4096;
  if (pending_events_.size() == kMaxPendingEvents) pending_events_.pop_front();
  pending_events_.push_back(std::move(event));
}

void ControlClient::send_line(const std::string& line) {
  std::size_t sent = 0;
  while (sent < line.size()) {
    // MSG_NOSIGNAL: a daemon that went away is an error to report, not a SIGPIPE that kills
    // jitterctl.
    const ssize_t n = ::send(fd_.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n == -1 && errno == EINTR) continue;
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      throw TimeoutError("jitterd did not take the request within " +
                         shaper::format_duration(options_.timeout) + "; try a longer --timeout");
    }
    sent += static_cast<std::size_t>(check_syscall(n, "send", endpoint()));
  }
}

std::optional<std::string> ControlClient::read_line(std::optional<Clock::time_point> deadline) {
  for (;;) {
    const auto newline = buffer_.find('\n', std::max(scanned_, consumed_));
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(consumed_, newline - consumed_);
      consumed_ = scanned_ = newline + 1;
      // Compact once the returned part dominates, so a long stream of events stays O(bytes).
      if (consumed_ > buffer_.size() / 2) {
        buffer_.erase(0, consumed_);
        consumed_ = scanned_ = 0;
      }
      return line;
    }
    scanned_ = buffer_.size();
    if (buffer_.size() - consumed_ > kMaxLineBytes) {
      throw ProtocolError("jitterd sent a line longer than " +
                          std::to_string(kMaxLineBytes / (1024 * 1024)) + " MiB");
    }
    if (!wait_readable(deadline)) return std::nullopt;
    const std::size_t old_size = buffer_.size();
    buffer_.resize(old_size + kReadChunk);
    const ssize_t n = ::read(fd_.get(), buffer_.data() + old_size, kReadChunk);
    const int read_errno = errno;
    buffer_.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == -1 && read_errno == EINTR) continue;
    // ECONNRESET: jitterd closed while a request of ours was still unread in its queue (after
    // "busy"); the lines it sent before were read already, so this is an end of stream like EOF.
    if (n == 0 || (n == -1 && read_errno == ECONNRESET)) {
      explain_end();
      const std::size_t partial = buffer_.size() - consumed_;
      if (partial > 0) {
        throw ConnectionClosed(std::to_string(partial) + " bytes of an unfinished line: " +
                                   excerpt(buffer_.substr(consumed_)),
                               true);
      }
      throw ConnectionClosed("jitterd closed the connection", false);
    }
    if (n == -1) {
      errno = read_errno;
      check_syscall(n, "read", endpoint());
    }
  }
}

bool ControlClient::wait_readable(std::optional<Clock::time_point> deadline) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline) {
      const auto left = *deadline - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      // Rounded up, so that poll never returns just before the deadline and makes us spin.
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      timeout_ms = static_cast<int>(std::min<std::int64_t>(ms, std::numeric_limits<int>::max()));
    }
    pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {options_.interrupt_fd, POLLIN, 0}};
    const nfds_t count = options_.interrupt_fd >= 0 ? 2 : 1;
    const int n = ::poll(fds, count, timeout_ms);
    if (n == -1 && errno == EINTR) continue;
    check_syscall(n, "poll", endpoint());
    if (count == 2 && fds[1].revents != 0) throw Interrupted();
    // POLLHUP and POLLERR too: the read that follows reports the end of the stream or the error.
    if (fds[0].revents != 0) return true;
  }
}

}  // namespace jitterctl
