#pragma once
// Which pod `jitterctl --host k8s://NODE` runs `jitterctl proxy` in: the Running jitterd pod of the
// DaemonSet (deploy/kubernetes) on node NODE, found with `kubectl get pods ... -o json`, whose
// reply is read here into typed structs (the only fields used: name, creation time, deletion mark,
// phase, Ready condition). During a rolling update a node can have two Running pods for a moment
// (the old one terminating, or a new one not yet Ready): the newest Ready one that is not being
// deleted wins.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "remote_host.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

// One item of `kubectl get pods -o json`, as far as the choice needs it.
struct JitterdPod {
  std::string name;
  std::string created;       // metadata.creationTimestamp, RFC 3339 UTC ("2026-12-05T14:12:40Z")
  bool ready = false;        // status.conditions[type=Ready].status == "True"
  bool terminating = false;  // metadata.deletionTimestamp is set
  std::string phase;         // status.phase
};

// `kubectl get pods -o json`'s output (a List of Pods) read into pods; throws ConnectError naming
// the URL when it is not such a list (kubectl printing something else) or a pod's name is not a
// DNS-1123 subdomain.
std::vector<JitterdPod> read_pod_list(const RemoteHost& remote, const std::string& json_text);

struct PodChoice {
  std::string pod;
  std::string note;  // "": nothing to say; else one line about the choice (several pods, not Ready)
};

// The pod to use among `pods` (all Running on the URL's node): not terminating before terminating,
// Ready before not Ready, then the newest. Throws ConnectError when there is none, naming the node,
// the namespace, the selector and the kubectl command to look with.
PodChoice choose_pod(const RemoteHost& remote, const RemoteCommands& commands,
                     const std::vector<JitterdPod>& pods);

// Runs `kubectl get pods` (bounded by `limit`) and chooses; throws ConnectError when kubectl cannot
// run, fails, says nothing usable, or finds no pod. `note` gets PodChoice::note when not empty.
std::string find_jitterd_pod(const RemoteHost& remote, const RemoteCommands& commands,
                             shaper::Nanoseconds limit,
                             const std::function<void(const std::string&)>& note);

}  // namespace jitterctl
