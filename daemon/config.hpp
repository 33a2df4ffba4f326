#pragma once
// The daemon's configuration (/etc/jitterd/config.json, docs/daemon.md), converted to a typed
// struct at the edge. Every problem is a diagnostic with its JSON pointer; `jitterd --check-config`
// prints them all.

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"

namespace jitterd {

enum class Recovery { kRemove, kAdopt };

// How a switch due at a deadline reaches the kernel (docs/daemon.md, "switch_gate"). kOff: the
// daemon wakes at the deadline and changes the netem then. kKernel: a whole-interface lane is
// installed as a gated root (shaper::GatedNetem) and the switch is armed ahead, so the kernel moves
// the traffic at the deadline by its own clock.
enum class SwitchGate { kOff, kKernel };

struct SocketConfig {
  std::string path = "/run/jitterd/jitterd.sock";
  std::string group;  // empty: the daemon's own group
  mode_t mode = 0660;
};

struct Limits {
  std::size_t max_connections = 64;
  // An inline profile may be as large as a profile file (8 MiB: kMaxProfileBytes), plus the
  // envelope.
  std::size_t max_request_bytes = 9 * 1024 * 1024;
  std::chrono::nanoseconds idle_timeout = std::chrono::minutes(10);
  std::size_t max_queued_events = 4096;
};

// Shaping beyond jitterd's own namespace (docs/operations.md, "Containers and namespaces").
struct TargetsConfig {
  // "KIND:GLOB" (fnmatch) patterns of the targets that may be shaped: netns:NAME, netns-path:PATH,
  // pid:PID, container:NAME, pod:NAMESPACE/NAME. Empty: none may.
  std::vector<std::string> allow;
  // The Docker Engine API sockets (Docker's, Podman's) asked for `container` targets, in order;
  // empty: default_engine_sockets().
  std::vector<std::string> engine_sockets;
  // The CRI sockets (containerd's, k3s's, CRI-O's) asked for `pod` targets: the first that answers
  // CRI's Version is used. Empty: default_cri_sockets() (pod_target.hpp).
  std::vector<std::string> cri_sockets;
  // How long a CRI call may take (not in the config file: the protocol tests shorten it).
  std::chrono::milliseconds cri_timeout = std::chrono::seconds{5};
};

// Where the optional HTTP scrape endpoint listens (docs/daemon.md, metrics.listen). An address
// that is not loopback is taken only as written in the config: "9464" alone means loopback.
struct MetricsListen {
  std::string address;  // numeric IPv4 or IPv6, without brackets: "127.0.0.1", "::1"
  std::uint16_t port = 0;
};

struct MetricsConfig {
  std::optional<MetricsListen> listen;  // nullopt: no HTTP listener (the default)
};

struct Config {
  SocketConfig socket;
  std::string state_dir = "/run/jitterd";
  std::vector<std::string> profile_dirs = {"/etc/jitterd/profiles", "/usr/share/jitterd/profiles"};
  // Glob patterns (fnmatch) of interface names that may be shaped. Empty: nothing may be shaped, so
  // a fresh install cannot take down a management interface by a typo.
  std::vector<std::string> allow_interfaces;
  bool allow_force = false;  // whether `apply` may replace a root qdisc someone else installed
  Recovery recovery = Recovery::kRemove;
  SwitchGate switch_gate = SwitchGate::kOff;
  Limits limits;
  std::chrono::nanoseconds max_lease = std::chrono::hours(24);
  bool lease_required = false;
  MetricsConfig metrics;

  TargetsConfig targets;

  bool interface_allowed(std::string_view name) const;
  // Whether a target (kind "container", name "redis0") may be shaped.
  bool target_allowed(std::string_view kind, std::string_view name) const;
};

struct ConfigLoad {
  std::optional<Config> config;     // set only when there are no diagnostics
  shaper::Diagnostics diagnostics;  // `where` is a JSON pointer, or "line L, column C" for syntax
};

// A config is a few hundred bytes; a megabyte means the wrong file was named.
inline constexpr std::size_t kMaxConfigBytes = 1024 * 1024;

// Refuses a text larger than kMaxConfigBytes unread.
ConfigLoad parse_config(std::string_view text);

// metrics.listen's value: "PORT" (loopback, 127.0.0.1), "IPv4:PORT" or "[IPv6]:PORT", with a
// numeric address and a port from 1 to 65535; nullopt when it is none of these.
std::optional<MetricsListen> parse_metrics_listen(std::string_view text);

// Reads and parses `path`. A missing file at the default path is not an error (defaults: nothing
// may be shaped); `must_exist` makes it one. Throws shaper::SystemError when the file cannot be
// read.
ConfigLoad load_config_file(const std::string& path, bool must_exist);

}  // namespace jitterd
