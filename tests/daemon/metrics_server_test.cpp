// MetricsServer on a real TCP socket on 127.0.0.1 (port 0: the kernel's choice). The server's
// io_context runs on the test thread, in between the test's plain blocking-socket clients, which
// read without blocking (MSG_DONTWAIT) while the server runs.
//
// Time in these tests is only ever a limit that must pass before something may happen (a slow
// client's timeout) or a patience after which the test gives up; never a speed.
#include "metrics_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

#include "asio.hpp"
#include "logger.hpp"

using namespace std::chrono_literals;

namespace jitterd::testing {
namespace {

// How long a test waits for something that should happen at once.
constexpr auto kPatience = 3000ms;

// What the tests' render function returns for /metrics.
constexpr std::string_view kMetricsBody =
    "# HELP jitterd_sessions Sessions.\n# TYPE jitterd_sessions gauge\njitterd_sessions 2\n";

// A client on a blocking TCP socket that reads without blocking while the server runs.
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  ~HttpClient() { close(); }

  void send(const std::string& text) {
    ASSERT_EQ(::send(fd_, text.data(), text.size(), MSG_NOSIGNAL), static_cast<long>(text.size()));
  }
  // Reads what has arrived; true once the server closed the connection.
  bool poll() {
    char buffer[4096];
    for (;;) {
      const long n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        received_.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) closed_ = true;
      return closed_;
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return received_; }
  bool closed() const { return closed_; }

 private:
  int fd_;
  std::string received_;
  bool closed_ = false;
};

class MetricsServerTest : public ::testing::Test {
 protected:
  void start(MetricsServerLimits limits = {}) {
    server_ = std::make_unique<MetricsServer>(
        io_,
        [this] {
          ++renders_;
          return std::string(kMetricsBody);
        },
        log_, limits);
    server_->bind(MetricsListen{"127.0.0.1", 0});
    server_->start();
    const std::string address = server_->local_address();
    port_ = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  }

  // Runs the server until `client` is closed by it, or kPatience passed; its whole reply.
  std::string exchange(HttpClient& client, const std::string& request) {
    client.send(request);
    run_until([&] { return client.poll(); }, kPatience);
    EXPECT_TRUE(client.closed()) << "the server keeps the connection open: " << client.received();
    return client.received();
  }

  std::string request(const std::string& text) {
    HttpClient client(port_);
    return exchange(client, text);
  }

  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done() && std::chrono::steady_clock::now() < end) {
      io_.restart();
      io_.run_for(5ms);
    }
    return done();
  }

  asio::io_context io_;
  std::ostringstream log_stream_;
  Logger log_{log_stream_};
  std::unique_ptr<MetricsServer> server_;
  std::uint16_t port_ = 0;
  int renders_ = 0;
};

std::string status_line(const std::string& reply) {
  return reply.substr(0, reply.find("\r\n"));
}

std::string body_of(const std::string& reply) {
  const auto end = reply.find("\r\n\r\n");
  return end == std::string::npos ? std::string() : reply.substr(end + 4);
}

TEST_F(MetricsServerTest, MetricsIsTheRenderedTextInTheExpositionFormat) {
  start();
  const std::string reply = request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(reply), "HTTP/1.1 200 OK");
  EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << reply;
  EXPECT_NE(reply.find("Connection: close\r\n"), std::string::npos) << reply;
  EXPECT_EQ(body_of(reply), kMetricsBody);
  EXPECT_EQ(renders_, 1);
}

TEST_F(MetricsServerTest, HealthzAnswersOkWithoutRenderingMetrics) {
  start();
  const std::string reply = request("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(reply), "HTTP/1.1 200 OK");
  EXPECT_EQ(body_of(reply), "ok\n");
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsServerTest, AQueryStringDoesNotChangeThePath) {
  start();
  EXPECT_EQ(status_line(request("GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")),
            "HTTP/1.1 200 OK");
}

TEST_F(MetricsServerTest, HeadGivesTheLengthAndNoBody) {
  start();
  const std::string reply = request("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(reply), "HTTP/1.1 200 OK");
  EXPECT_NE(reply.find("Content-Length: " + std::to_string(kMetricsBody.size()) + "\r\n"),
            std::string::npos)
      << reply;
  EXPECT_EQ(body_of(reply), "");
}

TEST_F(MetricsServerTest, EveryOtherPathIsNotFound) {
  start();
  for (const char* path : {"/", "/metrics/", "/metricsx", "/api/v1/clear", "*", "/healthz/x"}) {
    EXPECT_EQ(status_line(request(std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n")),
              "HTTP/1.1 404 Not Found")
        << path;
  }
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsServerTest, MethodsOtherThanGetAndHeadAreNotAllowedAndSayWhichAre) {
  start();
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    const std::string reply =
        request(std::string(method) + " /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(status_line(reply), "HTTP/1.1 405 Method Not Allowed") << method;
    EXPECT_NE(reply.find("Allow: GET, HEAD\r\n"), std::string::npos) << reply;
  }
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsServerTest, ARequestBodyIsRefusedWhetherSizedOrChunked) {
  start();
  EXPECT_EQ(status_line(request("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(status_line(
                request("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsServerTest, AHeaderOverTheLimitIsRefused) {
  MetricsServerLimits limits;
  limits.max_header_bytes = 1024;
  start(limits);
  const std::string reply =
      request("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  EXPECT_EQ(status_line(reply), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsServerTest, GarbageIsABadRequest) {
  start();
  EXPECT_EQ(status_line(request("\x16\x03\x01 hello\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_line(request("GET /metrics SPDY/9\r\n\r\n")), "HTTP/1.1 400 Bad Request");
}

TEST_F(MetricsServerTest, AClientTooSlowToSendItsHeaderIsClosed) {
  MetricsServerLimits limits;
  limits.request_timeout = 300ms;
  start(limits);
  HttpClient slow(port_);
  slow.send("GET /metrics HTTP/1.1\r\nHost: x\r\n");  // and never the blank line
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(run_until([&] { return slow.poll(); }, kPatience)) << "never closed";
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 300ms) << "closed before its time was up";
  EXPECT_EQ(slow.received(), "");
  EXPECT_TRUE(run_until([&] { return server_->open_connections() == 0; }, kPatience));
}

TEST_F(MetricsServerTest, ConnectionsOverTheLimitGetBusyAndTheOthersStillServe) {
  MetricsServerLimits limits;
  limits.max_connections = 2;
  start(limits);
  HttpClient first(port_);
  HttpClient second(port_);
  ASSERT_TRUE(run_until([&] { return server_->open_connections() == 2; }, kPatience));
  HttpClient third(port_);
  ASSERT_TRUE(run_until([&] { return third.poll(); }, kPatience));
  EXPECT_EQ(status_line(third.received()), "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(status_line(exchange(first, "GET /healthz HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_line(request("GET /healthz HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST_F(MetricsServerTest, StopClosesOpenConnections) {
  start();
  HttpClient idle(port_);
  ASSERT_TRUE(run_until([&] { return server_->open_connections() == 1; }, kPatience));
  server_->stop();
  EXPECT_EQ(server_->open_connections(), 0u);
  EXPECT_TRUE(run_until([&] { return idle.poll(); }, kPatience));
}

TEST_F(MetricsServerTest, ABusyPortIsAnErrorNamingTheAddressAndTheKey) {
  start();
  MetricsServer second(
      io_, [] { return std::string(); }, log_);
  try {
    second.bind(MetricsListen{"127.0.0.1", port_});
    FAIL() << "bound a port in use";
  } catch (const std::exception& e) {
    EXPECT_NE(
        std::string(e.what()).find("127.0.0.1:" + std::to_string(port_) + " (metrics.listen)"),
        std::string::npos)
        << e.what();
  }
}

TEST(IsTcpListener, TellsATcpListenerFromAUnixOneAndAConnectedSocket) {
  const int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(tcp, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_FALSE(is_tcp_listener(tcp)) << "bound, not listening";
  ASSERT_EQ(::listen(tcp, 1), 0);
  EXPECT_TRUE(is_tcp_listener(tcp));
  const int unix_socket = ::socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_FALSE(is_tcp_listener(unix_socket));
  ::close(tcp);
  ::close(unix_socket);
}

}  // namespace
}  // namespace jitterd::testing
