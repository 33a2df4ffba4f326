#include "config.hpp"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <net/if.h>
#include <algorithm>
#include <cerrno>
#include <iterator>
#include <sstream>

#include "interface_pattern.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/json_reader.hpp"

namespace jitterd {
namespace {

using json = nlohmann::json;
using shaper::JsonReader;

bool absolute_path(JsonReader& r, const std::string& pointer, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    r.error(pointer,
            "\"" + path + "\" is not an absolute path; write it from / (e.g. /run/jitterd)");
    return false;
  }
  return true;
}

void read_socket(JsonReader& r, const json& j, SocketConfig& out) {
  const std::string p = "/socket";
  if (!r.object(j, p, {"path", "group", "mode"})) return;
  if (auto path = r.string(j, p, "path", false, 107)) {  // sun_path holds 108 bytes with the NUL
    if (!path->empty() && absolute_path(r, p + "/path", *path)) out.path = *path;
  }
  if (auto group = r.string(j, p, "group", false, 32)) out.group = *group;
  if (auto mode = r.string(j, p, "mode", false, 4)) {
    if (!mode->empty()) {
      char* end = nullptr;
      const unsigned long m = std::strtoul(mode->c_str(), &end, 8);
      if (*end != '\0' || m > 0777 || (m & 0006) != 0) {
        r.error(p + "/mode",
                "\"" + *mode +
                    "\" is not an octal mode without access for others; use \"0660\" or "
                    "\"0600\" (others must never reach the socket)");
      } else {
        out.mode = static_cast<mode_t>(m);
      }
    }
  }
}

void read_limits(JsonReader& r, const json& j, Limits& out) {
  const std::string p = "/limits";
  if (!r.object(j, p,
                {"max_connections", "max_request_bytes", "idle_timeout", "max_queued_events"}))
    return;
  if (auto v = r.integer<std::size_t>(j, p, "max_connections", 1, 4096, out.max_connections))
    out.max_connections = *v;
  if (auto v = r.integer<std::size_t>(j, p, "max_request_bytes", 4096, 64 * 1024 * 1024,
                                      out.max_request_bytes)) {
    out.max_request_bytes = *v;
  }
  if (j.contains("idle_timeout")) {
    if (auto v = r.duration(j, p, "idle_timeout", true)) {
      if (*v < std::chrono::seconds(1)) {
        r.error(p + "/idle_timeout", "must be at least 1s");
      } else {
        out.idle_timeout = *v;
      }
    }
  }
  if (auto v =
          r.integer<std::size_t>(j, p, "max_queued_events", 16, 1000000, out.max_queued_events)) {
    out.max_queued_events = *v;
  }
}

// The kinds a target allow pattern may name (TargetsConfig::allow).
constexpr std::string_view kTargetKinds[] = {"netns", "netns-path", "pid", "container", "pod"};

void read_target_allow(JsonReader& r, const json& allow, const std::string& p, TargetsConfig& out) {
  if (!allow.is_array()) {
    r.error(p, "expected an array of \"KIND:PATTERN\" strings, e.g. [\"container:redis*\"]");
    return;
  }
  for (std::size_t i = 0; i < allow.size(); ++i) {
    const json& e = allow[i];
    const std::string ep = p + "/" + std::to_string(i);
    const std::string text = e.is_string() ? e.get<std::string>() : std::string();
    const auto colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    const bool known =
        std::find(std::begin(kTargetKinds), std::end(kTargetKinds), kind) != std::end(kTargetKinds);
    if (!e.is_string() || colon == std::string::npos || !known || colon + 1 == text.size() ||
        text.size() > 4096) {
      r.error(ep,
              "expected \"KIND:PATTERN\" with KIND one of netns, netns-path, pid, container, pod "
              "(e.g. \"container:redis*\", \"netns:lab-*\", \"pod:default/redis-*\"), found " +
                  shaper::json_excerpt(e));
      continue;
    }
    out.allow.push_back(text);
  }
}

// An array of absolute socket paths at `key` of `j` (targets.engine_sockets, targets.cri_sockets).
void read_socket_list(JsonReader& r, const json& j, const std::string& p, const char* key,
                      std::vector<std::string>& out) {
  const json* sockets = r.member(j, p, key, false);
  if (!sockets) return;
  const std::string kp = p + "/" + key;
  if (!sockets->is_array()) {
    r.error(kp, "expected an array of socket paths, e.g. [\"/run/containerd/containerd.sock\"]");
    return;
  }
  for (std::size_t i = 0; i < sockets->size(); ++i) {
    const json& e = (*sockets)[i];
    const std::string ep = kp + "/" + std::to_string(i);
    if (!e.is_string()) {
      r.error(ep, "expected a socket path, found " + shaper::json_excerpt(e));
    } else if (absolute_path(r, ep, e.get<std::string>())) {
      out.push_back(e.get<std::string>());
    }
  }
}

void read_targets(JsonReader& r, const json& j, TargetsConfig& out) {
  const std::string p = "/targets";
  if (!r.object(j, p, {"allow", "engine_sockets", "cri_sockets"})) return;
  if (const json* allow = r.member(j, p, "allow", false)) {
    read_target_allow(r, *allow, p + "/allow", out);
  }
  read_socket_list(r, j, p, "engine_sockets", out.engine_sockets);
  read_socket_list(r, j, p, "cri_sockets", out.cri_sockets);
}

void read_interfaces(JsonReader& r, const json& j, Config& out) {
  const std::string p = "/interfaces";
  if (!r.object(j, p, {"allow"})) return;
  const json* allow = r.member(j, p, "allow", false);
  if (!allow) return;
  if (!allow->is_array()) {
    r.error(p + "/allow",
            "expected an array of interface names or glob patterns, e.g. [\"veth*\", \"eth1\"]");
    return;
  }
  for (std::size_t i = 0; i < allow->size(); ++i) {
    const json& e = (*allow)[i];
    const std::string ep = p + "/allow/" + std::to_string(i);
    if (!e.is_string() || e.get<std::string>().empty() ||
        e.get<std::string>().size() >= IFNAMSIZ * 4) {
      r.error(ep, "expected an interface name or glob pattern such as \"veth*\", found " +
                      shaper::json_excerpt(e));
      continue;
    }
    const std::string pattern = e.get<std::string>();
    // By what it matches, not how it is written: "?*", "**", "[!.]*" and "??*" are "*" too.
    const PatternVerdict verdict = judge_interface_pattern(pattern);
    if (verdict.kind == PatternVerdict::Kind::kEveryName) {
      const std::string which =
          verdict.every_length
              ? "every interface name"
              : "every interface name of " + std::to_string(verdict.length) + " characters";
      r.error(ep, "\"" + pattern + "\" matches " + which +
                      ", so it would allow shaping every interface, including "
                      "the one you manage this host through, whatever it is called (lo, eth0, "
                      "enp0s3); list the test "
                      "interfaces (\"veth*\", \"eth1\")");
      continue;
    }
    if (verdict.kind == PatternVerdict::Kind::kTooIntricate) {
      r.error(ep, "\"" + pattern +
                      "\" is too intricate for jitterd to tell which interfaces it allows; list "
                      "the test interfaces by name or prefix (\"veth*\", \"eth1\")");
      continue;
    }
    out.allow_interfaces.push_back(pattern);
  }
}

void read_metrics(JsonReader& r, const json& j, MetricsConfig& out) {
  const std::string p = "/metrics";
  if (!r.object(j, p, {"listen"}) || !j.contains("listen")) return;
  // The longest form: "[" + an IPv6 address (at most 45 characters) + "]:65535".
  constexpr std::size_t kMaxListenChars = 53;
  const auto listen = r.string(j, p, "listen", false, kMaxListenChars);
  if (!listen) return;
  if (listen->empty()) {
    r.error(p + "/listen",
            "empty; write \"127.0.0.1:9464\" (or \"9464\", loopback) to serve /metrics, or "
            "leave metrics.listen out to keep the HTTP listener off");
    return;
  }
  if (auto parsed = parse_metrics_listen(*listen)) {
    out.listen = *parsed;
    return;
  }
  r.error(p + "/listen",
          "\"" + *listen +
              "\" is not a port or a numeric address with a port; write \"9464\" (loopback), "
              "\"127.0.0.1:9464\" or \"[::1]:9464\" (an address other than loopback only if "
              "Prometheus scrapes from another host: /metrics needs no credentials)");
}

std::optional<std::uint16_t> parse_port(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  unsigned value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value == 0 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

}  // namespace

bool Config::target_allowed(std::string_view kind, std::string_view name) const {
  const std::string prefix = std::string(kind) + ":";
  const std::string n(name);
  for (const auto& pattern : targets.allow) {
    if (pattern.starts_with(prefix) &&
        fnmatch(pattern.c_str() + prefix.size(), n.c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

std::optional<MetricsListen> parse_metrics_listen(std::string_view text) {
  if (text.find(':') == std::string_view::npos) {
    const auto port = parse_port(text);
    if (!port) return std::nullopt;
    return MetricsListen{"127.0.0.1", *port};
  }
  std::string address;
  std::string_view port_text;
  unsigned char bytes[sizeof(in6_addr)];
  if (text.front() == '[') {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) return std::nullopt;
    address = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    if (::inet_pton(AF_INET6, address.c_str(), bytes) != 1) return std::nullopt;
  } else {
    const auto colon = text.rfind(':');
    address = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (::inet_pton(AF_INET, address.c_str(), bytes) != 1) return std::nullopt;
  }
  const auto port = parse_port(port_text);
  if (!port) return std::nullopt;
  return MetricsListen{address, *port};
}

bool Config::interface_allowed(std::string_view name) const {
  const std::string n(name);
  for (const auto& pattern : allow_interfaces) {
    if (fnmatch(pattern.c_str(), n.c_str(), 0) == 0) return true;
  }
  return false;
}

ConfigLoad parse_config(std::string_view text) {
  ConfigLoad load;
  if (text.size() > kMaxConfigBytes) {
    load.diagnostics.push_back({"", "larger than 1 MiB; is this the right file?"});
    return load;
  }
  // Bounded in depth before a document is built, and refusing repeated keys ({"recovery": "adopt",
  // "recovery": "remove"} would otherwise be read as its last).
  shaper::JsonDocument doc = shaper::parse_json_bounded(text);
  if (doc.problem != shaper::JsonProblem::kNone) {
    load.diagnostics.push_back(
        {doc.where,
         (doc.problem == shaper::JsonProblem::kSyntax ? "not valid JSON: " : "") + doc.message});
    return load;
  }
  const json& j = doc.value;
  JsonReader r(load.diagnostics);
  Config config;
  if (r.object(j, "",
               {"socket", "state_dir", "profile_dirs", "interfaces", "allow_force", "recovery",
                "limits", "leases", "targets", "metrics", "switch_gate"})) {
    if (const json* s = r.member(j, "", "socket", false)) read_socket(r, *s, config.socket);
    if (auto dir = r.string(j, "", "state_dir", false, 4096)) {
      if (!dir->empty() && absolute_path(r, "/state_dir", *dir)) config.state_dir = *dir;
    }
    if (const json* dirs = r.member(j, "", "profile_dirs", false)) {
      if (!dirs->is_array()) {
        r.error("/profile_dirs", "expected an array of absolute directory paths");
      } else {
        config.profile_dirs.clear();
        for (std::size_t i = 0; i < dirs->size(); ++i) {
          const json& d = (*dirs)[i];
          const std::string dp = "/profile_dirs/" + std::to_string(i);
          if (!d.is_string()) {
            r.error(dp, "expected a directory path, found " + shaper::json_excerpt(d));
          } else if (absolute_path(r, dp, d.get<std::string>())) {
            config.profile_dirs.push_back(d.get<std::string>());
          }
        }
      }
    }
    if (const json* i = r.member(j, "", "interfaces", false)) read_interfaces(r, *i, config);
    if (const json* t = r.member(j, "", "targets", false)) read_targets(r, *t, config.targets);
    if (auto v = r.boolean(j, "", "allow_force", false)) config.allow_force = *v;
    if (auto v = r.string(j, "", "recovery", false, 16)) {
      if (*v == "adopt") {
        config.recovery = Recovery::kAdopt;
      } else if (!v->empty() && *v != "remove") {
        r.error("/recovery",
                "\"" + *v +
                    "\" is not a recovery mode; expected \"remove\" (the default: a restart "
                    "removes what a crashed jitterd left) or \"adopt\"");
      }
    }
    if (auto v = r.string(j, "", "switch_gate", false, 16)) {
      if (*v == "kernel") {
        config.switch_gate = SwitchGate::kKernel;
      } else if (!v->empty() && *v != "off") {
        r.error("/switch_gate",
                "\"" + *v +
                    "\" is not a switch gate; expected \"off\" (the default: the daemon changes "
                    "the netem when it wakes at the deadline) or \"kernel\" (a whole-interface "
                    "lane is armed ahead and the kernel switches at the deadline; needs CAP_BPF)");
      }
    }
    if (const json* l = r.member(j, "", "limits", false)) read_limits(r, *l, config.limits);
    if (const json* m = r.member(j, "", "metrics", false)) read_metrics(r, *m, config.metrics);
    if (const json* l = r.member(j, "", "leases", false)) {
      if (r.object(*l, "/leases", {"max", "required"})) {
        if (l->contains("max")) {
          if (auto v = r.duration(*l, "/leases", "max", true)) {
            if (*v < std::chrono::seconds(1)) {
              r.error("/leases/max", "must be at least 1s");
            } else {
              config.max_lease = *v;
            }
          }
        }
        if (auto v = r.boolean(*l, "/leases", "required", false)) config.lease_required = *v;
      }
    }
  }
  if (load.diagnostics.empty()) load.config = std::move(config);
  return load;
}

ConfigLoad load_config_file(const std::string& path, bool must_exist) {
  std::string text;
  try {
    text = shaper::read_file_bounded(path, kMaxConfigBytes);
  } catch (const shaper::SystemError& e) {
    if (e.error_number() == ENOENT && !must_exist) {
      ConfigLoad load;
      load.config = Config{};
      return load;
    }
    throw;
  }
  return parse_config(text);
}

}  // namespace jitterd
