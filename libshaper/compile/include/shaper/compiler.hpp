#pragma once
// The capture-to-profile compiler: turns RTT captures into a netem profile that reproduces their
// delay distribution exactly (exact tables, tails kept), their loss bursts (a fitted loss model)
// and their changes of regime (phases and a schedule). What each option means: docs/compiler.md.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/loss_fit.hpp"
#include "shaper/profile.hpp"
#include "shaper/trace.hpp"

namespace shaper {

// What is subtracted from every RTT, because the capture's path is not the test path: the test link
// adds its own base delay, and only the variation on top of the capture's floor should be replayed.
enum class BaselineKind { kMinimum, kPercentile, kFixed, kNone };
struct BaselineOption {
  BaselineKind kind = BaselineKind::kMinimum;
  double percentile = 0.0;  // kPercentile: 0..100
  Nanoseconds value{0};     // kFixed
};

// RTT to one-way delay: all of it on the shaped direction, or half of it (when both directions of
// the test link are shaped with the same profile).
enum class DirectionSplit { kOneWay, kHalves };

enum class RegimeMode {
  kSingle,       // one phase with the whole capture's distribution
  kClusters,     // windows clustered into K regimes, replayed in the capture's order
  kPercentiles,  // fixed-delay phases at the capture's p50, p95 and p99.9, switching periodically
  kReplay,       // the capture's time line window by window: its delay level and loss, in order
};

struct PeriodicSpikes {
  Nanoseconds extra{0};     // added to the delay during a spike (e.g. 100ms)
  std::size_t packets = 2;  // how long a spike lasts, in probe intervals
  Nanoseconds every{30'000'000'000};
};

struct CompileOptions {
  std::string name = "capture";
  std::string description;
  BaselineOption baseline;
  DirectionSplit split = DirectionSplit::kOneWay;
  std::size_t table_entries = kMaxTableEntries;
  RegimeMode regimes = RegimeMode::kSingle;
  std::size_t clusters = 3;            // K, for kClusters
  Nanoseconds window{10'000'000'000};  // kClusters: the capture is cut into windows this long
  Nanoseconds percentile_step{30'000'000'000};  // kPercentiles: how long each phase lasts
  // kReplay: the window (nullopt: chosen from the probe interval and the lag-1 autocorrelation,
  // docs/compiler.md) and whether the schedule starts again at its end (otherwise the last window's
  // phase stays in force).
  std::optional<Nanoseconds> replay_window;
  bool replay_loop = true;
  std::optional<PeriodicSpikes> spikes;
  bool reorder = true;  // false: keep packet order with netem's rate (docs/compiler.md)
  // Packets per second the shaped link is expected to carry; sizes netem's queue limit so that it
  // never drops for want of room: limit = 2 x rate x largest delay, at least 1000.
  double packet_rate = 100'000;
  bool tail_phases = true;  // keep samples rarer than the table can hold as explicit phases
  std::uint64_t seed = 1;   // for the loss-model scoring simulation
};

// One capture file, already parsed.
struct CaptureInput {
  std::string name;    // file name as given
  std::string sha256;  // of the file's bytes
  Trace trace;
};

struct PhaseReport {
  std::string name;
  std::size_t samples = 0;    // delivered probes in this phase
  std::size_t probes = 0;     // including losses
  Nanoseconds resolution{0};  // exact table step
  std::size_t table_entries = 0;
  std::size_t tail_samples = 0;  // samples the table does not hold, moved to a tail phase
  double table_ks = 0;           // KS distance between the samples the table holds and its entries
  // When the rarest samples were cut off because one table for all of them would have been too
  // coarse for the rest (a tight body under a tail of stalls): the step and KS that one table would
  // have had.
  Nanoseconds whole_table_resolution{0};
  double whole_table_ks = 0;
  Nanoseconds min{0}, max{0};
  LossFit loss;
};

// How the replay's window was chosen (kReplay).
struct ReplayReport {
  Nanoseconds window{0};
  double capture_lag1 = 0;    // lag-1 autocorrelation of the capture's delivered delays
  double predicted_lag1 = 0;  // what the replay's phases give it (see docs/compiler.md)
  std::size_t windows = 0;
  std::size_t levels = 0;       // distinct (delay level, loss band) pairs: the phases
  std::size_t loss_bursts = 0;  // replayed one by one where they happened (0: loss bands instead)
};

struct CompileReport {
  Nanoseconds baseline{0};
  std::size_t probes = 0;
  std::size_t delivered = 0;
  std::size_t clamped_to_zero = 0;  // RTTs below the baseline (a percentile or fixed baseline)
  bool send_times_inferred = false;
  Nanoseconds interval{0};
  std::vector<PhaseReport> phases;
  std::optional<ReplayReport> replay;
  std::vector<std::string> notes;  // decisions a reader should know about
};

struct CompileResult {
  std::optional<Profile> profile;
  CompileReport report;
  Diagnostics diagnostics;  // why nothing could be compiled (no samples, bad options ...)
};

CompileResult compile_profile(const std::vector<CaptureInput>& captures,
                              const CompileOptions& options);

// The largest delay a phase can produce (latency + jitter * max entry / 8192, or latency + jitter).
Nanoseconds max_phase_delay(const NetemSpec& spec);

}  // namespace shaper
