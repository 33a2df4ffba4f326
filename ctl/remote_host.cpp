#include "remote_host.hpp"

#include <algorithm>
#include <charconv>

#include "options.hpp"

namespace jitterctl {

namespace {

constexpr std::string_view kScheme = "ssh://";
constexpr std::string_view kK8sScheme = "k8s://";
// Kubernetes' own limits (apimachinery's validation): a DNS-1123 subdomain, a DNS-1123 label.
constexpr std::size_t kMaxSubdomain = 253;
constexpr std::size_t kMaxLabel = 63;

// ssh reads a word that starts with '-' as an option, whatever comes after it on its command line;
// "--" in ssh_argv stops that for the host, and this refuses such a user or host outright.
void refuse_option_like(std::string_view what, std::string_view word, std::string_view url) {
  if (!word.empty() && word.front() == '-') {
    throw UsageError("--host \"" + std::string(url) + "\": the " + std::string(what) +
                     " may not start with '-'");
  }
  const bool control = std::any_of(word.begin(), word.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ' ';
  });
  if (control) {
    throw UsageError("--host \"" + std::string(url) + "\": the " + std::string(what) +
                     " may not contain spaces or control characters");
  }
}

std::uint16_t read_port(std::string_view text, std::string_view url) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value == 0 ||
      value > 65535) {
    throw UsageError("--host \"" + std::string(url) + "\": port \"" + std::string(text) +
                     "\" is not a port number (1 to 65535)");
  }
  return static_cast<std::uint16_t>(value);
}

// "host", "host:port", "[v6]", "[v6]:port" into the host and the port text.
std::pair<std::string_view, std::string_view> split_host_port(std::string_view hostport,
                                                              std::string_view url) {
  if (!hostport.empty() && hostport.front() == '[') {
    const auto close = hostport.find(']');
    if (close == std::string_view::npos)
      throw UsageError("--host \"" + std::string(url) + "\": '[' without ']'");
    const std::string_view rest = hostport.substr(close + 1);
    if (!rest.empty() && rest.front() != ':')
      throw UsageError("--host \"" + std::string(url) + "\": expected ':PORT' after ']'");
    return {hostport.substr(1, close - 1), rest.empty() ? rest : rest.substr(1)};
  }
  const auto colon = hostport.find(':');
  if (colon == std::string_view::npos) return {hostport, {}};
  if (hostport.find(':', colon + 1) != std::string_view::npos) {
    throw UsageError("--host \"" + std::string(url) +
                     "\": an IPv6 address is written in brackets: ssh://[2001:db8::1]:22");
  }
  return {hostport.substr(0, colon), hostport.substr(colon + 1)};
}

// 'text' for a POSIX shell: sshd runs the remote command through the user's shell.
std::string shell_quote(std::string_view text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// k8s://NODE[/socket]: no user, no port (kubectl exec has neither), NODE a node's name.
RemoteHost parse_k8s_url(std::string_view url) {
  const std::string_view rest = url.substr(kK8sScheme.size());
  const auto slash = rest.find('/');
  RemoteHost remote;
  remote.transport = Transport::kKubernetes;
  remote.host = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) remote.socket_path = std::string(rest.substr(slash));
  const std::string quoted = "--host \"" + std::string(url) + "\": ";
  if (remote.socket_path.find_first_of("?#") != std::string::npos ||
      remote.host.find_first_of("?#") != std::string::npos)
    throw UsageError(quoted + "no query or fragment is taken");
  if (remote.host.find_first_of("@:") != std::string::npos)
    throw UsageError(quoted +
                     "a user or port means nothing to kubectl exec; give k8s://NODE[/socket]");
  if (remote.host.empty()) throw UsageError(quoted + "which node? give k8s://NODE[/socket]");
  if (!is_dns1123_subdomain(remote.host))
    throw UsageError(quoted + "\"" + remote.host +
                     "\" is not a Kubernetes node name (lower-case letters, digits, '-' and '.', "
                     "at most 253; as `kubectl get nodes` lists them)");
  refuse_option_like("socket path", remote.socket_path, url);
  return remote;
}

std::vector<std::string> words_of(const char* environment_value, const char* fallback) {
  std::vector<std::string> words;
  const std::string_view text = environment_value ? environment_value : "";
  std::size_t at = 0;
  while (at < text.size()) {
    const auto start = text.find_first_not_of(" \t", at);
    if (start == std::string_view::npos) break;
    const auto end = std::min(text.find_first_of(" \t", start), text.size());
    words.emplace_back(text.substr(start, end - start));
    at = end;
  }
  if (words.empty()) words.emplace_back(fallback);
  return words;
}

}  // namespace

bool is_dns1123_subdomain(std::string_view name) {
  if (name.empty() || name.size() > kMaxSubdomain) return false;
  std::size_t start = 0;
  for (;;) {
    const auto dot = std::min(name.find('.', start), name.size());
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty() || !lower_alnum(label.front()) || !lower_alnum(label.back())) return false;
    if (!std::all_of(label.begin(), label.end(), [](char c) { return lower_alnum(c) || c == '-'; }))
      return false;
    if (dot == name.size()) return true;
    start = dot + 1;
  }
}

void check_k8s_namespace(std::string_view name) {
  if (name.size() > kMaxLabel || name.find('.') != std::string_view::npos ||
      !is_dns1123_subdomain(name)) {
    throw UsageError("$JITTERD_K8S_NAMESPACE \"" + std::string(name) +
                     "\" is not a Kubernetes namespace name (lower-case letters, digits and '-', "
                     "at most 63)");
  }
}

std::string RemoteHost::url() const {
  if (transport == Transport::kKubernetes) return std::string(kK8sScheme) + host + socket_path;
  std::string text(kScheme);
  if (!user.empty()) text += user + "@";
  text += host.find(':') == std::string::npos ? host : "[" + host + "]";
  if (port) text += ":" + std::to_string(*port);
  return text + socket_path;
}

RemoteHost parse_host_url(std::string_view url) {
  if (url.starts_with(kK8sScheme)) return parse_k8s_url(url);
  if (!url.starts_with(kScheme)) {
    const auto scheme_end = url.find("://");
    throw UsageError(
        "--host \"" + std::string(url) + "\": " +
        (scheme_end == std::string_view::npos
             ? std::string("not a URL")
             : "unsupported scheme \"" + std::string(url.substr(0, scheme_end)) + "\"") +
        "; give ssh://[user@]host[:port][/socket/path] or k8s://NODE[/socket/path]");
  }
  const std::string_view rest = url.substr(kScheme.size());
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  RemoteHost remote;
  if (slash != std::string_view::npos) remote.socket_path = std::string(rest.substr(slash));
  if (remote.socket_path.find_first_of("?#") != std::string::npos)
    throw UsageError("--host \"" + std::string(url) + "\": no query or fragment is taken");
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    remote.user = std::string(authority.substr(0, at));
    authority = authority.substr(at + 1);
    if (remote.user.empty())
      throw UsageError("--host \"" + std::string(url) + "\": empty user before '@'");
  }
  const auto [host, port] = split_host_port(authority, url);
  if (host.empty()) throw UsageError("--host \"" + std::string(url) + "\": which host?");
  remote.host = std::string(host);
  if (!port.empty() || authority.ends_with(':')) remote.port = read_port(port, url);
  refuse_option_like("user", remote.user, url);
  refuse_option_like("host", remote.host, url);
  refuse_option_like("socket path", remote.socket_path, url);
  return remote;
}

std::string remote_proxy_command(const RemoteHost& remote) {
  std::string command = "jitterctl proxy";
  if (!remote.socket_path.empty()) command += " --socket " + shell_quote(remote.socket_path);
  return command;
}

std::vector<std::string> ssh_argv(const RemoteHost& remote,
                                  const std::vector<std::string>& ssh_command) {
  std::vector<std::string> argv = ssh_command;
  // -T: no terminal (the protocol is bytes, not a session); BatchMode: never prompt, since
  // jitterctl owns stdin and stdout, so a key or host that needs a question fails with a message.
  argv.insert(argv.end(), {"-T", "-o", "BatchMode=yes"});
  if (remote.port) argv.insert(argv.end(), {"-p", std::to_string(*remote.port)});
  if (!remote.user.empty()) argv.insert(argv.end(), {"-l", remote.user});
  argv.insert(argv.end(), {"--", remote.host, remote_proxy_command(remote)});
  return argv;
}

std::vector<std::string> ssh_command_words(const char* environment_value) {
  return words_of(environment_value, "ssh");
}

std::vector<std::string> kubectl_command_words(const char* environment_value) {
  return words_of(environment_value, "kubectl");
}

std::string k8s_namespace_of(const char* environment_value) {
  return environment_value && *environment_value ? std::string(environment_value)
                                                 : std::string(kDefaultK8sNamespace);
}

std::vector<std::string> kubectl_get_pods_argv(const RemoteHost& remote,
                                               const RemoteCommands& commands) {
  std::vector<std::string> argv = commands.kubectl;
  argv.insert(argv.end(),
              {"get", "pods", "--namespace", commands.k8s_namespace, "--selector",
               std::string(kJitterdPodSelector), "--field-selector",
               "spec.nodeName=" + remote.host + ",status.phase=Running", "--output", "json"});
  return argv;
}

std::vector<std::string> kubectl_exec_argv(const RemoteHost& remote, const RemoteCommands& commands,
                                           const std::string& pod) {
  std::vector<std::string> argv = commands.kubectl;
  // --stdin: the protocol flows in; no --tty (bytes, not a session). The command is an argv that
  // the container runtime execs: no shell in the pod either, so the path is not quoted.
  argv.insert(argv.end(), {"exec", "--stdin", "--namespace", commands.k8s_namespace, "--container",
                           std::string(kJitterdContainer), pod, "--", "jitterctl", "proxy"});
  if (!remote.socket_path.empty()) argv.insert(argv.end(), {"--socket", remote.socket_path});
  return argv;
}

std::string command_line_for_people(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=,:@+%") == std::string::npos;
    line += plain ? word : shell_quote(word);
  }
  return line;
}

}  // namespace jitterctl
