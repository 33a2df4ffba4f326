// The kubelet's part in the CRI bed (tests/vm/cri-bed): pod sandboxes and containers made and
// removed through a real runtime's CRI socket, one call per invocation:
//   cri_bed_client SOCKET run-pod NAMESPACE NAME UID LOGDIR   -> prints the sandbox ID
//   cri_bed_client SOCKET pod-ip SANDBOX                       -> prints the pod's IP
//   cri_bed_client SOCKET pod-info SANDBOX                     -> prints the verbose "info" JSON
//   cri_bed_client SOCKET stop-pod SANDBOX | remove-pod SANDBOX
//   cri_bed_client SOCKET create NAMESPACE NAME UID LOGDIR SANDBOX CONTAINER ATTEMPT IMAGE
//   COMMAND...
//                                                              -> prints the container ID
//   cri_bed_client SOCKET start|stop|remove CONTAINER
// Exit 0 on success; otherwise gRPC's status on stderr and exit 1 (2: usage).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cri_bed.grpc.pb.h"

namespace {

namespace v1 = ::runtime::v1;

// Sandbox creation pulls nothing (the image is imported) but sets up the CNI network: seconds in
// the UML guest.
constexpr auto kTimeout = std::chrono::seconds(60);

v1::PodSandboxConfig sandbox_config(const std::string& ns, const std::string& name,
                                    const std::string& uid, const std::string& log_directory) {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_namespace_(ns);
  config.mutable_metadata()->set_uid(uid);
  config.set_hostname(name);
  config.set_log_directory(log_directory);
  // The labels the kubelet gives every sandbox, which jitterd's --pod looks for.
  (*config.mutable_labels())["io.kubernetes.pod.namespace"] = ns;
  (*config.mutable_labels())["io.kubernetes.pod.name"] = name;
  (*config.mutable_labels())["io.kubernetes.pod.uid"] = uid;
  return config;
}

int fail(const std::string& method, const grpc::Status& status) {
  std::cerr << "cri_bed_client: " << method << ": code " << status.error_code() << ": "
            << status.error_message() << "\n";
  return 1;
}

int usage() {
  std::cerr << "usage: cri_bed_client SOCKET run-pod|pod-ip|pod-info|stop-pod|remove-pod|create|"
               "start|stop|remove ...\n";
  return 2;
}

struct Call {
  std::unique_ptr<v1::RuntimeService::Stub> stub;
  grpc::ClientContext context;
  explicit Call(const std::string& socket)
      : stub(v1::RuntimeService::NewStub(
            grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()))) {
    context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  }
};

int pod_command(Call& c, const std::string& verb, const std::vector<std::string>& a) {
  if (verb == "run-pod" && a.size() == 4) {
    v1::RunPodSandboxRequest request;
    *request.mutable_config() = sandbox_config(a[0], a[1], a[2], a[3]);
    v1::RunPodSandboxResponse reply;
    const auto status = c.stub->RunPodSandbox(&c.context, request, &reply);
    if (!status.ok()) return fail("RunPodSandbox", status);
    std::cout << reply.pod_sandbox_id() << "\n";
    return 0;
  }
  if ((verb == "pod-ip" || verb == "pod-info") && a.size() == 1) {
    v1::PodSandboxStatusRequest request;
    request.set_pod_sandbox_id(a[0]);
    request.set_verbose(verb == "pod-info");
    v1::PodSandboxStatusResponse reply;
    const auto status = c.stub->PodSandboxStatus(&c.context, request, &reply);
    if (!status.ok()) return fail("PodSandboxStatus", status);
    if (verb == "pod-ip") {
      std::cout << reply.status().network().ip() << "\n";
    } else {
      std::cout << reply.info().at("info") << "\n";
    }
    return 0;
  }
  if (verb == "stop-pod" && a.size() == 1) {
    v1::StopPodSandboxRequest request;
    request.set_pod_sandbox_id(a[0]);
    v1::StopPodSandboxResponse reply;
    const auto status = c.stub->StopPodSandbox(&c.context, request, &reply);
    return status.ok() ? 0 : fail("StopPodSandbox", status);
  }
  if (verb == "remove-pod" && a.size() == 1) {
    v1::RemovePodSandboxRequest request;
    request.set_pod_sandbox_id(a[0]);
    v1::RemovePodSandboxResponse reply;
    const auto status = c.stub->RemovePodSandbox(&c.context, request, &reply);
    return status.ok() ? 0 : fail("RemovePodSandbox", status);
  }
  return -1;
}

int container_command(Call& c, const std::string& verb, const std::vector<std::string>& a) {
  if (verb == "create" && a.size() >= 9) {
    v1::CreateContainerRequest request;
    request.set_pod_sandbox_id(a[4]);
    *request.mutable_sandbox_config() = sandbox_config(a[0], a[1], a[2], a[3]);
    v1::ContainerConfig& config = *request.mutable_config();
    config.mutable_metadata()->set_name(a[5]);
    config.mutable_metadata()->set_attempt(static_cast<unsigned>(std::stoul(a[6])));
    config.mutable_image()->set_image(a[7]);
    config.set_log_path(a[5] + "-" + a[6] + ".log");
    for (std::size_t i = 8; i < a.size(); ++i) config.add_command(a[i]);
    v1::CreateContainerResponse reply;
    const auto status = c.stub->CreateContainer(&c.context, request, &reply);
    if (!status.ok()) return fail("CreateContainer", status);
    std::cout << reply.container_id() << "\n";
    return 0;
  }
  if (verb == "start" && a.size() == 1) {
    v1::StartContainerRequest request;
    request.set_container_id(a[0]);
    v1::StartContainerResponse reply;
    const auto status = c.stub->StartContainer(&c.context, request, &reply);
    return status.ok() ? 0 : fail("StartContainer", status);
  }
  if (verb == "stop" && a.size() == 1) {
    v1::StopContainerRequest request;
    request.set_container_id(a[0]);
    request.set_timeout(1);
    v1::StopContainerResponse reply;
    const auto status = c.stub->StopContainer(&c.context, request, &reply);
    return status.ok() ? 0 : fail("StopContainer", status);
  }
  if (verb == "remove" && a.size() == 1) {
    v1::RemoveContainerRequest request;
    request.set_container_id(a[0]);
    v1::RemoveContainerResponse reply;
    const auto status = c.stub->RemoveContainer(&c.context, request, &reply);
    return status.ok() ? 0 : fail("RemoveContainer", status);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  Call call(argv[1]);
  const std::string verb = argv[2];
  const std::vector<std::string> args(argv + 3, argv + argc);
  int result = pod_command(call, verb, args);
  if (result < 0) result = container_command(call, verb, args);
  return result < 0 ? usage() : result;
}
