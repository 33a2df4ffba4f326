// `--pod NS/NAME` against a fake CRI runtime (docs/operations.md, "Kubernetes"): an in-process gRPC
// server on a Unix socket serving the replies a real containerd gave (tests/fixtures/cri/, recorded
// by tests/vm/cri-bed --record), with the sandbox's pid and namespace path pointed at this process
// so that the real resolver opens a real namespace. The real containerd is tests/vm/cri-bed's.
//
// Its own binary: gRPC's threads are not instrumented by the sanitizers' runtimes, and the TSan run
// covers the two binaries whose own threads it can see (docs/testing.md).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "config.hpp"
#include "cri/cri_client.hpp"
#include "cri_runtime.grpc.pb.h"
#include "pod_target.hpp"
#include "shaper/errors.hpp"
#include "shaper/network_namespace.hpp"
#include "system_error_of.hpp"
#include "target_resolver.hpp"
#include "temp_dir.hpp"

namespace jitterd::testing {
namespace {

namespace v1 = ::runtime::v1;
using protocol::ErrorCode;
using test_support::system_error_of;
using test_support::TempDir;

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(JITTERD_CRI_FIXTURES) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// containerd 1.6.20's verbose info of the bed's pod default/redis-0 (recorded), with its pid and
// its network namespace's path replaced by ones of this process.
std::string recorded_info(pid_t pid, const std::string& netns_path) {
  auto info = nlohmann::json::parse(read_fixture("containerd-1.6.20-sandbox-info.json"));
  info["pid"] = pid;
  for (auto& ns : info["runtimeSpec"]["linux"]["namespaces"]) {
    if (ns["type"] == "network") ns["path"] = netns_path;
  }
  return info.dump();
}

// A CRI runtime that serves what a test puts in it.
class FakeRuntime final : public v1::RuntimeService::Service {
 public:
  grpc::Status Version(grpc::ServerContext*, const v1::VersionRequest*,
                       v1::VersionResponse* reply) override {
    reply->set_version("0.1.0");
    reply->set_runtime_name("containerd");
    reply->set_runtime_version("1.6.20~ds1");
    reply->set_runtime_api_version("v1");
    return grpc::Status::OK;
  }

  grpc::Status ListPodSandbox(grpc::ServerContext*, const v1::ListPodSandboxRequest* request,
                              v1::ListPodSandboxResponse* reply) override {
    std::this_thread::sleep_for(delay);
    const std::lock_guard lock(mutex_);
    selector.clear();
    selector.insert(request->filter().label_selector().begin(),
                    request->filter().label_selector().end());
    for (const v1::PodSandbox& s : sandboxes) {
      bool match = true;
      for (const auto& [key, value] : selector) {
        const auto it = s.labels().find(key);
        match = match && it != s.labels().end() && it->second == value;
      }
      if (match) *reply->add_items() = s;
    }
    return grpc::Status::OK;
  }

  grpc::Status PodSandboxStatus(grpc::ServerContext*, const v1::PodSandboxStatusRequest* request,
                                v1::PodSandboxStatusResponse* reply) override {
    const std::lock_guard lock(mutex_);
    verbose_asked = request->verbose();
    const auto it = statuses.find(request->pod_sandbox_id());
    if (it == statuses.end()) {
      return {grpc::StatusCode::NOT_FOUND,
              "an error occurred when try to find sandbox: not found"};  // containerd's words
    }
    *reply = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ListContainers(grpc::ServerContext*, const v1::ListContainersRequest*,
                              v1::ListContainersResponse* reply) override {
    const std::lock_guard lock(mutex_);
    ++list_containers_calls;
    for (const v1::Container& c : containers) *reply->add_containers() = c;
    return grpc::Status::OK;
  }

  // A container of sandbox `sandbox_id`, named as the kubelet names it.
  void add_container(const std::string& id, const std::string& sandbox_id, const std::string& name,
                     std::uint32_t attempt, v1::ContainerState state, std::int64_t created_at) {
    v1::Container c;
    c.set_id(id);
    c.set_pod_sandbox_id(sandbox_id);
    c.mutable_metadata()->set_name(name);
    c.mutable_metadata()->set_attempt(attempt);
    c.set_state(state);
    c.set_created_at(created_at);
    containers.push_back(c);
  }

  // A sandbox of pod `ns`/`name`, labelled as the kubelet labels it, with its status.
  void add(const std::string& id, const std::string& ns, const std::string& name, bool ready,
           std::int64_t created_at, const std::string& info, v1::NamespaceMode network = v1::POD) {
    v1::PodSandbox s;
    s.set_id(id);
    s.mutable_metadata()->set_name(name);
    s.mutable_metadata()->set_namespace_(ns);
    s.set_state(ready ? v1::SANDBOX_READY : v1::SANDBOX_NOTREADY);
    s.set_created_at(created_at);
    (*s.mutable_labels())["io.kubernetes.pod.namespace"] = ns;
    (*s.mutable_labels())["io.kubernetes.pod.name"] = name;
    sandboxes.push_back(s);
    v1::PodSandboxStatusResponse status;
    status.mutable_status()->set_id(id);
    status.mutable_status()->set_state(s.state());
    status.mutable_status()->mutable_network()->set_ip("10.88.0." +
                                                       std::to_string(sandboxes.size()));
    status.mutable_status()->mutable_linux()->mutable_namespaces()->mutable_options()->set_network(
        network);
    (*status.mutable_info())["info"] = info;
    statuses[id] = status;
  }

  std::vector<v1::PodSandbox> sandboxes;
  std::vector<v1::Container> containers;
  int list_containers_calls = 0;
  std::map<std::string, v1::PodSandboxStatusResponse> statuses;
  std::map<std::string, std::string> selector;  // the last ListPodSandbox's
  bool verbose_asked = false;
  std::chrono::milliseconds delay{0};

 private:
  std::mutex mutex_;
};

// The fake runtime served on <dir>/cri.sock.
class FakeCri {
 public:
  FakeCri() : socket(dir.file("cri.sock")) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(&runtime);
    server = builder.BuildAndStart();
    if (!server) throw std::runtime_error("cannot serve the fake CRI on " + socket);
  }
  ~FakeCri() { server->Shutdown(std::chrono::system_clock::now()); }

  TempDir dir{"jitterd-cri-"};
  std::string socket;
  FakeRuntime runtime;
  std::unique_ptr<grpc::Server> server;
};

constexpr auto kShort = std::chrono::milliseconds(300);

std::string own_info() {
  return recorded_info(::getpid(), "/proc/self/ns/net");
}

// ---------------------------------------------------------------------------------------------

TEST(PodName, KubernetesRulesAreChecked) {
  EXPECT_FALSE(pod_name_problem("default/redis-0"));
  EXPECT_FALSE(pod_name_problem("kube-system/coredns-5d78c9869d-x7x2k"));
  EXPECT_FALSE(pod_name_problem("a/b.c"));
  EXPECT_TRUE(pod_name_problem("redis-0"));           // no namespace
  EXPECT_TRUE(pod_name_problem("default/redis/0"));   // two slashes
  EXPECT_TRUE(pod_name_problem("/redis-0"));          // empty namespace
  EXPECT_TRUE(pod_name_problem("default/"));          // empty name
  EXPECT_TRUE(pod_name_problem("Default/redis-0"));   // upper case
  EXPECT_TRUE(pod_name_problem("default/-redis"));    // starts with '-'
  EXPECT_TRUE(pod_name_problem("de.fault/redis-0"));  // a namespace has no '.'
  EXPECT_TRUE(pod_name_problem(std::string(64, 'a') + "/x"));
  EXPECT_FALSE(pod_name_problem(std::string(63, 'a') + "/x"));
  const auto problem = pod_name_problem("default/redis_0");
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("redis_0"), std::string::npos) << *problem;
}

TEST(SandboxInfo, ContainerdsRecordedInfoGivesPidAndNetnsPath) {
  shaper::Diagnostics d;
  const auto info = read_sandbox_info(read_fixture("containerd-1.6.20-sandbox-info.json"), d);
  ASSERT_TRUE(info) << shaper::to_string(d);
  EXPECT_GT(info->pid, 1);
  EXPECT_TRUE(info->netns_path.starts_with("/var/run/netns/cni-")) << info->netns_path;
}

TEST(SandboxInfo, WrongTypesAreNamedByPointer) {
  shaper::Diagnostics d;
  EXPECT_FALSE(read_sandbox_info(R"({"pid": "12"})", d));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].where, "/pid");
  d.clear();
  EXPECT_FALSE(read_sandbox_info(
      R"({"runtimeSpec": {"linux": {"namespaces": [{"type": "network", "path": 7}]}}})", d));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].where, "/runtimeSpec/linux/namespaces/0/path");
  d.clear();
  EXPECT_FALSE(read_sandbox_info("[1]", d));
  d.clear();
  EXPECT_FALSE(read_sandbox_info("{", d));
  EXPECT_EQ(d.size(), 1u);
  d.clear();
  // Neither is an error of the document (the caller refuses it, naming the runtime).
  const auto empty = read_sandbox_info("{}", d);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->pid, 0);
  EXPECT_EQ(empty->netns_path, "");
}

TEST(FakeCri, TheReadySandboxOfThePodIsFoundByTheKubeletsLabels) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add("b1", "default", "redis-1", true, 100, recorded_info(1, "/x"));
  cri.runtime.add("c1", "other", "redis-0", true, 100, recorded_info(1, "/x"));
  const auto found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->sandbox_id, "a1");
  EXPECT_EQ(found->socket, cri.socket);
  EXPECT_EQ(found->runtime, "containerd 1.6.20~ds1");
  EXPECT_EQ(found->ip, "10.88.0.1");
  EXPECT_EQ(found->info.pid, ::getpid());
  EXPECT_EQ(found->info.netns_path, "/proc/self/ns/net");
  EXPECT_EQ(cri.runtime.selector,
            (std::map<std::string, std::string>{{"io.kubernetes.pod.namespace", "default"},
                                                {"io.kubernetes.pod.name", "redis-0"}}));
  EXPECT_TRUE(cri.runtime.verbose_asked);
}

TEST(FakeCri, OfSeveralSandboxesTheReadyOneIsTaken) {
  FakeCri cri;
  // A pod deleted and created again: the old sandbox NOTREADY (newer by created_at, as when the
  // kubelet re-created it and the new one is ready again), the new one ready.
  cri.runtime.add("old", "default", "redis-0", false, 300, recorded_info(1, "/x"));
  cri.runtime.add("new", "default", "redis-0", true, 200, own_info());
  auto found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->sandbox_id, "new");
  // Two ready (a runtime mid-change): the newest.
  cri.runtime.add("newest", "default", "redis-0", true, 400, own_info());
  found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->sandbox_id, "newest");
}

TEST(FakeCri, NoSuchPodIsNotFoundNamingTheRuntimeAsked) {
  FakeCri cri;
  cri.runtime.add("b1", "default", "redis-1", true, 100, own_info());
  const auto found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(found.error().where, "/target/pod");
  EXPECT_NE(found.error().message.find("no pod default/redis-0 on this node (asked containerd "
                                       "1.6.20~ds1 at " +
                                       cri.socket + ")"),
            std::string::npos)
      << found.error().message;
  EXPECT_NE(found.error().hint.find("node"), std::string::npos);
}

TEST(FakeCri, APodWithoutAReadySandboxIsAConflict) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", false, 100, own_info());
  const auto found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, ErrorCode::kConflict);
  EXPECT_NE(found.error().message.find("has no ready sandbox (1 not ready"), std::string::npos)
      << found.error().message;
  EXPECT_NE(found.error().hint.find("--follow"), std::string::npos);
}

TEST(FakeCri, AHostNetworkPodIsRefusedSayingSo) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info(), v1::NODE);
  const auto found = find_pod_sandbox({cri.socket}, "default/redis-0", kShort);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, ErrorCode::kInvalidParams);
  EXPECT_NE(found.error().message.find("uses the node's network namespace (hostNetwork)"),
            std::string::npos)
      << found.error().message;
}

TEST(FakeCri, AnInfoWithoutANamespaceIsTheRuntimesFaultNamed) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, R"({"image": "pause"})");
  const auto [number, text] =
      system_error_of([&] { (void)find_pod_sandbox({cri.socket}, "default/redis-0", kShort); });
  EXPECT_EQ(number, EPROTO);
  EXPECT_NE(text.find("CRI PodSandboxStatus"), std::string::npos) << text;
  EXPECT_NE(text.find(cri.socket + " sandbox a1"), std::string::npos) << text;
  EXPECT_NE(text.find("neither \"pid\" nor"), std::string::npos) << text;
}

TEST(FakeCri, AnInvalidPodNameIsRefusedBeforeAnySocketIsAsked) {
  const auto found = find_pod_sandbox({"/nonexistent/cri.sock"}, "redis-0", kShort);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, ErrorCode::kInvalidParams);
  EXPECT_EQ(found.error().where, "/target/pod");
}

// A Unix socket that accepts and never answers (a runtime that hangs, or something that is not
// gRPC), for the probe and the deadlines.
class SilentSocket {
 public:
  explicit SilentSocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof(address.sun_path) - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(fd_, 8) != 0) {
      throw std::runtime_error("cannot listen on " + path);
    }
  }
  ~SilentSocket() { ::close(fd_); }
  SilentSocket(const SilentSocket&) = delete;
  SilentSocket& operator=(const SilentSocket&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(FakeCri, TheFirstSocketThatAnswersVersionIsUsedAndTheErrorListsWhatWasTried) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  TempDir dir("jitterd-cri-probe-");
  const std::string absent = dir.file("absent.sock");
  const std::string silent_path = dir.file("silent.sock");
  const SilentSocket silent(silent_path);
  const auto t0 = std::chrono::steady_clock::now();
  const auto found = find_pod_sandbox({absent, silent_path, cri.socket}, "default/redis-0", kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->socket, cri.socket);
  // The silent one cost its deadline, no more.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));

  const auto none = find_pod_sandbox({absent, silent_path}, "default/redis-0", kShort);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  const std::string& m = none.error().message;
  EXPECT_NE(m.find("no CRI runtime answers (tried " + absent + ": no such socket; "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("CRI Version"), std::string::npos) << m;
  EXPECT_NE(m.find(silent_path), std::string::npos) << m;
  EXPECT_NE(none.error().hint.find("targets.cri_sockets"), std::string::npos);
}

TEST(FakeCri, ARuntimeSlowerThanTheDeadlineIsAnErrorNamingSocketMethodAndStatus) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.delay = std::chrono::milliseconds(1500);
  const auto [number, text] =
      system_error_of([&] { (void)find_pod_sandbox({cri.socket}, "default/redis-0", kShort); });
  EXPECT_EQ(number, ETIMEDOUT);
  EXPECT_NE(text.find("CRI ListPodSandbox"), std::string::npos) << text;
  EXPECT_NE(text.find(cri.socket), std::string::npos) << text;
  EXPECT_NE(text.find("DEADLINE_EXCEEDED"), std::string::npos) << text;
}

TEST(FakeCri, TheClientNamesTheMethodAndGrpcsStatusText) {
  FakeCri cri;
  const cri::Client client(cri.socket, kShort);
  EXPECT_EQ(client.version().runtime_api_version, "v1");
  const auto [number, text] = system_error_of([&] { (void)client.pod_sandbox_status("nope"); });
  EXPECT_EQ(number, ENOENT);
  EXPECT_NE(text.find("CRI PodSandboxStatus"), std::string::npos) << text;
  EXPECT_NE(text.find("NOT_FOUND: an error occurred when try to find sandbox"), std::string::npos)
      << text;
}

// A network namespace other than this process's: a thread that unshared one, and the path of its
// nsfs file while the thread lives.
class OtherNamespace {
 public:
  OtherNamespace() {
    std::promise<std::string> made;
    auto result = made.get_future();
    thread_ = std::thread([this, &made] {
      if (::unshare(CLONE_NEWNET) != 0) {
        made.set_value("");
        return;
      }
      made.set_value("/proc/" + std::to_string(::getpid()) + "/task/" + std::to_string(::gettid()) +
                     "/ns/net");
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return stop_; });
    });
    path = result.get();
    if (path.empty()) throw std::runtime_error("unshare(CLONE_NEWNET) failed");
  }
  ~OtherNamespace() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    done_.notify_all();
    thread_.join();
  }
  OtherNamespace(const OtherNamespace&) = delete;
  OtherNamespace& operator=(const OtherNamespace&) = delete;

  std::string path;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool stop_ = false;
  std::thread thread_;
};

// The real resolver, through the fake runtime, into a real namespace: this process's own (the
// sandbox's pid is this process). via inside needs CAP_SYS_ADMIN, as for every target.
TEST(FakeCri, TheResolverOpensThePodsNamespaceThroughTheSandboxPid) {
  if (!can_enter_namespaces()) GTEST_SKIP() << "needs CAP_SYS_ADMIN (run as root)";
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  TargetsConfig config;
  config.cri_sockets = {cri.socket};
  config.cri_timeout = kShort;
  const auto resolver = make_namespace_resolver(config);
  const TargetRequest request{"pod", "default/redis-0", "inside", false};
  auto resolved = resolver->resolve(request, "eth0");
  ASSERT_TRUE(resolved) << resolved.error().message;
  EXPECT_EQ(resolved->info.kind, "pod");
  EXPECT_EQ(resolved->info.name, "default/redis-0");
  EXPECT_EQ(resolved->info.interface, "eth0");
  EXPECT_EQ(resolved->pid, ::getpid());
  ASSERT_TRUE(resolved->inside.has_value());
  EXPECT_EQ(resolved->inside->identity(), shaper::NetworkNamespace::own().identity());
  EXPECT_EQ(resolved->info.namespace_id, shaper::NetworkNamespace::own().identity().to_string());

  // A pid whose namespace is not the one the runtime names: jitterd is not in the node's PID
  // namespace, and the pid would be some other process here. Refused, naming both.
  const OtherNamespace other;
  cri.runtime.statuses["a1"].mutable_info()->at("info") = recorded_info(::getpid(), other.path);
  const auto wrong = resolver->resolve(request, "eth0");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kConflict);
  EXPECT_NE(wrong.error().message.find("is not in the namespace its runtime names (" + other.path),
            std::string::npos)
      << wrong.error().message;
  EXPECT_NE(wrong.error().hint.find("hostPID"), std::string::npos);
  // Without a pid the runtime's path is used: that other namespace, unwatched (pid 0).
  cri.runtime.statuses["a1"].mutable_info()->at("info") =
      nlohmann::json{{"runtimeSpec",
                      {{"linux", {{"namespaces", {{{"type", "network"}, {"path", other.path}}}}}}}}}
          .dump();
  const auto by_path = resolver->resolve(request, "eth0");
  ASSERT_TRUE(by_path) << by_path.error().message;
  EXPECT_EQ(by_path->pid, 0);
  EXPECT_NE(by_path->inside->identity(), shaper::NetworkNamespace::own().identity());
}

TEST(FakeCri, AnAbsentRuntimeIsNotFoundThroughTheResolverAtTargetPod) {
  TempDir dir("jitterd-cri-none-");
  TargetsConfig config;
  config.cri_sockets = {dir.file("containerd.sock")};
  config.cri_timeout = kShort;
  const auto resolver = make_namespace_resolver(config);
  const auto resolved = resolver->resolve({"pod", "default/redis-0", "host-veth", false}, "eth0");
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(resolved.error().where, "/target/pod");
  EXPECT_NE(resolved.error().message.find(dir.file("containerd.sock") + ": no such socket"),
            std::string::npos)
      << resolved.error().message;
}

// --- `--container` of a CRI container ---------------------------------------------------------

// Container IDs as containerd makes them (64 hex digits).
const std::string kRedisId = "c0ffee01" + std::string(56, '1');
const std::string kOtherId = "c0ffee02" + std::string(56, '2');

TEST(FakeCriContainer, FoundByFullIdUniquePrefixNameAndPodPath) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add("b1", "default", "web-0", true, 100, recorded_info(1, "/x"));
  cri.runtime.add_container(kRedisId, "a1", "redis", 0, v1::CONTAINER_RUNNING, 100);
  cri.runtime.add_container(kOtherId, "b1", "web", 0, v1::CONTAINER_RUNNING, 100);
  for (const std::string& text : {kRedisId, std::string("c0ffee01"), std::string("redis"),
                                  std::string("default/redis-0/redis")}) {
    SCOPED_TRACE(text);
    const auto found = find_cri_container({cri.socket}, text, {}, kShort);
    ASSERT_TRUE(found) << found.error().message;
    EXPECT_EQ(found->container_id, kRedisId);
    EXPECT_EQ(found->name, "redis");
    EXPECT_EQ(found->pod, "default/redis-0");
    EXPECT_EQ(found->sandbox.sandbox_id, "a1");
    EXPECT_EQ(found->sandbox.runtime, "containerd 1.6.20~ds1");
    EXPECT_EQ(found->sandbox.info.pid, ::getpid());
  }
  // "c0ffee0" starts both IDs: refused, naming them.
  const auto ambiguous = find_cri_container({cri.socket}, "c0ffee0", {}, kShort);
  ASSERT_FALSE(ambiguous);
  EXPECT_EQ(ambiguous.error().code, ErrorCode::kConflict);
  EXPECT_EQ(ambiguous.error().where, "/target/container");
  EXPECT_NE(ambiguous.error().message.find("ambiguous: 2 containers"), std::string::npos)
      << ambiguous.error().message;
  // A pod path of another pod does not find it.
  EXPECT_FALSE(find_cri_container({cri.socket}, "default/web-0/redis", {}, kShort));
}

TEST(FakeCriContainer, ANameIsTriedBeforeAnIdPrefix) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add("b1", "default", "cafe-0", true, 100, recorded_info(1, "/x"));
  cri.runtime.add_container("cafe" + std::string(60, '0'), "a1", "redis", 0, v1::CONTAINER_RUNNING,
                            100);
  cri.runtime.add_container(kOtherId, "b1", "cafe", 0, v1::CONTAINER_RUNNING, 100);
  // "cafe" is the name of one and a prefix of the other's ID: the name wins, as in Docker.
  const auto found = find_cri_container({cri.socket}, "cafe", {}, kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->container_id, kOtherId);
  EXPECT_EQ(found->pod, "default/cafe-0");
  const auto by_prefix = find_cri_container({cri.socket}, "cafe0", {}, kShort);
  ASSERT_TRUE(by_prefix) << by_prefix.error().message;
  EXPECT_EQ(by_prefix->pod, "default/redis-0");
}

TEST(FakeCriContainer, ANameRunningInTwoPodsIsRefusedNamingThePods) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add("b1", "shop", "redis-0", true, 100, own_info());
  cri.runtime.add_container(kRedisId, "a1", "redis", 0, v1::CONTAINER_RUNNING, 100);
  cri.runtime.add_container(kOtherId, "b1", "redis", 0, v1::CONTAINER_RUNNING, 100);
  const auto found = find_cri_container({cri.socket}, "redis", {}, kShort);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, ErrorCode::kConflict);
  EXPECT_EQ(found.error().where, "/target/container");
  EXPECT_NE(found.error().message.find("runs in 2 pods (default/redis-0, shop/redis-0)"),
            std::string::npos)
      << found.error().message;
  EXPECT_NE(found.error().hint.find("--pod NAMESPACE/NAME"), std::string::npos);
  EXPECT_NE(found.error().hint.find("NAMESPACE/POD/redis"), std::string::npos);
  // Either way of picking works.
  const auto picked = find_cri_container({cri.socket}, "shop/redis-0/redis", {}, kShort);
  ASSERT_TRUE(picked) << picked.error().message;
  EXPECT_EQ(picked->sandbox.sandbox_id, "b1");
  const auto by_id = find_cri_container({cri.socket}, kOtherId.substr(0, 8), {}, kShort);
  ASSERT_TRUE(by_id) << by_id.error().message;
  EXPECT_EQ(by_id->pod, "shop/redis-0");
}

TEST(FakeCriContainer, OnlyExitedOnesMatchingIsNotRunningSayingSo) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add_container(kRedisId, "a1", "redis", 0, v1::CONTAINER_EXITED, 100);
  for (const std::string& text : {std::string("redis"), kRedisId}) {
    const auto found = find_cri_container({cri.socket}, text, {}, kShort);
    ASSERT_FALSE(found);
    EXPECT_EQ(found.error().code, ErrorCode::kConflict);
    EXPECT_NE(found.error().message.find("is not running: only 1 exited"), std::string::npos)
        << found.error().message;
    EXPECT_NE(found.error().message.find("default/redis-0"), std::string::npos);
  }
  // A restart in the pod: attempt 0 exited, attempt 1 running, one sandbox: attempt 1.
  cri.runtime.add_container(kOtherId, "a1", "redis", 1, v1::CONTAINER_RUNNING, 200);
  const auto found = find_cri_container({cri.socket}, "redis", {}, kShort);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->container_id, kOtherId);
  EXPECT_EQ(found->sandbox.sandbox_id, "a1");
}

TEST(FakeCriContainer, NoSuchContainerNamesTheRuntimesAskedAndHostNetworkIsRefused) {
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info(), v1::NODE);
  cri.runtime.add_container(kRedisId, "a1", "redis", 0, v1::CONTAINER_RUNNING, 100);
  EnginesAsked engines{"/run/docker.sock: no such container (404)", true, false};
  const auto none = find_cri_container({cri.socket}, "web", engines, kShort);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_NE(none.error().message.find("no container web (asked /run/docker.sock: no such container "
                                      "(404); containerd 1.6.20~ds1 at " +
                                      cri.socket + ")"),
            std::string::npos)
      << none.error().message;
  EXPECT_NE(none.error().hint.find("--pid or --netns-path"), std::string::npos);
  const auto host = find_cri_container({cri.socket}, "redis", {}, kShort);
  ASSERT_FALSE(host);
  EXPECT_EQ(host.error().code, ErrorCode::kInvalidParams);
  EXPECT_EQ(host.error().where, "/target/container");
  EXPECT_NE(host.error().message.find("container redis (pod default/redis-0) uses the node's"),
            std::string::npos)
      << host.error().message;
}

TEST(FakeCriContainer, PodContainerPathsFollowKubernetesRules) {
  EXPECT_FALSE(pod_container_problem("default/redis-0/redis"));
  EXPECT_TRUE(pod_container_problem("default/redis-0"));
  EXPECT_TRUE(pod_container_problem("a/b/c/d"));
  EXPECT_TRUE(pod_container_problem("default/redis-0/"));
  EXPECT_TRUE(pod_container_problem("default/redis-0/re.dis"));
}

// An engine API socket that answers 404 to everything (a Docker with no such container).
class NotFoundEngine {
 public:
  explicit NotFoundEngine(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof(address.sun_path) - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(fd_, 8) != 0) {
      throw std::runtime_error("cannot listen on " + path);
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~NotFoundEngine() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  NotFoundEngine(const NotFoundEngine&) = delete;
  NotFoundEngine& operator=(const NotFoundEngine&) = delete;
  int requests() const { return requests_; }

 private:
  void serve() {
    for (;;) {
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0) break;
        request.append(buffer, static_cast<std::size_t>(n));
      }
      ++requests_;
      const std::string body = R"({"message":"No such container: x"})";
      const std::string reply =
          "HTTP/1.1 404 Not Found\r\nServer: Docker/20.10.24+dfsg1 (linux)\r\nContent-Type: "
          "application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] const ssize_t written = ::write(client, reply.data(), reply.size());
      ::close(client);
    }
  }
  int fd_ = -1;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

TEST(FakeCriContainer, ADockerThatSays404ThenTheCriRuntimeFindsIt) {
  if (!can_enter_namespaces()) GTEST_SKIP() << "needs CAP_SYS_ADMIN (run as root)";
  FakeCri cri;
  cri.runtime.add("a1", "default", "redis-0", true, 100, own_info());
  cri.runtime.add_container(kRedisId, "a1", "redis", 0, v1::CONTAINER_RUNNING, 100);
  TempDir dir("jitterd-cri-engine-");
  const NotFoundEngine docker(dir.file("docker.sock"));
  TargetsConfig config;
  config.engine_sockets = {dir.file("absent.sock"), dir.file("docker.sock")};
  config.cri_sockets = {cri.socket};
  config.cri_timeout = kShort;
  const auto resolver = make_namespace_resolver(config);
  const auto resolved = resolver->resolve({"container", "redis", "inside", false}, "eth0");
  ASSERT_TRUE(resolved) << resolved.error().message;
  EXPECT_EQ(docker.requests(), 1);
  EXPECT_EQ(resolved->info.kind, "container");
  EXPECT_EQ(resolved->info.name, "redis");
  EXPECT_EQ(resolved->pid, ::getpid());  // the sandbox's process: its exit ends the target
  ASSERT_TRUE(resolved->inside.has_value());
  EXPECT_EQ(resolved->inside->identity(), shaper::NetworkNamespace::own().identity());
  // Not a CRI container either: the error names every socket asked.
  const auto none = resolver->resolve({"container", "web", "inside", false}, "eth0");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(none.error().where, "/target/container");
  const std::string& m = none.error().message;
  EXPECT_NE(m.find(dir.file("absent.sock") + ": no such socket"), std::string::npos) << m;
  EXPECT_NE(m.find(dir.file("docker.sock") + ": no such container (404)"), std::string::npos) << m;
  EXPECT_NE(m.find("containerd 1.6.20~ds1 at " + cri.socket), std::string::npos) << m;
}

TEST(FakeCriContainer, NoRuntimeAtAnySocketNamesEverySocketTried) {
  TempDir dir("jitterd-cri-none-");
  TargetsConfig config;
  config.engine_sockets = {dir.file("docker.sock")};
  config.cri_sockets = {dir.file("containerd.sock")};
  config.cri_timeout = kShort;
  const auto resolver = make_namespace_resolver(config);
  const auto resolved = resolver->resolve({"container", "redis", "host-veth", false}, "eth0");
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(resolved.error().where, "/target/container");
  EXPECT_NE(resolved.error().message.find("no container runtime answers at any socket (tried " +
                                          dir.file("docker.sock") + ": no such socket; " +
                                          dir.file("containerd.sock") + ": no such socket)"),
            std::string::npos)
      << resolved.error().message;
  EXPECT_NE(resolved.error().hint.find("targets.cri_sockets"), std::string::npos);
  // A pod path is refused before any socket is asked when it breaks Kubernetes' rules.
  const auto bad =
      resolver->resolve({"container", "default/Redis-0/x", "host-veth", false}, "eth0");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidParams);
  EXPECT_EQ(bad.error().where, "/target/container");
}

TEST(CriSockets, TheDefaultProbeOrderIsContainerdK3sCrio) {
  EXPECT_EQ(default_cri_sockets(), (std::vector<std::string>{"/run/containerd/containerd.sock",
                                                             "/run/k3s/containerd/containerd.sock",
                                                             "/run/crio/crio.sock"}));
}

}  // namespace
}  // namespace jitterd::testing
