// SSH_CONNECTION parsing (every diagnostic with its column) and the SSH protection rules, checked
// by what they match on synthetic packets (u32_evaluator.hpp) in both directions and both families.
#include "shaper/route_facts.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "u32_evaluator.hpp"

using namespace shaper;
using jitterd_test::address;
using jitterd_test::ipv4;
using jitterd_test::ipv6;
using jitterd_test::matches;

namespace {

SshConnection parse_ok(std::string_view text) {
  const auto c = parse_ssh_connection(text);
  EXPECT_TRUE(c.diagnostics().empty()) << to_string(c.diagnostics());
  EXPECT_TRUE(c && c->has_value()) << text;
  return c ? c->value_or(SshConnection{}) : SshConnection{};
}

void expect_parse_error(std::string_view text, const std::string& where,
                        const std::string& fragment) {
  const auto c = parse_ssh_connection(text);
  EXPECT_FALSE(c) << text;
  const Diagnostics& d = c.diagnostics();
  ASSERT_EQ(d.size(), 1u) << text << "\n" << to_string(d);
  EXPECT_EQ(d[0].where, where) << d[0].message;
  EXPECT_NE(d[0].message.find(fragment), std::string::npos) << d[0].message;
}

}  // namespace

TEST(SshConnection, ParsesIpv4AndIpv6) {
  EXPECT_EQ(parse_ok("192.0.2.10 51234 198.51.100.5 22"),
            (SshConnection{address("192.0.2.10"), 51234, address("198.51.100.5"), 22}));
  EXPECT_EQ(parse_ok("2001:db8::1 40000 2001:db8::2 2222"),
            (SshConnection{address("2001:db8::1"), 40000, address("2001:db8::2"), 2222}));
}

TEST(SshConnection, MappedAddressesBecomeIpv4AndZonesAreDropped) {
  const auto mapped = parse_ok("::ffff:192.0.2.10 51234 ::ffff:198.51.100.5 22");
  EXPECT_EQ(mapped.client, address("192.0.2.10"));
  EXPECT_EQ(mapped.server.family, IpFamily::kV4);
  const auto zoned = parse_ok("fe80::1%eth0 5000 fe80::2%eth0 22");
  EXPECT_EQ(zoned.client, address("fe80::1"));
  EXPECT_EQ(zoned.server, address("fe80::2"));
}

TEST(SshConnection, EmptyMeansNoSessionWithoutDiagnostics) {
  const auto c = parse_ssh_connection("");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->has_value());
  EXPECT_TRUE(c.diagnostics().empty());
}

TEST(SshConnection, MalformedTextIsReportedWithItsColumn) {
  expect_parse_error("192.0.2.10 51234 198.51.100.5", "SSH_CONNECTION:1", "found 3 fields");
  expect_parse_error("192.0.2.10  51234 198.51.100.5 22", "SSH_CONNECTION:1", "found 5 fields");
  expect_parse_error("192.0.2.300 51234 198.51.100.5 22", "SSH_CONNECTION:1",
                     "the client address is not");
  expect_parse_error("192.0.2.10 0 198.51.100.5 22", "SSH_CONNECTION:12",
                     "the client port is not a port");
  expect_parse_error("192.0.2.10 51234 198.51.100.5 70000", "SSH_CONNECTION:31",
                     "the server port is not");
  expect_parse_error("192.0.2.10 51234 host.example 22", "SSH_CONNECTION:18",
                     "the server address is not");
  expect_parse_error("192.0.2.10 +1 198.51.100.5 22", "SSH_CONNECTION:12", "the client port");
  expect_parse_error("192.0.2.10 51234 2001:db8::2 22", "SSH_CONNECTION:18", "another family");
}

TEST(SshProtection, DefaultPortBothDirectionsBothFamilies) {
  const auto rules = ssh_protection_rules({}, {});
  ASSERT_EQ(rules.size(), 2u);
  for (const auto& r : rules) {
    EXPECT_TRUE(validate(r).empty()) << to_string(validate(r));
    EXPECT_EQ(compile_match(r).size(), 2u);  // IPv4 and IPv6
  }
  EXPECT_TRUE(matches(rules, ipv4("192.0.2.1", "192.0.2.2", kProtoTcp, 50000, 22)));  // to a server
  EXPECT_TRUE(matches(rules, ipv4("192.0.2.2", "192.0.2.1", kProtoTcp, 22, 50000)));  // its answers
  EXPECT_TRUE(matches(rules, ipv6("2001:db8::1", "2001:db8::2", kProtoTcp, 50000, 22)));
  EXPECT_TRUE(matches(rules, ipv6("2001:db8::2", "2001:db8::1", kProtoTcp, 22, 50000)));
  EXPECT_FALSE(matches(rules, ipv4("192.0.2.1", "192.0.2.2", kProtoUdp, 50000, 22)));  // not TCP
  EXPECT_FALSE(matches(rules, ipv4("192.0.2.1", "192.0.2.2", kProtoTcp, 50000, 443)));
  EXPECT_FALSE(matches(rules, ipv6("2001:db8::1", "2001:db8::2", kProtoTcp, 2222, 443)));
}

TEST(SshProtection, GivenPortsReplaceTheDefaultAndRepeatsCollapse) {
  const std::vector<std::uint16_t> ports{2222, 22, 2222};
  const auto rules = ssh_protection_rules({}, ports);
  EXPECT_EQ(rules.size(), 4u);
  EXPECT_TRUE(matches(rules, ipv4("192.0.2.1", "192.0.2.2", kProtoTcp, 50000, 2222)));
  const std::vector<std::uint16_t> only{2222};
  EXPECT_FALSE(matches(ssh_protection_rules({}, only),
                       ipv4("192.0.2.1", "192.0.2.2", kProtoTcp, 50000, 22)));
}

// sshd on a port outside the list (2200 here): only the named connection is kept unshaped, in both
// directions, and only that one (another client, another client port, another family: shaped).
TEST(SshProtection, NamedConnectionIsKeptInBothOrientations) {
  const std::vector<SshConnection> connections{
      **parse_ssh_connection("192.0.2.10 51234 198.51.100.5 2200")};
  const std::vector<std::uint16_t> ports{22};
  const auto rules = ssh_protection_rules(connections, ports);
  ASSERT_EQ(rules.size(), 4u);
  for (const auto& r : rules) EXPECT_TRUE(validate(r).empty()) << to_string(validate(r));
  EXPECT_EQ(to_string(rules[2]),
            "src=198.51.100.5/32,dst=192.0.2.10/32,proto=tcp,sport=2200,dport=51234");
  EXPECT_EQ(to_string(rules[3]),
            "src=192.0.2.10/32,dst=198.51.100.5/32,proto=tcp,sport=51234,dport=2200");

  EXPECT_TRUE(
      matches(rules, ipv4("198.51.100.5", "192.0.2.10", kProtoTcp, 2200, 51234)));  // egress
  EXPECT_TRUE(
      matches(rules, ipv4("192.0.2.10", "198.51.100.5", kProtoTcp, 51234, 2200)));  // ingress
  EXPECT_FALSE(
      matches(rules, ipv4("192.0.2.11", "198.51.100.5", kProtoTcp, 51234, 2200)));  // other client
  EXPECT_FALSE(
      matches(rules, ipv4("192.0.2.10", "198.51.100.5", kProtoTcp, 51235, 2200)));  // other port
  EXPECT_FALSE(
      matches(rules, ipv4("198.51.100.5", "192.0.2.10", kProtoUdp, 2200, 51234)));  // not TCP
  EXPECT_FALSE(matches(rules, ipv6("::1", "::2", kProtoTcp, 51234, 2200)));
}

// --- sshd's listening ports, from /proc
// ------------------------------------------------------------

namespace {

constexpr const char* kTcpHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n";

// A folder laid out like /proc: processes with comm and fd links, and the net tables.
class FakeProc {
 public:
  FakeProc() {
    char dir[] = "/tmp/jitterd-proc-XXXXXX";
    if (!::mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    root_ = dir;
    std::filesystem::create_directories(root_ / "net");
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  void process(int pid, const std::string& comm, const std::vector<std::string>& fd_targets) {
    const auto dir = root_ / std::to_string(pid);
    std::filesystem::create_directories(dir / "fd");
    write(dir / "comm", comm + "\n");
    for (std::size_t i = 0; i < fd_targets.size(); ++i) {
      std::filesystem::create_symlink(fd_targets[i], dir / "fd" / std::to_string(i + 3));
    }
  }
  void table(const std::string& name, const std::string& rows) {
    write(root_ / "net" / name, kTcpHeader + rows);
  }
  std::string path() const { return root_.string(); }

 private:
  static void write(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text;
  }
  std::filesystem::path root_;
};

}  // namespace

TEST(ProcNetTcp, ReadsPortStateAndInodeOfBothFamilies) {
  const std::string text = std::string(kTcpHeader) +
                           "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 "
                           "00000000     0        0 555 1 0000 100 0 0 10 0\n"
                           "   1: 0100007F:0016 0200007F:C350 01 00000000:00000000 00:00000000 "
                           "00000000     0        0 556 1 0000 20 4 30 10 -1\n"
                           "   0: 00000000000000000000000000000000:0016 "
                           "00000000000000000000000000000000:0000 0A 00000000:00000000 "
                           "00:00000000 00000000     0        0 557 1 0000 100 0 0 10 0\n"
                           "   garbage line\n";
  const auto rows = parse_proc_net_tcp(text);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (ProcTcpSocket{2222, kTcpListen, 555}));
  EXPECT_EQ(rows[1], (ProcTcpSocket{22, 0x01, 556}));
  EXPECT_EQ(rows[2], (ProcTcpSocket{22, kTcpListen, 557}));
}

TEST(SshdPorts, ListeningSocketsOfSshdProcessesOnly) {
  FakeProc proc;
  proc.process(100, "sshd", {"socket:[555]", "/dev/null", "socket:[560]"});
  proc.process(200, "nginx", {"socket:[777]"});
  proc.table("tcp",
             "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0    "
             "    0 555 1 0 0 0 0 0 0\n"
             "   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0    "
             "    0 777 1 0 0 0 0 0 0\n"
             "   2: 0100007F:08AF 0200007F:C350 01 00000000:00000000 00:00000000 00000000     0    "
             "    0 560 1 0 0 0 0 0 0\n");
  proc.table("tcp6",
             "   0: 00000000000000000000000000000000:08AE 00000000000000000000000000000000:0000 0A "
             "00000000:00000000 "
             "00:00000000 00000000     0        0 555 1 0 0 0 0 0 0\n");
  // 2222 (v4 and v6, once); not nginx's 80; not sshd's established socket on 2223.
  EXPECT_EQ(sshd_listening_ports(proc.path()), std::vector<std::uint16_t>{2222});
}

TEST(SshdPorts, ConfiguredPortsFromSshdConfigAndItsDropIns) {
  char dir[] = "/tmp/jitterd-etc-ssh-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::filesystem::path etc(dir);
  std::filesystem::create_directories(etc / "sshd_config.d");
  std::ofstream(etc / "sshd_config")
      << "# Port 1\nInclude /etc/ssh/sshd_config.d/*.conf\nPort 2222\n  port\t22\n"
         "Port 99999\nPort x\nPortable 7\nListenAddress 0.0.0.0\n";
  std::ofstream(etc / "sshd_config.d" / "local.conf") << "PORT 2200\nPort 2222\n";
  std::ofstream(etc / "sshd_config.d" / "ignored.disabled") << "Port 4444\n";
  EXPECT_EQ(sshd_config_ports(etc.string()), (std::vector<std::uint16_t>{22, 2200, 2222}));
  EXPECT_TRUE(sshd_config_ports((etc / "missing").string()).empty());
  std::filesystem::remove_all(etc);
}

TEST(SshdPorts, NoSshdOrNoProcMeansNoPorts) {
  FakeProc proc;
  proc.process(200, "nginx", {"socket:[777]"});
  proc.table("tcp",
             "   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 777 "
             "1 0 0 0 0 0 0\n");
  EXPECT_TRUE(sshd_listening_ports(proc.path()).empty());
  EXPECT_TRUE(sshd_listening_ports("/nonexistent/proc").empty());
}
