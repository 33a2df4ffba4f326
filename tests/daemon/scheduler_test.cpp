// ScheduleClock: absolute deadlines (step k of iteration i at origin + i*period + offset[k]),
// lookups at the boundaries, the end of a schedule without loop, pause/resume and skip
// (restart_at). Pure arithmetic on made-up time points: every expectation is exact, to the
// nanosecond.
#include "scheduler.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace jitterd {
namespace {

// An arbitrary origin far from zero, so an off-by-origin mistake cannot hide behind
// time_since_epoch.
const MonotonicTime kOrigin{std::chrono::seconds(1000)};

// Offsets 0, 10 s, 15 s; period 30 s.
std::vector<ScheduledStep> three_steps() {
  return {{"a", 10s}, {"b", 5s}, {"c", 15s}};
}

TEST(ScheduleClock, PeriodIsTheSumOfTheSteps) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  EXPECT_EQ(clock.period(), 30s);
  EXPECT_EQ(clock.origin(), kOrigin);
  EXPECT_TRUE(clock.loop());
  EXPECT_FALSE(clock.paused());
}

TEST(ScheduleClock, StepKOfIterationIStartsAtOriginPlusIPeriodsPlusItsOffset) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  EXPECT_EQ(clock.position(0, 0), (SchedulePosition{0, 0, kOrigin, kOrigin + 10s}));
  EXPECT_EQ(clock.position(1, 0), (SchedulePosition{1, 0, kOrigin + 10s, kOrigin + 15s}));
  EXPECT_EQ(clock.position(2, 0), (SchedulePosition{2, 0, kOrigin + 15s, kOrigin + 30s}));
  EXPECT_EQ(clock.position(1, 7),
            (SchedulePosition{1, 7, kOrigin + 7 * 30s + 10s, kOrigin + 7 * 30s + 15s}));
  // A week of 30 s iterations: still exact.
  const std::uint64_t week = 7 * 24 * 3600 / 30;
  EXPECT_EQ(clock.position(2, week).start, kOrigin + std::chrono::hours(7 * 24) + 15s);
}

TEST(ScheduleClock, WalkingWithNextNeverDrifts) {
  // Ten thousand iterations of next(): every step starts exactly where the previous one ended, and
  // iteration n starts at origin + n * period, whatever happened in between.
  ScheduleClock clock({{"a", 1001ns}, {"b", 3ms}, {"c", 7777us}}, true, kOrigin);
  SchedulePosition p = clock.position(0, 0);
  for (int n = 0; n < 30000; ++n) {
    const auto next = clock.next(p);
    ASSERT_TRUE(next);
    ASSERT_EQ(next->start, p.end);
    ASSERT_EQ(clock.at(next->start), next);
    p = *next;
  }
  EXPECT_EQ(p.step, 0u);
  EXPECT_EQ(p.iteration, 10000u);
  EXPECT_EQ(p.start, kOrigin + 10000 * clock.period());
}

TEST(ScheduleClock, AtFindsTheStepInForceAtItsBoundaries) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  EXPECT_EQ(clock.at(kOrigin - 1ns), std::nullopt) << "before the origin nothing is in force";
  EXPECT_EQ(clock.at(kOrigin), clock.position(0, 0));
  EXPECT_EQ(clock.at(kOrigin + 10s - 1ns), clock.position(0, 0));
  EXPECT_EQ(clock.at(kOrigin + 10s), clock.position(1, 0));
  EXPECT_EQ(clock.at(kOrigin + 15s - 1ns), clock.position(1, 0));
  EXPECT_EQ(clock.at(kOrigin + 15s), clock.position(2, 0));
  EXPECT_EQ(clock.at(kOrigin + 30s - 1ns), clock.position(2, 0));
  EXPECT_EQ(clock.at(kOrigin + 30s), clock.position(0, 1)) << "a looping schedule starts over";
  EXPECT_EQ(clock.at(kOrigin + 3 * 30s + 12s), clock.position(1, 3));
}

TEST(ScheduleClock, NextWrapsToTheNextIterationWhenLooping) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  EXPECT_EQ(clock.next(clock.position(0, 4)), clock.position(1, 4));
  EXPECT_EQ(clock.next(clock.position(2, 4)), clock.position(0, 5));
  EXPECT_EQ(clock.next(clock.position(2, 4))->start, clock.position(2, 4).end);
}

TEST(ScheduleClock, WithoutLoopTheScheduleEndsAfterItsLastStep) {
  ScheduleClock clock(three_steps(), false, kOrigin);
  EXPECT_EQ(clock.at(kOrigin + 30s - 1ns), clock.position(2, 0));
  EXPECT_EQ(clock.at(kOrigin + 30s), std::nullopt);
  EXPECT_EQ(clock.at(kOrigin + 1000s), std::nullopt);
  EXPECT_EQ(clock.next(clock.position(1, 0)), clock.position(2, 0));
  EXPECT_EQ(clock.next(clock.position(2, 0)), std::nullopt);
}

TEST(ScheduleClock, ASingleStepScheduleLoopsOnItself) {
  ScheduleClock clock({{"only", 2s}}, true, kOrigin);
  EXPECT_EQ(clock.at(kOrigin + 5s), clock.position(0, 2));
  EXPECT_EQ(clock.next(clock.position(0, 2)), clock.position(0, 3));
}

TEST(ScheduleClock, PauseAndResumeShiftEveryDeadlineByThePausedTime) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  // Paused 2 s into step b (10 s .. 15 s): 3 s of it remain.
  const MonotonicTime paused = kOrigin + 12s;
  clock.pause(paused);
  EXPECT_TRUE(clock.paused());
  EXPECT_EQ(clock.paused_at(), paused);
  clock.pause(paused + 50s);  // a second pause does not move the pause time
  EXPECT_EQ(clock.paused_at(), paused);
  const MonotonicTime resumed = paused + 100s;
  clock.resume(resumed);
  EXPECT_FALSE(clock.paused());
  EXPECT_EQ(clock.origin(), kOrigin + 100s);
  // The rest of step b, then the schedule as before, 100 s later.
  EXPECT_EQ(clock.at(resumed), clock.position(1, 0));
  EXPECT_EQ(clock.position(1, 0).end - resumed, 3s);
  EXPECT_EQ(clock.position(0, 1).start, kOrigin + 100s + 30s);
}

TEST(ScheduleClock, ResumeWithoutPauseChangesNothing) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  clock.resume(kOrigin + 500s);
  EXPECT_EQ(clock.origin(), kOrigin);
  EXPECT_FALSE(clock.paused());
}

TEST(ScheduleClock, RestartAtStartsTheStepNowWithItsFullDuration) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  const MonotonicTime now = kOrigin + 3s;  // in step a
  clock.restart_at(2, 0, now);
  EXPECT_EQ(clock.position(2, 0).start, now);
  EXPECT_EQ(clock.position(2, 0).end, now + 15s);
  EXPECT_EQ(clock.at(now), clock.position(2, 0));
  EXPECT_EQ(clock.next(clock.position(2, 0))->start, now + 15s);
  EXPECT_EQ(clock.next(clock.position(2, 0))->step, 0u);
}

TEST(ScheduleClock, RestartAtKeepsTheIteration) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  const MonotonicTime now = kOrigin + 5 * 30s + 1s;  // iteration 5, step a
  clock.restart_at(1, 5, now);
  EXPECT_EQ(clock.at(now), (SchedulePosition{1, 5, now, now + 5s}));
}

TEST(ScheduleClock, RestartAtEndsAPause) {
  ScheduleClock clock(three_steps(), true, kOrigin);
  clock.pause(kOrigin + 1s);
  clock.restart_at(0, 0, kOrigin + 40s);
  EXPECT_FALSE(clock.paused());
  EXPECT_EQ(clock.position(0, 0).start, kOrigin + 40s);
}

}  // namespace
}  // namespace jitterd
