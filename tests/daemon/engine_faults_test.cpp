// Faults at the engine boundary (issue 7), through the protocol: the FakeBackend refuses an
// install, a change or a removal the way NetemEngine reports a kernel refusal (EBUSY, ENOMEM,
// EPERM, with and without extended-ACK text), and the state folder disappears under a request or a
// schedule. Each time the reply (or, for a timer, the `error` event) names the operation, the
// interface and the errno's text; the session state stays what the kernel holds (a failed install
// leaves nothing recorded, a failed change keeps the previous phase in force and reported, a failed
// removal keeps the session, a running schedule keeps running); the ledger is written before the
// kernel is touched; and the next request works.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "profile_store.hpp"
#include "protocol.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace jitterd::testing {
namespace {

using json = nlohmann::json;
using Call = FakeBackend::CallKind;
using Fault = FakeBackend::Fault;

// A dispatcher over a rig, with a profile folder: "held" (phases a, b, c; no schedule), "looped"
// (a then b, 10 s each: nothing moves by itself while a test looks) and "fast" (a then b, 100 ms
// each).
class FaultRig {
 public:
  FaultRig()
      : store({profiles.path()}), dispatcher(rig.sessions, store, rig.backend, rig.config, stats) {
    profiles.write("held.json", profile_json("held"));
    profiles.write("looped.json", profile_json("looped", {{"a", "10s"}, {"b", "10s"}}));
    profiles.write("fast.json", profile_json("fast", {{"a", "100ms"}, {"b", "100ms"}}));
  }

  json call(const std::string& method, const json& params = json::object()) {
    return json::parse(
        dispatcher.handle(json{{"method", method}, {"params", params}}.dump(), test_peer(), true)
            .line);
  }
  json ok(const std::string& method, const json& params = json::object()) {
    const json reply = call(method, params);
    EXPECT_EQ(reply["ok"], true) << reply.dump();
    return reply.value("result", json());
  }
  // The error of a reply that must fail with `code`.
  json error(const json& reply, const std::string& code) {
    EXPECT_EQ(reply["ok"], false) << reply.dump();
    EXPECT_EQ(reply["error"]["code"], code) << reply.dump();
    return reply.value("error", json::object());
  }
  // veth0's sessions as `status` reports them.
  json sessions() { return ok("status")["sessions"]; }
  json ledger() const { return json::parse(read_file(rig.ledger.path())); }
  std::string phase_in_kernel() const {
    const auto spec = rig.backend.spec_on(5);
    return spec ? phase_of(*spec) : "none";
  }

  DaemonRig rig;
  TempDir profiles;
  ProfileStore store;
  ServerStats stats;
  Dispatcher dispatcher;
};

// A kernel refusal: its errno, the extended-ACK text (often none), and glibc's text for the errno.
struct Refusal {
  int error_number;
  std::string ack;
  std::string text;
};

// For ctest's and gtest's listings (otherwise gtest prints the struct's bytes).
void PrintTo(const Refusal& r, std::ostream* out) {
  *out << r.text << (r.ack.empty() ? "" : " (" + r.ack + ")");
}

// "netem change (dev veth0 handle 1a7e:): Device or resource busy: <ack>": the engine's form.
std::string engine_message(const std::string& operation, const std::string& device,
                           const Refusal& r) {
  return operation + " (dev " + device + " handle 1a7e:): " + r.text +
         (r.ack.empty() ? "" : ": " + r.ack);
}

class EngineFaults : public ::testing::TestWithParam<Refusal> {};

INSTANTIATE_TEST_SUITE_P(Errnos, EngineFaults,
                         ::testing::Values(Refusal{EBUSY, "Exclusivity flag on, cannot modify",
                                                   "Device or resource busy"},
                                           Refusal{ENOMEM, "", "Cannot allocate memory"},
                                           Refusal{EPERM, "", "Operation not permitted"}),
                         [](const ::testing::TestParamInfo<Refusal>& refusal) {
                           return std::string(refusal.param.error_number == EBUSY    ? "EBUSY"
                                              : refusal.param.error_number == ENOMEM ? "ENOMEM"
                                                                                     : "EPERM");
                         });

TEST_P(EngineFaults, AFailedInstallIsAnErrorReplyAndLeavesNothingRecorded) {
  FaultRig r;
  r.rig.backend.fail_next(Fault::kInstall, GetParam().error_number, GetParam().ack);
  const json e =
      r.error(r.call("apply", {{"interface", "veth0"}, {"profile", "held"}, {"phase", "b"}}),
              "kernel-error");
  EXPECT_EQ(e["message"], engine_message("netem install", "veth0", GetParam()));
  // Nothing is recorded as installed: no session, no ledger entry (written first, then put back),
  // no qdisc, no event.
  EXPECT_TRUE(r.sessions().empty());
  r.error(r.call("status", {{"interface", "veth0"}}), "not-found");
  EXPECT_TRUE(r.ledger()["interfaces"].empty()) << r.ledger().dump();
  EXPECT_EQ(r.rig.backend.root_of(5), FakeBackend::Root::kKernelDefault);
  EXPECT_TRUE(r.rig.backend.layout_on(5, Direction::kEgress).empty());
  EXPECT_TRUE(r.rig.events.empty());

  const json status = r.ok("apply", {{"interface", "veth0"}, {"profile", "held"}, {"phase", "b"}});
  EXPECT_EQ(status["phase"], "b") << status.dump();
  EXPECT_EQ(r.phase_in_kernel(), "b");
  EXPECT_EQ(r.ledger()["interfaces"][0]["phase"], "b");
}

TEST_P(EngineFaults, AFailedChangeKeepsThePreviousPhaseInForceAndReported) {
  FaultRig r;
  r.ok("apply", {{"interface", "veth0"}, {"profile", "held"}, {"phase", "a"}});
  r.rig.backend.fail_next(Fault::kChange, GetParam().error_number, GetParam().ack);
  const json e =
      r.error(r.call("switch", {{"interface", "veth0"}, {"phase", "b"}}), "kernel-error");
  EXPECT_EQ(e["message"], engine_message("netem change", "veth0", GetParam()));
  ASSERT_EQ(r.sessions().size(), 1u);
  EXPECT_EQ(r.sessions()[0]["phase"], "a");
  EXPECT_EQ(r.sessions()[0]["transitions"]["count"], 1) << "only the install";
  EXPECT_EQ(r.phase_in_kernel(), "a");
  EXPECT_EQ(r.ledger()["interfaces"][0]["phase"], "a") << "the ledger is put back";
  EXPECT_EQ(r.rig.count(EventType::kPhaseChanged), 0u);

  EXPECT_EQ(r.ok("switch", {{"interface", "veth0"}, {"phase", "b"}})["phase"], "b");
  EXPECT_EQ(r.phase_in_kernel(), "b");
  EXPECT_EQ(r.ledger()["interfaces"][0]["phase"], "b");
}

TEST_P(EngineFaults, AFailedRemovalKeepsTheSessionShapingAndListed) {
  FaultRig r;
  r.ok("apply", {{"interface", "veth0"}, {"profile", "held"}, {"phase", "c"}});
  r.rig.backend.fail_next(Fault::kRemove, GetParam().error_number, GetParam().ack);
  const json e = r.error(r.call("clear", {{"interface", "veth0"}}), "kernel-error");
  EXPECT_EQ(e["message"], engine_message("netem remove", "veth0", GetParam()));
  // Still shaping, so still listed, still in the ledger, and no `cleared` that would say otherwise.
  ASSERT_EQ(r.sessions().size(), 1u);
  EXPECT_EQ(r.sessions()[0]["phase"], "c");
  EXPECT_EQ(r.phase_in_kernel(), "c");
  EXPECT_EQ(r.ledger()["interfaces"].size(), 1u);
  EXPECT_EQ(r.rig.count(EventType::kCleared), 0u);

  EXPECT_EQ(r.ok("clear", {{"interface", "veth0"}})["cleared"], json::array({"veth0"}));
  EXPECT_TRUE(r.sessions().empty());
  EXPECT_EQ(r.rig.backend.root_of(5), FakeBackend::Root::kKernelDefault);
  EXPECT_TRUE(r.ledger()["interfaces"].empty());
  EXPECT_EQ(r.rig.count(EventType::kCleared), 1u);
}

TEST(EngineFaultsOnLanes, AFailedRemovalOfOneLaneKeepsThatLane) {
  FaultRig r;
  r.ok("apply",
       {{"interface", "veth0"}, {"profile", "held"}, {"phase", "a"}, {"direction", "both"}});
  r.rig.backend.fail_next(Fault::kRemove, EBUSY);
  const json e =
      r.error(r.call("clear", {{"interface", "veth0"}, {"direction", "ingress"}}), "kernel-error");
  // Ingress netem sits on the IFB jitterd made for veth0 (index 5).
  EXPECT_EQ(e["message"], "netem remove (dev jdifb5 handle 1a7e:): Device or resource busy");
  EXPECT_EQ(r.sessions().size(), 2u);
  EXPECT_FALSE(r.rig.backend.layout_on(5, Direction::kIngress).empty());
  EXPECT_EQ(r.ledger()["interfaces"].size(), 2u);

  r.ok("clear", {{"interface", "veth0"}, {"direction", "ingress"}});
  ASSERT_EQ(r.sessions().size(), 1u);
  EXPECT_EQ(r.sessions()[0]["direction"], "egress");
  EXPECT_TRUE(r.rig.backend.layout_on(5, Direction::kIngress).empty());
  EXPECT_EQ(r.ledger()["interfaces"].size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Schedules through a failed request

TEST(EngineFaultsOnSchedules, AFailedSwitchLeavesARunningScheduleRunning) {
  FaultRig r;
  r.ok("apply", {{"interface", "veth0"}, {"profile", "looped"}});
  const json before = r.sessions()[0];
  ASSERT_EQ(before["schedule"]["state"], "running") << before.dump();
  r.rig.backend.fail_next(Fault::kChange, ENOMEM);
  r.error(r.call("switch", {{"interface", "veth0"}, {"phase", "b"}}), "kernel-error");
  const json after = r.sessions()[0];
  EXPECT_EQ(after["phase"], "a");
  EXPECT_EQ(after["schedule"]["state"], "running")
      << "the switch did not happen; nor did its pause";
  EXPECT_EQ(after["schedule"]["step"], 0);
  // Monotonic: the realtime half is converted when the status is made.
  EXPECT_EQ(after["next_transition"]["deadline"]["monotonic_ns"],
            before["next_transition"]["deadline"]["monotonic_ns"])
      << after.dump();
}

TEST(EngineFaultsOnSchedules, AFailedSkipOrResumeLeavesTheScheduleAsItWas) {
  FaultRig r;
  r.ok("apply", {{"interface", "veth0"}, {"profile", "looped"}});
  const json before = r.sessions()[0];
  r.rig.backend.fail_next(Fault::kChange, EBUSY);
  r.error(r.call("skip", {{"interface", "veth0"}, {"phase", "b"}}), "kernel-error");
  json now = r.sessions()[0];
  EXPECT_EQ(now["phase"], "a");
  EXPECT_EQ(now["schedule"]["state"], "running");
  EXPECT_EQ(now["schedule"]["step"], 0);
  EXPECT_EQ(now["next_transition"]["deadline"]["monotonic_ns"],
            before["next_transition"]["deadline"]["monotonic_ns"])
      << now.dump();

  // A resume changes the phase when a switch put another one in force while paused.
  r.ok("pause", {{"interface", "veth0"}});
  r.ok("switch", {{"interface", "veth0"}, {"phase", "c"}});
  r.rig.backend.fail_next(Fault::kChange, EBUSY);
  r.error(r.call("resume", {{"interface", "veth0"}}), "kernel-error");
  now = r.sessions()[0];
  EXPECT_EQ(now["phase"], "c");
  EXPECT_EQ(now["schedule"]["state"], "paused") << "not running without a timer";
  EXPECT_TRUE(now["next_transition"].is_null()) << now.dump();
  EXPECT_EQ(r.phase_in_kernel(), "c");

  now = r.ok("resume", {{"interface", "veth0"}});
  EXPECT_EQ(now["phase"], "a");
  EXPECT_EQ(now["schedule"]["state"], "running");
  EXPECT_TRUE(now["next_transition"].is_object()) << now.dump();
}

// ---------------------------------------------------------------------------------------------
// The ledger comes first (for requests; a schedule's steps on lanes already recorded reach the
// kernel first and the ledger soon after: sessions_test.cpp,
// "AScheduleGoesOnWhenTheLedgerCannotNameItsPhase...")

TEST(LedgerFirst, ARequestThatCannotBeRecordedNeverReachesTheKernel) {
  FaultRig r;
  r.ok("apply", {{"interface", "veth0"}, {"profile", "held"}, {"phase", "a"}});
  std::filesystem::remove_all(r.rig.state.path());  // the state folder vanished
  const json e =
      r.error(r.call("switch", {{"interface", "veth0"}, {"phase", "b"}}), "system-error");
  EXPECT_EQ(e["message"],
            "create the ledger (" + r.rig.ledger.path() + "): No such file or directory");
  EXPECT_NE(e.value("hint", "").find("check " + r.rig.state.path() + ", or set state_dir"),
            std::string::npos)
      << e.dump();
  r.error(r.call("apply", {{"interface", "veth1"}, {"profile", "held"}}), "system-error");
  EXPECT_EQ(r.rig.backend.count(Call::kApply), 1u) << "only the first install reached the kernel";
  EXPECT_EQ(r.phase_in_kernel(), "a");
  EXPECT_EQ(r.rig.backend.root_of(6), FakeBackend::Root::kKernelDefault);
  ASSERT_EQ(r.sessions().size(), 1u);
  EXPECT_EQ(r.sessions()[0]["phase"], "a");
  EXPECT_EQ(r.rig.count(EventType::kPhaseChanged), 0u);

  std::filesystem::create_directories(r.rig.state.path());
  EXPECT_EQ(r.ok("switch", {{"interface", "veth0"}, {"phase", "b"}})["phase"], "b");
  EXPECT_EQ(r.ledger()["interfaces"][0]["phase"], "b");
}

}  // namespace
}  // namespace jitterd::testing
