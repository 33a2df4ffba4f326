#pragma once
// The optional HTTP scrape endpoint (config metrics.listen, docs/daemon.md): GET or HEAD of
// /metrics (Prometheus' text exposition format, Dispatcher::metrics_text) and /healthz, on a TCP
// listener on jitterd's one io_context. It changes nothing: there is no other path, no method but
// GET and HEAD, and no request body. One request per connection (Connection: close). Hostile
// clients are bounded as on the control socket: a request's header has a size limit and must
// arrive within a time limit (slowloris), the reply must be taken within one too, and the
// connections are counted (the ones over the limit get 503 and are closed at once).

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "asio.hpp"
#include "config.hpp"
#include "logger.hpp"

namespace jitterd {

struct MetricsServerLimits {
  // Prometheus scrapes with one connection at a time per target; a few more leave room for a
  // second Prometheus and a curl, not for a thousand clients.
  std::size_t max_connections = 16;
  // Prometheus' request header is about 300 bytes; 8 KiB is what common servers allow (nginx's
  // large_client_header_buffers, Beast's own example servers).
  std::size_t max_header_bytes = 8 * 1024;
  // From accept to the end of the request's header, and for writing the reply: a scraper sends its
  // request at once and reads at once, so 10 s (Prometheus' default scrape_timeout) is lenient.
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::milliseconds reply_timeout{10'000};
};

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // `render` produces /metrics' body when a scrape asks for it (on the loop).
  MetricsServer(asio::io_context& io, Render render, Logger& log, MetricsServerLimits limits = {});
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer();

  // Binds and listens at `where`; throws shaper::SystemError naming the address when it cannot.
  void bind(const MetricsListen& where);
  // Takes over a listening TCP socket (systemd socket activation).
  void adopt_listener(int fd);
  void start();
  // Stops accepting and closes every connection.
  void stop();

  // The address listened on, as "127.0.0.1:9464" or "[::1]:9464" (the port the kernel chose for
  // port 0 in tests).
  std::string local_address() const;
  std::size_t open_connections() const { return connections_.size(); }

  class Connection;

 private:
  asio::awaitable<void> accept_loop();

  asio::io_context& io_;
  Render render_;
  Logger& log_;
  MetricsServerLimits limits_;
  asio::ip::tcp::acceptor acceptor_;
  std::set<std::shared_ptr<Connection>> connections_;
};

// Whether `fd` is a listening TCP socket (AF_INET or AF_INET6, SOCK_STREAM): what socket activation
// hands over for metrics. False for anything else, including a Unix socket.
bool is_tcp_listener(int fd);

}  // namespace jitterd
