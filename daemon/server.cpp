#include "server.hpp"

#include <poll.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <fstream>

#include "shaper/errors.hpp"

namespace jitterd {

using shaper::check_syscall;
using stream = asio::local::stream_protocol;

bool AccessPolicy::permits(const Peer& peer, const std::vector<std::uint32_t>& groups) const {
  if (peer.uid == 0 || peer.uid == daemon_uid) return true;
  if (!group) return false;
  return peer.gid == *group || std::find(groups.begin(), groups.end(), *group) != groups.end();
}

namespace {

Peer peer_of(int fd, std::vector<std::uint32_t>* groups) {
  ucred cred{};
  socklen_t len = sizeof cred;
  check_syscall(::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len), "getsockopt SO_PEERCRED",
                "control connection");
  Peer peer{cred.uid, cred.gid, cred.pid, {}};
  // Supplementary groups (Linux 4.13+): a member of the socket's group through a supplementary group
  // is a member.
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
  std::ifstream comm("/proc/" + std::to_string(cred.pid) + "/comm");
  std::getline(comm, peer.command);
  return peer;
}

}  // namespace

// One client. Reads requests, answers them in order, and (after subscribe) streams events; owned by
// the server's set and by its own coroutines, so it lives until both have finished.
class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ControlServer& server, stream::socket socket)
      : server_(server), socket_(std::move(socket)), wake_(socket_.get_executor()), idle_(socket_.get_executor()) {}

  void start() {
    std::vector<std::uint32_t> groups;
    peer_ = peer_of(socket_.native_handle(), &groups);
    authorized_ = server_.policy_.permits(peer_, groups);
    if (!authorized_) {
      ++server_.stats_.connections_refused;
      server_.log_.warning("refused a control connection from uid " + std::to_string(peer_.uid) + " pid " +
                           std::to_string(peer_.pid) + " (" + peer_.command + "): not in the socket's group");
    }
    auto self = shared_from_this();
    asio::co_spawn(socket_.get_executor(), [self]() { return self->read_loop(); }, asio::detached);
    asio::co_spawn(socket_.get_executor(), [self]() { return self->write_loop(); }, asio::detached);
    asio::co_spawn(socket_.get_executor(), [self]() { return self->idle_loop(); }, asio::detached);
  }

  // Queues a line; a client that lets too many pile up is disconnected.
  void send(std::string line) {
    if (closed_) return;
    if (outgoing_.size() >= server_.config_.limits.max_queued_events) {
      if (subscription_) ++server_.stats_.subscribers_dropped;
      server_.log_.warning("disconnecting uid " + std::to_string(peer_.uid) + " pid " + std::to_string(peer_.pid) +
                           ": it does not read what jitterd sends (" + std::to_string(outgoing_.size()) +
                           " lines queued)");
      close();
      return;
    }
    outgoing_.push_back(std::move(line));
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
    --server_.stats_.connections_open;
    if (server_.connections_.empty() && server_.finished_) std::exchange(server_.finished_, nullptr)();
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

  // Answers nothing but `line` (too many connections), then closes.
  void refuse(std::string line) {
    outgoing_.push_back(std::move(line));
    close_after_write_ = true;
    auto self = shared_from_this();
    asio::co_spawn(socket_.get_executor(), [self]() { return self->write_loop(); }, asio::detached);
  }

 private:
  asio::awaitable<void> read_loop() {
    auto self = shared_from_this();
    std::string buffer;
    const std::size_t max = server_.config_.limits.max_request_bytes;
    while (!closed_) {
      boost::system::error_code ec;
      const std::size_t n = co_await asio::async_read_until(socket_, asio::dynamic_buffer(buffer, max + 1), '\n',
                                                            asio::redirect_error(asio::use_awaitable, ec));
      if (closed_ || close_after_write_) co_return;  // closing: the writer closes once it has written
      if (ec == asio::error::not_found) {
        send_and_close(Dispatcher::error_line("too-large",
                                              "the request line is longer than " + std::to_string(max) + " bytes",
                                              "send one request per line; limits.max_request_bytes sets the limit"));
        co_return;
      }
      if (ec == asio::error::eof) {
        // The client is done sending (`echo ... | socat`): every request it sent is answered first.
        // A subscriber that only shut its sending side keeps receiving events; one that closed the
        // socket (the kernel reports a hang-up, not just the end of input) and anyone else is closed,
        // a non-subscriber once its replies are written.
        if (subscription_ && !peer_hung_up()) co_return;
        close_after_write_ = true;
        wake_.cancel();
        co_return;
      }
      if (ec) {
        close();
        co_return;
      }
      last_activity_ = MonotonicClock::now();
      std::string_view line(buffer.data(), n - 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") != std::string_view::npos) {
        Reply reply = server_.dispatcher_.handle(line, peer_, authorized_);
        send(std::move(reply.line));
        if (reply.subscribe && !subscription_ && !closed_) {
          std::weak_ptr<Connection> weak = self;
          subscription_ = server_.bus_.subscribe([weak, filter = *reply.subscribe](const Event& e) {
            if (auto c = weak.lock(); c && filter.matches(e)) c->send(Dispatcher::event_line(e));
          });
        }
      }
      buffer.erase(0, n);
    }
  }

  // Whether the client closed its socket altogether (both directions shut), rather than half-closed it.
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
      std::string line = std::move(outgoing_.front());
      outgoing_.pop_front();
      line += '\n';
      boost::system::error_code ec;
      co_await asio::async_write(socket_, asio::buffer(line), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        close();
        co_return;
      }
    }
  }

  // Closes a connection that sends nothing for limits.idle_timeout, unless it subscribed (subscribers
  // only listen).
  asio::awaitable<void> idle_loop() {
    auto self = shared_from_this();
    const auto timeout = std::chrono::duration_cast<MonotonicClock::duration>(server_.config_.limits.idle_timeout);
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
  std::deque<std::string> outgoing_;
  Peer peer_;
  bool authorized_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  std::optional<std::uint64_t> subscription_;
  MonotonicTime last_activity_ = MonotonicClock::now();
};

ControlServer::ControlServer(asio::io_context& io, Dispatcher& dispatcher, EventBus& bus, const Config& config,
                             AccessPolicy policy, ServerStats& stats, Logger& log)
    : io_(io), dispatcher_(dispatcher), bus_(bus), config_(config), policy_(policy), stats_(stats), log_(log),
      acceptor_(io) {}

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

void ControlServer::bind(const std::string& path, mode_t mode, std::optional<gid_t> group) {
  path_ = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw shaper::SystemError("bind control socket", path + " (exists and is not a socket; remove it)", EEXIST);
    }
    // Another jitterd answering there must not lose its socket to us.
    stream::socket probe(io_);
    boost::system::error_code ec;
    probe.connect(stream::endpoint(path), ec);
    if (!ec) {
      throw shaper::SystemError("bind control socket", path + " (another jitterd is listening there)", EADDRINUSE);
    }
    check_syscall(::unlink(path.c_str()), "unlink stale socket", path);
  }
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw shaper::SystemError("mkdir", dir, errno);
  }
  acceptor_.open(stream());
  // Created with no access for anyone but the owner, then opened up to the group once it has its group:
  // nobody outside the group can connect in between.
  const mode_t old_mask = ::umask(0177);
  boost::system::error_code ec;
  acceptor_.bind(stream::endpoint(path), ec);
  ::umask(old_mask);
  if (ec) throw shaper::SystemError("bind control socket", path, ec.value());
  owns_path_ = true;
  if (group) check_syscall(::chown(path.c_str(), static_cast<uid_t>(-1), *group), "chown control socket", path);
  check_syscall(::chmod(path.c_str(), mode), "chmod control socket", path);
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw shaper::SystemError("listen", path, ec.value());
}

void ControlServer::start() {
  asio::co_spawn(io_, [this]() { return accept_loop(); }, asio::detached);
}

asio::awaitable<void> ControlServer::accept_loop() {
  while (acceptor_.is_open()) {
    boost::system::error_code ec;
    stream::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      // EMFILE and friends: say so, and do not spin.
      log_.error("accept on the control socket: " + ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    ++stats_.connections_total;
    ++stats_.connections_open;
    auto connection = std::make_shared<Connection>(*this, std::move(socket));
    connections_.insert(connection);
    if (connections_.size() > config_.limits.max_connections) {
      ++stats_.connections_refused;
      connection->refuse(Dispatcher::error_line(
          "busy", "jitterd has " + std::to_string(config_.limits.max_connections) + " connections open",
          "close idle connections, or raise limits.max_connections"));
      continue;
    }
    try {
      connection->start();
    } catch (const std::exception& e) {
      log_.error(std::string("control connection: ") + e.what());
      connection->close();
    }
  }
}

void ControlServer::stop() {
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
