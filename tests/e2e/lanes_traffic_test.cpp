// Lanes through jitterd under traffic, judged by UDP and TCP probes that run side by side
// (port_probes.hpp): the SSH guard on an interface with the default route, rule sets that each run
// their own schedule, a whole-interface switch of several leaves and the IFB side with no probe
// seeing an unshaped or double-shaped path, and offloads turned off and restored (ethtool is the
// independent reader).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "e2e_support.hpp"
#include "port_probes.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Json;
using jitterd_test::EchoServer;
using jitterd_test::ProbeSample;
using jitterd_test::ProbeTarget;
using jitterd_test::Transport;
using jitterd_test::VethPair;

namespace {

constexpr double kUnshapedMs = 15;  // unshaped RTTs of the emulated machine stay well below this
constexpr double kHighMs = 50;      // jitterd_e2e::kHighDelay
constexpr const char* kAddrB2 = "198.18.0.3";

// Sets an environment variable for the scope (jitterctl inherits the test's environment).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A profile without a schedule (or with `steps` as its looped schedule): phase name -> delay.
std::string profile_json(const std::string& name,
                         const std::vector<std::pair<std::string, int>>& phases,
                         const std::vector<std::pair<std::string, int>>& steps = {}) {
  Json p = {{"version", 1},
            {"name", name},
            {"description", "end-to-end lanes test"},
            {"phases", Json::object()}};
  for (const auto& [phase, ms] : phases)
    p["phases"][phase] = {{"delay", {{"latency", std::to_string(ms) + "ms"}}}};
  if (!steps.empty()) {
    Json s = Json::array();
    for (const auto& [phase, ms] : steps)
      s.push_back({{"phase", phase}, {"duration", std::to_string(ms) + "ms"}});
    p["schedule"] = {{"steps", s}, {"loop", true}};
  }
  return p.dump(2) + "\n";
}

class E2eLanesUnderTraffic : public jitterd_e2e::E2eTest {
 protected:
  // 198.18.0.3 on jtb too, with a permanent neighbour entry in a.
  void add_second_address() {
    jitterd_test::run("ip -n " + bed().net.ns_b() + " addr add " + kAddrB2 + "/24 dev jtb");
    bed().in_ns_a("ip neigh replace " + std::string(kAddrB2) + " lladdr $(ip netns exec " +
                  bed().net.ns_b() + " cat /sys/class/net/jtb/address) dev jta nud permanent");
  }
  void write_profile(const std::string& name, const std::string& text) {
    bed().dir.write("profiles/" + name + ".json", text);
  }
  void expect_ok(const std::vector<std::string>& args) {
    const auto r = bed().ctl(args);
    ASSERT_EQ(r.exit_code, 0) << jitterd_e2e::command_line(args) << "\n" << r.err << r.out;
  }
};

// --- the SSH guard ------------------------------------------------------------------------------

TEST_F(E2eLanesUnderTraffic,
       SshGuardLeavesPort22AndTheRequestersConnectionUnshapedOnTheDefaultRoute) {
  bed().in_ns_a("ip route add default via " + std::string(VethPair::kAddrB) + " dev jta");
  // Servers in a (the shaped host); probes from b, so a's answers leave through jta's egress.
  const std::string a = bed().net.ns_a();
  EchoServer ssh(a, Transport::kTcp, 22), operators(a, Transport::kTcp, 2222),
      other(a, Transport::kTcp, 2223);
  const std::vector<ProbeTarget> targets{{Transport::kTcp, VethPair::kAddrA, 22, 0},
                                         {Transport::kTcp, VethPair::kAddrA, 2222, 40000},
                                         {Transport::kTcp, VethPair::kAddrA, 2223, 40001}};
  {
    // The operator arrived from b's port 40000 on a's sshd at 2222 (as sshd would tell jitterctl).
    ScopedEnv ssh_connection(
        "SSH_CONNECTION", std::string(VethPair::kAddrB) + " 40000 " + VethPair::kAddrA + " 2222");
    expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  }
  const Json status = bed().ctl_json({"status", "jta"});
  const Json& unshaped = status.at("sessions")[0].at("unshaped");
  ASSERT_EQ(unshaped.size(), 2u) << status.dump();
  EXPECT_NE(unshaped[0].get<std::string>().find("port 22"), std::string::npos) << status.dump();
  EXPECT_NE(unshaped[1].get<std::string>().find("198.18.0.2 port 40000"), std::string::npos)
      << status.dump();

  auto series = jitterd_test::probe_side_by_side(bed().net.ns_b(), targets, 10, 50ms);
  std::string all = describe(targets, series);
  EXPECT_LT(jitterd_test::min_rtt(series[0], "port 22"), kUnshapedMs) << all;
  EXPECT_LT(jitterd_test::min_rtt(series[1], "the requester's connection"), kUnshapedMs) << all;
  EXPECT_GE(jitterd_test::min_rtt(series[2], "another connection"), kHighMs) << all;

  // Without the guard, port 22 is shaped like everything else, and the status says nothing is
  // spared.
  expect_ok({"clear", "jta"});
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--no-ssh-guard"});
  EXPECT_TRUE(bed().ctl_json({"status", "jta"}).at("sessions")[0].at("unshaped").empty());
  series = jitterd_test::probe_side_by_side(bed().net.ns_b(), {targets[0]}, 5, 50ms);
  EXPECT_GE(jitterd_test::min_rtt(series[0], "port 22"), kHighMs) << describe({targets[0]}, series);
}

TEST_F(E2eLanesUnderTraffic, SessionsOnAPortSshdListensOnStayUnshapedToo) {
  bed().in_ns_a("ip route add default via " + std::string(VethPair::kAddrB) + " dev jta");
  // An sshd on 2200 in namespace a (a stand-in with that process name; jitterd reads /proc).
  jitterd_e2e::SpawnOptions in_a;
  in_a.netns = bed().net.ns_a();
  auto sshd = jitterd_e2e::Process::spawn({JITTERD_E2E_FAKE_SSHD, "2200"}, in_a);
  ASSERT_EQ(sshd.read_line(jitterd_e2e::Clock::now() + 10s), "listening") << sshd.err_text();
  EchoServer other(bed().net.ns_a(), Transport::kTcp, 2201);

  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  const Json status = bed().ctl_json({"status", "jta"});
  EXPECT_EQ(status.at("sessions")[0].at("unshaped")[0], "tcp ports 22, 2200 (either side)")
      << status.dump();
  const std::vector<ProbeTarget> targets{{Transport::kTcp, VethPair::kAddrA, 2200, 0},
                                         {Transport::kTcp, VethPair::kAddrA, 2201, 0}};
  const auto series = jitterd_test::probe_side_by_side(bed().net.ns_b(), targets, 10, 50ms);
  EXPECT_LT(jitterd_test::min_rtt(series[0], "sshd's port"), kUnshapedMs)
      << describe(targets, series);
  EXPECT_GE(jitterd_test::min_rtt(series[1], "another port"), kHighMs) << describe(targets, series);
}

TEST_F(E2eLanesUnderTraffic, NoGuardWhereTheInterfaceDoesNotCarryTheDefaultRoute) {
  EchoServer ssh(bed().net.ns_a(), Transport::kTcp, 22);
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  EXPECT_TRUE(bed().ctl_json({"status", "jta"}).at("sessions")[0].at("unshaped").empty());
  const ProbeTarget port22{Transport::kTcp, VethPair::kAddrA, 22, 0};
  const auto series = jitterd_test::probe_side_by_side(bed().net.ns_b(), {port22}, 5, 50ms);
  EXPECT_GE(jitterd_test::min_rtt(series[0], "port 22"), kHighMs) << describe({port22}, series);
}

// --- rule sets with schedules of their own
// ------------------------------------------------------------

// How often a series changes level between low (< 30 ms) and high (>= 30 ms), a change counted only
// once three answered probes in a row agree on the new level (the starting level too): a lone probe
// that the emulated machine delayed by 20-30 ms is noise, not a phase.
int level_changes(const std::vector<ProbeSample>& series) {
  int changes = 0, run = 0;
  std::optional<bool> level;
  bool candidate = false;
  for (const auto& s : series) {
    if (!s.rtt_ms) continue;
    const bool high = *s.rtt_ms >= 30;
    if (level && high == *level) {
      run = 0;
      continue;
    }
    run = (run > 0 && candidate == high) ? run + 1 : 1;
    candidate = high;
    if (run == 3) {
      if (level) ++changes;  // the first settled level is where the series starts, not a change
      level = high;
      run = 0;
    }
  }
  return changes;
}

TEST_F(E2eLanesUnderTraffic, RuleSetsRunTheirOwnProfilesAndSchedulesSideBySide) {
  add_second_address();
  // "fast": 5 ms and 50 ms alternating every 400 ms; the shipped test profile alternates every 2 s.
  write_profile("fast",
                profile_json("fast", {{"low", 5}, {"high", 50}}, {{"low", 400}, {"high", 400}}));
  EchoServer near(bed().net.ns_b(), Transport::kUdp, 9000, VethPair::kAddrB),
      far(bed().net.ns_b(), Transport::kUdp, 9000, kAddrB2);
  expect_ok(
      {"apply", "jta", jitterd_e2e::kProfileName, "--set", "replica", "--match", "dst=198.18.0.2"});
  expect_ok({"apply", "jta", "fast", "--set", "clients", "--match", std::string("dst=") + kAddrB2});
  const Json status = bed().ctl_json({"status", "jta"});
  ASSERT_EQ(status.at("sessions").size(), 2u) << status.dump();

  const std::vector<ProbeTarget> targets{{Transport::kUdp, VethPair::kAddrB, 9000, 0},
                                         {Transport::kUdp, kAddrB2, 9000, 0}};
  // 3.2 s: at most two changes of the 2 s schedule, about eight of the 400 ms one.
  const auto series = jitterd_test::probe_side_by_side(bed().net.ns_a(), targets, 128, 25ms);
  const std::string all = describe(targets, series);
  EXPECT_LE(level_changes(series[0]), 2) << all;
  EXPECT_GE(level_changes(series[1]), 5) << all;
  EXPECT_GE(jitterd_test::min_rtt(series[1], "clients"), 5) << all;
  EXPECT_LE(jitterd_test::lost(series[0]) + jitterd_test::lost(series[1]), 2u) << all;
}

// --- one transition for the whole interface, under traffic
// ----------------------------------------

TEST_F(E2eLanesUnderTraffic,
       WholeInterfaceSwitchUnderTrafficNeverShowsAnUnshapedOrDoubleShapedPath) {
  add_second_address();
  // Delays chosen so that the bands cannot be confused: each direction takes 40 or 120 ms, so every
  // legitimate round trip is 80, 160 or 240 ms (a probe may straddle the switch). A direction left
  // unshaped for a moment gives 40 or 120 with the other's share; a direction shaped twice (old and
  // new leaf: 80, 160 or 240) gives 120, 200, 280 or 360. All at least 40 ms from the legitimate
  // ones.
  write_profile("wide", profile_json("wide", {{"a", 40}, {"b", 120}}));
  EchoServer near(bed().net.ns_b(), Transport::kUdp, 9000, VethPair::kAddrB),
      far(bed().net.ns_b(), Transport::kUdp, 9000, kAddrB2);
  // Three lanes: egress for 198.18.0.3 (a leaf), egress for everything else (the tree's default
  // class), and ingress as a whole (the IFB).
  expect_ok({"apply", "jta", "wide", "--phase", "a", "--direction", "both"});
  expect_ok({"apply", "jta", "wide", "--phase", "a", "--set", "far", "--match",
             std::string("dst=") + kAddrB2});
  auto events = bed().subscribe();

  const std::vector<ProbeTarget> targets{{Transport::kUdp, VethPair::kAddrB, 9000, 0},
                                         {Transport::kUdp, kAddrB2, 9000, 0}};
  std::vector<std::vector<ProbeSample>> series;
  const auto probes_start = std::chrono::steady_clock::now();
  std::thread probes(
      [&] { series = jitterd_test::probe_side_by_side(bed().net.ns_a(), targets, 150, 20ms); });
  std::this_thread::sleep_for(1s);
  const auto switched = bed().ctl({"--json", "switch", "jta", "b"});
  probes.join();
  ASSERT_EQ(switched.exit_code, 0) << switched.err;
  EXPECT_EQ(jitterd_e2e::parse_json(switched.out).at("sessions").size(), 3u) << switched.out;
  // One transition, one event, naming the three lanes.
  const auto changed = events.wait_for("phase-changed", 10s);
  ASSERT_TRUE(changed) << events.describe();
  ASSERT_TRUE(changed->contains("lanes")) << changed->dump();
  EXPECT_EQ(changed->at("lanes").size(), 3u) << changed->dump();
  events.drain(500ms);
  EXPECT_EQ(events.of_type("phase-changed").size(), 1u) << events.describe();

  // steady_clock is CLOCK_MONOTONIC, the clock of the events' monotonic_ns.
  const double switch_ms = static_cast<double>(jitterd_e2e::monotonic_ns(changed->at("at")) -
                                               std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   probes_start.time_since_epoch())
                                                   .count()) /
                           1e6;
  const std::string all = describe(targets, series) + "the switch took effect " +
                          std::to_string(switch_ms) +
                          " ms after the probes started (probes every 20 ms)\n";
  // netem never releases early; the emulated machine adds a few ms (30 allowed, 40 would be
  // ambiguous).
  const auto legitimate = [](double rtt) {
    for (const double sum : {80.0, 160.0, 240.0}) {
      if (rtt >= sum - 1 && rtt < sum + 30) return true;
    }
    return false;
  };
  for (std::size_t t = 0; t < targets.size(); ++t) {
    EXPECT_EQ(jitterd_test::lost(series[t]), 0u) << targets[t].label() << "\n" << all;
    int before = 0, after = 0;
    std::string wrong;
    for (const auto& s : series[t]) {
      if (!s.rtt_ms) continue;
      if (!legitimate(*s.rtt_ms)) {
        wrong += "  sent at " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(s.sent_at).count()) +
                 " ms: " + std::to_string(*s.rtt_ms) + " ms\n";
      }
      before += *s.rtt_ms < 120;
      after += *s.rtt_ms >= 200;
    }
    EXPECT_EQ(wrong, "") << targets[t].label() << ": probes outside every legitimate band\n" << all;
    EXPECT_GT(before, 10) << all;
    EXPECT_GT(after, 10) << all;
  }
}

// --- offloads
// ---------------------------------------------------------------------------------------

// "on"/"off" of tso, gso and gro on jta, as `ethtool -k` (run in namespace a) reports them.
std::string offload_states(jitterd_e2e::Bed& bed) {
  const std::string out = bed.in_ns_a("ethtool -k jta");
  std::string states;
  for (const char* feature : {"tcp-segmentation-offload: ", "generic-segmentation-offload: ",
                              "generic-receive-offload: "}) {
    const auto at = out.find(feature);
    if (at == std::string::npos)
      throw std::runtime_error(std::string("ethtool -k jta lacks ") + feature + "\n" + out);
    states +=
        out.substr(at + std::strlen(feature), out.find_first_of(" \n", at + std::strlen(feature)) -
                                                  (at + std::strlen(feature)));
    states += " ";
  }
  return states;
}

TEST_F(E2eLanesUnderTraffic, OffloadsOffWhileShapedRestoredOnClearAndAfterACrash) {
  try {
    jitterd_test::run("command -v ethtool");
  } catch (const std::exception&) {
    FAIL() << "ethtool (the independent reader) is not installed; scripts/setup installs it";
  }
  bed().in_ns_a("ethtool -K jta tso on gso on gro on");
  const std::string before = offload_states(bed());
  ASSERT_EQ(before, "on on on ");

  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--offloads", "off"});
  EXPECT_EQ(offload_states(bed()), "off off off ");
  EXPECT_TRUE(bed().ctl_json({"status", "jta"}).at("sessions")[0].at("offloads_off").get<bool>());
  expect_ok({"clear", "jta"});
  EXPECT_EQ(offload_states(bed()), before);

  // A crash leaves them off; the next start puts them back (the ledger kept what they were).
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--offloads", "off"});
  bed().daemon.kill_hard();
  EXPECT_EQ(offload_states(bed()), "off off off ");
  bed().daemon.start();
  EXPECT_EQ(offload_states(bed()), before) << bed().daemon.log();
}

}  // namespace
