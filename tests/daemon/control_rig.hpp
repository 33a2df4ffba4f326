#pragma once
// A control server on a real Unix socket in a temporary folder (ServerRig), and a client of it
// (ControlClient): what the control socket's tests (server_test.cpp) and the metrics endpoint's
// neighbour test (metrics_server_test.cpp) share. The server's io_context runs on the test thread
// (DaemonRig::run_until) in between the clients, which read without blocking (MSG_DONTWAIT).

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "profile_store.hpp"
#include "protocol.hpp"
#include "server.hpp"
#include "test_support.hpp"

namespace jitterd::testing {

// How long a ControlClient waits for a reply that should come at once.
constexpr std::chrono::milliseconds kControlPatience{3000};

// connect(2) to `path`; the fd, or -1 with errno.
int connect_to(const std::string& path);

// A blocking-socket client that reads without blocking while the server runs.
class ControlClient {
 public:
  explicit ControlClient(const std::string& path) : fd_(connect_to(path)) {
    EXPECT_GE(fd_, 0) << "connect " << path << ": " << std::strerror(errno);
  }
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  ~ControlClient() { close(); }

  void send(std::string_view text) {
    while (!text.empty()) {
      const long n = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GT(n, 0) << "send: " << std::strerror(errno);
      text.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void request(const nlohmann::json& j) { send(j.dump() + "\n"); }
  // Sends EOF; the daemon may still write.
  void half_close() { ::shutdown(fd_, SHUT_WR); }

  // The next line (without "\n"), running the server meanwhile; nullopt at EOF or after `timeout`.
  std::optional<std::string> line(DaemonRig& rig,
                                  std::chrono::milliseconds timeout = kControlPatience) {
    rig.run_until([&] { return pump(), has_line() || eof_; }, timeout);
    const auto nl = buffer_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string out = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    return out;
  }
  nlohmann::json reply(DaemonRig& rig) {
    const auto l = line(rig);
    EXPECT_TRUE(l) << "no reply (connection closed or nothing within the patience)";
    return l ? nlohmann::json::parse(*l) : nlohmann::json();
  }
  // Runs the server until the daemon closes this connection; true if it did within `timeout`.
  // Whatever arrived first stays readable with line().
  bool closed_by_daemon(DaemonRig& rig, std::chrono::milliseconds timeout = kControlPatience) {
    return rig.run_until([&] { return pump(), eof_; }, timeout);
  }
  // Reads what has arrived without running the server.
  void drain() { pump(); }
  bool eof() const { return eof_; }
  std::size_t lines_buffered() const {
    return static_cast<std::size_t>(std::count(buffer_.begin(), buffer_.end(), '\n'));
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool has_line() const { return buffer_.find('\n') != std::string::npos; }
  void pump() {
    if (fd_ < 0) return;
    char chunk[65536];
    for (;;) {
      const long n = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) eof_ = true;
      return;
    }
  }

  int fd_;
  std::string buffer_;
  bool eof_ = false;
};

// A daemon with a control server in a temporary folder.
class ServerRig {
 public:
  explicit ServerRig(const std::function<void(Config&)>& adjust = {},
                     AccessPolicy policy = AccessPolicy{0, std::nullopt})
      : rig(adjust),
        path(sockets.file("jitterd.sock")),
        store(std::vector<std::string>{profiles.path()}),
        dispatcher(rig.sessions, store, rig.backend, rig.config, stats),
        server(rig.io, dispatcher, store, rig.bus, rig.config, policy, stats, rig.log) {}

  void listen(mode_t mode = 0660, std::optional<gid_t> group = std::nullopt) {
    server.bind(path, mode, group);
    server.start();
  }

  DaemonRig rig;
  TempDir sockets;
  std::string path;
  TempDir profiles;  // the one profile folder
  ProfileStore store;
  ServerStats stats;
  Dispatcher dispatcher;
  ControlServer server;
};

}  // namespace jitterd::testing
