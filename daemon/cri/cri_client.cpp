#include "cri/cri_client.hpp"

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <utility>

#include "cri_runtime.grpc.pb.h"
#include "shaper/errors.hpp"

namespace jitterd::cri {
namespace {

namespace v1 = ::runtime::v1;

// The errno that says the most about a gRPC status: the messages carry errnos (ENOENT: nothing
// there; ETIMEDOUT: no answer in time; EPROTO: it answered, but not as a CRI runtime), so that a
// caller can tell "no runtime at this socket" from "the runtime refused".
int errno_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return ETIMEDOUT;
    case grpc::StatusCode::UNAVAILABLE:
      return ECONNREFUSED;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return EACCES;
    case grpc::StatusCode::NOT_FOUND:
      return ENOENT;
    case grpc::StatusCode::UNIMPLEMENTED:
      return EOPNOTSUPP;
    default:
      return EPROTO;
  }
}

std::string code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "code " + std::to_string(static_cast<int>(code));
  }
}

void check(const grpc::Status& status, const std::string& method, const std::string& socket) {
  if (status.ok()) return;
  throw shaper::SystemError("CRI " + method, socket, errno_of(status.error_code()),
                            code_name(status.error_code()) + ": " + status.error_message());
}

SandboxState state_of(v1::PodSandboxState state) {
  return state == v1::SANDBOX_READY ? SandboxState::kReady : SandboxState::kNotReady;
}

ContainerState state_of(v1::ContainerState state) {
  switch (state) {
    case v1::CONTAINER_CREATED:
      return ContainerState::kCreated;
    case v1::CONTAINER_RUNNING:
      return ContainerState::kRunning;
    case v1::CONTAINER_EXITED:
      return ContainerState::kExited;
    default:
      return ContainerState::kUnknown;
  }
}

NetworkMode mode_of(v1::NamespaceMode mode) {
  switch (mode) {
    case v1::CONTAINER:
      return NetworkMode::kContainer;
    case v1::NODE:
      return NetworkMode::kNode;
    case v1::TARGET:
      return NetworkMode::kTarget;
    default:
      return NetworkMode::kPod;
  }
}

// A CRI reply is a few KiB (a verbose status carries the sandbox's OCI spec: ~10 KiB); a list of
// every sandbox on a busy node is at most a few MiB. Larger is not a runtime's answer.
constexpr int kMaxReplyBytes = 16 * 1024 * 1024;

void set_deadline(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace

struct Client::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::RuntimeService::Stub> stub;
};

Client::Client(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)),
      timeout_(timeout),
      channel_(std::make_unique<Channel>()) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxReplyBytes);
  // One connection attempt per call: a socket with nothing behind it fails the call at once
  // (UNAVAILABLE) instead of being retried until the deadline.
  arguments.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  channel_->channel = grpc::CreateCustomChannel("unix:" + socket_path_,
                                                grpc::InsecureChannelCredentials(), arguments);
  channel_->stub = v1::RuntimeService::NewStub(channel_->channel);
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

RuntimeVersion Client::version() const {
  grpc::ClientContext context;
  set_deadline(context, timeout_);
  v1::VersionRequest request;
  request.set_version("v1");
  v1::VersionResponse reply;
  check(channel_->stub->Version(&context, request, &reply), "Version", socket_path_);
  return {reply.runtime_name(), reply.runtime_version(), reply.runtime_api_version()};
}

std::vector<PodSandbox> Client::list_pod_sandboxes(
    const std::map<std::string, std::string>& labels) const {
  grpc::ClientContext context;
  set_deadline(context, timeout_);
  v1::ListPodSandboxRequest request;
  auto& selector = *request.mutable_filter()->mutable_label_selector();
  for (const auto& [key, value] : labels) selector[key] = value;
  v1::ListPodSandboxResponse reply;
  check(channel_->stub->ListPodSandbox(&context, request, &reply), "ListPodSandbox", socket_path_);
  std::vector<PodSandbox> out;
  out.reserve(static_cast<std::size_t>(reply.items_size()));
  for (const v1::PodSandbox& item : reply.items()) {
    PodSandbox sandbox;
    sandbox.id = item.id();
    sandbox.name = item.metadata().name();
    sandbox.pod_namespace = item.metadata().namespace_();
    sandbox.attempt = item.metadata().attempt();
    sandbox.state = state_of(item.state());
    sandbox.created_at_ns = item.created_at();
    sandbox.labels.insert(item.labels().begin(), item.labels().end());
    out.push_back(std::move(sandbox));
  }
  return out;
}

PodSandboxStatus Client::pod_sandbox_status(const std::string& id) const {
  grpc::ClientContext context;
  set_deadline(context, timeout_);
  v1::PodSandboxStatusRequest request;
  request.set_pod_sandbox_id(id);
  request.set_verbose(true);
  v1::PodSandboxStatusResponse reply;
  check(channel_->stub->PodSandboxStatus(&context, request, &reply), "PodSandboxStatus",
        socket_path_ + " sandbox " + id);
  PodSandboxStatus out;
  out.id = reply.status().id();
  out.state = state_of(reply.status().state());
  out.network = mode_of(reply.status().linux().namespaces().options().network());
  out.ip = reply.status().network().ip();
  out.info.insert(reply.info().begin(), reply.info().end());
  return out;
}

std::vector<Container> Client::list_containers() const {
  grpc::ClientContext context;
  set_deadline(context, timeout_);
  const v1::ListContainersRequest request;
  v1::ListContainersResponse reply;
  check(channel_->stub->ListContainers(&context, request, &reply), "ListContainers", socket_path_);
  std::vector<Container> out;
  out.reserve(static_cast<std::size_t>(reply.containers_size()));
  for (const v1::Container& item : reply.containers()) {
    Container c;
    c.id = item.id();
    c.sandbox_id = item.pod_sandbox_id();
    c.name = item.metadata().name();
    c.attempt = item.metadata().attempt();
    c.state = state_of(item.state());
    c.created_at_ns = item.created_at();
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace jitterd::cri
