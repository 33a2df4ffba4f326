// fidelity_report: how closely a profile compiled from a real capture reproduces it, next to what
// other tools would configure for the same capture. Not a timing benchmark: it prints the markdown
// tables of docs/fidelity.md.
//
//   fidelity_report [--seed N] [--sweep N] [CAPTURE...]
//
// Without captures it reads every *.txt in tests/fixtures/captures (made by make-captures there)
// but the link calibration; the two synthetic captures with stalls of
// tests/support/stall_captures.hpp are always added. For each capture: parse (parse_trace_file),
// compile with default options (compile_profile), simulate the profile with netem's arithmetic
// (simulate_profile, seeded), and compare with the capture (validate_series: the thresholds of
// docs/validation.md). The other tools' settings are simulated the same way, on the same packets
// with the same seed:
//   - normal:    delay MEAN STD distribution normal (tc's 4096-entry table; ours,
//   make_normal_table)
//   - uniform:   delay MEAN JITTER, JITTER = sqrt(3) STD (netem's built-in uniform, same std)
//   - maketable: delay MEAN STD distribution custom, the table built by iproute2's maketable
//                (re-implemented below from its algorithm)
// with Bernoulli loss at the capture's loss rate, which is all these tools offer. MEAN and STD are
// the capture's, on the same footing as the profile's delays (RTT minus the capture's minimum).
// --sweep N repeats the simulations with seeds 1..N and counts how often each target is met: it
// tells a systematic miss from the noise of one finite simulation.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../support/stall_captures.hpp"
#include "shaper/compiler.hpp"
#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/profile.hpp"
#include "shaper/sha256.hpp"
#include "shaper/statistics.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"

namespace {

using namespace shaper;
using namespace std::chrono_literals;

// The targets (issue 3 §7), the same numbers as validation.cpp's profile thresholds.
// KS: at most validate's own limit for the pair (ks_limit: 0.02, or the critical value at the
// effective sizes).
constexpr double kQuantileTarget = 0.02;  // p99 and p99.9, relative
constexpr double kLossTarget = 0.10;      // loss rate and mean burst, relative
constexpr double kLossFloor = 0.001;      // absolute loss-rate difference always allowed
constexpr std::size_t kMinSamplesForP999 = 1000;
constexpr std::uint64_t kMinBurstsToJudge = 10;

// The long run: how far each model's law is from the capture, with little of a single simulation's
// own sampling noise left (its standard errors shrink by sqrt(100) = 10).
constexpr std::size_t kLongRun = 100;

// tc's distribution files (normal.dist, pareto.dist, and what maketable prints) have 4096 entries.
constexpr std::size_t kTcTableEntries = 4096;

// ---- iproute2's maketable ----
// netem/maketable.c (from NISTnet), step by step, as documented in reference/netem-kernel.md §1:
//   1. mu = mean, sigma = sample standard deviation (from sums and the sum of squares, as it does);
//   2. a histogram of (x - mu) / sigma over +/-4 (DISTTABLEDOMAIN = 32767/8192 + 1) with 50 000
//      bins per sigma; samples beyond +/-4 sigma are piled into the edge bins;
//   3. the cumulative histogram, inverted into 4096 slots: every bin writes
//      inverse[rint(F * 4096)] = rint(x * 8192) (later bins overwrite earlier ones; F = 1 maps to
//      slot 4095, so the last entry is always +32767), values clamped to [-32767, 32767];
//   4. empty slots (still -32768) are filled by linear interpolation in C integer arithmetic.
// Input in ms, as a user would feed it ping times. Checked entry for entry against maketable.c
// built from iproute2's source, on the four capture fixtures.
DistributionTable maketable(std::span<const double> x) {
  constexpr int kTableSize = static_cast<int>(kTcTableEntries);
  constexpr int kTableFactor = 8192;
  constexpr int kMinShort = -32768;
  constexpr int kMaxShort = 32767;
  constexpr int kDomain = kMaxShort / kTableFactor + 1;
  constexpr int kGranularity = 50000;
  constexpr int kDistSize = kDomain * kGranularity * 2;

  double sum = 0, sum_square = 0;
  for (double v : x) {
    sum += v;
    sum_square += v * v;
  }
  const double n = static_cast<double>(x.size());
  const double mu = sum / n;
  const double sigma = std::sqrt((sum_square - n * mu * mu) / (n - 1));

  std::vector<int> histogram(kDistSize, 0);
  for (double v : x) {
    int index = static_cast<int>(std::rint(((v - mu) / sigma + kDomain) * kGranularity));
    index = std::clamp(index, 0, kDistSize - 1);
    ++histogram[static_cast<std::size_t>(index)];
  }
  int total = 0;
  for (int& count : histogram) {
    total += count;
    count = total;
  }

  std::vector<int> inverse(kTableSize, kMinShort);
  for (int i = 0; i < kDistSize; ++i) {
    const double findex = static_cast<double>(i) / kGranularity - kDomain;
    const double fvalue = static_cast<double>(histogram[static_cast<std::size_t>(i)]) / total;
    int slot = static_cast<int>(std::rint(fvalue * kTableSize));
    int value = static_cast<int>(std::rint(findex * kTableFactor));
    if (value <= kMinShort) value = kMinShort + 1;
    if (value > kMaxShort) value = kMaxShort;
    if (slot >= kTableSize) slot = kTableSize - 1;
    inverse[static_cast<std::size_t>(slot)] = value;
  }

  int last = kMinShort, last_i = -1;
  for (int i = 0; i < kTableSize; ++i) {
    auto& entry = inverse[static_cast<std::size_t>(i)];
    if (entry != kMinShort) {
      last = entry;
      last_i = i;
      continue;
    }
    int j = i;
    while (j < kTableSize && inverse[static_cast<std::size_t>(j)] == kMinShort) ++j;
    entry = j < kTableSize
                ? last + (i - last_i) * (inverse[static_cast<std::size_t>(j)] - last) / (j - last_i)
                : last + (i - last_i) * (kMaxShort - last) / (kTableSize - last_i);
  }
  return DistributionTable(inverse.begin(), inverse.end());
}

// ---- The models compared ----

struct Model {
  std::string name;
  Profile profile;
};

Profile single_phase(const std::string& name, const NetemSpec& spec) {
  Profile p;
  p.name = name;
  p.phases.push_back(Phase{"capture", "", spec, TableSource::kNone, TableSource::kNone});
  return p;
}

Nanoseconds round_ns(double ns) {
  return Nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

std::vector<Model> peer_models(const DelaySeries& capture) {
  const auto delivered = capture.delivered();
  const Moments m = *moments(delivered);  // captures have thousands of samples
  const double mean_ns = m.mean.count(), std_ns = m.sample_stddev.count();
  const LossStatistics loss = loss_statistics(capture.lost());
  LossModel bernoulli;
  if (loss.lost > 0)
    bernoulli = RandomLoss{*Probability::make(*loss.loss_rate), Probability::zero()};

  std::vector<Model> out;
  NetemSpec normal;
  normal.delay = {round_ns(mean_ns), round_ns(std_ns), Probability::zero(),
                  make_normal_table(kTcTableEntries)};
  normal.loss = bernoulli;
  out.push_back({"normal (μ, σ)", single_phase("normal", normal)});

  NetemSpec uniform;
  // netem's built-in uniform is latency ± jitter; its std is jitter / sqrt(3).
  uniform.delay = {round_ns(mean_ns), round_ns(std::sqrt(3.0) * std_ns), Probability::zero(),
                   std::nullopt};
  uniform.loss = bernoulli;
  out.push_back({"uniform ± √3σ", single_phase("uniform", uniform)});

  std::vector<double> ms;
  ms.reserve(delivered.size());
  for (const auto d : delivered) ms.push_back(static_cast<double>(d.count()) / 1e6);
  NetemSpec custom;
  custom.delay = {round_ns(mean_ns), round_ns(std_ns), Probability::zero(), maketable(ms)};
  custom.loss = bernoulli;
  out.push_back({"maketable", single_phase("maketable", custom)});
  return out;
}

// ---- Targets ----

// How far the capture's p-quantile moves when it is read one rank higher or lower (the larger of
// the two steps, relative to it). The capture cannot tell apart values closer than this: a model
// that draws exactly the capture's delays (an exact table) lands within a rank of it, and at p99.9
// of 12 000 probes one rank can be 12 %. So a quantile target is met within 2 % or within this
// step.
double rank_step(const DelaySeries& series, double p) {
  const SortedSamples sorted(series.delivered());
  const auto v = sorted.values();
  const std::size_t k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  if (v.size() < 3 || k == 0 || k + 1 >= v.size() || v[k].count() == 0) return 0;
  const auto step = std::max(v[k + 1] - v[k], v[k] - v[k - 1]);
  return static_cast<double>(step.count()) / static_cast<double>(v[k].count());
}

// ---- Formatting ----

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string percent(double relative, bool met) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.2f %%", 100 * relative);
  return std::string(buf) + (met ? "" : " ✗");
}

struct CaptureRun {
  std::string name;
  Trace trace;
  CompileResult compiled;
  DelaySeries series;
  SeriesStats stats;
  LossStatistics loss;
  double p99_rank_step = 0, p999_rank_step = 0;  // rank_step of `series`
  std::vector<Model> models;                     // jitterd's profile first
};

struct Targets {
  bool ks, p99, p999, loss, burst;
  bool all() const { return ks && p99 && p999 && loss && burst; }
};

Targets targets_met(const Comparison& c, const CaptureRun& r, const SeriesStats& model,
                    std::size_t capture_delivered, std::size_t model_delivered) {
  Targets t{};
  t.ks = c.ks <= c.ks_limit;
  t.p99 = std::fabs(c.p99_error) <= std::max(kQuantileTarget, r.p99_rank_step);
  t.p999 = capture_delivered < kMinSamplesForP999 || model_delivered < kMinSamplesForP999 ||
           std::fabs(c.p999_error) <= std::max(kQuantileTarget, r.p999_rank_step);
  t.loss = std::fabs(model.loss_rate - r.stats.loss_rate) <=
           std::max(kLossFloor, kLossTarget * r.stats.loss_rate);
  t.burst = r.loss.bursts < kMinBurstsToJudge || !c.burst_error ||
            std::fabs(*c.burst_error) <= kLossTarget;
  return t;
}

// A capture compiled with `options`, or nullopt (the reason on stderr).
std::optional<Profile> compiled(const CaptureInput& input, const CompileOptions& options,
                                const char* how) {
  CompileResult r = compile_profile({input}, options);
  if (!r.profile) {
    std::cerr << input.name << ": not compiled" << how << ": " << to_string(r.diagnostics) << '\n';
    return std::nullopt;
  }
  return std::move(*r.profile);
}

std::optional<CaptureRun> prepare(std::string name, Trace trace, const std::string& sha256) {
  CaptureRun run;
  run.name = std::move(name);
  run.trace = std::move(trace);
  const CaptureInput input{run.name, sha256, run.trace};
  run.compiled = compile_profile({input}, CompileOptions{});
  if (!run.compiled.profile) {
    std::cerr << run.name << ": not compiled: " << to_string(run.compiled.diagnostics) << '\n';
    return std::nullopt;
  }
  run.series = capture_series(run.trace, *run.compiled.profile);
  run.stats = series_stats(run.series);
  run.loss = loss_statistics(run.series.lost());
  run.p99_rank_step = rank_step(run.series, 0.99);
  run.p999_rank_step = rank_step(run.series, 0.999);
  run.models.push_back({"**jitterd profile**", *run.compiled.profile});
  // The capture made of regimes is also compiled the way profiles/lab-regimes.json is (two regimes
  // in 10 s windows, the capture's sequence replayed): what the regime replay reproduces.
  if (run.name == "regimes.txt") {
    CompileOptions options;
    options.regimes = RegimeMode::kClusters;
    options.clusters = 2;
    options.window = std::chrono::seconds(10);
    auto regimes = compiled(input, options, " with regimes");
    if (!regimes) return std::nullopt;
    run.models.push_back({"**jitterd profile, 2 regimes**", std::move(*regimes)});
  }
  // Every capture also compiled with --replay: the time line followed window by window (its lag-1
  // autocorrelation is the column the other models cannot match).
  CompileOptions replay;
  replay.regimes = RegimeMode::kReplay;
  auto replayed = compiled(input, replay, " with --replay");
  if (!replayed) return std::nullopt;
  run.models.push_back({"**jitterd profile, replay**", std::move(*replayed)});
  for (auto& m : peer_models(run.series)) run.models.push_back(std::move(m));
  return run;
}

std::optional<CaptureRun> prepare(const std::filesystem::path& path) {
  Trace trace = parse_trace_file(path.string());
  if (trace.samples.empty()) {
    std::cerr << path.string() << ": no RTT samples\n";
    return std::nullopt;
  }
  if (!trace.diagnostics.empty()) {
    std::cerr << path.string() << ": " << trace.unrecognised_lines << " unrecognised lines\n";
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SystemError("open", path.string(), errno);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return prepare(path.filename().string(), std::move(trace), sha256_hex(bytes.str()));
}

void print_capture_table(const std::vector<CaptureRun>& runs) {
  std::printf(
      "| capture | probes | delivered | interval ms | p50 ms | p99 ms | p99.9 ms | p99.9 rank step "
      "| max ms | "
      "mean ms | std ms | loss | mean burst | profile |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : runs) {
    const auto& rep = r.compiled.report;
    std::string profile = std::to_string(r.compiled.profile->phases.size()) + " phase" +
                          (r.compiled.profile->phases.size() == 1 ? "" : "s");
    for (const auto& p : rep.phases) {
      profile += "; " + p.name + ": " + std::to_string(p.table_entries) + " entries at " +
                 duration_to_string(p.resolution) + ", loss " + to_string(p.loss.chosen.kind);
    }
    std::printf(
        "| %s | %zu | %zu | %.2f | %.3f | %.3f | %.3f | %.2f %% | %.3f | %.3f | %.3f | %.4f | %s | "
        "%s |\n",
        r.name.c_str(), r.stats.samples, r.series.delivered().size(),
        static_cast<double>(r.trace.interval.count()) / 1e6, r.stats.p50_ms, r.stats.p99_ms,
        r.stats.p999_ms, 100 * r.p999_rank_step, r.stats.max_ms, r.stats.mean_ms, r.stats.stddev_ms,
        r.stats.loss_rate,
        r.stats.mean_loss_burst ? fixed(*r.stats.mean_loss_burst, 2).c_str() : "—",
        profile.c_str());
  }
}

// One model simulated against one capture: `length` times as many probes as the capture has (0: as
// many as `jitterctl validate` simulates, simulation_copies).
struct Evaluation {
  Comparison comparison;
  Targets targets{};
  double critical = 0;  // the 95 % KS critical value for these sample sizes
  double capture_lag1 = 0,
         model_lag1 = 0;  // lag-1 autocorrelation of the delivered delays (not judged here)
};

Evaluation evaluate(const CaptureRun& r, const Model& model, std::uint64_t seed,
                    std::size_t length) {
  // Probes sent when the capture's were, `length` times over (each copy after the previous one, as
  // the looped schedule repeats): a profile with regimes then meets as many probes in each as the
  // capture.
  if (length == 0) length = simulation_copies(r.series.delay.size());
  const DelaySeries sim = simulate_profile(model.profile, r.series, r.trace.interval, seed, length);
  const ValidationReport v = validate_series(r.series, sim, nullptr);
  Evaluation e;
  e.comparison = v.comparisons.front();
  e.capture_lag1 = v.capture.lag1_autocorr.value_or(0.0);
  e.model_lag1 = v.profile.lag1_autocorr.value_or(0.0);
  const std::size_t n = r.series.delivered().size(), m = sim.delivered().size();
  e.targets = targets_met(e.comparison, r, v.profile, n, m);
  e.critical = ks_critical_value(n, m, 0.05).value_or(1.0);
  return e;
}

void print_fidelity_table(const std::vector<CaptureRun>& runs, std::uint64_t seed,
                          std::size_t length) {
  std::printf(
      "| capture | model | KS | KS 95 %% crit. | W1 ms | p99 err | p99.9 err | loss err | burst "
      "err | "
      "lag-1 capture → model | verdict |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : runs) {
    for (const auto& model : r.models) {
      const Evaluation e = evaluate(r, model, seed, length);
      const Comparison& c = e.comparison;
      const Targets& t = e.targets;
      // Relative where the capture loses 0.1 % or more, absolute below (validation.cpp's rule).
      const std::string loss =
          r.loss.lost == 0 && c.loss_rate_error == 0 ? "—" : percent(c.loss_rate_error, t.loss);
      const std::string burst = c.burst_error ? percent(*c.burst_error, t.burst) : "—";
      std::printf("| %s | %s | %s | %.4f | %.3f | %s | %s | %s | %s | %.3f → %.3f | %s |\n",
                  r.name.c_str(), model.name.c_str(), (fixed(c.ks, 4) + (t.ks ? "" : " ✗")).c_str(),
                  e.critical, c.w1_ms, percent(c.p99_error, t.p99).c_str(),
                  percent(c.p999_error, t.p999).c_str(), loss.c_str(), burst.c_str(),
                  e.capture_lag1, e.model_lag1, t.all() ? "pass" : "**miss**");
    }
  }
}

void print_sweep_table(const std::vector<CaptureRun>& runs, std::uint64_t seeds,
                       std::size_t length) {
  std::printf("| capture | model | KS | p99 | p99.9 | loss | burst | all |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : runs) {
    for (const auto& model : r.models) {
      std::uint64_t ks = 0, p99 = 0, p999 = 0, loss = 0, burst = 0, all = 0;
      for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
        const Targets t = evaluate(r, model, seed, length).targets;
        ks += t.ks;
        p99 += t.p99;
        p999 += t.p999;
        loss += t.loss;
        burst += t.burst;
        all += t.all();
      }
      auto share = [&](std::uint64_t k) {
        return fixed(100.0 * static_cast<double>(k) / static_cast<double>(seeds), 0) + " %";
      };
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(), model.name.c_str(),
                  share(ks).c_str(), share(p99).c_str(), share(p999).c_str(), share(loss).c_str(),
                  share(burst).c_str(), share(all).c_str());
    }
  }
}

std::optional<std::uint64_t> parse_count(const std::string& text) {
  try {
    std::size_t used = 0;
    const unsigned long long v = std::stoull(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 1, sweep = 100;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seed" || arg == "--sweep") && i + 1 < argc) {
      const auto v = parse_count(argv[++i]);
      if (!v) {
        std::cerr << "fidelity_report: " << arg << " needs a positive integer\n";
        return 2;
      }
      (arg == "--seed" ? seed : sweep) = *v;
    } else if (!arg.empty() && arg[0] == '-') {
      std::cerr << "usage: fidelity_report [--seed N] [--sweep N] [CAPTURE...]\n";
      return 2;
    } else {
      paths.emplace_back(arg);
    }
  }
  try {
    if (paths.empty()) {
      for (const auto& entry : std::filesystem::directory_iterator(JITTERD_CAPTURES_DIR)) {
        // link-calibration.txt is a 500 µs netem link's own noise (validate's --link-calibration
        // input), 1000 probes: not a path to reproduce.
        if (entry.path().extension() == ".txt" &&
            entry.path().filename() != "link-calibration.txt") {
          paths.push_back(entry.path());
        }
      }
      std::sort(paths.begin(), paths.end());
    }
    std::vector<CaptureRun> runs;
    for (const auto& path : paths) {
      if (auto run = prepare(path)) runs.push_back(std::move(*run));
    }
    // The synthetic captures of issue 20 (tests/support/stall_captures.hpp, the seeds of the unit
    // tests): a tight body under stalls of seconds, which one table cannot hold at one step.
    const std::pair<const char*, synthetic::StallCaptureShape> shapes[] = {
        {"synthetic tight-body-stalls (seed 20)", synthetic::tight_body_with_stalls()},
        {"synthetic bimodal-stalls (seed 21)", synthetic::bimodal_with_stalls()}};
    std::uint64_t shape_seed = 20;
    for (const auto& [name, shape] : shapes) {
      if (auto run = prepare(name, synthetic::make_stall_capture(shape, shape_seed++),
                             std::string(64, '0'))) {
        runs.push_back(std::move(*run));
      }
    }
    if (runs.empty()) {
      std::cerr << "fidelity_report: no capture to report on\n";
      return 3;
    }
    std::printf("### Captures\n\n");
    print_capture_table(runs);
    const auto seed_ll = static_cast<unsigned long long>(seed);
    const auto sweep_ll = static_cast<unsigned long long>(sweep);
    std::printf(
        "\n### What jitterctl validate computes: at least %zu simulated probes (seed %llu)\n\n",
        kValidationProbes, seed_ll);
    print_fidelity_table(runs, seed, 0);
    std::printf("\n### Simulated for the capture's length only (seed %llu)\n\n", seed_ll);
    print_fidelity_table(runs, seed, 1);
    std::printf("\n### Simulated for a hundred times the capture's length (seed %llu)\n\n",
                seed_ll);
    print_fidelity_table(runs, seed, kLongRun);
    std::printf(
        "\n### Share of %llu seeds meeting each target, as jitterctl validate simulates\n\n",
        sweep_ll);
    print_sweep_table(runs, sweep, 0);
    std::printf(
        "\n### Share of %llu seeds meeting each target, simulated for the capture's length "
        "only\n\n",
        sweep_ll);
    print_sweep_table(runs, sweep, 1);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fidelity_report: " << e.what() << '\n';
    return 4;
  }
}
