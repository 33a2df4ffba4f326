// The compiler on captures with a tight body and multi-second stalls (issue 20 §3): each part keeps its
// own table resolution, and the compiled profile, simulated as `jitterctl validate` does, meets the
// profile thresholds of docs/validation.md. Captures: tests/support/stall_captures.hpp (seeded).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "../support/stall_captures.hpp"
#include "shaper/compiler.hpp"
#include "shaper/validation.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

CaptureInput input(const Trace& trace) { return CaptureInput{"stalls.txt", std::string(64, 'c'), trace}; }

// The capture against its profile simulated for at least a million probes (jitterctl validate's own
// comparison, its thresholds and its simulation length).
Comparison judged(const Trace& trace, const Profile& profile) {
  const DelaySeries capture = capture_series(trace, profile);
  const DelaySeries sim = simulate_profile(profile, capture, trace.interval, 1,
                                           simulation_copies(capture.delay.size()));
  return validate_series(capture, sim, nullptr).comparisons.front();
}

std::string describe(const Comparison& c) {
  std::string out = "KS " + std::to_string(c.ks) + " (limit " + std::to_string(c.ks_limit) + "), p99 " +
                    std::to_string(c.p99_error) + ", p99.9 " + std::to_string(c.p999_error) + ", loss " +
                    std::to_string(c.loss_rate_error);
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
