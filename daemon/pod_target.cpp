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

std::string runtime_of(const cri::RuntimeVersion& version) {
  return version.runtime_name + " " + version.runtime_version;
}

// Where the ready sandbox `sandbox_id` keeps its namespace, from its verbose PodSandboxStatus: the
// part `--pod` and a CRI `--container` share. `what` names the target in refusals ("pod
// default/redis-0", "container redis (pod default/redis-0)"), `where` is its JSON pointer.
shaper::Expected<PodSandboxFound, Refusal> sandbox_namespace(const cri::Client& client,
                                                             const std::string& runtime,
                                                             const std::string& sandbox_id,
                                                             const std::string& what,
                                                             const std::string& where) {
  const cri::PodSandboxStatus status = client.pod_sandbox_status(sandbox_id);
  if (status.network == cri::NetworkMode::kNode) {
    return Refusal{ErrorCode::kInvalidParams,
                   what + " uses the node's network namespace (hostNetwork)", where,
                   "shaping it would shape the node itself: name the node's interface instead "
                   "(interfaces.allow), or give the pod a network of its own"};
  }
  if (status.state != cri::SandboxState::kReady) {
    return Refusal{ErrorCode::kConflict, what + ": sandbox " + sandbox_id + " stopped while asked",
                   where, "apply again once the pod runs"};
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
                              client.socket_path() + " sandbox " + sandbox_id, EPROTO,
                              "the runtime does not say where the pod's namespace is: " + why);
  }
  return PodSandboxFound{client.socket_path(), runtime, sandbox_id, status.ip, *info};
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
  const std::string runtime = runtime_of(answering->second);
  const std::string asked = runtime + " at " + client.socket_path();
  const auto [pod_namespace, name] = split_pod(pod);
  auto sandbox = ready_sandbox(
      client.list_pod_sandboxes({{kNamespaceLabel, pod_namespace}, {kNameLabel, name}}), pod,
      asked);
  if (!sandbox) return std::move(sandbox.error());
  return sandbox_namespace(client, runtime, sandbox->id, "pod " + std::string(pod), "/target/pod");
}

namespace {

// The sandboxes by ID, for the pods the containers are in.
using Sandboxes = std::map<std::string, cri::PodSandbox>;

std::string pod_of(const Sandboxes& sandboxes, const std::string& sandbox_id) {
  const auto it = sandboxes.find(sandbox_id);
  if (it == sandboxes.end()) return "sandbox " + sandbox_id.substr(0, 12);
  return it->second.pod_namespace + "/" + it->second.name;
}

std::string short_ids(const std::vector<cri::Container>& containers) {
  std::string out;
  for (const cri::Container& c : containers) out += (out.empty() ? "" : ", ") + c.id.substr(0, 12);
  return out;
}

// The containers `text` names (any state), in Docker's order: the full ID, the name (of the pod
// "NAMESPACE/POD/NAME" names), a unique ID prefix. An ambiguous prefix is refused.
shaper::Expected<std::vector<cri::Container>, Refusal> match_containers(
    std::vector<cri::Container> all, const Sandboxes& sandboxes, std::string_view text) {
  if (text.find('/') != std::string_view::npos) {
    const auto last = text.rfind('/');
    const std::string pod(text.substr(0, last));
    const std::string name(text.substr(last + 1));
    std::erase_if(all, [&](const cri::Container& c) {
      return c.name != name || pod_of(sandboxes, c.sandbox_id) != pod;
    });
    return all;
  }
  for (const cri::Container& c : all) {
    if (c.id == text) return std::vector<cri::Container>{c};
  }
  std::vector<cri::Container> named;
  std::vector<cri::Container> prefixed;
  for (const cri::Container& c : all) {
    if (c.name == text) named.push_back(c);
    if (c.id.starts_with(text)) prefixed.push_back(c);
  }
  if (!named.empty()) return named;
  if (prefixed.size() > 1) {
    return Refusal{ErrorCode::kConflict,
                   "container ID prefix " + std::string(text) +
                       " is ambiguous: " + std::to_string(prefixed.size()) +
                       " containers' IDs start with it (" + short_ids(prefixed) + ")",
                   "/target/container", "give more of the ID (`crictl ps -a` shows them)"};
  }
  return prefixed;
}

// The one running container of `matched` (or the sandbox all the running ones share), or why not.
shaper::Expected<cri::Container, Refusal> running_one(const std::vector<cri::Container>& matched,
                                                      const Sandboxes& sandboxes,
                                                      std::string_view text) {
  std::vector<cri::Container> running;
  for (const cri::Container& c : matched) {
    if (c.state == cri::ContainerState::kRunning) running.push_back(c);
  }
  if (running.empty()) {
    std::string pods;
    for (const cri::Container& c : matched) {
      const std::string pod = pod_of(sandboxes, c.sandbox_id);
      if (pods.find(pod) == std::string::npos) pods += (pods.empty() ? "" : ", ") + pod;
    }
    return Refusal{ErrorCode::kConflict,
                   "container " + std::string(text) + " is not running: only " +
                       std::to_string(matched.size()) + " exited or created one(s) match (" +
                       short_ids(matched) + " in " + pods + ")",
                   "/target/container",
                   "apply again once it runs (`crictl ps` lists the running ones): its namespace "
                   "is its pod's, shaped while a container of that name runs in it"};
  }
  std::vector<std::string> pods;
  for (const cri::Container& c : running) {
    const std::string pod = pod_of(sandboxes, c.sandbox_id);
    if (std::find(pods.begin(), pods.end(), pod) == pods.end()) pods.push_back(pod);
  }
  if (pods.size() > 1) {
    std::string list;
    for (const std::string& pod : pods) list += (list.empty() ? "" : ", ") + pod;
    return Refusal{ErrorCode::kConflict,
                   "container name " + std::string(text) + " runs in " +
                       std::to_string(pods.size()) + " pods (" + list + ")",
                   "/target/container",
                   "pick one: --pod NAMESPACE/NAME (the pod's namespace is its containers'), "
                   "--container NAMESPACE/POD/" +
                       std::string(text) + ", or the container's ID (`crictl ps --name " +
                       std::string(text) + "`)"};
  }
  // The newest, should one sandbox run two of the name (a runtime mid-restart).
  return *std::max_element(running.begin(), running.end(), [](const auto& a, const auto& b) {
    return a.created_at_ns < b.created_at_ns;
  });
}

std::string joined(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + "; " + b;
}

}  // namespace

std::optional<std::string> pod_container_problem(std::string_view text) {
  const auto last = text.rfind('/');
  const std::string_view pod = text.substr(0, last);
  if (last == std::string_view::npos || pod.find('/') == std::string_view::npos) {
    return "a container of a pod is named \"NAMESPACE/POD/CONTAINER\" (e.g. "
           "default/redis-0/redis); \"" +
           shaper::text_excerpt(text) + "\" is not";
  }
  if (auto problem = pod_name_problem(pod)) return problem;
  if (auto problem = dns_problem(text.substr(last + 1), "container's name", kMaxLabel, false))
    return problem;
  return std::nullopt;
}

shaper::Expected<CriContainerFound, Refusal> find_cri_container(
    const std::vector<std::string>& sockets, std::string_view container,
    const EnginesAsked& engines, std::chrono::milliseconds timeout) {
  std::string tried;
  auto answering = first_answering(sockets, timeout, tried);
  if (!answering) {
    const bool denied = engines.denied && !engines.answered;
    return Refusal{
        denied ? ErrorCode::kPermissionDenied : ErrorCode::kNotFound,
        engines.answered ? "no container " + std::string(container) + " (asked " + engines.tried +
                               "; no CRI runtime answers: " + tried + ")"
                         : "no container runtime answers at any socket (tried " +
                               joined(engines.tried, tried) + ")",
        "/target/container",
        std::string(denied ? "jitterd may not use the runtime's socket: give its user the "
                             "socket's group (Docker's is `docker`); or "
                           : "") +
            "start Docker or Podman's API service (`systemctl start podman.socket`), or containerd "
            "or CRI-O, and list their sockets in targets.engine_sockets or targets.cri_sockets in "
            "the config"};
  }
  const cri::Client& client = answering->first;
  const std::string runtime = runtime_of(answering->second);
  Sandboxes sandboxes;
  for (cri::PodSandbox& s : client.list_pod_sandboxes({})) {
    std::string id = s.id;
    sandboxes.emplace(std::move(id), std::move(s));
  }
  auto matched = match_containers(client.list_containers(), sandboxes, container);
  if (!matched) return std::move(matched.error());
  if (matched->empty()) {
    return Refusal{
        ErrorCode::kNotFound,
        "no container " + std::string(container) + " (asked " +
            joined(engines.tried, runtime + " at " + client.socket_path()) + ")",
        "/target/container",
        "`docker ps -a`, `podman ps -a` or `crictl ps -a` lists the containers (a pod's "
        "are on the node it was scheduled to); containerd's own (`ctr`, nerdctl) are not "
        "CRI's: reach them with --pid or --netns-path"};
  }
  auto one = running_one(*matched, sandboxes, container);
  if (!one) return std::move(one.error());
  const std::string pod = pod_of(sandboxes, one->sandbox_id);
  auto sandbox = sandbox_namespace(client, runtime, one->sandbox_id,
                                   "container " + std::string(container) + " (pod " + pod + ")",
                                   "/target/container");
  if (!sandbox) return std::move(sandbox.error());
  return CriContainerFound{one->id, one->name, pod, std::move(*sandbox)};
}

}  // namespace jitterd
