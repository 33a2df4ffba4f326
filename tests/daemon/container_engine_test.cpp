// The Docker Engine API client (container_engine.hpp) against a fake runtime on a Unix socket: a
// protocol test (the real runtimes are the bed's; tests/fixtures/runtime holds their recorded
// replies). The fake answers each connection with the reply its test gives for the request line it
// reads, and records the request lines.
#include "container_engine.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/system_error_of.hpp"
#include "shaper/errors.hpp"
#include "test_files.hpp"

using namespace jitterd;
using test_support::system_error_of;

namespace {

// Raw HTTP replies by request target; a target not listed gets a 404.
class FakeEngine {
 public:
  FakeEngine(std::string path, std::map<std::string, std::string> replies)
      : path_(std::move(path)), replies_(std::move(replies)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof address.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 8) != 0) {
      throw std::runtime_error("fake engine: bind/listen " + path_ + ": " + std::strerror(errno));
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeEngine() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  // Accepts connections but never answers (a hung runtime).
  void go_silent() { silent_ = true; }
  std::vector<std::string> request_lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  void serve() {
    while (!stopping_) {
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0) break;
        request.append(buffer, static_cast<std::size_t>(n));
      }
      const std::string line = request.substr(0, request.find("\r\n"));
      {
        std::lock_guard lock(mutex_);
        lines_.push_back(line);
      }
      if (silent_) {
        while (!stopping_ && ::read(client, buffer, sizeof buffer) > 0) {
        }
        ::close(client);
        continue;
      }
      const std::string target = line.substr(4, line.rfind(' ') - 4);  // "GET <target> HTTP/1.1"
      const auto found = replies_.find(target);
      const std::string reply = found != replies_.end()
                                    ? found->second
                                    : http(404, R"({"message":"No such container: x"})");
      for (std::size_t sent = 0; sent < reply.size();) {
        const ssize_t n = ::write(client, reply.data() + sent, reply.size() - sent);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
      ::close(client);
    }
  }

 public:
  static std::string http(int status, const std::string& body, const std::string& server = "") {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\n" +
           (server.empty() ? "" : "Server: " + server + "\r\n") +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  }

 private:
  std::string path_;
  std::map<std::string, std::string> replies_;
  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> silent_{false};
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

const std::string kRunning = R"({
  "Id": "3f2a9c1b7e6d5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f",
  "Name": "/redis0",
  "State": {"Status": "running", "Running": true, "Pid": 4242},
  "NetworkSettings": {"SandboxKey": "/var/run/docker/netns/3f2a9c1b7e6d", "IPAddress": "172.17.0.2"}
})";

// The Server headers the bed's runtimes sent (tests/fixtures/runtime).
const std::string kDockerServer = "Docker/20.10.24+dfsg1 (linux)";
const std::string kPodmanServer = "Libpod/4.3.1 (linux)";

}  // namespace

TEST(ContainerEngine, InspectReadsTheNamespaceOfARunningContainer) {
  jitterd::testing::TempDir dir;
  FakeEngine engine(dir.file("docker.sock"), {{"/v1.40/containers/redis0/json",
                                               FakeEngine::http(200, kRunning, kDockerServer)}});
  const EngineClient client(dir.file("docker.sock"));
  const auto info = client.inspect("redis0");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->name, "redis0");
  EXPECT_EQ(info->id.size(), 64u);
  EXPECT_TRUE(info->running);
  EXPECT_EQ(info->pid, 4242);
  EXPECT_EQ(info->sandbox_key, "/var/run/docker/netns/3f2a9c1b7e6d");
  EXPECT_EQ(info->runtime, "docker");
  const auto lines = engine.request_lines();
  ASSERT_EQ(lines.size(), 1u) << "one request: the runtime is told by the reply's Server header";
  EXPECT_EQ(lines[0], "GET /v1.40/containers/redis0/json HTTP/1.1");
}

TEST(ContainerEngine, PodmanIsToldApartByItsServerHeader) {
  jitterd::testing::TempDir dir;
  FakeEngine engine(dir.file("podman.sock"), {{"/v1.40/containers/redis0/json",
                                               FakeEngine::http(200, kRunning, kPodmanServer)}});
  EXPECT_EQ(EngineClient(dir.file("podman.sock")).inspect("redis0")->runtime, "podman");
}

TEST(ContainerEngine, AnUnknownContainerIsNotAnError) {
  jitterd::testing::TempDir dir;
  FakeEngine engine(dir.file("docker.sock"), {});
  EXPECT_FALSE(EngineClient(dir.file("docker.sock")).inspect("nosuch"));
}

TEST(ContainerEngine, RuntimeFailuresNameTheSocketAndTheRequest) {
  jitterd::testing::TempDir dir;
  const std::string path = dir.file("docker.sock");
  {
    const auto [number, text] = system_error_of([&] { EngineClient(path).inspect("redis0"); });
    EXPECT_EQ(number, ENOENT);
    EXPECT_NE(text.find("connect to the container runtime (" + path +
                        " GET /v1.40/containers/redis0/json)"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("podman.socket"), std::string::npos) << text;
  }
  {
    FakeEngine engine(path, {{"/v1.40/containers/redis0/json",
                              FakeEngine::http(500, R"({"message":"layer does not exist"})")}});
    const auto [number, text] = system_error_of([&] { EngineClient(path).inspect("redis0"); });
    EXPECT_EQ(number, EPROTO);
    EXPECT_NE(text.find("HTTP 500"), std::string::npos) << text;
    EXPECT_NE(text.find("layer does not exist"), std::string::npos) << text;
  }
  {
    FakeEngine engine(path, {{"/v1.40/containers/redis0/json", "SSH-2.0-OpenSSH_9.2\r\n\r\n"}});
    const auto [number, text] = system_error_of([&] { EngineClient(path).inspect("redis0"); });
    EXPECT_EQ(number, EPROTO);
    EXPECT_NE(text.find("not HTTP"), std::string::npos) << text;
  }
  {
    FakeEngine engine(path, {{"/v1.40/containers/redis0/json", FakeEngine::http(200, "[1, 2")}});
    const auto [number, text] = system_error_of([&] { EngineClient(path).inspect("redis0"); });
    EXPECT_EQ(number, EPROTO);
    EXPECT_NE(text.find("not JSON"), std::string::npos) << text;
  }
}

TEST(ContainerEngine, AHungRuntimeCostsTheDeadlineOnly) {
  jitterd::testing::TempDir dir;
  FakeEngine engine(dir.file("docker.sock"), {});
  engine.go_silent();
  const auto start = std::chrono::steady_clock::now();
  const auto [number, text] = system_error_of(
      [&] { EngineClient(dir.file("docker.sock"), std::chrono::milliseconds{200}).get("/_ping"); });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(number, ETIMEDOUT) << text;
  EXPECT_LT(took, std::chrono::seconds{3});
}

TEST(ContainerEngine, InspectRepliesAreCheckedMemberByMember) {
  shaper::Diagnostics d;
  EXPECT_FALSE(read_container_info(R"({"Id": "x", "Name": "/a", "State": {"Running": "yes"}})", d));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].where, "/State/Running");

  d.clear();
  EXPECT_FALSE(read_container_info(R"({"Id": "x", "Name": "/a", "State": {"Running": true}})", d));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].where, "/State/Pid");

  d.clear();
  EXPECT_FALSE(read_container_info(R"({"Name": "/a", "State": {"Pid": -1}})", d));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].where, "/Id");
  EXPECT_EQ(d[1].where, "/State/Pid");

  d.clear();
  const auto stopped = read_container_info(
      R"({"Id": "x", "Name": "/a", "State": {"Running": false, "Pid": 0}, "NetworkSettings": null})",
      d);
  ASSERT_TRUE(stopped) << shaper::to_string(d);
  EXPECT_FALSE(stopped->running);
  EXPECT_EQ(stopped->sandbox_key, "");
}

TEST(ContainerEngine, NamesAreCheckedBeforeTheyReachARequestLine) {
  EXPECT_FALSE(container_name_problem("redis0"));
  EXPECT_FALSE(container_name_problem("3f2a9c1b7e6d"));
  EXPECT_FALSE(container_name_problem("my_app.web-1"));
  EXPECT_TRUE(container_name_problem(""));
  EXPECT_TRUE(container_name_problem("../../version"));
  EXPECT_TRUE(container_name_problem("a b"));
  EXPECT_TRUE(container_name_problem("a?all=1"));
  EXPECT_TRUE(container_name_problem("-rm"));
  jitterd::testing::TempDir dir;
  const auto [number, text] =
      system_error_of([&] { EngineClient(dir.file("x.sock")).inspect("a/../../version"); });
  EXPECT_EQ(number, EINVAL);
}

namespace {

// A reply recorded from the real runtime in the container bed (tests/vm/container-bed --record):
// status line, headers and body byte for byte, chunked as it was sent.
std::string recorded(const std::string& runtime, const std::string& name) {
  const std::string path = std::string(JITTERD_RUNTIME_FIXTURES) + "/" + runtime + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the fixture " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// The replies of podman 4.3.1 and Docker 20.10.24, recorded in the UML bed: a running container
// gives its PID and namespace, a stopped one PID 0 (Docker keeps its stale SandboxKey), a removed
// one 404; Podman is told apart by its Server header (no second request).
TEST(ContainerEngine, RecordedRepliesOfPodmanAndDockerAreRead) {
  for (const std::string runtime : {"podman", "docker"}) {
    SCOPED_TRACE(runtime);
    for (const std::string state : {"running", "running-http10", "stopped", "removed"}) {
      SCOPED_TRACE(state);
      jitterd::testing::TempDir dir;
      FakeEngine engine(
          dir.file("engine.sock"),
          {{"/v1.40/containers/redis0/json", recorded(runtime, "container-" + state + ".http")}});
      const auto info = EngineClient(dir.file("engine.sock")).inspect("redis0");
      if (state == "removed") {
        EXPECT_FALSE(info);
        continue;
      }
      ASSERT_TRUE(info);
      EXPECT_EQ(info->name, "redis0");
      EXPECT_EQ(info->id.size(), 64u);
      EXPECT_EQ(info->runtime, runtime);
      if (state == "stopped") {
        EXPECT_FALSE(info->running);
        EXPECT_EQ(info->pid, 0);
        // Podman clears the namespace path; Docker keeps one that is no longer a namespace.
        EXPECT_EQ(info->sandbox_key.empty(), runtime == "podman") << info->sandbox_key;
      } else {
        EXPECT_TRUE(info->running);
        EXPECT_GT(info->pid, 1);
        EXPECT_NE(info->sandbox_key.find("netns"), std::string::npos) << info->sandbox_key;
      }
    }
  }
}
