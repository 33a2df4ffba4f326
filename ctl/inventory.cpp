#include "inventory.hpp"

#include <set>

#include "options.hpp"
#include "shaper/json_reader.hpp"

namespace jitterctl {
namespace {

using Json = nlohmann::json;
using shaper::JsonReader;

// Interface names are IFNAMSIZ - 1 bytes; a profile name is libshaper's limit; a socket path fits
// sun_path (108 bytes).
constexpr std::size_t kMaxInterface = 15;
constexpr std::size_t kMaxName = 128;
constexpr std::size_t kMaxPath = 107;
// A DNS name is at most 253 characters.
constexpr std::size_t kMaxHostName = 253;

std::optional<FleetTarget> read_target(JsonReader& r, const Json& host, const std::string& p) {
  const Json* t = r.member(host, p, "target", false);
  if (!t) return std::nullopt;
  const std::string tp = p + "/target";
  if (!r.object(*t, tp, {"netns", "netns_path", "pid", "container", "pod", "via"}))
    return std::nullopt;
  FleetTarget out;
  int given = 0;
  for (const char* kind : {"netns", "netns_path", "container", "pod"}) {
    if (!t->contains(kind)) continue;
    ++given;
    out.kind = kind;
    out.name = r.string(*t, tp, kind, true, 4096).value_or("");
  }
  if (t->contains("pid")) {
    ++given;
    out.kind = "pid";
    if (auto pid = r.integer<std::int64_t>(*t, tp, "pid", 1, 4194304, 0))
      out.name = std::to_string(*pid);
  }
  if (given != 1) {
    r.error(tp,
            "give exactly one of \"netns\", \"netns_path\", \"pid\", \"container\" and \"pod\"");
    return std::nullopt;
  }
  out.via = r.string(*t, tp, "via", false, 32).value_or("");
  return out;
}

FleetHost read_host(JsonReader& r, const Json& host, const std::string& p) {
  FleetHost out;
  r.object(host, p, {"name", "host", "socket", "interface", "target", "profile", "probe_address"});
  const auto url = r.string(host, p, "host", false, 4096).value_or("");
  out.socket = r.string(host, p, "socket", false, kMaxPath).value_or("");
  if (url.empty() == out.socket.empty()) {
    r.error(p,
            "give \"host\": \"ssh://[user@]host[:port][/socket]\" or \"k8s://NODE[/socket]\", "
            "or \"socket\": a local jitterd's socket path, one of them");
  } else if (!url.empty()) {
    try {
      out.remote = parse_host_url(url);
    } catch (const UsageError& e) {
      r.error(p + "/host", e.what());
    }
  }
  out.interface = r.string(host, p, "interface", true, kMaxInterface).value_or("");
  out.target = read_target(r, host, p);
  out.profile = r.string(host, p, "profile", false, kMaxName).value_or("");
  out.probe_address = r.string(host, p, "probe_address", false, kMaxHostName).value_or("");
  if (out.probe_address.empty() && out.remote) out.probe_address = out.remote->host;
  out.name = r.string(host, p, "name", false, kMaxName).value_or("");
  if (out.name.empty()) out.name = out.remote ? out.remote->url() : out.socket;
  return out;
}

}  // namespace

Json FleetTarget::to_json() const {
  Json t = Json::object();
  if (kind == "pid") {
    t["pid"] = std::stoll(name);
  } else {
    t[kind] = name;
  }
  if (!via.empty()) t["via"] = via;
  return t;
}

Inventory read_inventory(const std::string& text, shaper::Diagnostics& found) {
  Inventory out;
  const shaper::JsonDocument doc = shaper::parse_json_bounded(text);
  if (doc.problem != shaper::JsonProblem::kNone) {
    found.push_back({doc.where, doc.message});
  } else {
    JsonReader r(found);
    if (r.object(doc.value, "", {"version", "hosts"})) {
      if (r.integer<int>(doc.value, "", "version", 1, 1, 0) == 0)
        r.error("/version", "give \"version\": 1 (the format docs/operations.md describes)");
      const Json* hosts = r.member(doc.value, "", "hosts", true);
      if (hosts && (!hosts->is_array() || hosts->empty() || hosts->size() > kMaxFleetHosts)) {
        r.error("/hosts", "expected an array of 1 to " + std::to_string(kMaxFleetHosts) +
                              " hosts, found " + shaper::json_excerpt(*hosts));
      } else if (hosts) {
        std::set<std::string> names;
        for (std::size_t i = 0; i < hosts->size(); ++i) {
          const std::string p = "/hosts/" + std::to_string(i);
          out.hosts.push_back(read_host(r, (*hosts)[i], p));
          if (!names.insert(out.hosts.back().name).second)
            r.error(p, "\"" + out.hosts.back().name +
                           "\" is in the inventory twice; give each host a \"name\" of its own");
        }
      }
    }
  }
  return out;
}

}  // namespace jitterctl
