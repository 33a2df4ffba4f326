#pragma once
// A remote jitterd, reached the way docker does it (DOCKER_HOST=ssh://): the URL of `--host` /
// $JITTERD_HOST read into its parts, and the command line of the child that runs `jitterctl proxy`
// there, with the protocol on its stdin and stdout (child_transport.hpp):
//   ssh://[user@]host[:port][/socket]  `ssh HOST 'jitterctl proxy ...'`; the remote command is one
//                                      line that sshd hands to the remote user's shell, so the
//                                      socket path in it is single-quoted;
//   k8s://NODE[/socket]                `kubectl exec --stdin ... POD -- jitterctl proxy ...` into
//                                      the Running jitterd pod of Kubernetes node NODE
//                                      (k8s_pods.hpp finds it); an argv, no shell anywhere.
// No shell is involved on this side either (posix_spawn).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitterctl {

// How the remote jitterctl proxy is reached.
enum class Transport { kSsh, kKubernetes };

// ssh://[user@]host[:port][/remote/socket/path] or k8s://NODE[/socket/path in the pod]
struct RemoteHost {
  Transport transport = Transport::kSsh;
  std::string user;  // empty: ssh's default (~/.ssh/config, then the local user)
  // ssh: a name, an IPv4 address, or an IPv6 address without []; k8s: the node's name (a DNS-1123
  // subdomain, checked).
  std::string host;
  std::optional<std::uint16_t> port;  // unset: ssh's default (22, or ~/.ssh/config)
  std::string socket_path;            // empty: the remote jitterctl's default socket
  // "ssh://root@192.0.2.1:2222", "k8s://node-a" as the user should read it in messages.
  std::string url() const;
};

// What jitterctl needs to build either child's command line: $JITTERD_SSH, $JITTERD_KUBECTL (words)
// and $JITTERD_K8S_NAMESPACE, read once by main.
struct RemoteCommands {
  std::vector<std::string> ssh{"ssh"};
  std::vector<std::string> kubectl{"kubectl"};
  std::string k8s_namespace{"jitterd"};
};

// The namespace deploy/kubernetes puts jitterd in, and the label its pods carry.
inline constexpr std::string_view kDefaultK8sNamespace = "jitterd";
inline constexpr std::string_view kJitterdPodSelector = "app.kubernetes.io/name=jitterd";
// The container of the DaemonSet's pod that holds jitterd and jitterctl.
inline constexpr std::string_view kJitterdContainer = "jitterd";

// Reads `ssh://[user@]host[:port][/path]` or `k8s://NODE[/path]`; throws UsageError naming what is
// wrong (an unsupported scheme, an empty host, a port that is not 1-65535, a user or host that ssh
// would take for an option, a node name that is not a DNS-1123 subdomain, a user or port in a k8s
// URL).
RemoteHost parse_host_url(std::string_view url);

// Whether `name` is a DNS-1123 subdomain as Kubernetes names nodes, pods and namespaces: at most
// 253 characters of [a-z0-9.-], dot-separated labels that start and end with [a-z0-9].
bool is_dns1123_subdomain(std::string_view name);

// The remote command: "jitterctl proxy" plus " --socket 'PATH'" when the URL named a socket.
std::string remote_proxy_command(const RemoteHost& remote);

// The ssh command to run: `ssh_command` ($JITTERD_SSH split at spaces, default "ssh") followed by
// -T -o BatchMode=yes [-p PORT] [-l USER] -- HOST "jitterctl proxy [--socket 'PATH']".
std::vector<std::string> ssh_argv(const RemoteHost& remote,
                                  const std::vector<std::string>& ssh_command);

// $JITTERD_SSH split at spaces and tabs (no quoting); "ssh" when unset or blank.
std::vector<std::string> ssh_command_words(const char* environment_value);
// $JITTERD_KUBECTL split the same way; "kubectl" when unset or blank.
std::vector<std::string> kubectl_command_words(const char* environment_value);
// $JITTERD_K8S_NAMESPACE, "jitterd" when unset or empty.
std::string k8s_namespace_of(const char* environment_value);
// Throws UsageError unless `name` is a Kubernetes namespace name (a DNS-1123 label: at most 63
// characters of [a-z0-9-], starting and ending with [a-z0-9]); run before any kubectl.
void check_k8s_namespace(std::string_view name);

// `kubectl get pods` for the jitterd pods of the URL's node, as JSON:
//   KUBECTL get pods --namespace NS --selector app.kubernetes.io/name=jitterd
//     --field-selector spec.nodeName=NODE,status.phase=Running --output json
std::vector<std::string> kubectl_get_pods_argv(const RemoteHost& remote,
                                               const RemoteCommands& commands);

// The transport child for a k8s:// URL, once its pod is known:
//   KUBECTL exec --stdin --namespace NS --container jitterd POD -- jitterctl proxy [--socket PATH]
std::vector<std::string> kubectl_exec_argv(const RemoteHost& remote, const RemoteCommands& commands,
                                           const std::string& pod);

// A command line for people to paste (words joined by spaces, a word with a blank or a shell
// character single-quoted): the "check with:" part of messages.
std::string command_line_for_people(const std::vector<std::string>& argv);

}  // namespace jitterctl
