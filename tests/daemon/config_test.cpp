// parse_config: the daemon's configuration as a typed struct, every problem a diagnostic with its
// JSON pointer (or the line and column of a syntax error); and the interface allowlist's globbing.
#include "config.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "shaper/errors.hpp"
#include "test_files.hpp"

using namespace std::chrono_literals;

namespace jitterd {
namespace {

std::vector<std::string> wheres(const ConfigLoad& load) {
  std::vector<std::string> out;
  for (const auto& d : load.diagnostics) out.push_back(d.where);
  return out;
}

// The message of the one diagnostic at `where`; fails the test unless that is the only diagnostic.
std::string only_message(const ConfigLoad& load, const std::string& where) {
  EXPECT_FALSE(load.config) << "a config with a diagnostic must not be returned";
  EXPECT_EQ(wheres(load), std::vector<std::string>{where}) << shaper::to_string(load.diagnostics);
  return load.diagnostics.empty() ? "" : load.diagnostics.front().message;
}

TEST(Config, AnEmptyObjectGivesTheDocumentedDefaults) {
  const auto load = parse_config("{}");
  ASSERT_TRUE(load.config) << shaper::to_string(load.diagnostics);
  const Config& c = *load.config;
  EXPECT_EQ(c.socket.path, "/run/jitterd/jitterd.sock");
  EXPECT_EQ(c.socket.group, "");
  EXPECT_EQ(c.socket.mode, 0660u);
  EXPECT_EQ(c.state_dir, "/run/jitterd");
  EXPECT_EQ(c.profile_dirs,
            (std::vector<std::string>{"/etc/jitterd/profiles", "/usr/share/jitterd/profiles"}));
  EXPECT_TRUE(c.allow_interfaces.empty()) << "by default nothing may be shaped";
  EXPECT_FALSE(c.interface_allowed("eth0"));
  EXPECT_FALSE(c.allow_force);
  EXPECT_EQ(c.recovery, Recovery::kRemove);
  EXPECT_EQ(c.limits.max_connections, 64u);
  // 9 MiB: an inline profile may be as large as a profile file (8 MiB), plus the envelope.
  EXPECT_EQ(c.limits.max_request_bytes, 9u * 1024u * 1024u);
  EXPECT_EQ(c.limits.idle_timeout, 10min);
  EXPECT_EQ(c.limits.max_queued_events, 4096u);
  EXPECT_EQ(c.max_lease, 24h);
  EXPECT_FALSE(c.lease_required);
}

TEST(Config, TheMetricsListenerIsOffByDefault) {
  const auto load = parse_config("{}");
  ASSERT_TRUE(load.config);
  EXPECT_FALSE(load.config->metrics.listen);
}

TEST(Config, AMetricsPortAloneMeansLoopback) {
  const auto load = parse_config(R"({"metrics": {"listen": "9464"}})");
  ASSERT_TRUE(load.config) << shaper::to_string(load.diagnostics);
  ASSERT_TRUE(load.config->metrics.listen);
  EXPECT_EQ(load.config->metrics.listen->address, "127.0.0.1");
  EXPECT_EQ(load.config->metrics.listen->port, 9464);
}

TEST(Config, MetricsListenTakesExplicitIPv4AndBracketedIPv6Addresses) {
  const auto v4 = parse_metrics_listen("192.0.2.7:9100");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->address, "192.0.2.7");
  EXPECT_EQ(v4->port, 9100);
  const auto v6 = parse_metrics_listen("[::1]:9464");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->address, "::1");
  EXPECT_EQ(v6->port, 9464);
}

TEST(Config, ABadMetricsListenIsRefusedWithItsPointerAndTheFormsThatWork) {
  for (const char* bad : {"0", "65536", "localhost:9464", "::1:9464", "[::1]9464", "1.2.3:80",
                          "127.0.0.1:", "[127.0.0.1]:80", "9464x", "-1"}) {
    const auto load = parse_config(std::string(R"({"metrics": {"listen": ")") + bad + R"("}})");
    const std::string message = only_message(load, "/metrics/listen");
    EXPECT_NE(message.find("\"[::1]:9464\""), std::string::npos) << bad << ": " << message;
  }
  EXPECT_EQ(wheres(parse_config(R"({"metrics": {"listen": 9464}})")),
            std::vector<std::string>{"/metrics/listen"});
  EXPECT_EQ(wheres(parse_config(R"({"metrics": {"port": "9464"}})")),
            std::vector<std::string>{"/metrics/port"});
  EXPECT_NE(only_message(parse_config(R"({"metrics": {"listen": ""}})"), "/metrics/listen")
                .find("leave metrics.listen out"),
            std::string::npos);
}

TEST(Config, EveryFieldIsRead) {
  const auto load = parse_config(R"({
    "socket": {"path": "/run/j/j.sock", "group": "netlab", "mode": "0600"},
    "state_dir": "/var/lib/jitterd",
    "profile_dirs": ["/srv/profiles", "/opt/profiles"],
    "interfaces": {"allow": ["veth*", "eth1"]},
    "allow_force": true,
    "recovery": "adopt",
    "limits": {"max_connections": 8, "max_request_bytes": 65536, "idle_timeout": "10m",
               "max_queued_events": 100},
    "leases": {"max": "2h", "required": true}
  })");
  ASSERT_TRUE(load.config) << shaper::to_string(load.diagnostics);
  const Config& c = *load.config;
  EXPECT_EQ(c.socket.path, "/run/j/j.sock");
  EXPECT_EQ(c.socket.group, "netlab");
  EXPECT_EQ(c.socket.mode, 0600u);
  EXPECT_EQ(c.state_dir, "/var/lib/jitterd");
  EXPECT_EQ(c.profile_dirs, (std::vector<std::string>{"/srv/profiles", "/opt/profiles"}));
  EXPECT_EQ(c.allow_interfaces, (std::vector<std::string>{"veth*", "eth1"}));
  EXPECT_TRUE(c.allow_force);
  EXPECT_EQ(c.recovery, Recovery::kAdopt);
  EXPECT_EQ(c.limits.max_connections, 8u);
  EXPECT_EQ(c.limits.max_request_bytes, 65536u);
  EXPECT_EQ(c.limits.idle_timeout, 10min);
  EXPECT_EQ(c.limits.max_queued_events, 100u);
  EXPECT_EQ(c.max_lease, 2h);
  EXPECT_TRUE(c.lease_required);
}

TEST(Config, DurationsTakeMinutesHoursAndFractions) {
  const auto load =
      parse_config(R"({"limits": {"idle_timeout": "1.5m"}, "leases": {"max": "90s"}})");
  ASSERT_TRUE(load.config) << shaper::to_string(load.diagnostics);
  EXPECT_EQ(load.config->limits.idle_timeout, 90s);
  EXPECT_EQ(load.config->max_lease, 90s);
}

TEST(Config, DurationsBelowOneSecondOrWithoutUnitAreRefused) {
  EXPECT_EQ(only_message(parse_config(R"({"limits": {"idle_timeout": "500ms"}})"),
                         "/limits/idle_timeout"),
            "must be at least 1s");
  EXPECT_EQ(only_message(parse_config(R"({"leases": {"max": "999ms"}})"), "/leases/max"),
            "must be at least 1s");
  const std::string m =
      only_message(parse_config(R"({"limits": {"idle_timeout": 10}})"), "/limits/idle_timeout");
  EXPECT_NE(m.find("expected a duration"), std::string::npos) << m;
  EXPECT_NE(m.find("found 10"), std::string::npos) << m;
}

// Issue 21: {"recovery": "adopt", "recovery": "remove"} was read as its last, silently.
TEST(Config, ARepeatedKeyIsRefusedWithItsPointer) {
  const auto load = parse_config(
      R"({"recovery": "adopt", "limits": {"max_connections": 3, "max_connections": 300}})");
  const std::string m = only_message(load, "/limits/max_connections");
  EXPECT_EQ(m.rfind("the key \"max_connections\" appears twice in one object", 0), 0u) << m;
}

// Issue 21: jitterd --check-config died with SIGSEGV on a config nested 100 000 deep.
TEST(Config, AConfigNestedAHundredThousandDeepIsRefusedNotACrash) {
  const auto load = parse_config("{\"interfaces\": {\"allow\": " + std::string(100000, '[') +
                                 std::string(100000, ']') + "}}");
  ASSERT_EQ(load.diagnostics.size(), 1u);
  EXPECT_EQ(load.diagnostics[0].where.rfind("/interfaces/allow/0/0/", 0), 0u)
      << load.diagnostics[0].where;
  EXPECT_EQ(load.diagnostics[0].message, "nests deeper than 64 levels; it was not read");
  // Within the limit, the error quotes an excerpt.
  const auto shallow = parse_config("{\"interfaces\": {\"allow\": [" + std::string(50, '[') +
                                    std::string(50, ']') + "]}}");
  EXPECT_EQ(only_message(shallow, "/interfaces/allow/0"),
            "expected an interface name or glob pattern such as \"veth*\", found " +
                std::string(50, '[') + std::string(10, ']') + "...");
}

TEST(Config, UnknownKeysAreReportedEachWithItsPointer) {
  const auto load = parse_config(R"({
    "sockett": {},
    "socket": {"paht": "/x.sock"},
    "limits": {"max_conections": 3},
    "leases": {"maximum": "1h"},
    "interfaces": {"allowed": ["veth0"]}
  })");
  EXPECT_FALSE(load.config);
  auto w = wheres(load);
  std::sort(w.begin(), w.end());
  EXPECT_EQ(w, (std::vector<std::string>{"/interfaces/allowed", "/leases/maximum",
                                         "/limits/max_conections", "/socket/paht", "/sockett"}));
  for (const auto& d : load.diagnostics) {
    EXPECT_NE(d.message.find("unknown key; expected one of:"), std::string::npos) << d.to_string();
  }
}

TEST(Config, ASocketModeGivingOthersAccessIsRefused) {
  // Read or write for others; (execute alone, e.g. "0661", grants nothing on a socket: connect(2)
  // needs write permission.)
  for (const char* mode : {"0666", "0664", "0662", "0777", "0606"}) {
    const std::string m = only_message(
        parse_config(std::string(R"({"socket": {"mode": ")") + mode + "\"}}"), "/socket/mode");
    EXPECT_NE(m.find("without access for others"), std::string::npos) << mode << ": " << m;
  }
  // Not octal, or more than permission bits.
  for (const char* mode : {"0680", "rw", "1660"}) {
    only_message(parse_config(std::string(R"({"socket": {"mode": ")") + mode + "\"}}"),
                 "/socket/mode");
  }
  for (const char* mode : {"0660", "0600", "660", "0640", "0770"}) {
    const auto load = parse_config(std::string(R"({"socket": {"mode": ")") + mode + "\"}}");
    ASSERT_TRUE(load.config) << mode << ": " << shaper::to_string(load.diagnostics);
    EXPECT_EQ(load.config->socket.mode & 0007u, 0u) << mode;
  }
}

TEST(Config, AStarAllowlistIsRefused) {
  const std::string m = only_message(parse_config(R"({"interfaces": {"allow": ["veth*", "*"]}})"),
                                     "/interfaces/allow/1");
  EXPECT_NE(m.find("every interface"), std::string::npos) << m;
}

TEST(Config, AllowlistEntriesMustBeNonEmptyStrings) {
  const auto load = parse_config(R"({"interfaces": {"allow": ["", 7, "veth0"]}})");
  EXPECT_EQ(wheres(load), (std::vector<std::string>{"/interfaces/allow/0", "/interfaces/allow/1"}));
  only_message(parse_config(R"({"interfaces": {"allow": "veth*"}})"), "/interfaces/allow");
}

TEST(Config, PathsMustBeAbsolute) {
  const std::string m = only_message(parse_config(R"({"state_dir": "run/jitterd"})"), "/state_dir");
  EXPECT_NE(m.find("not an absolute path"), std::string::npos) << m;
  only_message(parse_config(R"({"socket": {"path": "jitterd.sock"}})"), "/socket/path");
  only_message(parse_config(R"({"profile_dirs": ["/ok", "profiles"]})"), "/profile_dirs/1");
  // sun_path holds 107 characters and the NUL.
  only_message(parse_config(R"({"socket": {"path": "/)" + std::string(107, 'x') + "\"}}"),
               "/socket/path");
}

TEST(Config, PodTargetsAndCriSocketsAreRead) {
  const auto load = parse_config(R"({"targets": {
    "allow": ["pod:default/redis-*", "container:redis0"],
    "cri_sockets": ["/run/k3s/containerd/containerd.sock", "/run/crio/crio.sock"]}})");
  ASSERT_TRUE(load.config) << shaper::to_string(load.diagnostics);
  const Config& c = *load.config;
  EXPECT_EQ(c.targets.cri_sockets, (std::vector<std::string>{"/run/k3s/containerd/containerd.sock",
                                                             "/run/crio/crio.sock"}));
  EXPECT_TRUE(c.target_allowed("pod", "default/redis-0"));
  EXPECT_FALSE(c.target_allowed("pod", "staging/redis-0"));
  EXPECT_FALSE(c.target_allowed("container", "default/redis-0"));
  EXPECT_TRUE(parse_config(R"({"targets": {}})").config->targets.cri_sockets.empty());
  only_message(parse_config(R"({"targets": {"cri_sockets": ["crio.sock"]}})"),
               "/targets/cri_sockets/0");
  only_message(parse_config(R"({"targets": {"cri_sockets": "/run/crio/crio.sock"}})"),
               "/targets/cri_sockets");
  const std::string m =
      only_message(parse_config(R"({"targets": {"allow": ["kubepod:x"]}})"), "/targets/allow/0");
  EXPECT_NE(m.find("container, pod"), std::string::npos) << m;
}

TEST(Config, RecoveryIsRemoveOrAdopt) {
  ASSERT_TRUE(parse_config(R"({"recovery": "remove"})").config);
  EXPECT_EQ(parse_config(R"({"recovery": "remove"})").config->recovery, Recovery::kRemove);
  const std::string m = only_message(parse_config(R"({"recovery": "keep"})"), "/recovery");
  EXPECT_NE(m.find("\"keep\" is not a recovery mode"), std::string::npos) << m;
}

TEST(Config, TheSwitchGateIsOffUnlessKernelIsAsked) {
  EXPECT_EQ(parse_config("{}").config->switch_gate, SwitchGate::kOff);
  EXPECT_EQ(parse_config(R"({"switch_gate": "off"})").config->switch_gate, SwitchGate::kOff);
  EXPECT_EQ(parse_config(R"({"switch_gate": "kernel"})").config->switch_gate, SwitchGate::kKernel);
  const std::string m = only_message(parse_config(R"({"switch_gate": "bpf"})"), "/switch_gate");
  EXPECT_NE(m.find("\"bpf\" is not a switch gate"), std::string::npos) << m;
  EXPECT_NE(m.find("CAP_BPF"), std::string::npos) << m;
  only_message(parse_config(R"({"switch_gate": true})"), "/switch_gate");
}

TEST(Config, LimitsOutOfRangeAreRefused) {
  only_message(parse_config(R"({"limits": {"max_connections": 0}})"), "/limits/max_connections");
  only_message(parse_config(R"({"limits": {"max_request_bytes": 100}})"),
               "/limits/max_request_bytes");
  only_message(parse_config(R"({"limits": {"max_queued_events": 1}})"),
               "/limits/max_queued_events");
  only_message(parse_config(R"({"limits": {"max_connections": "8"}})"), "/limits/max_connections");
}

TEST(Config, WrongTypesAreReportedAtTheirMember) {
  only_message(parse_config(R"({"allow_force": "yes"})"), "/allow_force");
  only_message(parse_config(R"({"socket": []})"), "/socket");
  only_message(parse_config(R"({"leases": {"required": 1}})"), "/leases/required");
  only_message(parse_config(R"([])"), "");
}

TEST(Config, EveryProblemIsReportedNotJustTheFirst) {
  const auto load =
      parse_config(R"({"state_dir": "x", "recovery": "keep", "interfaces": {"allow": ["*"]}})");
  EXPECT_EQ(wheres(load),
            (std::vector<std::string>{"/state_dir", "/interfaces/allow/0", "/recovery"}));
}

TEST(Config, ASyntaxErrorGivesTheLineAndColumnOfTheOffendingCharacter) {
  // Line 3 is `  "state_dir": ,`: the stray comma is its 16th character.
  const auto load = parse_config("{\n  \"allow_force\": true,\n  \"state_dir\": ,\n}\n");
  ASSERT_EQ(load.diagnostics.size(), 1u);
  EXPECT_EQ(load.diagnostics[0].where, "3:16");
  EXPECT_NE(load.diagnostics[0].message.find("not valid JSON"), std::string::npos)
      << load.diagnostics[0].message;
  EXPECT_FALSE(load.config);
}

TEST(Config, ASyntaxErrorOnTheFirstLine) {
  // `{"a" 1}`: the 1 where a colon belongs is the 6th character.
  const auto load = parse_config("{\"a\" 1}");
  ASSERT_EQ(load.diagnostics.size(), 1u);
  EXPECT_EQ(load.diagnostics[0].where, "1:6");
}

TEST(Config, InterfaceAllowedGlobs) {
  Config c;
  c.allow_interfaces = {"veth*", "eth1", "tap[0-3]", "lab?"};
  EXPECT_TRUE(c.interface_allowed("veth0"));
  EXPECT_TRUE(c.interface_allowed("veth"));
  EXPECT_TRUE(c.interface_allowed("veth-long.name"));
  EXPECT_TRUE(c.interface_allowed("eth1"));
  EXPECT_FALSE(c.interface_allowed("eth10")) << "a plain name matches only itself";
  EXPECT_FALSE(c.interface_allowed("eth0"));
  EXPECT_FALSE(c.interface_allowed("xveth0")) << "patterns are anchored";
  EXPECT_TRUE(c.interface_allowed("tap3"));
  EXPECT_FALSE(c.interface_allowed("tap4"));
  EXPECT_TRUE(c.interface_allowed("labX"));
  EXPECT_FALSE(c.interface_allowed("lab"));
  EXPECT_FALSE(c.interface_allowed(""));
}

TEST(ConfigFile, AMissingFileAtTheDefaultPathMeansDefaults) {
  testing::TempDir dir;
  const auto load = load_config_file(dir.file("absent.json"), false);
  ASSERT_TRUE(load.config);
  EXPECT_TRUE(load.config->allow_interfaces.empty());
}

TEST(ConfigFile, AMissingFileThatMustExistIsAnEnvironmentError) {
  testing::TempDir dir;
  try {
    load_config_file(dir.file("absent.json"), true);
    FAIL() << "no exception";
  } catch (const shaper::SystemError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos) << e.what();
  }
}

TEST(ConfigFile, AFileIsParsed) {
  testing::TempDir dir;
  const auto path = dir.write("config.json", R"({"interfaces": {"allow": ["veth*"]}})");
  const auto load = load_config_file(path, true);
  ASSERT_TRUE(load.config);
  EXPECT_TRUE(load.config->interface_allowed("veth3"));
}

}  // namespace
}  // namespace jitterd
