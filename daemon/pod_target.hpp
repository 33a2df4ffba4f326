#pragma once
// `--pod NAMESPACE/NAME` (issue 23), and `--container` of a CRI container (find_cri_container): a
// Kubernetes pod's sandbox network namespace, asked of the node's container runtime through its CRI
// socket (containerd, CRI-O; cri/cri_client.hpp), never by running crictl. The kubelet labels every
// sandbox with io.kubernetes.pod.namespace and io.kubernetes.pod.name; ListPodSandbox filtered by
// them gives the pod's sandboxes (a pod deleted and created again, or a sandbox re-created by the
// kubelet, may leave an old NOTREADY one beside the new one); the READY one is the pod's now.
// PodSandboxStatus (verbose) then gives:
//  - whether the pod uses the node's own namespace (hostNetwork: namespace mode NODE): refused,
//    since shaping it would shape the node;
//  - the runtime's "info" JSON: the sandbox's process ("pid", the pause process that holds the
//    namespace for as long as the sandbox is ready) and its OCI runtime spec, whose network
//    namespace entry names the namespace's bind mount
//    (runtimeSpec.linux.namespaces[type=network].path: containerd's /var/run/netns/cni-...).
// Which is trusted: the pid (its /proc/PID/ns/net), as for containers. Its exit is the sandbox's
// end, which the inside mode watches through a pidfd (target-gone), and it needs no mount of the
// node's /run/netns with propagation (a DaemonSet's hostPID is enough). The path is the
// cross-check: where both open and name different namespaces, jitterd is not in the node's PID
// namespace (the pid means some other process here) and refuses. Without a pid the path is used,
// unwatched. A container restart inside the pod keeps the sandbox, its pause process and its
// namespace: the shaping stays with nothing re-applied. A pod deleted and created again is a new
// sandbox: a new namespace, which `--follow` re-applies to.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"
#include "shaper/diagnostics.hpp"
#include "shaper/expected.hpp"

namespace jitterd {

// Where containerd, k3s's containerd and CRI-O put their CRI sockets by default, in the order they
// are probed (the first that answers Version is asked).
std::vector<std::string> default_cri_sockets();

// Why `text` cannot name a pod as "NAMESPACE/NAME", or nullopt: the namespace is a DNS-1123 label
// (at most 63 of a-z, 0-9 and '-', starting and ending with a letter or digit), the name a DNS-1123
// subdomain (at most 253; also '.'), Kubernetes' own rules.
std::optional<std::string> pod_name_problem(std::string_view text);

// What the runtime's verbose "info" JSON says of a sandbox's namespace. A member that is there but
// of the wrong type is a diagnostic naming its JSON pointer.
struct SandboxInfo {
  pid_t pid = 0;           // /pid; 0: not given
  std::string netns_path;  // /runtimeSpec/linux/namespaces/[type=network]/path; "": not given
};
std::optional<SandboxInfo> read_sandbox_info(std::string_view json,
                                             shaper::Diagnostics& diagnostics);

// The pod's ready sandbox, found.
struct PodSandboxFound {
  std::string socket;   // the CRI socket that answered
  std::string runtime;  // "containerd 1.6.20~ds1"
  std::string sandbox_id;
  std::string ip;  // the pod's IP, as the runtime reports it ("" when none)
  SandboxInfo info;
};

// `pod` ("NAMESPACE/NAME") through the first of `sockets` that answers Version. What the user can
// fix (no runtime at any socket, no such pod, no ready sandbox, host network, an info without a
// namespace) is a protocol::Error whose `where` is "/target/pod" (or "/target"); a runtime that
// answers but fails a call later is thrown (shaper::SystemError naming socket, method and gRPC's
// status text).
shaper::Expected<PodSandboxFound, protocol::Error> find_pod_sandbox(
    const std::vector<std::string>& sockets, std::string_view pod,
    std::chrono::milliseconds timeout = std::chrono::seconds{5});

// `--container ID|NAME` of a container that no Docker or Podman socket knows, asked of the CRI
// runtime (issue 23): its namespace is its pod sandbox's, found as for `--pod` (the sandbox's pid,
// the path cross-check, hostNetwork refused), so that a restart of the container inside its pod
// (a new container, the same sandbox) changes nothing, and a pod created again (a new sandbox) is
// a new namespace, which `--follow` re-applies to. What is matched, in Docker's order: a full
// container ID, else the container's CRI metadata name (the kubelet's io.kubernetes.container.name;
// "NAMESPACE/POD/NAME" picks the pod), else a unique ID prefix. The name is tried before the prefix
// because a container name such as "db" or "cafe" is also a hexadecimal prefix. Only running
// containers count; a name running in more than one pod is refused, naming the pods.
//
// containerd's own containers (`ctr`, nerdctl: its "default" namespace, another gRPC service) are
// not CRI's and are not found here: `--pid` or `--netns-path` reach them.

// Why "NAMESPACE/POD/CONTAINER" is not one, or nullopt (Kubernetes' rules: pod_name_problem, and
// a container's name is a DNS-1123 label).
std::optional<std::string> pod_container_problem(std::string_view text);

// What the Docker/Podman sockets said before the CRI ones are asked, for the refusals.
struct EnginesAsked {
  std::string tried;      // "/run/docker.sock: no such socket; ..."
  bool answered = false;  // one answered (404: no such container)
  bool denied = false;    // one refused jitterd (EACCES/EPERM)
};

struct CriContainerFound {
  std::string container_id;  // the full ID
  std::string name;          // the CRI metadata name
  std::string pod;           // its sandbox's "NAMESPACE/NAME"
  PodSandboxFound sandbox;
};

shaper::Expected<CriContainerFound, protocol::Error> find_cri_container(
    const std::vector<std::string>& sockets, std::string_view container,
    const EnginesAsked& engines, std::chrono::milliseconds timeout = std::chrono::seconds{5});

}  // namespace jitterd
