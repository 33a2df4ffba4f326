#pragma once
// A fleet's inventory (docs/operations.md, "Fleets"): the jitterds `jitterctl fleet` changes
// together, each with the interface (or target) it shapes there. JSON, read into these structs at
// the edge; every problem is a diagnostic naming the file, the JSON pointer, what is wrong and what
// to write instead.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote_host.hpp"
#include "shaper/diagnostics.hpp"

namespace jitterctl {

// An inventory larger than this is not one (16 hosts take 2 KiB; a thousand fit in 1 MiB).
inline constexpr std::size_t kMaxInventoryBytes = 1024 * 1024;
// A fleet of more hosts than this would hold more ssh connections open at once than a client
// should (each is an ssh or kubectl process and two pipes).
inline constexpr std::size_t kMaxFleetHosts = 256;

// Where the interface is, beyond the jitterd's own namespace: the protocol's "target"
// (docs/protocol.md, apply), checked by that jitterd when the change is staged.
struct FleetTarget {
  std::string kind;  // netns, netns_path, pid, container
  std::string name;  // as given ("blue", "/proc/42/ns/net", "42", "redis0")
  std::string via;   // "": the jitterd's default
  nlohmann::json to_json() const;
};

struct FleetHost {
  std::string name;  // for people and the tables; default: the address
  // set: over ssh or kubectl exec ("host": "ssh://..." or "k8s://NODE")
  std::optional<RemoteHost> remote;
  std::string socket;  // otherwise: the local socket ("socket": "/run/...")
  std::string interface;
  std::optional<FleetTarget> target;
  std::string profile;  // "": the command line's
  // Where the other hosts' probes reach this one (`fleet validate`): an IPv4 address or a name
  // that resolves to one; default: the host part of `remote`'s URL (a k8s:// node's name), "" for
  // a local socket.
  std::string probe_address;
};

struct Inventory {
  std::vector<FleetHost> hosts;
};

// The inventory in `text`; its problems go to `diagnostics` (JSON pointers, or line:column for
// text that is not JSON: Diagnostic::in_file names the file).
Inventory read_inventory(const std::string& text, shaper::Diagnostics& diagnostics);

}  // namespace jitterctl
