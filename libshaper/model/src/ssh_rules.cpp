#include "shaper/ssh_rules.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace shaper {

namespace {

// 1-based column of `part` inside `whole` (part is a view into whole).
std::string where_in(std::string_view whole, std::string_view part) {
  return "SSH_CONNECTION:" + std::to_string(part.data() - whole.data() + 1);
}

std::optional<IpAddress> ssh_address(std::string_view text) {
  if (const auto zone = text.find('%'); zone != std::string_view::npos) text = text.substr(0, zone);
  auto a = parse_ip_address(text);
  // ::ffff:a.b.c.d is an IPv4 peer seen through an IPv6 socket: the wire carries IPv4.
  static constexpr std::uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a && a->family == IpFamily::kV6 && std::memcmp(a->bytes.data(), kMappedPrefix, 12) == 0) {
    IpAddress v4;
    std::memcpy(v4.bytes.data(), a->bytes.data() + 12, 4);
    return v4;
  }
  return a;
}

std::optional<std::uint16_t> ssh_port(std::string_view text) {
  if (text.empty() || text.size() > 5 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  unsigned v = 0;
  for (char c : text) v = v * 10 + static_cast<unsigned>(c - '0');
  if (v == 0 || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

MatchRule tcp_flow(const IpAddress& src, std::uint16_t sport, const IpAddress& dst,
                   std::uint16_t dport) {
  MatchRule r;
  r.src = host_prefix(src);
  r.dst = host_prefix(dst);
  r.protocol = kProtoTcp;
  r.src_ports = PortRange{sport, sport};
  r.dst_ports = PortRange{dport, dport};
  return r;
}

}  // namespace

Expected<std::optional<SshConnection>> parse_ssh_connection(std::string_view text) {
  if (text.empty()) return std::optional<SshConnection>();
  Diagnostics diagnostics;
  std::vector<std::string_view> fields;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find(' ', start), text.size());
    fields.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (fields.size() != 4) {
    diagnostics.push_back({"SSH_CONNECTION:1",
                           "expected \"client_ip client_port server_ip server_port\" "
                           "(four fields separated by single spaces), found " +
                               std::to_string(fields.size()) + " fields"});
    return diagnostics;
  }
  auto address = [&](std::string_view f, const char* what) {
    auto a = ssh_address(f);
    if (!a)
      diagnostics.push_back(
          {where_in(text, f), std::string(what) + " is not an IPv4 or IPv6 address"});
    return a;
  };
  auto port = [&](std::string_view f, const char* what) {
    auto p = ssh_port(f);
    if (!p)
      diagnostics.push_back(
          {where_in(text, f), std::string(what) + " is not a port from 1 to 65535"});
    return p;
  };
  const auto client = address(fields[0], "the client address");
  const auto client_port = port(fields[1], "the client port");
  const auto server = address(fields[2], "the server address");
  const auto server_port = port(fields[3], "the server port");
  if (client && server && client->family != server->family) {
    diagnostics.push_back(
        {where_in(text, fields[2]),
         "the server address is of another family than the client's; one connection has one"});
  }
  if (!diagnostics.empty()) return diagnostics;
  return std::optional(SshConnection{*client, *client_port, *server, *server_port});
}

std::vector<MatchRule> ssh_protection_rules(std::span<const SshConnection> connections,
                                            std::span<const std::uint16_t> ports) {
  std::vector<std::uint16_t> wanted(ports.begin(), ports.end());
  if (wanted.empty()) wanted.push_back(kSshPort);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());

  std::vector<MatchRule> out;
  for (std::uint16_t p : wanted) {
    MatchRule to_port;  // towards an SSH server here (ingress) or there (egress)
    to_port.protocol = kProtoTcp;
    to_port.dst_ports = PortRange{p, p};
    MatchRule from_port;  // its answers
    from_port.protocol = kProtoTcp;
    from_port.src_ports = PortRange{p, p};
    out.push_back(to_port);
    out.push_back(from_port);
  }
  for (const SshConnection& c : connections) {
    out.push_back(tcp_flow(c.server, c.server_port, c.client, c.client_port));  // egress: we send
    out.push_back(
        tcp_flow(c.client, c.client_port, c.server, c.server_port));  // ingress: we receive
  }
  return out;
}

}  // namespace shaper

namespace shaper {

namespace {

std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text, int base) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::vector<ProcTcpSocket> parse_proc_net_tcp(std::string_view text) {
  std::vector<ProcTcpSocket> out;
  bool header = true;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (header) {
      header = false;
      continue;
    }
    std::vector<std::string_view> fields;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      const std::size_t j = std::min(line.find(' ', i), line.size());
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.size() < 10) continue;
    const std::size_t colon = fields[1].rfind(':');
    if (colon == std::string_view::npos) continue;
    const auto port = parse_unsigned(fields[1].substr(colon + 1), 16);
    const auto state = parse_unsigned(fields[3], 16);
    const auto inode = parse_unsigned(fields[9], 10);
    if (!port || *port > 0xffff || !state || !inode) continue;
    out.push_back({static_cast<std::uint16_t>(*port), static_cast<int>(*state), *inode});
  }
  return out;
}

std::vector<std::uint16_t> sshd_config_ports(const std::string& etc_ssh) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files{fs::path(etc_ssh) / "sshd_config"};
  std::error_code ec;
  std::vector<fs::path> dropins;
  for (fs::directory_iterator it(fs::path(etc_ssh) / "sshd_config.d", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().extension() == ".conf") dropins.push_back(it->path());
  }
  std::sort(dropins.begin(), dropins.end());
  files.insert(files.end(), dropins.begin(), dropins.end());
  std::vector<std::uint16_t> ports;
  for (const auto& file : files) {
    const auto text = read_small_file(file);
    if (!text) continue;
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string keyword, value;
      if (!(words >> keyword >> value)) continue;
      std::transform(keyword.begin(), keyword.end(), keyword.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (keyword != "port") continue;
      if (const auto port = parse_unsigned(value, 10); port && *port >= 1 && *port <= 0xffff) {
        ports.push_back(static_cast<std::uint16_t>(*port));
      }
    }
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

std::vector<std::uint16_t> sshd_listening_ports(const std::string& proc) {
  namespace fs = std::filesystem;
  std::vector<std::uint64_t> inodes;
  std::error_code ec;
  // Processes come and go while we look: every error is a process that is gone or hidden, skipped.
  for (fs::directory_iterator it(proc, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string pid = it->path().filename().string();
    if (pid.empty() ||
        !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const auto comm = read_small_file(it->path() / "comm");
    if (!comm || (*comm != "sshd\n" && *comm != "sshd")) continue;
    std::error_code fd_ec;
    for (fs::directory_iterator fd(it->path() / "fd", fd_ec), fd_end; !fd_ec && fd != fd_end;
         fd.increment(fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd->path(), link_ec).string();
      if (link_ec || !target.starts_with("socket:[") || !target.ends_with("]")) continue;
      if (const auto inode =
              parse_unsigned(std::string_view(target).substr(8, target.size() - 9), 10)) {
        inodes.push_back(*inode);
      }
    }
  }
  std::vector<std::uint16_t> ports;
  if (inodes.empty()) return ports;
  for (const char* table : {"net/tcp", "net/tcp6"}) {
    const auto text = read_small_file(fs::path(proc) / table);
    if (!text) continue;
    for (const auto& s : parse_proc_net_tcp(*text)) {
      if (s.state == kTcpListen &&
          std::find(inodes.begin(), inodes.end(), s.inode) != inodes.end()) {
        ports.push_back(s.local_port);
      }
    }
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace shaper
