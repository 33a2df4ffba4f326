#pragma once
// Targets beyond jitterd's own network namespace (issue 23; docs/operations.md, "Containers and
// namespaces"): a request may name the interface as a network namespace, a process or a container
// sees it ("eth0" of container redis0) instead of an interface of jitterd's namespace. The resolver
// turns that into where jitterd shapes.
//
// Two ways to reach it (`via`):
//  - `inside`: the target's interface is shaped in the target's own namespace, through netlink
//    sockets created there by a short-lived thread that entered it (setns: CAP_SYS_ADMIN); the
//    sockets stay bound to that namespace for as long as a session lives there
//    (inside_targets.hpp), and an ingress IFB is created inside it. Nothing is installed in
//    jitterd's namespace.
//  - `host-veth`: the target's veth has a peer in jitterd's namespace, and shaping that peer shapes
//    the target's traffic with nothing installed inside the target (the target's egress is the
//    peer's ingress, shaped on an IFB of jitterd's namespace; its ingress is the peer's egress).
//    The sessions, the ledger, crash recovery and the netlink monitor then work on a device of
//    jitterd's own namespace as for any interface; when the target goes (a container stopped, a
//    namespace deleted), its veth goes with it and the session ends with `target-gone`. Finding
//    the peer takes one look inside: a NETLINK_ROUTE socket made by a short-lived thread that
//    entered the namespace, closed at once.
// A request that names no via gets `inside` when this jitterd can enter other namespaces
// (CAP_SYS_ADMIN in its effective set), `host-veth` otherwise (default_via()). No process is ever
// started.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "protocol/errors.hpp"
#include "protocol/results.hpp"
#include "shaper/expected.hpp"
#include "shaper/network_namespace.hpp"

namespace jitterd {

// A target as the request named it.
struct TargetRequest {
  std::string kind;     // netns, netns-path, pid, container, pod
  std::string name;     // the name, path, pid or container name/ID, as given
  std::string via;      // "inside", "host-veth"; "" = default_via()
  bool follow = false;  // apply only: applied again when the target comes back (follows.hpp)
  friend bool operator==(const TargetRequest&, const TargetRequest&) = default;
};

// Where a target's interface is shaped.
struct ResolvedTarget {
  // host-veth: the device of jitterd's namespace that carries the shaping; inside: the interface
  // as the target sees it.
  std::string host_interface;
  protocol::TargetInfo info;  // direction: egress (the caller sets the one it shapes)
  // inside: the target's namespace, held open; and the process whose exit ends the target (a
  // container's first process, --pid, a /proc/PID/ns/net path), 0 when the target is a name.
  std::optional<shaper::NetworkNamespace> inside;
  pid_t pid = 0;
};

// Whether this process can enter other network namespaces: CAP_SYS_ADMIN in its effective set.
bool can_enter_namespaces();
// The via of a request that names none: "inside" when can_enter_namespaces(), else "host-veth".
std::string default_via();

class TargetResolver {
 public:
  virtual ~TargetResolver() = default;
  // `interface` of `target`, resolved now (a container restarted since the last request has a new
  // namespace and a new veth). What the user can fix (no such container, not running, not a veth,
  // not allowed to enter) is a protocol::Error whose `where` is relative to the params ("/target",
  // "/interface"); environment failures are thrown.
  virtual shaper::Expected<ResolvedTarget, protocol::Error> resolve(
      const TargetRequest& target, const std::string& interface) = 0;
};

// The real one: ip netns names, nsfs paths, /proc/PID/ns/net, containers through the Docker
// Engine API sockets of `config.engine_sockets` (or default_engine_sockets()), else through the CRI
// sockets (a CRI container: its pod sandbox's namespace), and pods through the CRI sockets of
// `config.cri_sockets` (or default_cri_sockets(); pod_target.hpp).
std::unique_ptr<TargetResolver> make_namespace_resolver(const TargetsConfig& config);

}  // namespace jitterd
