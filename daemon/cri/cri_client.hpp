#pragma once
// A client of the Kubernetes Container Runtime Interface (CRI) on a Unix socket: what `--pod
// NS/NAME` needs of containerd or CRI-O (docs/operations.md, "Kubernetes"). CRI is gRPC over
// HTTP/2; gRPC's own library speaks it (hand-writing HTTP/2 framing, HPACK and flow control would
// be worse), and this header keeps gRPC and protobuf out of its callers: only cri_client.cpp
// includes them, so only the jitterd_cri library pays their compile cost.
//
// Synchronous and bounded: every call has a deadline. Failures throw shaper::SystemError naming
// the socket, the method and gRPC's status text: ("CRI ListPodSandbox",
// "/run/containerd/containerd.sock", ETIMEDOUT, "DEADLINE_EXCEEDED: Deadline Exceeded").

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace jitterd::cri {

struct RuntimeVersion {
  std::string runtime_name;         // "containerd", "cri-o"
  std::string runtime_version;      // "1.6.20~ds1"
  std::string runtime_api_version;  // "v1"
};

enum class SandboxState { kReady, kNotReady };

// One entry of ListPodSandbox.
struct PodSandbox {
  std::string id;
  std::string name;           // metadata
  std::string pod_namespace;  // metadata
  std::uint32_t attempt = 0;
  SandboxState state = SandboxState::kNotReady;
  std::int64_t created_at_ns = 0;
  std::map<std::string, std::string> labels;
};

// Which network namespace a sandbox's containers share.
enum class NetworkMode { kPod, kContainer, kNode, kTarget };

// PodSandboxStatus with verbose: the status and the runtime's "info" map (containerd and CRI-O put
// one JSON document under key "info").
struct PodSandboxStatus {
  std::string id;
  SandboxState state = SandboxState::kNotReady;
  NetworkMode network = NetworkMode::kPod;
  std::string ip;
  std::map<std::string, std::string> info;
};

enum class ContainerState { kCreated, kRunning, kExited, kUnknown };

// One entry of ListContainers.
struct Container {
  std::string id;
  std::string sandbox_id;
  std::string name;  // metadata: the kubelet's container name
  std::uint32_t attempt = 0;
  ContainerState state = ContainerState::kUnknown;
  std::int64_t created_at_ns = 0;
};

class Client {
 public:
  // Talks to the CRI socket at `socket_path`; each call must be answered within `timeout`.
  explicit Client(std::string socket_path,
                  std::chrono::milliseconds timeout = std::chrono::seconds{5});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& socket_path() const { return socket_path_; }

  RuntimeVersion version() const;
  // The sandboxes whose labels include all of `labels` (any state).
  std::vector<PodSandbox> list_pod_sandboxes(
      const std::map<std::string, std::string>& labels) const;
  PodSandboxStatus pod_sandbox_status(const std::string& id) const;
  // Every container the runtime knows (any state, any sandbox).
  std::vector<Container> list_containers() const;

 private:
  struct Channel;
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Channel> channel_;
};

}  // namespace jitterd::cri
