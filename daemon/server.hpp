#pragma once
// The control socket: a Unix stream listener (bound here, or handed over by systemd), one coroutine
// per connection reading newline-delimited requests and one writing its replies and events, all on
// the single io_context thread. Limits keep one slow or hostile client from stalling the others: a
// request line has a maximum size, a connection's outgoing queue has a maximum length (a subscriber
// that does not read is disconnected), idle connections are closed, and connections are counted.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "asio.hpp"
#include "config.hpp"
#include "events.hpp"
#include "logger.hpp"
#include "profile_store.hpp"
#include "protocol.hpp"

namespace jitterd {

// Who may talk to jitterd: root, jitterd's own user, and members of the socket's group.
struct AccessPolicy {
  std::uint32_t daemon_uid = 0;
  std::optional<std::uint32_t> group;  // the socket's group
  bool permits(const Peer& peer, const std::vector<std::uint32_t>& groups) const;
  // Root and jitterd's own user: the administrator, who has a slot kept (ConnectionSlots).
  bool is_admin(const Peer& peer) const { return peer.uid == 0 || peer.uid == daemon_uid; }
};

// Who holds the control connections' slots, and who may take the next one. Only permitted peers
// hold slots (a refused peer is answered and closed before it is counted). limits.max_connections
// is the whole; one slot of it is kept for root and jitterd's user, so that the administrator can
// always get in to clear shaping, whoever fills the rest; and no other user may hold more than a
// quarter of it (at least one), so that one user's scripts cannot keep the others out.
class ConnectionSlots {
 public:
  explicit ConnectionSlots(std::size_t max_connections) : max_(max_connections) {}

  // Why `uid` may not take a slot now (the message of a `busy` reply), or nullopt: it may.
  std::optional<std::string> refusal(std::uint32_t uid, bool admin) const;
  void take(std::uint32_t uid);
  void release(std::uint32_t uid);

  std::size_t per_user() const;        // the most one user other than the administrator may hold
  std::size_t kept_for_admin() const;  // slots others may not take
  std::size_t held() const { return held_; }

 private:
  std::size_t max_;
  std::size_t held_ = 0;
  std::map<std::uint32_t, std::size_t> by_uid_;
};

// Makes `path` free for a new listener, or refuses (shaper::SystemError with a hint) when something
// that is not a socket is there, or when a process listens there (named by its pid, from
// SO_PEERCRED). Removes a socket file nobody listens on: what a killed jitterd leaves. main() calls
// it before recovery, which would otherwise take the qdiscs of a jitterd listening there for
// leftovers.
void free_socket_path(const std::string& path);

class ControlServer {
 public:
  using stream_socket = asio::local::stream_protocol::socket;
  // `profiles` is the store `dispatcher` reads: the server reads its files on a thread of its own
  // and lends them to the dispatcher (ProfileStore::Lend).
  ControlServer(asio::io_context& io, Dispatcher& dispatcher, const ProfileStore& profiles,
                EventBus& bus, const Config& config, AccessPolicy policy, ServerStats& stats,
                Logger& log);
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  ~ControlServer();

  // Takes over a listening socket (systemd socket activation).
  void adopt_listener(int fd);
  // Binds `path`: refuses when another jitterd answers there, replaces a stale socket file, and
  // sets the mode and group before anyone can connect (the socket is created under a restrictive
  // umask).
  void bind(const std::string& path, mode_t mode, std::optional<gid_t> group);

  void start();
  // Stops accepting and closes every connection.
  void stop();
  // Stops accepting; every connection writes what is queued (subscribers hear the last events),
  // then closes. The io_context runs out of work once they have.
  void finish(std::function<void()> done);

  const std::string& path() const { return path_; }

  class Connection;
  struct QueuedEvent;

 private:
  asio::awaitable<void> accept_loop();
  // Answers `line` without waiting (one short line fits any socket's buffer) and closes: a peer
  // that is refused holds nothing, however many times it connects.
  void refuse_at_once(stream_socket socket, const std::string& line);
  // The event as subscribers queue it: one for all of them (the last one published is kept to
  // share).
  std::shared_ptr<QueuedEvent> queued(const Event& event);

  asio::io_context& io_;
  Dispatcher& dispatcher_;
  const ProfileStore& profiles_;
  EventBus& bus_;
  const Config& config_;
  AccessPolicy policy_;
  ServerStats& stats_;
  Logger& log_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;
  bool owns_path_ = false;
  std::set<std::shared_ptr<Connection>> connections_;
  ConnectionSlots slots_;
  std::shared_ptr<QueuedEvent> last_queued_;
  std::function<void()> finished_;  // set by finish(): called once the last connection closed
  // The helper thread that reads long request lines as JSON (Dispatcher::read) and takes their
  // documents apart afterwards, so that the loop goes on meanwhile. Declared last: it is joined
  // first, before anything a request it is reading could refer to goes away.
  asio::thread_pool reader_{1};
  // The thread that reads profile files (ProfileStore::scan, lookup) for `profiles` and `apply`, so
  // that a large folder or a slow disk holds up only the request that reads it. Joined before the
  // reader; the store it reads outlives the server.
  asio::thread_pool files_{1};
  // The threads that run `probe` requests (each blocks its thread for the probes' duration, up to
  // kMaxProbeDuration): four probes at once, say four fleet hosts probing this one's neighbours;
  // more wait for a thread. `probes_stop_` ends running probes when the server stops. Joined
  // first.
  std::atomic<bool> probes_stop_{false};
  asio::thread_pool probes_{4};
};

}  // namespace jitterd
