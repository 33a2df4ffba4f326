#pragma once
// A remote jitterd reached over SSH, the way docker does it (DOCKER_HOST=ssh://): the URL of
// `--host` / $JITTERD_HOST read into its parts, and the ssh command line that runs `jitterctl
// proxy` there. No shell is involved on this side (posix_spawn); the remote command is one word
// list that sshd hands to the remote user's shell, so the socket path in it is single-quoted.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitterctl {

// ssh://[user@]host[:port][/remote/socket/path]
struct RemoteHost {
  std::string user;                   // empty: ssh's default (~/.ssh/config, then the local user)
  std::string host;                   // a name, an IPv4 address, or an IPv6 address without []
  std::optional<std::uint16_t> port;  // unset: ssh's default (22, or ~/.ssh/config)
  std::string socket_path;            // empty: the remote jitterctl's default socket
  // "ssh://root@192.0.2.1:2222" as the user should read it in messages.
  std::string url() const;
};

// Reads `ssh://[user@]host[:port][/path]`; throws UsageError naming what is wrong (an unsupported
// scheme, an empty host, a port that is not 1-65535, a user or host that ssh would take for an
// option).
RemoteHost parse_host_url(std::string_view url);

// The remote command: "jitterctl proxy" plus " --socket 'PATH'" when the URL named a socket.
std::string remote_proxy_command(const RemoteHost& remote);

// The ssh command to run: `ssh_command` ($JITTERD_SSH split at spaces, default "ssh") followed by
// -T -o BatchMode=yes [-p PORT] [-l USER] -- HOST "jitterctl proxy [--socket 'PATH']".
std::vector<std::string> ssh_argv(const RemoteHost& remote,
                                  const std::vector<std::string>& ssh_command);

// $JITTERD_SSH split at spaces and tabs (no quoting); "ssh" when unset or blank.
std::vector<std::string> ssh_command_words(const char* environment_value);

}  // namespace jitterctl
