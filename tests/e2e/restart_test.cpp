// Crash and stop: after kill -9, jitterd's qdisc (handle 1a7e:) stays in the kernel and its ledger
// names it; the next jitterd with the same state folder removes it before it listens, leaving the
// kernel's default root and an empty ledger. SIGTERM removes everything and exits 0.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Json;

namespace {

class E2eRestart : public jitterd_e2e::E2eTest {};

TEST_F(E2eRestart, KillNineThenRestartLeavesNothingBehind) {
  const Json before = bed().root_qdisc_by_tc();
  ASSERT_EQ(before.value("handle", ""), "0:") << before.dump();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;

  const pid_t first = bed().daemon.pid();
  bed().daemon.kill_hard();
  // Nothing cleaned up: the qdisc is still there, and the ledger says whose it is.
  const Json left = bed().root_qdisc_by_tc();
  EXPECT_EQ(left.value("kind", ""), "netem") << left.dump();
  EXPECT_EQ(left.value("handle", ""), "1a7e:") << left.dump();
  const Json ledger = bed().ledger();
  EXPECT_EQ(ledger.at("pid").get<pid_t>(), first);
  ASSERT_EQ(ledger.at("interfaces").size(), 1u) << ledger.dump();
  EXPECT_EQ(ledger.at("interfaces")[0].at("interface"), "jta");
  EXPECT_EQ(ledger.at("interfaces")[0].at("profile"), jitterd_e2e::kProfileName);
  EXPECT_EQ(ledger.at("interfaces")[0].at("phase"), "high");

  bed().daemon.start();  // same config, same state folder
  const Json after = bed().root_qdisc_by_tc();
  EXPECT_EQ(after.value("handle", ""), "0:") << after.dump();
  EXPECT_EQ(after.value("kind", ""), before.value("kind", "")) << after.dump();
  const Json rewritten = bed().ledger();
  EXPECT_EQ(rewritten.at("pid").get<pid_t>(), bed().daemon.pid());
  EXPECT_TRUE(rewritten.at("interfaces").empty()) << rewritten.dump();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  // The default recovery mode removes; the log says what and names the ledger's profile.
  EXPECT_NE(bed().daemon.log().find("previous jitterd left on jta"), std::string::npos)
      << bed().daemon.log();

  // The restarted jitterd shapes as usual.
  const auto again = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
}

TEST_F(E2eRestart, SigtermRemovesEverythingAndExitsZero) {
  const Json before = bed().root_qdisc_by_tc();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  ASSERT_EQ(bed().ledger().at("interfaces").size(), 1u);

  const auto exit_code = bed().daemon.stop();
  ASSERT_TRUE(exit_code) << "jitterd still runs 20 s after SIGTERM";
  EXPECT_EQ(*exit_code, 0) << bed().daemon.log();
  const Json after = bed().root_qdisc_by_tc();
  EXPECT_EQ(after.value("handle", ""), "0:") << after.dump();
  EXPECT_EQ(after.value("kind", ""), before.value("kind", "")) << after.dump();
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
  struct stat st {};
  EXPECT_NE(::stat(bed().daemon.socket().c_str(), &st), 0) << "the socket file is still there";
}

// SIGTERM ends the sessions, then each connection writes what it has queued before it closes: a
// subscriber hears the `cleared` events with reason "shutdown".
TEST_F(E2eRestart, SubscribersHearTheShutdown) {
  auto events = bed().subscribe();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(events.wait_for("applied", 10s)) << events.describe();

  const auto exit_code = bed().daemon.stop();
  ASSERT_TRUE(exit_code);
  EXPECT_EQ(*exit_code, 0) << bed().daemon.log();
  const auto cleared = events.wait_for("cleared", 5s);
  ASSERT_TRUE(cleared) << events.describe();
  EXPECT_EQ(cleared->at("interface"), "jta");
  EXPECT_EQ(cleared->at("reason"), "shutdown");
}

}  // namespace

namespace {

// With kernel-timed switches (switch_gate "kernel"): the root left behind is the gated one (prio
// 1a7e:, two netem bands, the bpf gate with a switch armed), and the next start removes it whole.
class E2eRestartGated : public jitterd_e2e::E2eTest {
 protected:
  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.start = false;
    return options;
  }
  // jitterd started with switch_gate "kernel" in the bed's config.
  void start_gated() {
    Json config = jitterd_e2e::parse_json(jitterd_e2e::read_file(bed().daemon.config_path()));
    config["switch_gate"] = "kernel";
    bed().dir.write("config.json", config.dump(2) + "\n");
    bed().daemon.start();
  }
};

TEST_F(E2eRestartGated, KillNineLeavesAGatedRootWithAnArmedSwitchThatTheNextStartRemoves) {
  if (auto reason = jitterd_test::gate_unavailable_reason()) GTEST_SKIP() << *reason;
  start_gated();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("kind", ""), "prio");
  const auto armed = bed().ctl({"switch", "jta", "low", "--at", "+60s"});
  ASSERT_EQ(armed.exit_code, 0) << armed.err;

  bed().daemon.kill_hard();
  const Json left = bed().root_qdisc_by_tc();
  EXPECT_EQ(left.value("kind", ""), "prio") << left.dump();
  EXPECT_EQ(left.value("handle", ""), "1a7e:") << left.dump();
  const std::string filters = jitterd_test::run("ip netns exec " + bed().daemon.netns() +
                                                " tc filter show dev jta parent 1a7e:");
  EXPECT_NE(filters.find("jitterd_gate"), std::string::npos) << filters;

  bed().daemon.start();
  const Json after = bed().root_qdisc_by_tc();
  EXPECT_EQ(after.value("handle", ""), "0:") << after.dump();
  EXPECT_TRUE(bed().ledger().at("interfaces").empty());
  const std::string none =
      jitterd_test::run("ip netns exec " + bed().daemon.netns() + " tc filter show dev jta");
  EXPECT_EQ(none.find("bpf"), std::string::npos) << none;
  const auto again = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("kind", ""), "prio");
}

// A staged start (switch_gate "kernel", an apply whose --start is later): the gated root is there
// at once and passes packets on unchanged (ping through it as fast as before), and the phase lands
// at the start by itself (recorded as gated, applied at the start; ping then at the phase's delay).
// Nothing of a staged start outlives its apply: one whose lease runs out before it starts, one
// cleared, and one left by kill -9 (removed by the next start) all leave the kernel's default root.
TEST_F(E2eRestartGated, AStagedStartPassesPacketsOnUntilItsStartAndNothingOfItOutlivesItsApply) {
  if (auto reason = jitterd_test::gate_unavailable_reason()) GTEST_SKIP() << *reason;
  start_gated();
  const double high_ms = static_cast<double>(jitterd_e2e::kHighDelay.count());
  const auto min_rtt_ms = [&] {
    const auto result = jitterd_test::ping(bed().net, 6, 50ms);
    EXPECT_FALSE(result.rtt_ms.empty());
    return result.rtt_ms.empty() ? 1e9
                                 : *std::min_element(result.rtt_ms.begin(), result.rtt_ms.end());
  };
  const auto default_root = [&](const char* when) {
    const Json root = bed().root_qdisc_by_tc();
    EXPECT_NE(root.value("handle", ""), "1a7e:") << when << ": " << root.dump();
    const std::string filters =
        jitterd_test::run("ip netns exec " + bed().daemon.netns() + " tc filter show dev jta");
    EXPECT_EQ(filters.find("bpf"), std::string::npos) << when << ": " << filters;
  };

  // One lane: the reply is its status alone.
  const Json staged = bed().ctl_json(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--start", "+4s"});
  ASSERT_EQ(staged.value("state", ""), "pending") << staged.dump();
  const auto start = jitterd_e2e::monotonic_ns(staged.at("next_transition").at("deadline"));
  const Json root = bed().root_qdisc_by_tc();
  EXPECT_EQ(root.value("kind", ""), "prio") << root.dump();
  EXPECT_EQ(root.value("handle", ""), "1a7e:") << root.dump();
  EXPECT_LT(min_rtt_ms(), high_ms / 2) << "before the start packets pass on unchanged";
  Json status;
  for (int i = 0; i < 100; ++i) {
    status = bed().ctl_json({"status"});
    if (status.at("sessions").at(0).value("state", "") == "active") break;
    std::this_thread::sleep_for(100ms);
  }
  const Json& active = status.at("sessions").at(0);
  ASSERT_EQ(active.value("state", ""), "active") << status.dump();
  const Json& landed = active.at("transitions").at("recent").back();
  EXPECT_EQ(landed.value("gated", false), true) << landed.dump();
  EXPECT_EQ(jitterd_e2e::monotonic_ns(landed.at("applied")), start) << landed.dump();
  EXPECT_GE(min_rtt_ms(), high_ms) << "after the start every packet meets the phase";
  ASSERT_EQ(bed().ctl({"clear", "jta"}).exit_code, 0);
  default_root("after a clear");

  ASSERT_EQ(bed()
                .ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--start",
                      "+60s", "--lease", "1s"})
                .exit_code,
            0);
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  for (int i = 0; i < 50 && !bed().ctl_json({"status"}).at("sessions").empty(); ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  default_root("after the pending apply's lease ran out");

  ASSERT_EQ(
      bed()
          .ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--start", "+60s"})
          .exit_code,
      0);
  ASSERT_EQ(bed().ctl({"clear", "jta"}).exit_code, 0);
  default_root("after a clear before the start");

  ASSERT_EQ(
      bed()
          .ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--start", "+60s"})
          .exit_code,
      0);
  bed().daemon.kill_hard();
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  bed().daemon.start();
  default_root("after kill -9 and a new start");
  EXPECT_TRUE(bed().ledger().at("interfaces").empty());
}

}  // namespace
