// jitterctl's offline commands through the built binary (issue 21): validate's memory follows the
// probes compared, not the profile's schedule; output files are written through a private temporary
// (a symlink planted at the old "X.tmp" is not followed, a failure leaves nothing); every command
// answers --help; integer options are parsed as integers, with their range.
#include <gtest/gtest.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_jitterctl.hpp"
#include "test_files.hpp"

namespace {

namespace fs = std::filesystem;
using jitterctl_test::Completed;
using jitterctl_test::run;

const std::string kSource = JITTERD_SOURCE_DIR;
const std::string kCapture = kSource + "/tests/fixtures/captures/regimes.txt";

std::string contents(const fs::path& path) {
  return jitterd::testing::read_file(path.string());
}
std::vector<std::string> names_in(const fs::path& folder) {
  return jitterd::testing::names_in(folder.string());
}

class OfflineCommands : public ::testing::Test {
 protected:
  // A ping capture of six probes a second apart (20 to 25 ms), as ping -D prints them.
  std::string tiny_capture() {
    const fs::path path = dir_ / "tiny.txt";
    std::ofstream out(path);
    out << "PING 198.18.0.2 (198.18.0.2) 56(84) bytes of data.\n";
    for (int i = 0; i < 6; ++i) {
      out << "[17960629" << 77 + i << ".883520] 64 bytes from 198.18.0.2: icmp_seq=" << i + 1
          << " ttl=64 time=" << 20 + i << ".0 ms\n";
    }
    return path.string();
  }

  jitterd::testing::TempDir temp_;
  fs::path dir_ = temp_.path();
};

// --- validate's memory (§3) ---------------------------------------------------------------------

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define JITTERCTL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define JITTERCTL_TEST_SANITIZED 1
#endif
#endif

TEST_F(OfflineCommands, ValidateOfATinyCaptureAgainstALongLoopedScheduleFitsInOneGibibyte) {
#ifdef JITTERCTL_TEST_SANITIZED
  GTEST_SKIP() << "ASan and TSan reserve terabytes of address space; RLIMIT_AS cannot bound them";
#endif
  // profiles/lab-regimes.json loops 15 steps of ~10 s. A 6-probe capture is simulated 166 667 times
  // over to reach a million probes, each copy from the schedule's start: before, the simulation
  // covered every copy's whole pass (2.5 million phases, each with its table) and grew to 22.9 GB.
  const Completed r =
      run("validate " + kSource + "/profiles/lab-regimes.json " + tiny_capture() + " --json",
          "ulimit -v 1048576 &&");
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1)
      << "no verdict (killed, or out of memory): " << r.out;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report.at("capture").at("samples").get<std::size_t>(), 6u);
  EXPECT_EQ(report.at("profile").at("samples").get<std::size_t>(), 1'000'002u)
      << "166 667 copies of 6 probes";
}

// --- output files (§4) --------------------------------------------------------------------------

TEST_F(OfflineCommands, CompileDoesNotFollowASymlinkPlantedAtTheOldTemporaryName) {
  // Before: compile -o X opened X.tmp with O_CREAT | O_TRUNC, so a symlink planted there by another
  // user had the profile written into its target (any file, when run as root), and X became the
  // symlink.
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir_ / "regimes.json.tmp");
  const fs::path out = dir_ / "regimes.json";
  const Completed r = run("compile " + kCapture + " -o " + out.string() + " --regimes 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(contents(victim) == "precious") << "the symlink's target was overwritten";
  EXPECT_TRUE(fs::is_symlink(dir_ / "regimes.json.tmp"));
  ASSERT_FALSE(fs::is_symlink(out));
  EXPECT_EQ(nlohmann::json::parse(contents(out)).at("phases").size(), 2u);
  EXPECT_EQ(names_in(dir_),
            (std::vector<std::string>{"regimes.json", "regimes.json.tmp", "victim"}));
}

TEST_F(OfflineCommands, ValidatePlotDoesNotFollowASymlinkPlantedAtTheOldTemporaryName) {
  const fs::path profile = dir_ / "regimes.json";
  ASSERT_EQ(run("compile " + kCapture + " -o " + profile.string() + " --regimes 2").exit_code, 0);
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir_ / "plot.svg.tmp");
  const fs::path plot = dir_ / "plot.svg";
  const Completed r =
      run("validate " + profile.string() + " " + kCapture + " --probes 1 --plot " + plot.string());
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;
  EXPECT_TRUE(contents(victim) == "precious") << "the symlink's target was overwritten";
  ASSERT_FALSE(fs::is_symlink(plot));
  EXPECT_EQ(contents(plot).rfind("<?xml version='1.0' encoding='UTF-8'?>\n<svg", 0), 0u)
      << contents(plot).substr(0, 80);
}

TEST_F(OfflineCommands, AnOutputThatCannotBeRenamedIntoPlaceLeavesNothingBehind) {
  // The rename fails (a folder holds the name): exit 4 naming the rename, and no temporary left.
  // Before, "regimes.json.tmp" stayed in the folder.
  fs::create_directories(dir_ / "regimes.json" / "inside");
  const Completed r = run("compile " + kCapture + " -o " + (dir_ / "regimes.json").string());
  EXPECT_EQ(r.exit_code, 4) << r.out;
  EXPECT_NE(r.out.find("rename"), std::string::npos) << r.out;
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"regimes.json"});
}

// --- --help and integer options (§10) -----------------------------------------------------------

TEST(OfflineHelp, EveryCommandPrintsItsUsageForHelpAndExitsZero) {
  // Every command that `jitterctl --help` lists (offline and online alike), with --help and with -h
  // for the offline ones. Before, compile --help and validate --help said "unknown option".
  const Completed all = run("--help");
  ASSERT_EQ(all.exit_code, 0) << all.out;
  const std::regex listed(R"(^  ([a-z][a-z-]+) )");
  std::vector<std::string> commands;
  std::istringstream lines(all.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, listed)) commands.push_back(m[1]);
  }
  for (const char* expected : {"compile", "inspect", "validate", "apply", "status", "watch"}) {
    ASSERT_NE(std::find(commands.begin(), commands.end(), expected), commands.end())
        << expected << "\n"
        << all.out;
  }
  for (const auto& command : commands) {
    const Completed r = run(command + " --help", "JITTERD_SOCKET=/nonexistent");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.out;
    EXPECT_EQ(r.out.rfind("usage: jitterctl " + command, 0), 0u) << command << ": " << r.out;
  }
  for (const char* command : {"compile", "inspect", "validate"}) {
    const Completed r = run(std::string(command) + " some.json -h");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.out;
    EXPECT_EQ(r.out.rfind("usage: jitterctl " + std::string(command), 0), 0u)
        << command << ": " << r.out;
  }
}

TEST_F(OfflineCommands, IntegerOptionsAreWholeNumbersInTheirRangeAndTheErrorSaysWhich) {
  // Before, these went through a double and a cast: --regimes -1 was undefined behaviour (and then
  // "clusters: must be 1 to 16" from the compiler, exit 3), --entries 2.5 was 2.
  const std::string out = (dir_ / "p.json").string();
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {"compile " + kCapture + " -o " + out + " --regimes -1",
       "--regimes: \"-1\" is not a whole number from 1 to 16"},
      {"compile " + kCapture + " -o " + out + " --regimes 17",
       "--regimes: \"17\" is not a whole number from 1 to 16"},
      {"compile " + kCapture + " -o " + out + " --entries 2.5",
       "--entries: \"2.5\" is not a whole number from 1 to 16384"},
      {"compile " + kCapture + " -o " + out + " --entries 0",
       "--entries: \"0\" is not a whole number from 1 to 16384"},
      {"compile " + kCapture + " -o " + out + " --spike 100ms:-2:30s",
       "--spike: \"-2\" is not a whole number from 1"},
      {"compile " + kCapture + " -o " + out + " --packet-rate -5",
       "--packet-rate: \"-5\" is not a packet rate"},
      {"validate " + out + " " + kCapture + " --seed -1",
       "--seed: \"-1\" is not a whole number from 0 to 18446744073709551615"},
      {"validate " + out + " " + kCapture + " --seed 18446744073709551616",
       "--seed: \"18446744073709551616\" is not a whole number from 0 to 18446744073709551615"},
      {"validate " + out + " " + kCapture + " --probes 1e3",
       "--probes: \"1e3\" is not a whole number from 1 to 100000000"},
  };
  for (const auto& c : cases) {
    const Completed r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(out)) << "nothing compiled from a refused command line";
}

TEST_F(OfflineCommands, SeedsAbove2To53AreTakenWhole) {
  // 2^53 and 2^53 + 1 are one double: before, both seeds drew the same simulation.
  const fs::path profile = dir_ / "regimes.json";
  ASSERT_EQ(run("compile " + kCapture + " -o " + profile.string() + " --regimes 2").exit_code, 0);
  auto p50_and_mean = [&](const std::string& seed) {
    const Completed r =
        run("validate " + profile.string() + " " + kCapture + " --probes 1 --json --seed " + seed);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;
    const auto stats = nlohmann::json::parse(r.out).at("profile");
    return std::make_pair(stats.at("p50_ms").get<double>(), stats.at("mean_ms").get<double>());
  };
  EXPECT_NE(p50_and_mean("9007199254740992"), p50_and_mean("9007199254740993"));
  EXPECT_EQ(p50_and_mean("18446744073709551615"), p50_and_mean("18446744073709551615"));
}

// --alpha sets how often a faithful profile may fail by chance: each judged figure's level is that
// share of it (docs/validation.md), so a larger alpha gives every figure a larger level; out of
// range is a usage error naming the option.
TEST_F(OfflineCommands, AlphaSetsTheLevelTheFiguresAreJudgedAt) {
  const fs::path profile = dir_ / "regimes.json";
  ASSERT_EQ(run("compile " + kCapture + " -o " + profile.string()).exit_code, 0);
  auto level = [&](const std::string& extra) {
    const Completed r =
        run("validate " + profile.string() + " " + kCapture + " --probes 1 --json" + extra);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out;
    return nlohmann::json::parse(r.out)
        .at("comparisons")
        .at("capture_vs_profile")
        .at("level")
        .get<double>();
  };
  const double standard = level(""), loose = level(" --alpha 0.2");
  EXPECT_GT(standard, 0);
  EXPECT_NEAR(loose / standard, 4.0, 1e-9) << "the same figures judged, at four times the level";
  for (const char* bad : {"0", "0.6", "-0.01", "nan", "five"}) {
    const Completed r = run("validate " + profile.string() + " " + kCapture + " --alpha " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--alpha: \"" + std::string(bad) + "\""), std::string::npos) << r.out;
  }
}

}  // namespace

TEST_F(OfflineCommands, InspectShowsEachPhasesMeanDelay) {
  // A table of -1, 0 and +1 sigma at 1 ms, sigma 2 ms decodes to -1, 1 and 3 ms; the kernel sends
  // the first at once, so a packet waits (0 + 1 + 3) / 3 ms on average, not the latency's 1 ms.
  const fs::path path = dir_ / "means.json";
  std::ofstream(path) << R"({"version": 1, "name": "means", "phases": {
    "tabled": {"delay": {"latency": "1ms", "jitter": "2ms", "distribution": {"table": [-8192, 0, 8192]}}},
    "uniform": {"delay": {"latency": "10ms", "jitter": "4ms"}}}})";
  const Completed r = run("inspect " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\nPHASE +LATENCY +JITTER +MEAN +TABLE")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\ntabled +1ms +2ms +1\\.33333ms +3 "))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\nuniform +10ms +4ms +10ms +0 "))) << r.out;
}
