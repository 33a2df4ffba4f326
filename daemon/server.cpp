#include "server.hpp"

#include <poll.h>

#include <grp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <string_view>
#include <vector>

#include "framing.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "unix_peer.hpp"

namespace jitterd {

using shaper::check_syscall;
using stream = asio::local::stream_protocol;

bool AccessPolicy::permits(const Peer& peer, const std::vector<std::uint32_t>& groups) const {
  if (peer.uid == 0 || peer.uid == daemon_uid) return true;
  if (!group) return false;
  return peer.gid == *group || std::find(groups.begin(), groups.end(), *group) != groups.end();
}

std::size_t ConnectionSlots::kept_for_admin() const {
  return max_ > 1 ? 1 : 0;  // with a single slot there is nothing to keep
}

std::size_t ConnectionSlots::per_user() const {
  return std::max<std::size_t>(1, max_ / 4);
}

std::optional<std::string> ConnectionSlots::refusal(std::uint32_t uid, bool admin) const {
  const std::string limit = " (limits.max_connections " + std::to_string(max_) + ")";
  if (held_ >= max_) return "jitterd has " + std::to_string(held_) + " connections open" + limit;
  if (admin) return std::nullopt;
  if (held_ >= max_ - kept_for_admin()) {
    return "jitterd has " + std::to_string(held_) +
           " connections open; the last slot is kept for root" + limit;
  }
  const auto it = by_uid_.find(uid);
  if (it != by_uid_.end() && it->second >= per_user()) {
    return "uid " + std::to_string(uid) + " has " + std::to_string(it->second) +
           " connections open, as many as one user may hold (a quarter of limits.max_connections " +
           std::to_string(max_) + ")";
  }
  return std::nullopt;
}

void ConnectionSlots::take(std::uint32_t uid) {
  ++held_;
  ++by_uid_[uid];
}

void ConnectionSlots::release(std::uint32_t uid) {
  const auto it = by_uid_.find(uid);
  if (it == by_uid_.end() || held_ == 0) std::abort();  // released a slot never taken: a bug here
  --held_;
  if (--it->second == 0) by_uid_.erase(it);
}

namespace {

// The most one read takes from a client (as much as Asio's read_until takes per read): a connection
// buffers at most limits.max_request_bytes plus one read.
constexpr std::size_t kReadChunkBytes = 64 * 1024;
// The first reads take at most this much: a request is usually a line of under 200 bytes, and a
// buffer every connection holds from the start costs its size a thousand times over with a thousand
// clients (64 KiB each was 64 MiB, tests/bench/load_clients). A client whose read fills the buffer
// gets one twice as large, up to kReadChunkBytes.
constexpr std::size_t kFirstReadBytes = 1024;
// Longer request lines are read as JSON on the server's helper thread. Parsing takes about 0.1 s
// per MiB on the development machine (an 8 MiB array of numbers held the loop, and every other
// client and schedule, for 0.8 s: tests/bench/load_clients --garbage-kind wide); up to 16 KiB it is
// under 2 ms, less than the hand-over to the helper and back is worth.
constexpr std::size_t kReadOnLoopBytes = 16 * 1024;
// A connection answers the requests it has read one after another for up to this long, then lets
// the io_context run everything else that is due (the schedules' timers, the other connections)
// before it goes on. Short requests (~10 us each) are answered several to a turn and their replies
// leave together; one that takes longer (an apply) ends its turn by itself. A longer budget gives a
// client that floods jitterd a larger share of a busy loop (200 us: the others' median latency 13x
// calm beside a garbage stream, 50 us: 4.5x; docs/benchmarks.md, "A whole gigabyte").
constexpr auto kTurnBudget = std::chrono::microseconds(50);
// The most one write to a client carries: the queued lines are sent together up to this size (at
// least one line, whatever its length). One system call per reply was a fifth of the daemon's time
// under a client streaming garbage lines (tests/bench/load_clients --hostile).
constexpr std::size_t kWriteBatchBytes = 64 * 1024;
// The helper thread's nice value (Linux: per thread). Where CPUs are short (a client streaming long
// lines keeps the helper busy), the loop, with every schedule and every other client, comes first:
// nice 10 weighs a tenth of nice 0. Raising it needs no privilege.
constexpr int kReaderNice = 10;

// Which profile files a request reads: "" for the whole folders (`profiles`), a name for `apply`
// with a profile by name, nothing for the rest (and for anything malformed: the dispatcher says
// what is wrong with it, without files).
std::optional<std::string> profiles_needed(const ReadRequest& read) {
  const auto& r = read.request;
  if (read.error || !r.is_object()) return std::nullopt;
  const auto method = r.find("method");
  if (method == r.end() || !method->is_string()) return std::nullopt;
  if (*method == "profiles") return std::string();
  if (*method != "apply") return std::nullopt;
  const auto params = r.find("params");
  if (params == r.end() || !params->is_object()) return std::nullopt;
  const auto profile = params->find("profile");
  if (profile == params->end() || !profile->is_string()) return std::nullopt;
  const std::string name = profile->get<std::string>();
  if (name.empty()) return std::nullopt;
  return name;
}

Peer peer_of(int fd, std::vector<std::uint32_t>* groups) {
  ucred cred{};
  socklen_t len = sizeof cred;
  check_syscall(::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len), "getsockopt SO_PEERCRED",
                "control connection");
  Peer peer{cred.uid, cred.gid, cred.pid, {}};
  // Supplementary groups (Linux 4.13+): a member of the socket's group through a supplementary
  // group is a member.
  std::vector<gid_t> list(64);
  for (;;) {
    socklen_t size = static_cast<socklen_t>(list.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, list.data(), &size) == 0) {
      list.resize(size / sizeof(gid_t));
      break;
    }
    if (errno != ERANGE || list.size() > 65536) {
      list.clear();
      break;
    }
    list.resize(size / sizeof(gid_t) + 1);
  }
  groups->assign(list.begin(), list.end());
  peer.command = process_name(cred.pid);
  return peer;
}

}  // namespace

// A published event as the subscribers' connections queue it: serialised by the first writer that
// sends it, once for all of them, and never on the path of the transition that published it (the
// schedules' coincident deadlines wait for the kernel, not for JSON; docs/benchmarks.md).
struct ControlServer::QueuedEvent {
  Event event;
  std::optional<std::string> line;
  ServerStats& stats;

  const std::string& text() {
    if (!line) {
      line = Dispatcher::event_line(event);
      ++stats.events_written;
    }
    return *line;
  }
};

std::shared_ptr<ControlServer::QueuedEvent> ControlServer::queued(const Event& event) {
  if (!last_queued_ || last_queued_->event.seq != event.seq) {
    last_queued_ = std::make_shared<QueuedEvent>(QueuedEvent{event, std::nullopt, stats_});
  }
  return last_queued_;
}

// One client. Reads requests, answers them in order, and (after subscribe) streams events; owned by
// the server's set and by its own coroutines, so it lives until both have finished.
class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
  // What the writer sends: a reply's line, or an event shared with the other subscribers.
  struct Outgoing {
    std::string line;
    std::shared_ptr<QueuedEvent> event;
    const std::string& text() { return event ? event->text() : line; }
  };

 public:
  // `peer` is permitted (the server refuses others before a connection is made) and holds a slot
  // until close().
  Connection(ControlServer& server, stream::socket socket, Peer peer)
      : server_(server),
        socket_(std::move(socket)),
        wake_(socket_.get_executor()),
        idle_(socket_.get_executor()),
        peer_(std::move(peer)) {}

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->read_loop(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->write_loop(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->idle_loop(); }, asio::detached);
  }

  // Queues a line (or an event, serialised when it is written); a client that lets too many pile up
  // is disconnected.
  void send(std::string line) { queue(Outgoing{std::move(line), nullptr}); }
  void send(std::shared_ptr<QueuedEvent> event) { queue(Outgoing{{}, std::move(event)}); }

  void queue(Outgoing item) {
    if (closed_) return;
    if (outgoing_.size() >= server_.config_.limits.max_queued_events) {
      if (subscription_) ++server_.stats_.subscribers_dropped;
      server_.log_.warning("disconnecting uid " + std::to_string(peer_.uid) + " pid " +
                           std::to_string(peer_.pid) + ": it does not read what jitterd sends (" +
                           std::to_string(outgoing_.size()) + " lines queued)");
      close();
      return;
    }
    outgoing_.push_back(std::move(item));
    wake_.cancel();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (subscription_) server_.bus_.unsubscribe(*subscription_);
    subscription_.reset();
    boost::system::error_code ignored;
    socket_.shutdown(stream::socket::shutdown_both, ignored);
    socket_.close(ignored);
    wake_.cancel();
    idle_.cancel();
    server_.connections_.erase(shared_from_this());
    server_.slots_.release(peer_.uid);
    --server_.stats_.connections_open;
    if (server_.connections_.empty() && server_.finished_)
      std::exchange(server_.finished_, nullptr)();
  }

  // Sends `line` and closes once it is written (too large).
  void send_and_close(std::string line) {
    send(std::move(line));
    close_after_write_ = true;
  }

  // Shutdown: reads nothing more, writes what is queued (the last events), then closes.
  void finish() {
    if (closed_) return;
    if (subscription_) server_.bus_.unsubscribe(*subscription_);
    subscription_.reset();
    close_after_write_ = true;
    wake_.cancel();
    idle_.cancel();
  }

 private:
  asio::awaitable<void> read_loop() {
    auto self = shared_from_this();
    RequestFramer framer(server_.config_.limits.max_request_bytes);
    std::vector<char> chunk(kFirstReadBytes);
    MonotonicTime turn_start = MonotonicClock::now();
    while (!closed_) {
      const RequestFramer::Next next = framer.next();
      if (next.status == RequestFramer::Status::kNeedMore) {
        boost::system::error_code ec;
        const std::size_t n = co_await socket_.async_read_some(
            asio::buffer(chunk), asio::redirect_error(asio::use_awaitable, ec));
        if (closed_ || close_after_write_)
          co_return;  // closing: the writer closes once it has written
        if (ec == asio::error::eof) {
          // The client is done sending (`echo ... | socat`): every request it sent is answered
          // first (an incomplete last line is not a request). A subscriber that only shut its
          // sending side keeps receiving events; one that closed the socket (the kernel reports a
          // hang-up, not just the end of input) and anyone else is closed, a non-subscriber once
          // its replies are written.
          if (subscription_ && !peer_hung_up()) co_return;
          close_after_write_ = true;
          wake_.cancel();
          co_return;
        }
        if (ec) {
          close();
          co_return;
        }
        // Only complete lines are activity: a client trickling the bytes of a line goes idle.
        if (framer.feed(std::string_view(chunk.data(), n)) > 0)
          last_activity_ = MonotonicClock::now();
        if (n == chunk.size() && chunk.size() < kReadChunkBytes) {
          chunk.resize(std::min(2 * chunk.size(), kReadChunkBytes));
        }
        turn_start = MonotonicClock::now();  // the read was a turn of its own
        continue;
      }
      if (next.status == RequestFramer::Status::kTooLarge) {
        send_and_close(Dispatcher::error_line(
            ErrorCode::kTooLarge,
            "the request line is longer than " + std::to_string(framer.max_line_bytes()) + " bytes",
            "send one request per line; limits.max_request_bytes sets the limit"));
        co_return;
      }
      ReadRequest read;
      if (next.line.size() <= kReadOnLoopBytes) {
        read = Dispatcher::read(next.line);
      } else {
        // The line stays where it is (the framer is not fed until this coroutine goes on).
        const std::string_view line = next.line;
        read = co_await asio::co_spawn(
            server_.reader_.get_executor(),
            [line]() -> asio::awaitable<ReadRequest> { co_return Dispatcher::read(line); },
            asio::use_awaitable);
        if (closed_ || close_after_write_)
          co_return;                         // closing meanwhile: nothing more is answered
        turn_start = MonotonicClock::now();  // the wait for the helper was a turn of its own
      }
      // The profile files a request needs are read on the file thread, the loop serving everyone
      // else meanwhile (a folder of thousands of files, a slow disk), then lent to the dispatcher.
      ProfileStore::Prefetch prefetch;
      if (const auto need = profiles_needed(read)) {
        // By reference: both live in this coroutine's frame, which waits for the helper. (A
        // coroutine lambda's own captures are not safe to use after its first suspension.)
        const ProfileStore& store = server_.profiles_;
        const std::string& name = *need;
        prefetch = co_await asio::co_spawn(
            server_.files_.get_executor(),
            [&store, &name]() -> asio::awaitable<ProfileStore::Prefetch> {
              ProfileStore::Prefetch p;
              if (name.empty()) {
                p.listing = store.scan();
              } else {
                p.lookup = store.lookup(name);
              }
              co_return p;
            },
            asio::use_awaitable);
        if (closed_ || close_after_write_) co_return;
        turn_start = MonotonicClock::now();
      }
      Reply reply;
      {
        const ProfileStore::Lend lend(server_.profiles_, prefetch);
        reply = server_.dispatcher_.handle(read, peer_, true);
      }
      if (next.line.size() > kReadOnLoopBytes) {
        // Taking a large document apart takes long too: the helper does it.
        asio::post(server_.reader_, [document = std::move(read)] {});
      }
      if (reply.probe) {
        reply.line = co_await probe(reply);
        if (closed_ || close_after_write_) co_return;
        turn_start = MonotonicClock::now();
      }
      send(std::move(reply.line));
      if (reply.subscribe && !subscription_ && !closed_) {
        std::weak_ptr<Connection> weak = self;
        subscription_ = server_.bus_.subscribe([weak, filter = *reply.subscribe](const Event& e) {
          if (auto c = weak.lock(); c && filter.matches(e)) c->send(c->server_.queued(e));
        });
      }
      // A client that sends many requests at once holds up neither the schedules' timers nor the
      // other connections for longer than kTurnBudget.
      if (MonotonicClock::now() - turn_start >= kTurnBudget) {
        co_await asio::post(socket_.get_executor(), asio::use_awaitable);
        if (closed_ || close_after_write_) co_return;
        turn_start = MonotonicClock::now();
      }
    }
  }

  // The reply of an accepted probe. Probes take seconds: they run on a probe thread while the
  // loop serves the schedules and every other connection. This connection's later requests wait
  // for the reply, since replies come in request order (docs/protocol.md).
  asio::awaitable<std::string> probe(const Reply& reply) {
    // By reference: `reply` lives in the caller's frame, which waits for this one.
    const ProbeRequest& request = *reply.probe;
    const nlohmann::json& id = reply.id;
    const std::atomic<bool>& stop = server_.probes_stop_;
    co_return co_await asio::co_spawn(
        server_.probes_.get_executor(),
        [&request, &id, &stop]() -> asio::awaitable<std::string> {
          co_return Dispatcher::probe_reply(id, request, stop);
        },
        asio::use_awaitable);
  }

  // Whether the client closed its socket altogether (both directions shut), rather than half-closed
  // it.
  bool peer_hung_up() {
    pollfd p{socket_.native_handle(), POLLOUT, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0;
  }

  asio::awaitable<void> write_loop() {
    auto self = shared_from_this();
    while (true) {
      while (!closed_ && outgoing_.empty()) {
        if (close_after_write_) {
          close();
          co_return;
        }
        wake_.expires_at(asio::steady_timer::time_point::max());
        boost::system::error_code ec;
        co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if (closed_) co_return;
      std::string batch = outgoing_.front().event ? outgoing_.front().event->text()
                                                  : std::move(outgoing_.front().line);
      outgoing_.pop_front();
      batch += '\n';
      while (!outgoing_.empty() &&
             batch.size() + outgoing_.front().text().size() < kWriteBatchBytes) {
        batch += outgoing_.front().text();
        batch += '\n';
        outgoing_.pop_front();
      }
      boost::system::error_code ec;
      co_await asio::async_write(socket_, asio::buffer(batch),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        close();
        co_return;
      }
    }
  }

  // Closes a connection that sends nothing for limits.idle_timeout, unless it subscribed
  // (subscribers only listen).
  asio::awaitable<void> idle_loop() {
    auto self = shared_from_this();
    const auto timeout =
        std::chrono::duration_cast<MonotonicClock::duration>(server_.config_.limits.idle_timeout);
    while (!closed_) {
      idle_.expires_at(last_activity_ + timeout);
      boost::system::error_code ec;
      co_await idle_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (closed_) co_return;
      if (subscription_) co_return;  // subscribers only listen: never idle
      if (MonotonicClock::now() >= last_activity_ + timeout) {
        close();
        co_return;
      }
    }
  }

  ControlServer& server_;
  stream::socket socket_;
  asio::steady_timer wake_;
  asio::steady_timer idle_;
  std::deque<Outgoing> outgoing_;
  Peer peer_;
  bool closed_ = false;
  bool close_after_write_ = false;
  std::optional<std::uint64_t> subscription_;
  MonotonicTime last_activity_ = MonotonicClock::now();
};

ControlServer::ControlServer(asio::io_context& io, Dispatcher& dispatcher,
                             const ProfileStore& profiles, EventBus& bus, const Config& config,
                             AccessPolicy policy, ServerStats& stats, Logger& log)
    : io_(io),
      dispatcher_(dispatcher),
      profiles_(profiles),
      bus_(bus),
      config_(config),
      policy_(policy),
      stats_(stats),
      log_(log),
      acceptor_(io),
      slots_(config.limits.max_connections) {
  // Best effort: a helper at the loop's priority reads the same lines, only with less grace.
  asio::post(reader_,
             [] { (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kReaderNice); });
}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::adopt_listener(int fd) {
  acceptor_.assign(stream(), fd);
  sockaddr_un address{};
  socklen_t len = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) == 0 && address.sun_path[0]) {
    path_ = address.sun_path;
  }
}

void free_socket_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) {
    throw shaper::SystemError(
        "bind control socket", path + " (exists and is not a socket)", EEXIST,
        "jitterd leaves it alone: move it away if it is not needed, or set socket.path "
        "(or --socket) to a free path");
  }
  // Another jitterd answering there must not lose its socket to us. Non-blocking: a listener whose
  // backlog is full answers EAGAIN, which means someone listens too.
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    throw shaper::SystemError("bind control socket", path, ENAMETOOLONG,
                              "socket paths hold at most 107 bytes");
  }
  std::copy(path.begin(), path.end(), address.sun_path);
  const ListenerProbe probe = probe_listener(address, sizeof address, path);
  if (probe.listening) {
    const pid_t pid = probe.listener.pid;
    throw shaper::SystemError(
        "bind control socket",
        path + " (another jitterd is listening there" + describe_pid(pid) + ")", EADDRINUSE,
        "only one jitterd may use a socket (and a state folder): stop the other one first (" +
            (pid > 0 ? "kill " + std::to_string(pid) + ", or " : std::string()) +
            "systemctl stop jitterd), or give this one a socket.path and state_dir of its own");
  }
  const int error = probe.error;
  if (error == ENOENT) return;  // removed meanwhile
  if (error != ECONNREFUSED) {
    throw shaper::SystemError(
        "probe control socket", path, error,
        "jitterd cannot tell whether something listens there, so it leaves the file alone: "
        "check the file's permissions, or set socket.path (or --socket) to another path");
  }
  // Nobody listens: the file a killed jitterd left.
  check_syscall(::unlink(path.c_str()), "unlink stale socket", path);
}

void ControlServer::bind(const std::string& path, mode_t mode, std::optional<gid_t> group) {
  path_ = path;
  free_socket_path(path);
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw shaper::SystemError("mkdir", dir, errno);
  }
  acceptor_.open(stream());
  // Created with no access for anyone but the owner, then opened up to the group once it has its
  // group: nobody outside the group can connect in between.
  const mode_t old_mask = ::umask(0177);
  boost::system::error_code ec;
  acceptor_.bind(stream::endpoint(path), ec);
  ::umask(old_mask);
  if (ec) throw shaper::SystemError("bind control socket", path, ec.value());
  owns_path_ = true;
  if (group)
    check_syscall(::chown(path.c_str(), static_cast<uid_t>(-1), *group), "chown control socket",
                  path);
  check_syscall(::chmod(path.c_str(), mode), "chmod control socket", path);
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw shaper::SystemError("listen", path, ec.value());
}

void ControlServer::start() {
  asio::co_spawn(
      io_, [this]() { return accept_loop(); }, asio::detached);
}

asio::awaitable<void> ControlServer::accept_loop() {
  while (acceptor_.is_open()) {
    boost::system::error_code ec;
    stream::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      // EMFILE and friends: say so, and do not spin.
      log_.error("accept on the control socket: " + ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    ++stats_.connections_total;
    // Who it is decides everything else, before the peer holds anything: a refused peer is answered
    // and closed at once, so that no number of refused connections keeps anyone out.
    Peer peer;
    std::vector<std::uint32_t> groups;
    try {
      peer = peer_of(socket.native_handle(), &groups);
    } catch (const std::exception& e) {
      log_.error(std::string("control connection: ") + e.what());
      continue;  // the socket closes as it goes out of scope
    }
    if (!policy_.permits(peer, groups)) {
      ++stats_.connections_refused;
      log_.warning("refused a control connection from uid " + std::to_string(peer.uid) + " pid " +
                   std::to_string(peer.pid) + " (" + peer.command + "): not in the socket's group");
      const RequestError denied = Dispatcher::permission_denied(peer, config_.socket.group);
      refuse_at_once(std::move(socket),
                     Dispatcher::error_line(denied.code, denied.message, denied.hint));
      continue;
    }
    if (const auto why = slots_.refusal(peer.uid, policy_.is_admin(peer))) {
      ++stats_.connections_refused;
      refuse_at_once(
          std::move(socket),
          Dispatcher::error_line(ErrorCode::kBusy, *why,
                                 "close idle connections, or raise limits.max_connections"));
      continue;
    }
    slots_.take(peer.uid);
    ++stats_.connections_open;
    auto connection = std::make_shared<Connection>(*this, std::move(socket), std::move(peer));
    connections_.insert(connection);
    connection->start();
  }
}

void ControlServer::refuse_at_once(stream_socket socket, const std::string& line) {
  const std::string text = line + "\n";
  // Non-blocking: a fresh socket's buffer (net.core.wmem_default, ~200 KiB) takes a line of a few
  // hundred bytes whole; if it somehow does not, the peer loses a reply it was refused anyway.
  (void)::send(socket.native_handle(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ignored;
  socket.close(ignored);
}

void ControlServer::stop() {
  probes_stop_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  auto open = connections_;
  for (const auto& c : open) c->close();
  if (owns_path_) {
    ::unlink(path_.c_str());
    owns_path_ = false;
  }
}

void ControlServer::finish(std::function<void()> done) {
  probes_stop_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  finished_ = std::move(done);
  auto open = connections_;
  for (const auto& c : open) c->finish();
  if (connections_.empty() && finished_) std::exchange(finished_, nullptr)();
  if (owns_path_) {
    ::unlink(path_.c_str());
    owns_path_ = false;
  }
}

}  // namespace jitterd
