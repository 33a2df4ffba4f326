#include "k8s_pods.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include <nlohmann/json.hpp>

#include "child_transport.hpp"
#include "control_client.hpp"

namespace jitterctl {
namespace {

using Json = nlohmann::json;

// A node runs a handful of pods of one DaemonSet at most; a reply larger than this is not the list
// asked for (each pod's JSON is a few KiB).
constexpr std::size_t kMaxPodListBytes = 4 * 1024 * 1024;

ConnectError lookup_error(const RemoteHost& remote, const std::string& what) {
  return ConnectError("cannot reach jitterd on " + remote.url() + ": " + what, EPROTO);
}

// A string member, "" when absent or not a string (kubectl omits empty fields).
std::string text_at(const Json* object, const char* key) {
  if (!object || !object->is_object()) return {};
  const auto it = object->find(key);
  return it != object->end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The member, nullptr when absent (or `object` is not an object).
const Json* member(const Json* object, const char* key) {
  if (!object || !object->is_object()) return nullptr;
  const auto it = object->find(key);
  return it == object->end() ? nullptr : &*it;
}

bool ready_condition(const Json* status) {
  const Json* conditions = member(status, "conditions");
  if (!conditions || !conditions->is_array()) return false;
  return std::any_of(conditions->begin(), conditions->end(), [](const Json& c) {
    return text_at(&c, "type") == "Ready" && text_at(&c, "status") == "True";
  });
}

std::string look_command(const RemoteCommands& commands) {
  std::vector<std::string> argv = commands.kubectl;
  argv.insert(argv.end(), {"get", "pods", "--namespace", commands.k8s_namespace, "--selector",
                           std::string(kJitterdPodSelector), "--output", "wide"});
  return command_line_for_people(argv);
}

}  // namespace

std::vector<JitterdPod> read_pod_list(const RemoteHost& remote, const std::string& json_text) {
  const Json list = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  const Json* items = member(&list, "items");
  if (list.is_discarded() || !items || !items->is_array()) {
    const std::string start = json_text.substr(0, std::min<std::size_t>(json_text.size(), 80));
    throw lookup_error(remote,
                       "kubectl get pods printed no pod list (expected JSON with \"items\"; "
                       "it printed \"" +
                           start + (json_text.size() > 80 ? "…" : "") + "\")");
  }
  std::vector<JitterdPod> pods;
  for (const Json& item : *items) {
    const Json* metadata = member(&item, "metadata");
    JitterdPod pod;
    pod.name = text_at(metadata, "name");
    pod.created = text_at(metadata, "creationTimestamp");
    const Json* deletion = member(metadata, "deletionTimestamp");
    pod.terminating = deletion && !deletion->is_null();
    const Json* status = member(&item, "status");
    pod.phase = text_at(status, "phase");
    pod.ready = ready_condition(status);
    // The name goes into kubectl's argv: it must be what Kubernetes allows, never an option.
    if (!is_dns1123_subdomain(pod.name))
      throw lookup_error(remote, "kubectl get pods listed a pod named \"" + pod.name.substr(0, 80) +
                                     "\", not a Kubernetes name");
    pods.push_back(std::move(pod));
  }
  return pods;
}

PodChoice choose_pod(const RemoteHost& remote, const RemoteCommands& commands,
                     const std::vector<JitterdPod>& pods) {
  std::vector<const JitterdPod*> running;
  for (const JitterdPod& p : pods)
    if (p.phase == "Running") running.push_back(&p);
  if (running.empty()) {
    throw lookup_error(remote, "no Running jitterd pod on node " + remote.host + " in namespace " +
                                   commands.k8s_namespace + " (selector " +
                                   std::string(kJitterdPodSelector) +
                                   ") — is jitterd deployed there (docs/operations.md, "
                                   "\"Kubernetes\"), and is the node's name right? look with: " +
                                   look_command(commands));
  }
  // RFC 3339 times in UTC with the same layout compare as text.
  const auto rank = [](const JitterdPod* p) {
    return std::make_tuple(!p->terminating, p->ready, p->created, p->name);
  };
  const JitterdPod* best = *std::max_element(
      running.begin(), running.end(),
      [&](const JitterdPod* a, const JitterdPod* b) { return rank(a) < rank(b); });
  PodChoice choice{best->name, {}};
  if (running.size() > 1) {
    std::string others;
    for (const JitterdPod* p : running) {
      if (p == best) continue;
      others += (others.empty() ? "" : ", ") + p->name + " (" +
                (p->terminating ? "terminating"
                 : p->ready     ? "Ready"
                                : "not Ready") +
                ", created " + p->created + ")";
    }
    choice.note = remote.url() + ": " + std::to_string(running.size()) +
                  " Running jitterd pods on node " + remote.host + " (a rolling update?): using " +
                  best->name + (best->ready && !best->terminating ? ", the newest Ready one" : "") +
                  ", created " + best->created + "; not " + others;
  }
  if (!best->ready || best->terminating) {
    choice.note += (choice.note.empty() ? remote.url() + ": " : std::string("; ")) + "pod " +
                   best->name + (best->terminating ? " is terminating" : " is not Ready") +
                   " (no better one on the node)";
  }
  return choice;
}

std::string find_jitterd_pod(const RemoteHost& remote, const RemoteCommands& commands,
                             shaper::Nanoseconds limit,
                             const std::function<void(const std::string&)>& note) {
  const std::vector<std::string> argv = kubectl_get_pods_argv(remote, commands);
  const ChildRun run =
      run_child(remote, argv, "install kubectl, or name the kubectl command in $JITTERD_KUBECTL",
                limit, kMaxPodListBytes);
  const std::string check = "; check with: " + command_line_for_people(argv);
  if (!run.status) {
    throw ConnectError(
        "cannot reach jitterd on " + remote.url() + ": kubectl get pods did not answer within " +
            shaper::format_duration(limit) + " (is the API server reachable?)" + check,
        ETIMEDOUT);
  }
  if (!WIFEXITED(*run.status) || WEXITSTATUS(*run.status) != 0) {
    const std::string how = WIFEXITED(*run.status)
                                ? "exit code " + std::to_string(WEXITSTATUS(*run.status))
                                : "signal " + std::to_string(WTERMSIG(*run.status));
    throw lookup_error(remote, "kubectl get pods failed (" + how + ")" +
                                   (run.last_error_line.empty() ? "" : ": " + run.last_error_line) +
                                   check);
  }
  if (run.out_truncated)
    throw lookup_error(remote,
                       "kubectl get pods printed more than 4 MiB; not one node's pods" + check);
  const PodChoice choice = choose_pod(remote, commands, read_pod_list(remote, run.out));
  if (!choice.note.empty() && note) note(choice.note);
  return choice.pod;
}

}  // namespace jitterctl
