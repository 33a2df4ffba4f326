#pragma once
// The SSH side of keeping a shaping session from locking its operator out: the SSH connection the
// operator is using (from SSH_CONNECTION), the ports sshd listens on or is configured for, and
// match rules that exempt SSH from shaping. No netlink: the default-route dump is route_facts.hpp.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/expected.hpp"
#include "shaper/match_rules.hpp"

namespace shaper {

// One SSH session as sshd describes it to the shell.
struct SshConnection {
  IpAddress client;
  std::uint16_t client_port = 0;
  IpAddress server;  // this host's address for the session
  std::uint16_t server_port = 0;
  friend bool operator==(const SshConnection&, const SshConnection&) = default;
};

// The SSH_CONNECTION variable: "client_ip client_port server_ip server_port", single spaces. IPv4-
// mapped IPv6 addresses (::ffff:192.0.2.1, from a dual-stack socket) become IPv4, which is what the
// packets carry; a zone suffix (fe80::1%eth0) is dropped, since packets carry none. Empty text (not
// an SSH session): a value, nullopt, and no diagnostic. Malformed text: no value, and diagnostics
// whose `where` is "SSH_CONNECTION:<column>".
Expected<std::optional<SshConnection>> parse_ssh_connection(std::string_view text);

// The default SSH port (IANA).
inline constexpr std::uint16_t kSshPort = 22;

// Rules matching the traffic that must stay unshaped for SSH to keep working: TCP with `ports`
// (empty: port 22) as source or destination port, in either family, and each connection's packets
// in both directions (egress: server -> client, i.e. src = server; ingress: client -> server, i.e.
// src = client). Every rule passes validate() and compiles to at most two selectors.
std::vector<MatchRule> ssh_protection_rules(std::span<const SshConnection> connections,
                                            std::span<const std::uint16_t> ports);

// One row of /proc/net/tcp or /proc/net/tcp6: the local port, the TCP state (0x0A = LISTEN) and
// the socket's inode.
struct ProcTcpSocket {
  std::uint16_t local_port = 0;
  int state = 0;
  std::uint64_t inode = 0;
  friend bool operator==(const ProcTcpSocket&, const ProcTcpSocket&) = default;
};
inline constexpr int kTcpListen = 0x0A;

// The rows of a /proc/net/tcp or tcp6 table (the header line skipped; rows that do not parse are
// skipped too: the kernel's format, not user input).
std::vector<ProcTcpSocket> parse_proc_net_tcp(std::string_view text);

// The TCP ports sshd listens on in the caller's network namespace: the listening sockets of
// /proc/net/tcp and tcp6 whose inodes are open in a process whose comm is "sshd" (any sshd, so
// sessions on a port other than 22 are found too). Sorted, without duplicates; empty when no sshd
// runs or /proc does not show it (a process that cannot see other processes finds none). `proc` is
// the procfs root ("/proc"; tests give a folder of their own).
std::vector<std::uint16_t> sshd_listening_ports(const std::string& proc = "/proc");

// The ports sshd is configured to listen on: the `Port` lines of `etc_ssh`/sshd_config and of
// sshd_config.d/*.conf (keyword in any case, comments and malformed values skipped). For a daemon
// that cannot see other users' processes (systemd's ProtectProc=invisible), where
// sshd_listening_ports finds nothing. Sorted, without duplicates; empty when nothing is configured
// or readable (sshd's default 22 is not added here).
std::vector<std::uint16_t> sshd_config_ports(const std::string& etc_ssh = "/etc/ssh");

}  // namespace shaper
