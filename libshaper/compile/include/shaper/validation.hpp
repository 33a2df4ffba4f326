#pragma once
// Validation: puts a capture, its profile (simulated with netem's arithmetic) and, when given, a
// trace taken through the shaped link side by side, and judges how close they are. The thresholds
// are documented in docs/validation.md and live here, in one place.

#include <optional>
#include <string>
#include <vector>

#include "shaper/expected.hpp"
#include "shaper/profile.hpp"
#include "shaper/statistics.hpp"
#include "shaper/trace.hpp"

namespace shaper {

// One probe series on a common footing: the one-way delay each probe got (nullopt = lost), when it
// was sent (from the series' start), and the phase it ran under (simulated series only).
struct DelaySeries {
  std::string label;  // "capture", "profile", "shaped"
  std::vector<Nanoseconds> sent;
  std::vector<std::optional<Nanoseconds>> delay;
  std::vector<std::string> phase;  // empty, or one per probe
  std::vector<Nanoseconds> delivered() const;
  std::vector<bool> lost() const;
};

struct SeriesStats {
  std::size_t samples = 0;  // probes, lost ones included
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0, mean_ms = 0, stddev_ms = 0;
  double loss_rate = 0;
  std::optional<double> mean_loss_burst;  // none without a loss
  std::optional<double> lag1_autocorr;    // of the delivered delays in send order
};

// One figure of a comparison: its value in each series, and the limit it was judged against, with
// the reason for that limit, so that a report shows why it passed or failed.
struct Figure {
  std::string name;  // "ks", "p99_ms", "p999_ms", "loss_rate", "mean_loss_burst", "lag1_autocorr",
                     // "stall_ks"
  std::optional<double> a;  // the figure in the first series (none for a distance, such as KS)
  std::optional<double> b;  // the figure in the second series
  double difference = 0;    // b - a, or the distance
  double low = 0,
         high = 0;    // the allowed difference: within [low, high] passes (+-inf where unbounded)
  std::string basis;  // how the limit was set, in words
  bool judged =
      false;         // false: reported only (too few samples, or a timeline figure not asked for)
  bool pass = true;  // judged and within the limit, or not judged
};

struct Comparison {
  std::string a, b;  // "capture", "profile"
  double ks = 0;
  double ks_limit = 0;  // max(floor, the critical value at `level` for the effective sample sizes)
  double w1_ms = 0;
  double p99_error = 0;  // relative: (b - a) / a
  double p999_error = 0;
  double loss_rate_error = 0;  // relative, or absolute where the capture's rate is below 0.1 %
  std::optional<double> burst_error;
  // The false-failure rate each judged figure is allowed: the verdict's (kVerdictAlpha) split
  // evenly among the judged figures (Bonferroni), so that a faithful link fails the comparison at
  // most that often.
  double level = 0;
  std::vector<Figure> figures;        // every figure, judged or not, in a fixed order
  std::vector<std::string> failures;  // which thresholds were exceeded, in words
  bool pass() const { return failures.empty(); }
};

// What validation judges beyond the distributions.
struct ValidationOptions {
  // The profile claims to replay the capture in time (the compiler's replay mode sets this): then
  // the lag-1 autocorrelation of the delays and the distribution of stall lengths are judged too.
  // Off, they are reported only: a profile of independent draws cannot have a capture's
  // correlation, and does not claim to.
  bool judge_timeline = false;
  // How often a faithful profile (or link) may fail a comparison by chance alone: the family-wise
  // level, split among the judged figures (docs/validation.md). Smaller: fewer false failures, and
  // less power against a profile that is a little off.
  double alpha = 0.05;
};

inline constexpr double kVerdictAlpha = ValidationOptions{}.alpha;

struct ValidationReport {
  SeriesStats capture, profile;
  std::optional<SeriesStats> shaped;
  std::vector<Comparison> comparisons;
  bool pass = false;
  std::vector<std::string> notes;
};

// The capture as one-way delays, the way the compiler saw it (provenance baseline and halving).
DelaySeries capture_series(const Trace& capture, const Profile& profile);

// The profile replayed by the simulator for as many probes as `like` has, sent when its probes were
// (relative to its first) or, when `like` has no send times, one every `interval`; the schedule is
// followed (looped as needed). With `copies` > 1, `like`'s probes are sent that many times over,
// each copy starting one interval after the previous one's last probe or, with a looped schedule,
// at the next start of the schedule after that. Seeded: the same seed gives the same series. Memory
// follows the probes simulated, never the copies times the schedule's length: the simulator runs in
// bounded pieces and only over the spans where probes are (docs/validation.md). A schedule so dense
// that the copies would take more than kMaxSimulatedPhases phase changes gets fewer copies (at
// least one): the series is then shorter than `copies` times `like`.
DelaySeries simulate_profile(const Profile& profile, const DelaySeries& like, Nanoseconds interval,
                             std::uint64_t seed = 1, std::size_t copies = 1);

// How many probes `jitterctl validate` simulates at the least. A capture of 12 000 probes decides
// its p99.9 by its 12 largest delays and its mean burst by ~100 bursts; one simulation of the same
// length has the same sampling noise again, and its verdict would be a verdict on that draw. A
// million probes make the simulation's own noise small beside the capture's (docs/validation.md).
inline constexpr std::size_t kValidationProbes = 1'000'000;

// Time, not memory: a phase costs the simulator about what a probe does (a netem change), so a
// schedule of 1 ms steps met by a capture of a few probes would make each copy thousands of changes
// for a handful of probes. simulate_profile stops starting copies once this many phases were
// simulated (the first copy always runs).
inline constexpr std::size_t kMaxSimulatedPhases = 4 * kValidationProbes;

// How many copies of a series of `probes` probes reach `at_least` probes (at least one copy).
std::size_t simulation_copies(std::size_t probes, std::size_t at_least = kValidationProbes);

// Where shaped_series reads the low end of the shaped RTTs and of the profile's delays: the 1st
// percentile.
inline constexpr double kLinkAnchor = 0.01;

// How much a series built with the link's noise added owes to the calibration the noise was drawn
// from (calibration_sampling), as additions to 1 / (effective size) where a figure counts that
// series' sampling noise: KS's, and the p99's and p99.9's. All 0 for a series built from no sample.
struct CalibrationSampling {
  double ks = 0;
  double p99 = 0;
  double p999 = 0;
  // For a series probed through the same link (the shaped one): how much more its p99's and
  // p99.9's sampling variance is than its probes' count gives, where the calibration's noise comes
  // in runs of consecutive probes (the variance of the fraction below the quantile grows by the
  // runs' covariance). 1: no runs beyond independent draws.
  double p99_clustering = 1;
  double p999_clustering = 1;
};

// A series with what every comparison reads from it computed once: sorting and scanning a million
// simulated probes is most of a comparison's cost, and one profile may be judged against many
// traces (each phase's, or a calibration's thousand trials).
struct PreparedSeries {
  explicit PreparedSeries(DelaySeries series);
  DelaySeries series;
  SortedSamples delivered;
  std::vector<bool> lost;
  LossStatistics loss;
  SeriesStats stats;
  LossNoise noise;
  // Its stalls (docs/validation.md): runs of probes lost or delayed above stall_threshold, its own
  // p90; a comparison counts the other series' stalls at this series' threshold.
  Nanoseconds stall_threshold{0};
  LossStatistics stalls;
  // What the series' distribution owes, besides its own probes, to a sample it was built from: for
  // a profile or capture with the link's noise added, the calibration's (calibration_sampling).
  CalibrationSampling calibration;
};

// The test link measured by probing it through a netem with a constant delay (link_calibration).
struct LinkCalibration {
  // Every RTT above the calibration's minimum: noise the link adds on its own (timer lateness,
  // scheduling; tens of µs on hardware, about 0.1 ms in User-Mode Linux, 0.4 ms under qemu TCG).
  // In send order (the replies'; lost probes left out): calibration_sampling reads runs in it.
  std::vector<Nanoseconds> noise;
  // The link's own round trip, the calibration's minimum less the constant delay it was taken
  // through, when that delay is known; otherwise shaped_series estimates it.
  std::optional<Nanoseconds> base;
  // How many independent probes the calibration is worth (its replies at their lag-1
  // autocorrelation, effective_sample_size): the noise is known to that sample's precision.
  double effective_probes = 0;
  // The finest step its RTTs were printed to (ping prints 3 significant digits: 0.1 ms at 10 ms
  // and over), when every reply is a multiple of a step of 10 µs or more; 0 otherwise.
  Nanoseconds print_step{0};
};

// The calibration read from a trace taken through a constant `constant_delay` (nullopt: not
// known). No value, and a diagnostic saying why, when the trace has fewer than 100 replies, or a
// reply faster than `constant_delay` (it was not taken through it).
Expected<LinkCalibration> link_calibration(const Trace& calibration,
                                           std::optional<Nanoseconds> constant_delay);

// The calibrated link's noise and the profile as that link shows it: with a noise draw added to
// every delivered probe (two averaged, for a halved profile). shaped_series and the comparisons
// with the shaped trace must see the same draw, so it is made once (with_link_noise).
struct LinkNoise {
  std::vector<Nanoseconds> samples;
  bool halved = false;
  DelaySeries profile;
  std::optional<Nanoseconds> base;  // LinkCalibration::base
  double effective_probes = 0;      // LinkCalibration::effective_probes (0: not counted)
  // calibration_sampling for `profile` (PreparedSeries::calibration).
  CalibrationSampling profile_sampling;
};

// A trace taken through the shaped link, as added delay: its RTTs minus the test link's own base
// delay, and halved if the profile was. The base is noise->base when the calibration measured it;
// otherwise it is estimated as the shaped RTTs' kLinkAnchor quantile minus `profile`'s (twice that
// for a halved profile; with `noise`, minus that of noise->profile, since the shaped RTTs carry the
// link's noise too). The estimate moves the whole series by its own sampling error.
DelaySeries shaped_series(const Trace& shaped, const DelaySeries& profile, bool halved,
                          const LinkNoise* noise = nullptr);

SeriesStats series_stats(const DelaySeries& series);

// How much the calibration's sampling error reaches `series` with the link's noise added: the
// noised CDF at x is the mean over the calibration's draws z of F(x - z), which has the variance
// Var_z[F(x - z)] / n over calibrations of n independent probes (for a halved series, a mean of
// two draws: 4 Var_z[G(x - z / 2)] / n, G the series with one half draw added). That variance over
// F (1 - F) (the variance of a sample of n's CDF), divided by `effective_probes`: for KS the
// largest over the noised series' percentiles, for p99 and p99.9 its value at the noised series'
// quantile, or there the mean's variance by batch means over the calibration in send order where
// that is larger (runs of probes delayed together), which also gives p99_clustering and
// p999_clustering. All 0 when effective_probes is 0. docs/validation.md derives it.
CalibrationSampling calibration_sampling(const DelaySeries& series,
                                         const std::vector<Nanoseconds>& noise, bool halved,
                                         double effective_probes);

// `series` with a noise sample (drawn with replacement, seeded) added to every delivered probe; for
// a halved profile the link is crossed twice, so two draws are averaged as the shaped series
// halves.
DelaySeries add_link_noise(const DelaySeries& series, const std::vector<Nanoseconds>& noise,
                           bool halved, std::uint64_t seed = 1);

// The calibrated link with `profile` as it shows it (add_link_noise with the profile's own seed).
LinkNoise with_link_noise(LinkCalibration calibration, const DelaySeries& profile, bool halved);

// The comparisons. With `noise` (made by with_link_noise for this `profile`), what is compared with
// the shaped link is the capture and the profile with the link's own noise added (a shaped link
// cannot be quieter than the link), and a note says so.
ValidationReport validate_series(const DelaySeries& capture, const DelaySeries& profile,
                                 const DelaySeries* shaped, const LinkNoise* noise = nullptr,
                                 const ValidationOptions& options = {});

// A shaped trace judged against the profile alone, without a capture (jitterctl validate --shaped
// without CAPTURE, and --phase): one comparison, profile vs shaped, at the shaped link's
// thresholds, with the link's own noise added to the profile when `noise` is given. The report's
// `capture` slot holds the shaped trace's statistics (its label says "shaped"); `shaped` stays
// empty.
ValidationReport validate_shaped_only(const DelaySeries& shaped, const DelaySeries& profile,
                                      const LinkNoise* noise = nullptr,
                                      const ValidationOptions& options = {});

// The same against a profile prepared once (with the link's noise already added, if it is to be).
ValidationReport validate_shaped_only(const DelaySeries& shaped, const PreparedSeries& profile,
                                      const ValidationOptions& options = {});

// A figure in one line: "loss_rate 0.0606 -> 0.0467 (-0.0139; allowed -0.0405 to +0.0405: 99 %
// interval of ...): pass".
std::string describe(const Figure& figure);

// The `jitterctl validate --json` object.
std::string validation_json(const ValidationReport& report);

}  // namespace shaper
