#pragma once
// `--pod NAMESPACE/NAME` (issue 23): a Kubernetes pod's sandbox network namespace, asked of the
// node's container runtime through its CRI socket (containerd, CRI-O; cri/cri_client.hpp), never by
// running crictl. The kubelet labels every sandbox with io.kubernetes.pod.namespace and
// io.kubernetes.pod.name; ListPodSandbox filtered by them gives the pod's sandboxes (a pod deleted
// and created again, or a sandbox re-created by the kubelet, may leave an old NOTREADY one beside
// the new one); the READY one is the pod's now. PodSandboxStatus (verbose) then gives:
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

}  // namespace jitterd
