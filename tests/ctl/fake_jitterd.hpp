#pragma once
// A stand-in for jitterd in protocol tests: it listens on a Unix socket in a fresh directory under
// /tmp, records every request line, and answers each with what the test's handler returns —
// replies, events, a line cut in pieces, a connection closed mid-line, or nothing at all. Each
// connection is served by its own thread, so a client may hold several (watch does).

#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/temp_dir.hpp"

namespace jitterctl::testing {

class FakeJitterd {
 public:
  using Json = nlohmann::json;

  // What the server sends for one request.
  struct Response {
    std::vector<std::string> chunks;     // written in order, as given (a line needs its "\n")
    std::chrono::milliseconds pause{0};  // between chunks, so the client sees partial reads
    bool close_after = false;            // close the connection after the last chunk
  };
  using Handler = std::function<Response(const Json& request)>;

  explicit FakeJitterd(Handler handler);
  FakeJitterd(const FakeJitterd&) = delete;
  FakeJitterd& operator=(const FakeJitterd&) = delete;
  ~FakeJitterd();

  // Sent on every new connection before any request is read (e.g. a "busy" reply); with
  // `close_after`, the connection is closed without reading anything. Call before connecting.
  void set_greeting(Response greeting);

  const std::string& socket_path() const { return socket_path_; }
  const std::string& directory() const { return directory_.path(); }
  // Every request line received so far, parsed (a line that is not JSON is kept as a JSON string).
  std::vector<Json> requests() const;

  // Replies as jitterd writes them: one line each, echoing the request's id.
  static std::string ok_line(const Json& request, const Json& result);
  static std::string error_line(const Json& request, const std::string& code,
                                const std::string& message, const std::string& where = "",
                                const std::string& hint = "");
  static Response reply(const Json& request, const Json& result) {
    return {{ok_line(request, result)}};
  }

 private:
  void accept_loop();
  void serve(int fd);
  void send_response(int fd, const Response& response);
  bool wait_readable(int fd);  // false when the server is stopping

  Handler handler_;
  test_support::TempDir directory_{"jitterctl-test-"};
  std::string socket_path_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: readable once the destructor asks every thread to stop
  mutable std::mutex mutex_;
  std::vector<Json> requests_;
  Response greeting_;
  bool has_greeting_ = false;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

}  // namespace jitterctl::testing
