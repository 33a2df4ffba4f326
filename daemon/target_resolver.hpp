#pragma once
// Targets beyond jitterd's own network namespace (issue 23; docs/operations.md, "Containers and
// namespaces"): a request may name the interface as a network namespace, a process or a container
// sees it ("eth0" of container redis0) instead of an interface of jitterd's namespace. The resolver
// turns that into where jitterd shapes.
//
// Today's mode is `host-veth`: the target's veth has a peer in jitterd's namespace, and shaping
// that peer shapes the target's traffic with nothing installed inside the target (the target's
// egress is the peer's ingress, shaped on an IFB of jitterd's namespace; its ingress is the peer's
// egress). The sessions, the ledger, crash recovery and the netlink monitor then work on a device
// of jitterd's own namespace as for any interface; when the target goes (a container stopped, a
// namespace deleted), its veth goes with it and the session ends with `target-gone`.
//
// Finding the peer needs one look inside the target: a NETLINK_ROUTE socket created by a
// short-lived thread that entered the namespace (setns: CAP_SYS_ADMIN), which reads the interface's
// ifindex and IFLA_LINK and is closed. Nothing stays in the namespace and no process is started.

#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "protocol/errors.hpp"
#include "protocol/results.hpp"
#include "shaper/expected.hpp"

namespace jitterd {

// A target as the request named it.
struct TargetRequest {
  std::string kind;  // netns, netns-path, pid, container
  std::string name;  // the name, path, pid or container name/ID, as given
  std::string via = "host-veth";
  friend bool operator==(const TargetRequest&, const TargetRequest&) = default;
};

// Where a target's interface is shaped.
struct ResolvedTarget {
  std::string host_interface;  // the device of jitterd's namespace that carries the shaping
  protocol::TargetInfo info;   // direction: egress (the caller sets the one it shapes)
};

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

// The real one: ip netns names, nsfs paths, /proc/PID/ns/net, and containers through the Docker
// Engine API sockets of `config.engine_sockets` (or default_engine_sockets()).
std::unique_ptr<TargetResolver> make_namespace_resolver(const TargetsConfig& config);

}  // namespace jitterd
