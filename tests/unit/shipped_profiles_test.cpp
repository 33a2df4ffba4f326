// The profiles shipped in profiles/: each loads cleanly, says where it came from (and that capture
// is committed, byte for byte the one compiled), and simulates (the offline netem simulator,
// seeded) to the figures profiles/README.md states for it.
//
// How a stated figure is checked. The figures in profiles/README.md are rounded. A stated delay
// quantile must be what the phase's table gives, to half a unit of its last printed digit (Stated
// below), and, like every other figure, lie in the simulated run's confidence interval for the true
// value, widened by that half unit. The intervals are two-sided at z = 4 (a correct profile lands
// outside with probability 6e-5 per figure; the runs are seeded, so a pass is reproducible and this
// is how unlucky a seed would have had to be for a correct profile to fail):
//   - a quantile of iid delays (a held phase draws every delay independently from its table): the
//     number of simulated delays below the true p-quantile is Binomial(n, p), so the true quantile
//     lies between the order statistics of ranks n p -/+ z sqrt(n p (1 - p)) (distribution-free);
//   - a fraction of packets (a delay level, the spikes): Binomial(n, f), f -/+ z sqrt(f (1 - f) /
//   n);
//   - a loss rate: losses come in bursts, so a binomial interval would be too narrow. Batch means:
//   the
//     run is cut into 100 batches of n / 100 packets (10 000, thousands of mean burst lengths, so
//     the batches are nearly independent); the rate lies in mean -/+ z sd(batch rates) / sqrt(100);
//   - a mean burst length: in a Gilbert model a burst's length does not depend on earlier bursts,
//   in
//     the 4-state model only through its burst state, which the gaps of hundreds of packets between
//     bursts mostly leave; taken as iid: mean -/+ z sd(lengths) / sqrt(bursts).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "shaper/distribution_tables.hpp"
#include "shaper/profile.hpp"
#include "shaper/sha256.hpp"
#include "shaper/statistics.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

const std::string kSource = JITTERD_SOURCE_DIR;
const std::string kProfiles = kSource + "/profiles";
// Where the shipped profiles' captures live (profiles/README.md).
const std::string kCaptureDirs[] = {kProfiles + "/captures", kSource + "/tests/fixtures/captures"};

constexpr double kZ = 4.0;
// Simulated packets per held phase: 1 000 000 puts 1 000 above the p99.9 (its interval spans ranks
// p99.887 to p99.913), makes loss batches of 10 000 packets, and takes 0.2-0.3 s.
constexpr std::size_t kProbes = 1'000'000;

Profile load(const std::string& name) {
  ProfileLoad load = load_profile_file(kProfiles + "/" + name + ".json");
  if (!load) throw std::runtime_error(name + ": " + to_string(load.diagnostics()));
  return load->profile;
}

DelaySeries probes(std::size_t count, Nanoseconds interval) {
  DelaySeries like;
  for (std::size_t i = 0; i < count; ++i) {
    like.sent.push_back(interval * static_cast<std::int64_t>(i));
    like.delay.push_back(Nanoseconds(0));
  }
  return like;
}

// `phase` held for `count` probes 10 ms apart (the profile's whole schedule when `phase` is empty).
DelaySeries run(const Profile& profile, const std::string& phase, std::size_t count = kProbes,
                std::uint64_t seed = 1) {
  const auto one = phase.empty() ? std::optional<Profile>(profile) : profile.held(phase);
  if (!one) throw std::runtime_error("no phase " + phase + " in " + profile.name);
  return simulate_profile(*one, probes(count, 10ms), 10ms, seed);
}

double ms(Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

// A figure as profiles/README.md prints it: "3.45" is 3.45 give or take half a unit of its last
// digit.
struct Stated {
  double value = 0;
  double half_unit = 0;
  Stated(const char* text)
      : value(std::stod(text)) {  // NOLINT: implicit on purpose, Stated s = "3.45"
    const std::string s(text);
    const auto dot = s.find('.');
    const auto decimals = dot == std::string::npos ? 0 : static_cast<int>(s.size() - dot - 1);
    half_unit = 0.5 * std::pow(10.0, -decimals);
  }
};

struct Interval {
  double lo = 0, hi = 0;
};

// `stated` (rounded) is consistent with the interval of the true value.
::testing::AssertionResult consistent(const std::string& what, const Stated& stated,
                                      const Interval& ci) {
  if (stated.value + stated.half_unit >= ci.lo && stated.value - stated.half_unit <= ci.hi) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << what << ": stated " << stated.value << " (+/- " << stated.half_unit
         << ") is outside the simulated interval [" << ci.lo << ", " << ci.hi << "]";
}

// The distribution-free interval of the p-quantile of the delivered delays, in ms.
Interval quantile_interval(const SortedSamples& sorted, double p) {
  const double n = static_cast<double>(sorted.size());
  const double spread = kZ * std::sqrt(n * p * (1 - p));
  const auto at_rank = [&](double rank) {  // 1-based, clamped to the sample
    const auto k = static_cast<std::size_t>(std::clamp(rank, 1.0, n));
    return ms(sorted.values()[k - 1]);
  };
  return {at_rank(std::floor(n * p - spread)), at_rank(std::ceil(n * p + spread))};
}

Interval fraction_interval(std::size_t hits, std::size_t n) {
  const double f = static_cast<double>(hits) / static_cast<double>(n);
  const double spread = kZ * std::sqrt(f * (1 - f) / static_cast<double>(n));
  return {f - spread, f + spread};
}

// Batch means (see the top of the file), as a percentage.
Interval loss_rate_interval(const std::vector<bool>& lost) {
  constexpr std::size_t kBatches = 100;
  const std::size_t size = lost.size() / kBatches;
  std::vector<double> rates;
  for (std::size_t b = 0; b < kBatches; ++b) {
    rates.push_back(100.0 *
                    static_cast<double>(std::count(
                        lost.begin() + static_cast<std::ptrdiff_t>(b * size),
                        lost.begin() + static_cast<std::ptrdiff_t>((b + 1) * size), true)) /
                    static_cast<double>(size));
  }
  double mean = 0, var = 0;
  for (double r : rates) mean += r / kBatches;
  for (double r : rates) var += (r - mean) * (r - mean) / (kBatches - 1);
  const double spread = kZ * std::sqrt(var / kBatches);
  return {mean - spread, mean + spread};
}

Interval mean_burst_interval(const std::vector<bool>& lost) {
  const LossStatistics s = loss_statistics(lost);
  if (s.bursts < 2) return {0, 0};
  double mean = 0, var = 0;
  const double bursts = static_cast<double>(s.bursts);
  for (std::size_t len = 1; len < s.burst_lengths.size(); ++len) {
    mean += static_cast<double>(len * s.burst_lengths[len]) / bursts;
  }
  for (std::size_t len = 1; len < s.burst_lengths.size(); ++len) {
    var += static_cast<double>(s.burst_lengths[len]) * (static_cast<double>(len) - mean) *
           (static_cast<double>(len) - mean) / (bursts - 1);
  }
  const double spread = kZ * std::sqrt(var / bursts);
  return {mean - spread, mean + spread};
}

// Every delay a phase's table holds, decoded with the kernel's arithmetic, duplicates kept: netem
// draws an entry uniformly, so these are the phase's delay distribution exactly.
std::vector<Nanoseconds> table_entries(const NetemSpec& spec) {
  if (!spec.delay.distribution || spec.delay.jitter.count() == 0) return {spec.delay.latency};
  std::vector<Nanoseconds> out;
  for (auto entry : *spec.delay.distribution) {
    out.push_back(Nanoseconds(netem_table_delay_ns(
        spec.delay.latency.count(), static_cast<std::int32_t>(spec.delay.jitter.count()), entry)));
  }
  return out;
}

// The figures profiles/README.md states for a held phase; nullptr: not stated.
struct Figures {
  const char* p50_ms = nullptr;
  const char* p99_ms = nullptr;
  const char* p999_ms = nullptr;
  const char* loss_percent = nullptr;  // nullptr: stated as lossless
  const char* mean_burst = nullptr;
};

// A stated quantile is checked twice: against the phase's own distribution (its table's quantile,
// exact, must round to the stated figure) and against the simulated run (the stated figure must lie
// in its interval: the simulator draws what the table says).
void expect_quantile(const std::string& what, const Stated& stated, double p,
                     const SortedSamples& table, const SortedSamples& simulated) {
  const double exact = ms(*quantile_inverse_ecdf(table, p));
  EXPECT_LE(std::fabs(exact - stated.value), stated.half_unit + 1e-9)
      << what << ": the table's own quantile is " << exact << ", stated " << stated.value;
  EXPECT_TRUE(consistent(what + " (simulated)", stated, quantile_interval(simulated, p)));
}

void expect_figures(const Profile& profile, const std::string& phase, const Figures& f) {
  SCOPED_TRACE(profile.name + " " + phase);
  ASSERT_TRUE(profile.find_phase(phase));
  const SortedSamples table(table_entries(profile.find_phase(phase)->spec));
  const DelaySeries series = run(profile, phase);
  const SortedSamples sorted(series.delivered());
  ASSERT_FALSE(sorted.empty());
  if (f.p50_ms) expect_quantile("p50 ms", f.p50_ms, 0.5, table, sorted);
  if (f.p99_ms) expect_quantile("p99 ms", f.p99_ms, 0.99, table, sorted);
  if (f.p999_ms) expect_quantile("p99.9 ms", f.p999_ms, 0.999, table, sorted);
  const std::vector<bool> lost = series.lost();
  if (!f.loss_percent) {
    EXPECT_EQ(std::count(lost.begin(), lost.end(), true), 0) << "stated as lossless";
    return;
  }
  EXPECT_TRUE(consistent("loss %", f.loss_percent, loss_rate_interval(lost)));
  if (f.mean_burst) {
    EXPECT_TRUE(consistent("mean loss burst", f.mean_burst, mean_burst_interval(lost)));
  }
}

std::vector<std::string> phase_names(const Profile& p) {
  std::vector<std::string> out;
  for (const auto& phase : p.phases) out.push_back(phase.name);
  return out;
}

// The schedule as "phase:duration" words, e.g. "regime-1:20s regime-2:10s".
std::string schedule_text(const Profile& p) {
  std::string out;
  if (!p.schedule) return out;
  for (const auto& step : p.schedule->steps) {
    out += (out.empty() ? "" : " ") + step.phase + ":" + duration_to_string(step.duration);
  }
  return out;
}

// The delays a phase can produce: every table entry decoded with the kernel's arithmetic.
std::set<Nanoseconds> table_delays(const NetemSpec& spec) {
  std::set<Nanoseconds> out;
  if (!spec.delay.distribution) return {spec.delay.latency};
  for (auto entry : *spec.delay.distribution) {
    out.insert(Nanoseconds(netem_table_delay_ns(
        spec.delay.latency.count(), static_cast<std::int32_t>(spec.delay.jitter.count()), entry)));
  }
  return out;
}

std::string find_capture(const std::string& file) {
  for (const auto& dir : kCaptureDirs) {
    if (std::filesystem::exists(dir + "/" + file)) return dir + "/" + file;
  }
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> shipped() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kProfiles)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST(ShippedProfiles, EveryOneLoadsIsNamedAfterItsFileAndSaysWhereItCameFrom) {
  int count = 0;
  for (const auto& name : shipped()) {
    ++count;
    SCOPED_TRACE(name);
    const Profile p = load(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.description.empty());
    EXPECT_TRUE(p.provenance.has_value()) << "a shipped profile records its capture";
  }
  // lab-regimes and the ten of issue 6 (profiles/README.md).
  EXPECT_EQ(count, 11);
}

TEST(ShippedProfiles, EveryCaptureIsCommittedAndIsTheOneCompiled) {
  for (const auto& name : shipped()) {
    SCOPED_TRACE(name);
    const Profile p = load(name);
    ASSERT_TRUE(p.provenance.has_value());
    const std::string path = find_capture(p.provenance->capture);
    ASSERT_FALSE(path.empty()) << p.provenance->capture << " is in none of the capture folders";
    EXPECT_EQ(sha256_hex(read_file(path)), p.provenance->sha256) << path;
    ParseOptions options;
    options.format = *trace_format_from_name(p.provenance->format);
    EXPECT_EQ(parse_trace_file(path, options).samples.size(), p.provenance->samples) << path;
  }
}

TEST(ShippedProfiles, LabRegimesSimulatesToItsStatedFigures) {
  const Profile p = load("lab-regimes");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"regime-1", "regime-2"}));
  // profiles/README.md: regime-1 (calm) p50 1.3 ms, p99 6.6 ms, loss 0.12 %; regime-2 (storm) p50
  // 21 ms, p99 73 ms, loss 6.1 % in bursts of 3.0 (the capture was made with 0.1 % and 6 %).
  expect_figures(p, "regime-1", {.p50_ms = "1.3", .p99_ms = "6.6", .loss_percent = "0.12"});
  expect_figures(p, "regime-2",
                 {.p50_ms = "21", .p99_ms = "73", .loss_percent = "6.1", .mean_burst = "3.0"});
  // The capture's regimes lasted 10 s each; the replayed changes are where the capture changed, not
  // on the 10 s windows' edges (which were 0.3 s late): every inner step within 30 ms of 10 s.
  ASSERT_TRUE(p.schedule.has_value());
  ASSERT_EQ(p.schedule->steps.size(), 15u);
  for (std::size_t i = 1; i + 1 < p.schedule->steps.size(); ++i) {
    EXPECT_LE(std::chrono::abs(p.schedule->steps[i].duration - std::chrono::seconds(10)),
              std::chrono::milliseconds(30))
        << i;
  }
}

TEST(ShippedProfiles, CrossAzSwingsBetween2And5MsInThreeRegimesHeld10sEach) {
  const Profile p = load("cross-az");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"regime-1", "regime-2", "regime-3"}));
  // Every delay any regime can draw lies in 2..5 ms (the table, decoded exactly).
  for (const auto& phase : p.phases) {
    const auto delays = table_delays(phase.spec);
    EXPECT_GE(*delays.begin(), 2ms) << phase.name;
    EXPECT_LE(*delays.rbegin(), 5ms) << phase.name;
  }
  expect_figures(p, "regime-1", {.p50_ms = "2.4", .p999_ms = "2.7"});
  expect_figures(p, "regime-2", {.p50_ms = "3.5", .p999_ms = "3.8"});
  expect_figures(p, "regime-3", {.p50_ms = "4.6", .p999_ms = "4.9"});
  // The capture's sixteen 10 s windows (L L M H H M L M H M L L M H M L), as a looped schedule.
  ASSERT_TRUE(p.schedule.has_value());
  EXPECT_TRUE(p.schedule->loop);
  EXPECT_EQ(
      schedule_text(p),
      "regime-1:20s regime-2:10s regime-3:20s regime-2:10s regime-1:10s regime-2:10s regime-3:10s "
      "regime-2:10s regime-1:20s regime-2:10s regime-3:10s regime-2:10s regime-1:10s");
}

TEST(ShippedProfiles, WanSpikesJitters1To12MsWith20MsSpikes) {
  const Profile p = load("wan-spikes");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  // The table holds jitter of 1 to 12 ms and spikes 20 ms above it, nothing in between.
  const auto delays = table_delays(p.phases.front().spec);
  EXPECT_GE(*delays.begin(), 1ms);
  EXPECT_LE(*delays.rbegin(), 31ms);
  EXPECT_EQ(delays.lower_bound(12001us), delays.lower_bound(21ms))
      << "a delay between 12 and 21 ms";
  expect_figures(p, "capture",
                 {.p50_ms = "3.55", .p99_ms = "22.6", .p999_ms = "28", .loss_percent = "0.075"});
  // Spikes: the delays of 21 ms and more.
  const DelaySeries s = run(p, "capture");
  const auto delivered = s.delivered();
  const auto spikes = static_cast<std::size_t>(
      std::count_if(delivered.begin(), delivered.end(), [](Nanoseconds d) { return d >= 21ms; }));
  const Interval f = fraction_interval(spikes, delivered.size());
  EXPECT_TRUE(consistent("spike %", "1.5", {100 * f.lo, 100 * f.hi}));
}

TEST(ShippedProfiles, TransatlanticSitsAbove70MsWithModestJitter) {
  const Profile p = load("transatlantic");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  EXPECT_GE(*table_delays(p.phases.front().spec).begin(), 70ms);
  expect_figures(p, "capture",
                 {.p50_ms = "71.2", .p99_ms = "75.6", .p999_ms = "78.3", .loss_percent = "0.075"});
}

TEST(ShippedProfiles, OfficeWifiHasAHeavyTailAndBurstyLoss) {
  const Profile p = load("office-wifi");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  expect_figures(p, "capture",
                 {.p50_ms = "3.65",
                  .p99_ms = "19",
                  .p999_ms = "116",
                  .loss_percent = "1.05",
                  .mean_burst = "2.15"});
}

TEST(ShippedProfiles, LteHasThreeRadioRegimesReplayedInTheCapturesOrder) {
  const Profile p = load("lte");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"regime-1", "regime-2", "regime-3"}));
  expect_figures(p, "regime-1", {.p50_ms = "31.9", .p99_ms = "51.6", .loss_percent = "0.067"});
  expect_figures(p, "regime-2", {.p50_ms = "55.3", .p99_ms = "101.2", .loss_percent = "0.48"});
  expect_figures(p, "regime-3",
                 {.p50_ms = "121", .p99_ms = "369", .loss_percent = "2.3", .mean_burst = "4.2"});
  // The capture's 32 windows of 10 s, good (G, regime-1), fair (F, regime-2) and poor (P,
  // regime-3): GGG F GG FF P F GGGG FF G PP F GGG F GGG FF P GG.
  ASSERT_TRUE(p.schedule.has_value());
  EXPECT_TRUE(p.schedule->loop);
  EXPECT_EQ(
      schedule_text(p),
      "regime-1:30s regime-2:10s regime-1:20s regime-2:20s regime-3:10s regime-2:10s regime-1:40s "
      "regime-2:20s regime-1:10s regime-3:20s regime-2:10s regime-1:30s regime-2:10s regime-1:30s "
      "regime-2:20s regime-3:10s regime-1:20s");
}

TEST(ShippedProfiles, SatelliteIsAGeoLinkHalvedForBothDirections) {
  const Profile p = load("satellite");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  ASSERT_TRUE(p.provenance.has_value());
  EXPECT_TRUE(p.provenance->halved);
  // One way: half of the capture's 560 ms RTT floor at least.
  EXPECT_GE(*table_delays(p.phases.front().spec).begin(), 280ms);
  expect_figures(p, "capture",
                 {.p50_ms = "288.7",
                  .p99_ms = "328",
                  .p999_ms = "402",
                  .loss_percent = "0.65",
                  .mean_burst = "3.5"});
}

TEST(ShippedProfiles, SwitchBufferBimodalDrawsFiveExactDelaysWithExactMasses) {
  const Profile p = load("switch-buffer-bimodal");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  const NetemSpec& spec = p.phases.front().spec;
  ASSERT_TRUE(spec.delay.distribution.has_value());
  // The masses, exactly: 100 entries, each decoding (kernel arithmetic) to one of the five delays.
  const std::vector<std::pair<Nanoseconds, std::size_t>> levels = {
      {2ms, 40}, {5ms, 35}, {12ms, 15}, {28ms, 8}, {55ms, 2}};
  ASSERT_EQ(spec.delay.distribution->size(), 100u);
  for (const auto& [delay, entries] : levels) {
    const std::int64_t want = delay.count();  // (clang 14 cannot capture a structured binding)
    const auto n = std::count_if(
        spec.delay.distribution->begin(), spec.delay.distribution->end(), [&](auto t) {
          return netem_table_delay_ns(spec.delay.latency.count(),
                                      static_cast<std::int32_t>(spec.delay.jitter.count()),
                                      t) == want;
        });
    EXPECT_EQ(static_cast<std::size_t>(n), entries) << ms(delay) << " ms";
  }
  // Simulated: every delay is one of the five, to the nanosecond, and each level's share is
  // Binomial(n, mass / 100) (netem picks entry rnd % 100; the modulo's bias, under 1e-9, is far
  // below the interval): within z sqrt(mass (1 - mass) / n) of the exact mass.
  const DelaySeries s = run(p, "capture");
  const auto delivered = s.delivered();
  ASSERT_EQ(delivered.size(), kProbes);
  std::size_t accounted = 0;
  for (const auto& [delay, entries] : levels) {
    const auto hits =
        static_cast<std::size_t>(std::count(delivered.begin(), delivered.end(), delay));
    accounted += hits;
    const double mass = static_cast<double>(entries) / 100.0;
    EXPECT_NEAR(static_cast<double>(hits) / kProbes, mass,
                kZ * std::sqrt(mass * (1 - mass) / kProbes))
        << ms(delay) << " ms";
  }
  EXPECT_EQ(accounted, kProbes) << "a delay that is none of the five levels";
}

TEST(ShippedProfiles, BurstyLossLoses08PercentInBurstsAndAddsNoDelay) {
  const Profile p = load("bursty-loss");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture"}));
  const NetemSpec& spec = p.phases.front().spec;
  EXPECT_EQ(spec.delay.latency, 0ns);
  EXPECT_EQ(spec.delay.jitter, 0ns);
  EXPECT_TRUE(std::holds_alternative<GilbertElliottLoss>(spec.loss) ||
              std::holds_alternative<FourStateLoss>(spec.loss))
      << "a Markov loss model (Bernoulli loss has no bursts)";
  expect_figures(p, "capture", {.loss_percent = "0.80", .mean_burst = "2.6"});
  // Bursty, not Bernoulli: at this rate independent losses come in runs of 1 / (1 - 0.008) = 1.008
  // on average; the whole burst interval lies well above that.
  const Interval burst = mean_burst_interval(run(p, "capture").lost());
  EXPECT_GT(burst.lo, 1.5);
}

TEST(ShippedProfiles, PeriodicMicroburstsAdd100MsFor2PacketsEvery30s) {
  const Profile p = load("periodic-microbursts");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"capture", "spike"}));
  const Phase& base = *p.find_phase("capture");
  const Phase& spike = *p.find_phase("spike");
  // The spike is the base phase 100 ms later, nothing else changed.
  NetemSpec shifted = base.spec;
  shifted.delay.latency += 100ms;
  EXPECT_EQ(spike.spec.delay, shifted.delay);
  EXPECT_EQ(spike.spec.loss, base.spec.loss);
  // Two probe intervals of the capture (10 ms) at the end of every 30 s.
  ASSERT_TRUE(p.schedule.has_value());
  EXPECT_TRUE(p.schedule->loop);
  EXPECT_EQ(schedule_text(p), "capture:29980ms spike:20ms");
  // Five minutes of probes 10 ms apart with the schedule: exactly probes 2998 and 2999 of every
  // 3000 (29.98 s and 29.99 s into each 30 s) are 100 ms late, and every other one is not (the base
  // phase's delays are 2 to 5 ms).
  const DelaySeries s = run(p, "", 30000);
  std::vector<std::size_t> late;
  for (std::size_t i = 0; i < s.delay.size(); ++i) {
    ASSERT_TRUE(s.delay[i].has_value()) << "probe " << i << " lost: the profile has no loss";
    if (*s.delay[i] >= 100ms) late.push_back(i);
    EXPECT_EQ(s.phase[i], i % 3000 >= 2998 ? "spike" : "capture") << "probe " << i;
  }
  std::vector<std::size_t> expected;
  for (std::size_t cycle = 0; cycle < 10; ++cycle) {
    expected.push_back(cycle * 3000 + 2998);
    expected.push_back(cycle * 3000 + 2999);
  }
  EXPECT_EQ(late, expected);
  for (std::size_t i : late) {
    EXPECT_GE(*s.delay[i], 102ms);
    EXPECT_LE(*s.delay[i], 105ms);
  }
}

TEST(ShippedProfiles, PercentileRegimesHoldTheCapturesP50P95AndP999For30sEach) {
  const Profile p = load("percentile-regimes");
  ASSERT_EQ(phase_names(p), (std::vector<std::string>{"p50", "p95", "p99.9"}));
  ASSERT_TRUE(p.schedule.has_value());
  EXPECT_TRUE(p.schedule->loop);
  EXPECT_EQ(schedule_text(p), "p50:30s p95:30s p99.9:30s");
  // Each phase is a fixed delay at the capture's quantile (inverse ECDF of the delays above the
  // 20 ms baseline), recomputed here from the committed capture.
  ASSERT_TRUE(p.provenance.has_value());
  EXPECT_EQ(p.provenance->baseline, 20ms);
  ParseOptions options;
  options.format = TraceFormat::kEpochRtt;
  const Trace capture = parse_trace_file(find_capture(p.provenance->capture), options);
  std::vector<Nanoseconds> delays;
  for (const auto& s : capture.samples) {
    if (s.rtt) delays.push_back(std::max(*s.rtt - p.provenance->baseline, 0ns));
  }
  const SortedSamples sorted(std::move(delays));
  const std::pair<const char*, double> levels[] = {{"p50", 0.5}, {"p95", 0.95}, {"p99.9", 0.999}};
  for (const auto& [name, level] : levels) {
    const NetemSpec& spec = p.find_phase(name)->spec;
    EXPECT_EQ(spec.delay.latency, *quantile_inverse_ecdf(sorted, level)) << name;
    EXPECT_EQ(spec.delay.jitter, 0ns) << name;
    EXPECT_EQ(spec.loss, p.find_phase("p50")->spec.loss)
        << name << ": one loss model for all three";
  }
  // profiles/README.md's figures, exact (fixed delays print exactly).
  EXPECT_EQ(p.find_phase("p50")->spec.delay.latency, 3547us);
  EXPECT_EQ(p.find_phase("p95")->spec.delay.latency, 8418us);
  EXPECT_EQ(p.find_phase("p99.9")->spec.delay.latency, 27914us);
  expect_figures(p, "p50", {.loss_percent = "0.075"});
  // Simulated with the schedule for 9 minutes (54 000 probes 10 ms apart): every delivered probe
  // has exactly the delay of the step its send time falls in.
  const DelaySeries s = run(p, "", 54000);
  for (std::size_t i = 0; i < s.delay.size(); ++i) {
    const char* step = levels[(i / 3000) % 3].first;
    ASSERT_EQ(s.phase[i], step) << "probe " << i;
    if (s.delay[i]) {
      ASSERT_EQ(*s.delay[i], p.find_phase(step)->spec.delay.latency) << "probe " << i;
    }
  }
}
