// The compiler on captures with a tight body and multi-second stalls (issue 20 §3): each part keeps
// its own table resolution, and the compiled profile, simulated as `jitterctl validate` does, meets
// the profile thresholds of docs/validation.md. Captures: tests/support/stall_captures.hpp
// (seeded).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../support/stall_captures.hpp"
#include "shaper/compiler.hpp"
#include "shaper/statistics.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

CaptureInput input(const Trace& trace) {
  return CaptureInput{"stalls.txt", std::string(64, 'c'), trace};
}

// The capture against its profile simulated for at least a million probes (jitterctl validate's own
// comparison, its thresholds and its simulation length).
ValidationReport validation(const Trace& trace, const Profile& profile) {
  const DelaySeries capture = capture_series(trace, profile);
  const DelaySeries sim = simulate_profile(profile, capture, trace.interval, 1,
                                           simulation_copies(capture.delay.size()));
  return validate_series(capture, sim, nullptr);
}

Comparison judged(const Trace& trace, const Profile& profile) {
  return validation(trace, profile).comparisons.front();
}

std::string describe(const Comparison& c) {
  std::string out = "KS " + std::to_string(c.ks) + " (limit " + std::to_string(c.ks_limit) +
                    "), p99 " + std::to_string(c.p99_error) + ", p99.9 " +
                    std::to_string(c.p999_error) + ", loss " + std::to_string(c.loss_rate_error);
  for (const auto& f : c.failures) out += "; " + f;
  return out;
}

}  // namespace

TEST(CompilerStalls, ATightBodyUnderMultiSecondStallsKeepsItsOwnResolution) {
  const Trace trace = synthetic::make_stall_capture(synthetic::tight_body_with_stalls(), 20);
  const CompileResult r = compile_profile({input(trace)}, CompileOptions{});
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  const auto body = std::find_if(r.report.phases.begin(), r.report.phases.end(),
                                 [](const PhaseReport& p) { return p.name == "capture"; });
  const auto tail = std::find_if(r.report.phases.begin(), r.report.phases.end(),
                                 [](const PhaseReport& p) { return p.name == "capture-tail"; });
  ASSERT_NE(body, r.report.phases.end());
  ASSERT_NE(tail, r.report.phases.end());
  // One table for 0..13.4 s would step by ceil(13.4 s / 65535) = 204.5 us: five steps for the body.
  EXPECT_GE(body->whole_table_resolution, 200us);
  EXPECT_GT(body->whole_table_ks, 0.05);
  // The body's own table keeps its law within the budget (KS 0.005), the tail holds the stalls.
  EXPECT_LE(body->table_ks, 0.005);
  EXPECT_LE(body->resolution * 10, body->whole_table_resolution);
  EXPECT_GE(tail->max, 13s);
  EXPECT_GT(tail->samples, 100u);
  const Comparison c = judged(trace, *r.profile);
  EXPECT_TRUE(c.pass()) << describe(c);
}

TEST(CompilerStalls, ABimodalBodyUnderStallsTo14sMeetsTheProfileThresholds) {
  const Trace trace = synthetic::make_stall_capture(synthetic::bimodal_with_stalls(), 21);
  const CompileResult r = compile_profile({input(trace)}, CompileOptions{});
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->find_phase("capture-tail"));
  EXPECT_GE(r.report.phases.front().whole_table_resolution, 200us);
  const Comparison c = judged(trace, *r.profile);
  EXPECT_TRUE(c.pass()) << describe(c);
}

namespace {

// Stalls: runs of probes delayed by `above` or more, (first send, last send); runs less than `gap`
// apart are one stall (a replay draws each probe of a window afresh, so a stall's last seconds,
// where the capture's sawtooth falls below `above`, may interleave with higher draws).
std::vector<std::pair<Nanoseconds, Nanoseconds>> stalls(const DelaySeries& s, Nanoseconds above,
                                                        Nanoseconds gap) {
  std::vector<std::pair<Nanoseconds, Nanoseconds>> out;
  for (std::size_t i = 0; i < s.delay.size(); ++i) {
    if (!s.delay[i] || *s.delay[i] < above) continue;
    if (out.empty() || s.sent[i] - out.back().second > gap) {
      out.emplace_back(s.sent[i], s.sent[i]);
    } else {
      out.back().second = s.sent[i];
    }
  }
  return out;
}

double lag1(const DelaySeries& s) {
  return autocorrelation(s.delivered(), 1).value_or(0.0);
}

CompileOptions replay() {
  CompileOptions options;
  options.regimes = RegimeMode::kReplay;
  return options;
}

}  // namespace

TEST(CompilerReplay, StallsComeBackAtTheCapturesTimesWithItsLag1) {
  const Trace trace = synthetic::make_stall_capture(synthetic::tight_body_with_stalls(), 20);
  const CompileResult r = compile_profile({input(trace)}, replay());
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.report.replay);
  ASSERT_TRUE(r.profile->schedule);
  const Nanoseconds window = r.report.replay->window;
  EXPECT_EQ(r.profile->schedule->replay_window, window);
  EXPECT_TRUE(r.profile->schedule->loop);
  const DelaySeries capture = capture_series(trace, *r.profile);
  const DelaySeries sim = simulate_profile(*r.profile, capture, trace.interval, 1, 1);
  EXPECT_NEAR(lag1(sim), lag1(capture), 0.1) << "window " << duration_to_string(window);
  // Every stall of the capture (a run of delays of 1 s or more) is in the replay, starting and
  // ending within a window of where it did; and the replay has no other.
  const auto expected = stalls(capture, 1s, window);
  const auto got = stalls(sim, 1s, window);
  ASSERT_EQ(expected.size(), 8u);
  ASSERT_EQ(got.size(), expected.size()) << "window " << duration_to_string(window);
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(std::chrono::abs(got[k].first - expected[k].first), window) << k;
    EXPECT_LE(std::chrono::abs(got[k].second - expected[k].second), window) << k;
  }
  std::cerr << "window " << duration_to_string(window) << ", lag-1 capture " << lag1(capture)
            << ", replay " << lag1(sim) << ", phases " << r.profile->phases.size() << ", steps "
            << r.profile->schedule->steps.size() << '\n';
  const Comparison c = judged(trace, *r.profile);
  EXPECT_TRUE(c.pass()) << describe(c);
}

TEST(CompilerReplay, ABodyWithoutStallsKeepsItsLag1WhereOneTableLosesIt) {
  synthetic::StallCaptureShape shape = synthetic::tight_body_with_stalls();
  shape.stalls = 0;
  const Trace trace = synthetic::make_stall_capture(shape, 22);
  const CompileResult plain = compile_profile({input(trace)}, CompileOptions{});
  const CompileResult r = compile_profile({input(trace)}, replay());
  ASSERT_TRUE(plain.profile && r.profile) << to_string(r.diagnostics);
  const DelaySeries capture = capture_series(trace, *r.profile);
  ASSERT_GT(lag1(capture), 0.4);  // the generator's AR(1) body: about 0.6
  EXPECT_NEAR(lag1(simulate_profile(*plain.profile, capture, trace.interval, 1, 1)), 0.0, 0.05);
  const DelaySeries sim = simulate_profile(*r.profile, capture, trace.interval, 1, 1);
  EXPECT_NEAR(lag1(sim), lag1(capture), 0.1)
      << "window " << duration_to_string(r.report.replay->window);
  std::cerr << "window " << duration_to_string(r.report.replay->window) << ", lag-1 capture "
            << lag1(capture) << ", replay " << lag1(sim) << ", predicted "
            << r.report.replay->predicted_lag1 << ", phases " << r.profile->phases.size() << '\n';
  const Comparison c = judged(trace, *r.profile);
  EXPECT_TRUE(c.pass()) << describe(c);
}

namespace {

// Issue 20 §3's targets, as fidelity_report judges them: KS within max(0.02, the 95 % critical
// value for the two series' sizes, lost probes counted: a hair stricter than for the delivered
// ones), p99 and p99.9 within 2 %, the loss rate within 10 % (0.001 absolute).
void expect_issue_targets(const ValidationReport& v, const std::string& what) {
  const Comparison& c = v.comparisons.front();
  const double critical = ks_critical_value(v.capture.samples, v.profile.samples).value_or(1.0);
  EXPECT_LE(c.ks, std::max(0.02, critical)) << what;
  EXPECT_LE(std::fabs(c.p99_error), 0.02) << what;
  EXPECT_LE(std::fabs(c.p999_error), 0.02) << what;
  EXPECT_LE(std::fabs(v.profile.loss_rate - v.capture.loss_rate),
            std::max(0.001, 0.1 * v.capture.loss_rate))
      << what;
  EXPECT_TRUE(c.pass()) << what << ": " << describe(c);
}

}  // namespace

// Captures made in the VM test bed with outages held by the kernel (sch_plug on the replies,
// tests/fixtures/captures/README.md, "Outages held by the kernel"): a body 1-2 ms wide on the 0.1
// ms grid ping prints at 25-40 ms, and six outages of 4-10 s. One table for all would step by ~150
// us and move the body's law by KS ~0.2; the compiled profile and its replay meet the targets.
class BedStallCapture : public ::testing::TestWithParam<const char*> {};

TEST_P(BedStallCapture, TheProfileAndItsReplayMeetTheIssuesTargets) {
  const Trace trace =
      parse_trace_file(std::string(JITTERD_SOURCE_DIR) + "/tests/fixtures/captures/" + GetParam());
  ASSERT_TRUE(trace.diagnostics.empty());
  const CompileResult r = compile_profile({input(trace)}, CompileOptions{});
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->find_phase("capture-tail"));
  EXPECT_GT(r.report.phases.front().whole_table_ks, 0.05);
  EXPECT_LE(r.report.phases.front().table_ks, 0.005);
  expect_issue_targets(validation(trace, *r.profile), "profile");
  const CompileResult replayed = compile_profile({input(trace)}, replay());
  ASSERT_TRUE(replayed.profile) << to_string(replayed.diagnostics);
  const ValidationReport v = validation(trace, *replayed.profile);
  expect_issue_targets(v, "replay");
  // The time line: lag-1 within validate's 0.1. (validate also judges a replay's stall lengths,
  // runs above the capture's p90; on stalls-overflow that p90 is the upper route, whose runs the
  // replay lengthens, and that figure fails: docs/fidelity.md, "Wide tails".)
  EXPECT_NEAR(v.profile.lag1_autocorr.value_or(0), v.capture.lag1_autocorr.value_or(1), 0.1);
}

INSTANTIATE_TEST_SUITE_P(Captures, BedStallCapture,
                         ::testing::Values("stalls.txt", "stalls-overflow.txt"));
