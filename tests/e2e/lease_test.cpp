// Leases, the dead-man switch: shaping whose lease runs out without a renew is removed (iproute2
// sees the kernel's default root again, and a lease-expired event says so); a renewed lease keeps
// the shaping past its first expiry.
//
// Times come from the `applied` event's CLOCK_MONOTONIC stamps, which are this machine's
// steady_clock too, so jitterctl's start-up (0.1 s in the emulated machine, more while the host
// builds) does not eat into the margins. The lease starts when jitterd takes the apply: after the
// event's `deadline` (when it read the request) and before its `at` (when the kernel acknowledged
// the first phase); the two are 0.1 s apart on an idle emulated machine (loading the profile), and
// 0.35 s apart was seen while the host built. So the lease runs out in [deadline + lease,
// at + lease] plus the timer's and the removal's latency (a few ms on an idle machine): the test
// looks before the earliest and 0.5 s after the latest.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Clock;
using jitterd_e2e::Json;
using jitterd_e2e::monotonic_point;

namespace {

constexpr auto kLease = 2s;
// The renewal is longer, so that a look at the kernel past the first expiry has 2.5 s before the
// renewed one, however slowly `ip netns exec tc` starts on a busy host.
constexpr auto kRenewedLease = 4s;
constexpr auto kMargin = 500ms;

// What tc shows while a lease runs is judged, and tc must have looked before the lease ran out: in
// the test bed (User-Mode Linux on the host's clock) a tc process starts in ~10 ms, against a 2 s
// lease. (On qemu's virtual clock, JITTERD_VM=qemu JITTERD_VM_CLOCK=virtual, a guest waiting for
// the host's I/O jumps its clock to its next timer, which may be the lease's end: these tests are
// not for it.)
class E2eLease : public jitterd_e2e::E2eTest {};

TEST_F(E2eLease, ExpiryWithoutRenewRestoresTheKernelDefault) {
  const Json before = bed().root_qdisc_by_tc();
  ASSERT_EQ(before.value("handle", ""), "0:") << before.dump();
  auto events = bed().subscribe();
  const auto applied =
      bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--lease", "2s"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  const auto applied_event = events.wait_for("applied", 10s);
  ASSERT_TRUE(applied_event) << events.describe();
  const auto earliest_start = monotonic_point(applied_event->at("deadline"));
  const auto latest_start = monotonic_point(applied_event->at("at"));

  // Shaping is in place while the lease runs.
  const Json shaped = bed().root_qdisc_by_tc();
  ASSERT_LT(Clock::now(), earliest_start + kLease) << "tc took until the lease's end to look";
  EXPECT_EQ(shaped.value("kind", ""), "netem") << shaped.dump();
  EXPECT_EQ(shaped.value("handle", ""), "1a7e:") << shaped.dump();

  std::this_thread::sleep_until(latest_start + kLease + kMargin);
  const Json after = bed().root_qdisc_by_tc();
  EXPECT_EQ(after.value("handle", ""), "0:") << after.dump();
  EXPECT_EQ(after.value("kind", ""), before.value("kind", "")) << after.dump();
  // The event was published before the qdisc went; a short wait covers the pipe from jitterctl.
  const auto expired = events.wait_for("lease-expired", 1s);
  ASSERT_TRUE(expired) << events.describe();
  EXPECT_EQ(expired->at("interface"), "jta");
  EXPECT_EQ(expired->at("lease_ns").get<std::int64_t>(), std::chrono::nanoseconds(kLease).count());
  // Not early.
  EXPECT_GE(monotonic_point(expired->at("at")), earliest_start + kLease) << events.describe();

  // The session is gone, from jitterd's view and from its ledger.
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  const auto status = bed().ctl({"status", "jta"});
  EXPECT_EQ(status.exit_code, 3) << status.out << status.err;  // not-found
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
}

TEST_F(E2eLease, RenewedLeaseKeepsShapingPastItsFirstExpiry) {
  auto events = bed().subscribe();
  const auto applied =
      bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--lease", "2s"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  const auto applied_event = events.wait_for("applied", 10s);
  ASSERT_TRUE(applied_event) << events.describe();
  const auto earliest_start = monotonic_point(applied_event->at("deadline"));
  const auto latest_start = monotonic_point(applied_event->at("at"));

  // Renewed early in the lease: a loaded host can take over a second to start jitterctl in the VM.
  std::this_thread::sleep_until(latest_start + kLease / 4);
  const Json renewed = bed().ctl_json({"renew", "jta", "--lease", "4s"});
  ASSERT_LT(Clock::now(), earliest_start + kLease) << "too slow to renew before the lease ran out";
  EXPECT_GT(renewed.at("lease").at("remaining_ns").get<std::int64_t>(), 0) << renewed.dump();
  const auto expires = monotonic_point(renewed.at("lease").at("expires"));
  EXPECT_GE(expires, latest_start + kLease + kMargin) << renewed.dump();

  // Past the first expiry: still shaped.
  std::this_thread::sleep_until(latest_start + kLease + kMargin);
  const Json shaped = bed().root_qdisc_by_tc();
  ASSERT_LT(Clock::now(), expires) << "tc took until the renewed lease's end to look";
  EXPECT_EQ(shaped.value("kind", ""), "netem") << shaped.dump();
  EXPECT_EQ(shaped.value("handle", ""), "1a7e:") << shaped.dump();

  // The lease runs out once: at the renewed lease's end, not at the first.
  const auto expired = events.wait_for("lease-expired", kRenewedLease + 5s);
  ASSERT_TRUE(expired) << events.describe();
  EXPECT_GE(monotonic_point(expired->at("at")), expires);
  EXPECT_EQ(expired->at("lease_ns").get<std::int64_t>(),
            std::chrono::nanoseconds(kRenewedLease).count());
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "0:");
  events.drain(100ms);
  EXPECT_EQ(events.of_type("lease-expired").size(), 1u) << events.describe();
}

}  // namespace
