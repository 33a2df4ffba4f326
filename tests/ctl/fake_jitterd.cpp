#include "fake_jitterd.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shaper/errors.hpp"

namespace jitterctl::testing {

using shaper::check_syscall;

FakeJitterd::FakeJitterd(Handler handler) : handler_(std::move(handler)) {
  socket_path_ = directory_.file("jitterd.sock");
  listen_fd_ = static_cast<int>(
      check_syscall(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket", ""));
  const test_support::UnixAddress address = test_support::unix_address(socket_path_);
  check_syscall(::bind(listen_fd_, address.get(), address.length), "bind", socket_path_);
  check_syscall(::listen(listen_fd_, 16), "listen", socket_path_);
  stop_fd_ = static_cast<int>(check_syscall(::eventfd(0, EFD_CLOEXEC), "eventfd", ""));
  acceptor_ = std::thread([this] { accept_loop(); });
}

FakeJitterd::~FakeJitterd() {
  const std::uint64_t one = 1;
  // The eventfd stays readable from here on, so every thread's next poll returns and it ends.
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
  acceptor_.join();
  for (auto& t : connections_) t.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void FakeJitterd::set_greeting(Response greeting) {
  const std::lock_guard lock(mutex_);
  greeting_ = std::move(greeting);
  has_greeting_ = true;
}

std::vector<nlohmann::json> FakeJitterd::requests() const {
  const std::lock_guard lock(mutex_);
  return requests_;
}

std::string FakeJitterd::ok_line(const Json& request, const Json& result) {
  Json reply = {{"ok", true}, {"result", result}};
  if (request.is_object() && request.contains("id")) reply["id"] = request["id"];
  return reply.dump() + "\n";
}

std::string FakeJitterd::error_line(const Json& request, const std::string& code,
                                    const std::string& message, const std::string& where,
                                    const std::string& hint) {
  Json error = {{"code", code}, {"message", message}};
  if (!where.empty()) error["where"] = where;
  if (!hint.empty()) error["hint"] = hint;
  Json reply = {{"ok", false}, {"error", error}};
  if (request.is_object() && request.contains("id")) reply["id"] = request["id"];
  return reply.dump() + "\n";
}

bool FakeJitterd::wait_readable(int fd) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n == -1 && errno == EINTR) continue;
    check_syscall(n, "poll", socket_path_);
    if (fds[1].revents) return false;
    if (fds[0].revents) return true;
  }
}

void FakeJitterd::accept_loop() {
  while (wait_readable(listen_fd_)) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd == -1) continue;
    const std::lock_guard lock(mutex_);
    connections_.emplace_back([this, fd] { serve(fd); });
  }
}

void FakeJitterd::send_response(int fd, const Response& response) {
  for (std::size_t i = 0; i < response.chunks.size(); ++i) {
    if (i > 0 && response.pause.count() > 0) std::this_thread::sleep_for(response.pause);
    const std::string& chunk = response.chunks[i];
    std::size_t sent = 0;
    while (sent < chunk.size()) {
      // The client may have given up (timeout, line too long): then the rest is not wanted.
      const ssize_t n = ::send(fd, chunk.data() + sent, chunk.size() - sent, MSG_NOSIGNAL);
      if (n == -1 && errno == EINTR) continue;
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }
}

void FakeJitterd::serve(int fd) {
  Response greeting;
  bool greet = false;
  {
    const std::lock_guard lock(mutex_);
    greeting = greeting_;
    greet = has_greeting_;
  }
  if (greet) {
    send_response(fd, greeting);
    if (greeting.close_after) {
      ::close(fd);
      return;
    }
  }
  std::string buffer;
  char chunk[4096];
  while (wait_readable(fd)) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    bool closed = false;
    for (auto newline = buffer.find('\n'); newline != std::string::npos && !closed;
         newline = buffer.find('\n')) {
      const std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      Json request = Json::parse(line, nullptr, false);
      if (request.is_discarded()) request = line;
      {
        const std::lock_guard lock(mutex_);
        requests_.push_back(request);
      }
      const Response response = handler_(request);
      send_response(fd, response);
      closed = response.close_after;
    }
    if (closed) break;
  }
  ::close(fd);
}

}  // namespace jitterctl::testing
