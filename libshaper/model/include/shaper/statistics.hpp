#pragma once
// Statistics over delay samples and loss sequences, shared by the compiler (fitting a capture) and
// the validator (scoring a shaped link, or a simulation, against the capture). Pure functions, no
// state.
//
// One design throughout:
//  - Samples are `Nanoseconds` (exact integers: no NaN can enter, ties are exact, sorting is safe
//  for
//    any input). Results that are not samples (means, interpolated quantiles, W1) are
//    `FractionalNanoseconds`, a double-valued std::chrono duration in the same unit.
//  - A result that is undefined for the input (no samples, one sample for a standard deviation, a
//    probability outside [0, 1], a bin width of 0) is std::nullopt: never NaN, never an abort.
//  - Functions that need order take `SortedSamples`, which sorts once; sort a capture once and ask
//    it for every quantile, the ECDF, KS and W1.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "shaper/quantities.hpp"

namespace shaper {

using FractionalNanoseconds = std::chrono::duration<double, std::nano>;

// Sorts `samples` ascending. For large inputs an LSD radix sort over the samples' range (as few
// passes of up to 12 bits as the range needs: a 2.6 M-sample capture sorts several times faster
// than std::sort); the result is the same as std::sort's, samples being exact integers.
void sort_samples(std::vector<Nanoseconds>& samples);

// A copy of the samples in ascending order.
class SortedSamples {
 public:
  SortedSamples() = default;
  explicit SortedSamples(std::span<const Nanoseconds> samples);
  explicit SortedSamples(std::vector<Nanoseconds>&& samples);  // sorts in place, no copy

  std::span<const Nanoseconds> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  // Precondition: !empty() (aborts otherwise: callers check, it is not user data).
  Nanoseconds min() const;
  Nanoseconds max() const;

 private:
  std::vector<Nanoseconds> values_;
};

// ---- Quantiles -------------------------------------------------------------------------------
// Hyndman & Fan (1996) numbering, as R's quantile(type = ...). x_(k) is the k-th smallest
// (1-based).
enum class QuantileType {
  // Type 1, the inverse of the ECDF: the smallest sample x with ECDF(x) >= p, i.e. x_(ceil(n p)),
  // and x_(1) for p = 0. Always a sample that occurred; the right choice for tails ("p99.9 is a
  // delay the link really produced").
  kInverseEcdf,
  // Type 7 (R's and NumPy's default): h = (n - 1) p, x_(floor h + 1) + (h - floor h) (x_(floor h +
  // 2)
  // - x_(floor h + 1)). Continuous in p; interpolates between samples.
  kLinear,
};

// n p and (n - 1) p are computed in doubles; a product within a few ulps of an integer is taken as
// that integer (as R does), so p = 0.07 of 100 samples is x_(7), not x_(8) because 0.07 * 100 is
// 7.000000000000001 in binary.
std::optional<FractionalNanoseconds> quantile(const SortedSamples& samples, double p,
                                              QuantileType type);
// Type 1, typed as the sample it is.
std::optional<Nanoseconds> quantile_inverse_ecdf(const SortedSamples& samples, double p);

struct TailQuantiles {
  FractionalNanoseconds p50{0};
  FractionalNanoseconds p90{0};
  FractionalNanoseconds p99{0};
  FractionalNanoseconds p999{0};
  FractionalNanoseconds max{0};
  friend bool operator==(const TailQuantiles&, const TailQuantiles&) = default;
};
std::optional<TailQuantiles> tail_quantiles(const SortedSamples& samples, QuantileType type);

// ---- ECDF ------------------------------------------------------------------------------------
// F(x) = #{samples <= x} / n.
std::optional<double> ecdf(const SortedSamples& samples, Nanoseconds x);

// The ECDF's steps: one per distinct value, with F at that value (right-continuous: the step is
// included). Empty for no samples; the last step's cumulative is exactly 1.
struct EcdfStep {
  Nanoseconds value{0};
  double cumulative = 0.0;
  friend bool operator==(const EcdfStep&, const EcdfStep&) = default;
};
std::vector<EcdfStep> ecdf_steps(const SortedSamples& samples);

// ---- Histograms ------------------------------------------------------------------------------
// Bin i is [edges[i], edges[i + 1]); values below edges.front() count as underflow, values at or
// above edges.back() as overflow, so nothing is dropped silently: total = underflow + sum(counts)
// + overflow.
struct Histogram {
  std::vector<FractionalNanoseconds> edges;  // bins + 1 ascending edges
  std::vector<std::uint64_t> counts;         // bins
  std::uint64_t underflow = 0;
  std::uint64_t overflow = 0;
  std::uint64_t total = 0;
};

// `bins` bins of `width` starting at `origin` (all edges exact integers). nullopt for bins == 0,
// width <= 0, or an upper edge beyond the int64 range.
std::optional<Histogram> fixed_histogram(std::span<const Nanoseconds> samples, Nanoseconds origin,
                                         Nanoseconds width, std::size_t bins);

// `bins` bins with geometrically growing edges lo * (hi / lo)^(i / bins): equal width in
// log(delay), for delay distributions whose tail spans decades. nullopt for bins == 0, lo <= 0 or
// hi <= lo.
std::optional<Histogram> log_histogram(std::span<const Nanoseconds> samples, Nanoseconds lo,
                                       Nanoseconds hi, std::size_t bins);

// ---- Moments ---------------------------------------------------------------------------------
// Welford's update on samples shifted by the first one (the shift is integer and exact), so a
// microsecond spread on top of a large offset keeps its precision: no sum of squares is ever
// formed.
std::optional<FractionalNanoseconds> mean(std::span<const Nanoseconds> samples);  // n >= 1
// Sample standard deviation, divisor n - 1. n >= 2.
std::optional<FractionalNanoseconds> sample_stddev(std::span<const Nanoseconds> samples);

struct Moments {
  std::size_t count = 0;
  FractionalNanoseconds mean{0};
  FractionalNanoseconds sample_stddev{0};  // n - 1
};
// Both in one pass. nullopt for n < 2.
std::optional<Moments> moments(std::span<const Nanoseconds> samples);

// ---- Distances between two empirical distributions --------------------------------------------
// Two-sample Kolmogorov–Smirnov distance D = sup_x |F(x) - G(x)|, exact: the two sorted samples are
// merged and every copy of a tied value (within and across the samples) is consumed before F - G is
// evaluated, so ties never create a spurious step. Computed as max |i m - j n| / (n m) in integers.
// nullopt if either sample is empty.
std::optional<double> ks_distance(const SortedSamples& a, const SortedSamples& b);

// Asymptotic critical value c(alpha) sqrt((n + m) / (n m)), c(alpha) = sqrt(-ln(alpha / 2) / 2)
// (c(0.05) = 1.3581): D above it rejects "same distribution" at level alpha. Accurate for n, m of
// a few dozen and more; conservative with ties. nullopt for n or m = 0 or alpha outside (0, 1).
std::optional<double> ks_critical_value(std::size_t n, std::size_t m, double alpha = 0.05);
// The same for effective sample sizes (below), which need not be whole: nullopt for n or m <= 0.
std::optional<double> ks_critical_value_effective(double n, double m, double alpha = 0.05);

// The two-sample KS distance between two distributions over whole numbers given as counts:
// counts[k] = how many draws were k (e.g. LossStatistics::burst_lengths). nullopt if either has no
// draws.
std::optional<double> ks_distance_of_counts(std::span<const std::uint64_t> a,
                                            std::span<const std::uint64_t> b);

// ---- Sampling noise ----------------------------------------------------------------------------
// The standard normal quantile Phi^-1(p), to ~1e-12 (bisection on erfc): the z of a two-sided
// interval at level alpha is normal_quantile(1 - alpha / 2). nullopt for p outside (0, 1).
std::optional<double> normal_quantile(double p);

// How many independent samples `n` positively autocorrelated ones are worth, for the lag-1
// autocorrelation `lag1` of an AR(1) process: n (1 - rho) / (1 + rho) (the variance of the mean of
// an AR(1) series is that of n_eff independent draws). rho is taken as 0 below 0 (negative
// correlation is not counted as extra information) and as at most 0.99.
double effective_sample_size(std::size_t n, std::optional<double> lag1);

// The variance of the mean of a series in time order by the method of batch means: the series cut
// into `batches` consecutive batches of equal length (the remainder left out), the sample variance
// of the batch means divided by `batches`. Unlike effective_sample_size it assumes no AR(1)
// process: it counts every correlation shorter than a batch, such as runs of probes that one stall
// delays together. nullopt with fewer than 2 batches or fewer than 2 values a batch.
std::optional<double> batch_means_variance(std::span<const double> series,
                                           std::size_t batches = 20);

// Wasserstein-1 (earth mover's) distance = integral of |F(x) - G(x)| dx, exact: F and G are step
// functions, so the integral is a finite sum over the merged distinct values, accumulated in
// 128-bit integers and divided once at the end. In nanoseconds: "how far, on average, the delays
// must move". nullopt if either sample is empty.
std::optional<FractionalNanoseconds> wasserstein1(const SortedSamples& a, const SortedSamples& b);

// ---- Autocorrelation ---------------------------------------------------------------------------
// Lag-k sample autocorrelation of a series (the standard ACF estimator, R's acf()):
//   r_k = sum_{t<n-k} (x_t - mean)(x_{t+k} - mean) / sum_t (x_t - mean)^2.
// The caller decides what the series is: for delays, the delays of delivered packets in send order,
// with lost packets left out (so "lag 1" means the next packet that arrived), or whatever the
// comparison needs. nullopt for lag >= n or a constant series.
std::optional<double> autocorrelation(std::span<const Nanoseconds> series, std::size_t lag);
// The same estimator over a 0/1 series (true = 1), e.g. a loss sequence.
std::optional<double> autocorrelation(const std::vector<bool>& series, std::size_t lag);

// ---- Loss sequences ----------------------------------------------------------------------------
// A loss sequence has one entry per packet sent, in send order, true = lost.
// A burst is a maximal run of losses, a gap a maximal run of deliveries. Runs that touch either end
// of the sequence are counted at the length observed (they may have been longer).
struct LossStatistics {
  std::uint64_t packets = 0;
  std::uint64_t lost = 0;
  std::optional<double> loss_rate;  // lost / packets; nullopt for an empty sequence
  // burst_lengths[L] = number of bursts of exactly L losses; index 0 is always 0. Empty when no
  // loss.
  std::vector<std::uint64_t> burst_lengths;
  std::vector<std::uint64_t> gap_lengths;  // the same for runs of deliveries
  std::uint64_t bursts = 0;
  std::uint64_t gaps = 0;
  std::optional<double> mean_burst;  // nullopt without a loss
  std::optional<double> mean_gap;    // nullopt without a delivery
  // Transitions between consecutive packets, the counts behind a Gilbert fit (reference §2):
  // p = delivered_to_lost / delivered_followed, r = lost_to_delivered / lost_followed.
  std::uint64_t delivered_followed = 0;  // deliveries that have a next packet
  std::uint64_t delivered_to_lost = 0;
  std::uint64_t lost_followed = 0;
  std::uint64_t lost_to_delivered = 0;
};
LossStatistics loss_statistics(const std::vector<bool>& lost);

// The sampling noise of a loss sequence's loss rate and mean burst length, with the bursts as the
// independent units (docs/validation.md derives it). The sequence is cut into cycles, each a burst
// and the gap after it (deliveries before the first loss are a cycle without a burst); a cycle's
// losses X_i and length Y_i are taken as independent draws from one law (exact for a Gilbert chain
// with loss_good = 0 and loss_bad = 1, whose bursts and gaps are independent geometric runs). The
// loss rate R = sum X / sum Y is a ratio estimator; by the delta method its variance over n probes
// is V / n, with V = N s^2 / n, s^2 = sum (X_i - R Y_i)^2 / (N - 1) over the N cycles.
struct LossNoise {
  std::uint64_t cycles = 0;
  // V: the variance of the loss rate of n probes from this law is about V / n. nullopt for fewer
  // than two cycles.
  std::optional<double> loss_rate_variance_per_probe;
  // The sample variance of burst lengths: the mean burst of N bursts varies by about this / N.
  // nullopt for fewer than two bursts.
  std::optional<double> burst_variance;
};
LossNoise loss_noise(const std::vector<bool>& lost);

}  // namespace shaper
