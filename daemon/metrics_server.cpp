#include "metrics_server.hpp"

#include <sys/socket.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <string_view>

#include "shaper/errors.hpp"

namespace jitterd {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Response = http::response<http::string_body>;

// The Content-Type of Prometheus' text exposition format, version 0.0.4.
constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
// What a connection over max_connections gets before it is closed: short enough for any fresh
// socket's send buffer, so it is sent without waiting.
constexpr std::string_view kBusyReply =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

Response plain(http::status status, std::string body, unsigned version) {
  Response response(status, version);
  response.set(http::field::content_type, "text/plain; charset=utf-8");
  response.body() = std::move(body);
  return response;
}

// The reply to a request whose header was read whole. `has_body`: the header announces one.
Response answer(const http::request<http::empty_body>& request, bool has_body,
                const MetricsServer::Render& render) {
  const unsigned version = request.version();
  const auto method = request.method();
  if (method != http::verb::get && method != http::verb::head) {
    Response response = plain(http::status::method_not_allowed,
                              "jitterd's metrics endpoint answers GET and HEAD only\n", version);
    response.set(http::field::allow, "GET, HEAD");
    return response;
  }
  if (has_body) {
    return plain(http::status::payload_too_large, "a request body is not accepted\n", version);
  }
  std::string_view target(request.target().data(), request.target().size());
  target = target.substr(0, target.find('?'));
  if (target == "/metrics") {
    Response response = plain(http::status::ok, render(), version);
    response.set(http::field::content_type, kExpositionType);
    return response;
  }
  if (target == "/healthz") return plain(http::status::ok, "ok\n", version);
  return plain(http::status::not_found, "not found; jitterd serves /metrics and /healthz\n",
               version);
}

// Answers 503 without waiting. What the client already sent is read first: closing a socket with
// unread data makes the kernel send a reset, which may reach the client before the 503 does.
void refuse_busy(int fd) {
  char discard[4096];
  while (::recv(fd, discard, sizeof discard, MSG_DONTWAIT) > 0) {
  }
  (void)::send(fd, kBusyReply.data(), kBusyReply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)::shutdown(fd, SHUT_WR);
}

}  // namespace

// One HTTP client: reads one request's header (bounded in size and time), answers, and closes.
// Owned by the server's set and by its coroutine.
class MetricsServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(MetricsServer& server, tcp::socket socket)
      : server_(server), stream_(std::move(socket)) {}

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(
        stream_.get_executor(), [self]() { return self->serve(); }, asio::detached);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    server_.connections_.erase(shared_from_this());
  }

 private:
  asio::awaitable<void> serve() {
    auto self = shared_from_this();
    http::request_parser<http::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(server_.limits_.max_header_bytes));
    parser.body_limit(0);
    stream_.expires_after(server_.limits_.request_timeout);
    boost::system::error_code ec;
    co_await http::async_read_header(stream_, buffer_, parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (closed_) co_return;
    std::optional<Response> response;
    if (!ec || ec == http::error::body_limit) {
      // body_limit: the header was read whole and announces a body (Content-Length over 0).
      response = answer(parser.get(), ec || !parser.is_done(), server_.render_);
    } else if (ec == http::error::header_limit) {
      response = plain(http::status::request_header_fields_too_large,
                       "the request header is longer than " +
                           std::to_string(server_.limits_.max_header_bytes) + " bytes\n",
                       11);
    } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
      response = plain(http::status::bad_request, "not an HTTP/1 request\n", 11);
    }
    // Anything else (the client went away, or was too slow: beast::error::timeout) is closed
    // without a word.
    if (response) co_await reply(std::move(*response), parser.get().method() == http::verb::head);
    close();
  }

  asio::awaitable<void> reply(Response response, bool head) {
    response.set(http::field::connection, "close");
    response.keep_alive(false);
    response.prepare_payload();
    // HEAD: the header says how long the body is, and the body stays behind.
    if (head) response.body().clear();
    stream_.expires_after(server_.limits_.reply_timeout);
    boost::system::error_code ec;
    co_await http::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && !closed_) stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  MetricsServer& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bool closed_ = false;
};

MetricsServer::MetricsServer(asio::io_context& io, Render render, Logger& log,
                             MetricsServerLimits limits)
    : io_(io), render_(std::move(render)), log_(log), limits_(limits), acceptor_(io) {}

MetricsServer::~MetricsServer() {
  stop();
}

void MetricsServer::bind(const MetricsListen& where) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(where.address, ec);
  const std::string name = (address.is_v6() ? "[" + where.address + "]" : where.address) + ":" +
                           std::to_string(where.port);
  if (ec) throw shaper::SystemError("parse metrics.listen address", name, EINVAL);
  const tcp::endpoint endpoint(address, where.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(endpoint, ec);
  if (ec) {
    throw shaper::SystemError(
        "bind metrics listener", name + " (metrics.listen)", ec.value(),
        ec == asio::error::address_in_use
            ? "another program listens there (ss -ltnp shows which); choose another port in "
              "metrics.listen"
            : "metrics.listen must name an address of this host");
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw shaper::SystemError("listen", name + " (metrics.listen)", ec.value());
}

void MetricsServer::adopt_listener(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  shaper::check_syscall(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length),
                        "getsockname", "the metrics socket systemd handed over");
  acceptor_.assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd);
}

void MetricsServer::start() {
  asio::co_spawn(
      io_, [this]() { return accept_loop(); }, asio::detached);
}

void MetricsServer::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  auto open = connections_;
  for (const auto& c : open) c->close();
}

std::string MetricsServer::local_address() const {
  const tcp::endpoint e = acceptor_.local_endpoint();
  const std::string address = e.address().to_string();
  return (e.address().is_v6() ? "[" + address + "]" : address) + ":" + std::to_string(e.port());
}

asio::awaitable<void> MetricsServer::accept_loop() {
  while (acceptor_.is_open()) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      // EMFILE and friends: say so, and do not spin.
      log_.error("accept on the metrics listener: " + ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (connections_.size() >= limits_.max_connections) {
      refuse_busy(socket.native_handle());
      continue;  // the socket closes as it goes out of scope
    }
    auto connection = std::make_shared<Connection>(*this, std::move(socket));
    connections_.insert(connection);
    connection->start();
  }
}

bool is_tcp_listener(int fd) {
  int domain = 0;
  int type = 0;
  int listening = 0;
  socklen_t length = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) != 0) return false;
  length = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) return false;
  length = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0) return false;
  return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM && listening != 0;
}

}  // namespace jitterd
