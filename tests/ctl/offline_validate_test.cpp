// jitterctl validate --phase, through the built binary: a shaped trace judged against one phase of
// a profile, held. The profile is compiled from the two-regime fixture capture (calm about 4 ms,
// storm about 25 ms), so each phase's simulated delays are far from the other's.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/temp_dir.hpp"
#include "run_jitterctl.hpp"

namespace {

using jitterctl_test::Completed;
using jitterctl_test::run;

class ValidatePhase : public ::testing::Test {
 protected:
  void SetUp() override {
    profile_ = dir_.file("regimes.json");
    const Completed compiled =
        run("compile " + capture_ + " -o " + profile_ + " --regimes 2 --window 10s");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out;
  }

  // The simulated profile's p50 (ms) when `phase` is held.
  double held_p50(const std::string& phase) {
    const Completed r =
        run("validate " + profile_ + " --shaped " + capture_ + " --phase " + phase + " --json");
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;  // a verdict either way
    return nlohmann::json::parse(r.out).at("profile").at("p50_ms").get<double>();
  }

  std::string capture_ = std::string(JITTERD_SOURCE_DIR) + "/tests/fixtures/captures/regimes.txt";
  const test_support::TempDir dir_{"jitterctl-validate-"};
  std::string profile_;
};

TEST_F(ValidatePhase, EachPhaseIsSimulatedHeldOnItsOwn) {
  const double calm = held_p50("regime-1");
  const double storm = held_p50("regime-2");
  const double low = std::min(calm, storm), high = std::max(calm, storm);
  EXPECT_GT(high - low, 10.0) << "regime-1 p50 " << calm << " ms, regime-2 p50 " << storm << " ms";
  // The whole profile, schedule and all, mixes the two.
  const Completed whole = run("validate " + profile_ + " --shaped " + capture_ + " --json");
  const double mixed = nlohmann::json::parse(whole.out).at("profile").at("p50_ms").get<double>();
  EXPECT_GT(mixed, low) << whole.out;
  EXPECT_LT(mixed, high) << whole.out;
}

TEST_F(ValidatePhase, AnUnknownPhaseIsNamedWithThePhasesThereAre) {
  const Completed r = run("validate " + profile_ + " --shaped " + capture_ + " --phase storm");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("no phase \"storm\" (phases: regime-1, regime-2)"), std::string::npos)
      << r.out;
}

TEST_F(ValidatePhase, ThePhaseJudgesAShapedTraceNotTheCapture) {
  const Completed r = run("validate " + profile_ + " " + capture_ + " --phase regime-1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("give --shaped"), std::string::npos) << r.out;
}

// The profile is simulated for a million probes by default (the capture's 12 000, 84 times over),
// so that its verdict is on the profile and not on one short draw; --probes asks for another count,
// and never fewer than the capture's own probes.
TEST_F(ValidatePhase, TheProfileIsSimulatedForAMillionProbesUnlessToldOtherwise) {
  auto samples = [&](const std::string& extra) {
    const Completed r = run("validate " + profile_ + " " + capture_ + " --json" + extra);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;
    const auto report = nlohmann::json::parse(r.out);
    EXPECT_EQ(report.at("capture").at("samples").get<std::size_t>(), 12000u);
    return report.at("profile").at("samples").get<std::size_t>();
  };
  EXPECT_EQ(samples(""), 1'008'000u);
  EXPECT_EQ(samples(" --probes 30000"), 36'000u);
  EXPECT_EQ(samples(" --probes 1"), 12'000u);
}

TEST_F(ValidatePhase, ProbesMustBeAWholePositiveCount) {
  for (const char* bad : {"0", "-5", "2.5", "lots", "1e9"}) {
    const Completed r = run("validate " + profile_ + " " + capture_ + " --probes " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--probes"), std::string::npos) << bad << ": " << r.out;
  }
}

// `count` ping -D lines 20 ms apart whose RTTs are `rtt(i)`, printed as ping prints them: 3
// significant digits (24.3 ms is printed to 100 us).
std::string ping_lines(int count, double (*rtt)(int)) {
  std::string out = "PING 198.18.1.2 (198.18.1.2) 56(84) bytes of data.\n";
  for (int i = 0; i < count; ++i) {
    char line[160];
    const double ms = rtt(i);
    std::snprintf(line, sizeof line,
                  "[1796062977.%06d] 64 bytes from 198.18.1.2: icmp_seq=%d ttl=64 time=%.*f ms\n",
                  i * 20000 % 1000000, i + 1,
                  ms >= 10  ? 1
                  : ms >= 1 ? 2
                            : 3,
                  ms);
    out += line;
  }
  return out;
}

// A calibration through ~24 ms is printed to 100 us: that hides the noise of a phase 1 ms wide (a
// warning names the phase's spread and what to do), but is harmless beside a phase 40 ms wide
// (nothing is said).
TEST_F(ValidatePhase, ACoarselyPrintedCalibrationIsWarnedOfOnlyAgainstANarrowPhase) {
  const std::string profile = dir_.file("widths.json");
  {
    std::FILE* f = std::fopen(profile.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"version": 1, "name": "widths", "phases": {
      "narrow": {"delay": {"latency": "25ms", "jitter": "1ms"}},
      "wide": {"delay": {"latency": "50ms", "jitter": "40ms"}}}})",
               f);
    std::fclose(f);
  }
  const std::string calibration = dir_.file("calibration.txt");
  const std::string shaped = dir_.file("shaped.txt");
  auto write = [](const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write(calibration, ping_lines(1000, [](int i) { return 24.3 + 0.1 * (i % 3); }));
  write(shaped, ping_lines(1000, [](int i) { return 24.3 + 50.0 * ((i * 37) % 100) / 100.0; }));
  auto stderr_of = [&](const std::string& phase) {
    const Completed r = run("validate " + profile + " --shaped " + shaped + " --phase " + phase +
                            " --link-calibration " + calibration + " --calibration-delay 24.3ms");
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;  // a verdict either way
    return r.out;
  };
  const std::string narrow = stderr_of("narrow");
  EXPECT_NE(narrow.find("warning: every RTT is printed to 100us"), std::string::npos) << narrow;
  EXPECT_TRUE(narrow.find("interquartile range is 1.0") != std::string::npos ||
              narrow.find("interquartile range is 99") != std::string::npos)
      << narrow;  // ~1 ms, the phase's jitter band [24, 26) ms has an IQR of 1 ms
  EXPECT_NE(narrow.find("below 10 ms"), std::string::npos) << narrow;
  const std::string wide = stderr_of("wide");
  EXPECT_EQ(wide.find("warning"), std::string::npos) << wide;
}

}  // namespace

// compile --host picks one target of an fping capture with several; without it the first is kept
// and the diagnostic names the option.
TEST(CompileHost, PicksTheNamedTargetOfASeveralTargetFpingCapture) {
  const test_support::TempDir temp("jitterctl-host-");
  const char* dir = temp.path().c_str();
  const std::string capture =
      std::string(JITTERD_SOURCE_DIR) + "/tests/fixtures/traces/fping_two_targets.txt";
  const std::string first = std::string(dir) + "/first.json",
                    second = std::string(dir) + "/second.json";
  const Completed plain = run("compile " + capture + " -o " + first + " --format fping");
  EXPECT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_NE(plain.out.find("kept 127.0.0.1; ignored ::1"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("jitterctl compile --host"), std::string::npos) << plain.out;
  const Completed picked =
      run("compile " + capture + " -o " + second + " --format fping --host ::1");
  EXPECT_EQ(picked.exit_code, 0) << picked.out;
  EXPECT_NE(picked.out.find("kept ::1; ignored 127.0.0.1"), std::string::npos) << picked.out;
  const Completed a = run("inspect " + first + " --json"), b = run("inspect " + second + " --json");
  const auto provenance = [](const Completed& c) {
    return nlohmann::json::parse(c.out).at("provenance");
  };
  EXPECT_NE(provenance(a).at("samples"), nullptr);
  EXPECT_NE(a.out, b.out) << "the two targets' RTTs differ, so must the profiles";
}

// Issue 21: a profile with a value nested 100 000 deep (a 295 KB file) made `jitterctl inspect` and
// `jitterctl validate` die with SIGSEGV (no exit status: -1 here). Now: bad input (exit 3), one
// short line naming the pointer.
TEST(OfflineInput, AProfileNestedAHundredThousandDeepIsBadInputNotACrash) {
  const test_support::TempDir temp("jitterctl-deep-");
  const char* dir = temp.path().c_str();
  const std::string path = std::string(dir) + "/deep.json";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_TRUE(f);
  const std::string text =
      R"({"version": 1, "name": "deep", "phases": {"a": {"delay": {"latency": )" +
      std::string(100000, '[') + std::string(100000, ']') + "}}}}";
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  std::fclose(f);
  for (const std::string command : {"inspect ", "validate "}) {
    const std::string capture = command == "validate " ? " " + std::string(JITTERD_SOURCE_DIR) +
                                                             "/tests/fixtures/captures/regimes.txt"
                                                       : "";
    const Completed r = run(command + path + capture);
    EXPECT_EQ(r.exit_code, 3) << command << r.out.substr(0, 300);
    EXPECT_NE(r.out.find("/phases/a/delay/latency/0/0/"), std::string::npos)
        << r.out.substr(0, 300);
    EXPECT_NE(r.out.find("nests deeper than 64 levels"), std::string::npos) << r.out.substr(0, 300);
    EXPECT_LT(r.out.size(), 600u);
  }
}
