#include "pod_target.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "cri/cri_client.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"

namespace jitterd {
namespace {

using protocol::ErrorCode;
using Refusal = protocol::Error;

// The labels the kubelet puts on every sandbox it asks a runtime for.
constexpr const char* kNamespaceLabel = "io.kubernetes.pod.namespace";
constexpr const char* kNameLabel = "io.kubernetes.pod.name";
// Kubernetes' limits: a namespace is a DNS-1123 label, a pod's name a DNS-1123 subdomain.
constexpr std::size_t kMaxLabel = 63;
constexpr std::size_t kMaxSubdomain = 253;

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

std::optional<std::string> dns_problem(std::string_view part, const char* what, std::size_t max,
                                       bool dots) {
  if (part.empty()) return std::string("a pod's ") + what + " cannot be empty";
  if (part.size() > max)
    return std::string("a pod's ") + what + " is at most " + std::to_string(max) + " characters";
  for (const char c : part) {
    if (!lower_alnum(c) && c != '-' && !(dots && c == '.')) {
      return std::string("a pod's ") + what + " has only a-z, 0-9, '-'" + (dots ? " and '.'" : "") +
             " (Kubernetes' rule); \"" + shaper::text_excerpt(part) + "\" has others";
    }
  }
  if (!lower_alnum(part.front()) || !lower_alnum(part.back()))
    return std::string("a pod's ") + what + " starts and ends with a letter or digit";
  return std::nullopt;
}

std::pair<std::string, std::string> split_pod(std::string_view pod) {
  const auto slash = pod.find('/');
  return {std::string(pod.substr(0, slash)), std::string(pod.substr(slash + 1))};
}

// The network entry of the OCI spec's namespaces, if any: its path.
void read_spec_netns(shaper::JsonReader& r, const nlohmann::json& root, SandboxInfo& out) {
  const auto* spec =
      root.is_object() && root.contains("runtimeSpec") ? &root["runtimeSpec"] : nullptr;
  if (!spec || !spec->is_object() || !spec->contains("linux")) return;
  const nlohmann::json& linux_part = (*spec)["linux"];
  if (!linux_part.is_object() || !linux_part.contains("namespaces")) return;
  const nlohmann::json& namespaces = linux_part["namespaces"];
  const std::string p = "/runtimeSpec/linux/namespaces";
  if (!namespaces.is_array()) {
    r.error(p, "expected an array, found " + shaper::json_excerpt(namespaces));
    return;
  }
  for (std::size_t i = 0; i < namespaces.size(); ++i) {
    const nlohmann::json& entry = namespaces[i];
    const std::string ep = p + "/" + std::to_string(i);
    if (!entry.is_object() || !entry.contains("type") || entry["type"] != "network") continue;
    if (const auto path = r.string(entry, ep, "path", false, 4096)) out.netns_path = *path;
  }
}

// Each socket in turn: the first whose runtime answers Version. `tried` collects why the others
// were passed over ("/run/crio/crio.sock: no such socket").
std::optional<std::pair<cri::Client, cri::RuntimeVersion>> first_answering(
    const std::vector<std::string>& sockets, std::chrono::milliseconds timeout,
    std::string& tried) {
  for (const std::string& socket : sockets) {
    struct stat st {};
    if (::stat(socket.c_str(), &st) != 0) {
      tried += (tried.empty() ? "" : "; ") + socket + ": no such socket";
      continue;
    }
    cri::Client client(socket, timeout);
    try {
      cri::RuntimeVersion version = client.version();
      return std::pair{std::move(client), std::move(version)};
    } catch (const shaper::SystemError& e) {
      tried += (tried.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  return std::nullopt;
}

// The pod's ready sandbox among `found` (the newest, should a runtime list two), or why there is
// none.
shaper::Expected<cri::PodSandbox, Refusal> ready_sandbox(std::vector<cri::PodSandbox> found,
                                                         std::string_view pod,
                                                         const std::string& asked) {
  // Not a structured binding: clang 14 does not let a lambda capture one.
  const auto pod_name = split_pod(pod);
  // The label filter is the runtime's; the metadata is checked here as well.
  std::erase_if(found, [&](const cri::PodSandbox& s) {
    return s.pod_namespace != pod_name.first || s.name != pod_name.second;
  });
  if (found.empty()) {
    return Refusal{ErrorCode::kNotFound,
                   "no pod " + std::string(pod) + " on this node (asked " + asked + ")",
                   "/target/pod",
                   "a pod's sandbox is on the node it was scheduled to: ask that node's jitterd "
                   "(`kubectl get pod -o wide` names the node; `crictl pods` lists this one's)"};
  }
  std::optional<cri::PodSandbox> newest;
  std::size_t not_ready = 0;
  for (auto& sandbox : found) {
    if (sandbox.state != cri::SandboxState::kReady) {
      ++not_ready;
      continue;
    }
    if (!newest || sandbox.created_at_ns > newest->created_at_ns) newest = std::move(sandbox);
  }
  if (!newest) {
    return Refusal{ErrorCode::kConflict,
                   "pod " + std::string(pod) + " has no ready sandbox (" +
                       std::to_string(not_ready) + " not ready; asked " + asked + ")",
                   "/target/pod",
                   "its sandbox is being created or torn down: wait until the pod runs (`kubectl "
                   "get pod`), then apply again (or apply with --follow, which waits)"};
  }
  return std::move(*newest);
}

}  // namespace

std::vector<std::string> default_cri_sockets() {
  return {"/run/containerd/containerd.sock", "/run/k3s/containerd/containerd.sock",
          "/run/crio/crio.sock"};
}

std::optional<std::string> pod_name_problem(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos) {
    return "a pod is named \"NAMESPACE/NAME\" (e.g. default/redis-0), with one '/'; \"" +
           shaper::text_excerpt(text) + "\" is not";
  }
  if (auto problem = dns_problem(text.substr(0, slash), "namespace", kMaxLabel, false))
    return problem;
  return dns_problem(text.substr(slash + 1), "name", kMaxSubdomain, true);
}

std::optional<SandboxInfo> read_sandbox_info(std::string_view json,
                                             shaper::Diagnostics& diagnostics) {
  const std::optional<nlohmann::json> document =
      shaper::parse_json_object(json, "the runtime's info", diagnostics);
  if (!document) return std::nullopt;
  shaper::JsonReader r(diagnostics);
  const std::size_t before = diagnostics.size();
  SandboxInfo out;
  if (auto pid = r.integer<pid_t>(*document, "", "pid", 0, std::numeric_limits<pid_t>::max(), 0))
    out.pid = *pid;
  read_spec_netns(r, *document, out);
  if (diagnostics.size() != before) return std::nullopt;
  return out;
}

shaper::Expected<PodSandboxFound, Refusal> find_pod_sandbox(const std::vector<std::string>& sockets,
                                                            std::string_view pod,
                                                            std::chrono::milliseconds timeout) {
  if (auto problem = pod_name_problem(pod)) {
    return Refusal{ErrorCode::kInvalidParams, *problem, "/target/pod",
                   "give NAMESPACE/NAME as `kubectl get pods -A` shows them"};
  }
  std::string tried;
  auto answering = first_answering(sockets, timeout, tried);
  if (!answering) {
    return Refusal{ErrorCode::kNotFound, "no CRI runtime answers (tried " + tried + ")",
                   "/target/pod",
                   "is containerd or CRI-O running on this node? List its socket in "
                   "targets.cri_sockets in the config (and, in a pod, mount it)"};
  }
  const cri::Client& client = answering->first;
  const std::string runtime =
      answering->second.runtime_name + " " + answering->second.runtime_version;
  const std::string asked = runtime + " at " + client.socket_path();
  const auto [pod_namespace, name] = split_pod(pod);
  auto sandbox = ready_sandbox(
      client.list_pod_sandboxes({{kNamespaceLabel, pod_namespace}, {kNameLabel, name}}), pod,
      asked);
  if (!sandbox) return std::move(sandbox.error());
  const cri::PodSandboxStatus status = client.pod_sandbox_status(sandbox->id);
  if (status.network == cri::NetworkMode::kNode) {
    return Refusal{ErrorCode::kInvalidParams,
                   "pod " + std::string(pod) + " uses the node's network namespace (hostNetwork)",
                   "/target/pod",
                   "shaping it would shape the node itself: name the node's interface instead "
                   "(interfaces.allow), or give the pod a network of its own"};
  }
  if (status.state != cri::SandboxState::kReady) {
    return Refusal{ErrorCode::kConflict,
                   "pod " + std::string(pod) + "'s sandbox " + sandbox->id + " stopped while asked",
                   "/target/pod", "apply again once the pod runs"};
  }
  const auto info_json = status.info.find("info");
  shaper::Diagnostics diagnostics;
  std::optional<SandboxInfo> info;
  if (info_json != status.info.end()) info = read_sandbox_info(info_json->second, diagnostics);
  if (!info || (info->pid <= 0 && info->netns_path.empty())) {
    const std::string why = info_json == status.info.end() ? "its verbose status has no \"info\""
                            : diagnostics.empty()          ? "its info has neither \"pid\" nor the "
                                                             "runtime spec's network namespace path"
                                                           : shaper::to_string(diagnostics);
    throw shaper::SystemError("CRI PodSandboxStatus",
                              client.socket_path() + " sandbox " + sandbox->id, EPROTO,
                              "the runtime does not say where the pod's namespace is: " + why);
  }
  return PodSandboxFound{client.socket_path(), runtime, sandbox->id, status.ip, *info};
}

}  // namespace jitterd
