#include "shaper/statistics.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <utility>

namespace shaper {

namespace {

// GCC and Clang both provide 128-bit integers; __extension__ keeps -Wpedantic quiet about it.
// KS and W1 use them to stay exact: |i m - j n| * dx summed over a merge overflows 64 bits at
// about a million samples a side.
__extension__ using UInt128 = unsigned __int128;

// W1 is exact while n m (range) < 2^128: both sizes below 2^32 and any int64 range guarantee it.
constexpr std::size_t kMaxExactSamples = std::size_t{1} << 32;

// a - b as a double without signed overflow: the int64 difference of two extreme samples would not
// fit, the unsigned one always does (magnitude < 2^64).
double difference(Nanoseconds a, Nanoseconds b) {
  const auto ua = static_cast<std::uint64_t>(a.count());
  const auto ub = static_cast<std::uint64_t>(b.count());
  return a >= b ? static_cast<double>(ua - ub) : -static_cast<double>(ub - ua);
}

// b - a for b >= a, exactly, as an unsigned 64-bit number.
std::uint64_t span_between(Nanoseconds a, Nanoseconds b) {
  return static_cast<std::uint64_t>(b.count()) - static_cast<std::uint64_t>(a.count());
}

// n p in doubles is off by an ulp for many "round" p (0.07 * 100 = 7.000000000000001). Within
// 8 ulps of an integer we take the integer, which is what the caller meant; R applies the same
// fuzz.
double snap_to_integer(double x) {
  const double r = std::nearbyint(x);
  const double fuzz = 8.0 * std::numeric_limits<double>::epsilon() * std::max(1.0, std::fabs(x));
  return std::fabs(x - r) <= fuzz ? r : x;
}

bool is_probability(double p) {
  return p >= 0.0 && p <= 1.0;
}  // false for NaN too

// Welford's running mean and sum of squared deviations over values already shifted near zero.
struct Welford {
  std::size_t n = 0;
  double mean = 0.0;
  double m2 = 0.0;
  void add(double y) {
    ++n;
    const double d = y - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (y - mean);
  }
};

Welford welford_shifted(std::span<const Nanoseconds> samples) {
  Welford w;
  for (const Nanoseconds x : samples) w.add(difference(x, samples.front()));
  return w;
}

FractionalNanoseconds unshift(Nanoseconds origin, double shifted) {
  return FractionalNanoseconds(static_cast<double>(origin.count()) + shifted);
}

// The standard ACF estimator over n values given by get(t), centred on their mean.
template <class Get>
std::optional<double> acf(std::size_t n, std::size_t lag, Get get) {
  if (n == 0 || lag >= n) return std::nullopt;
  Welford w;
  for (std::size_t t = 0; t < n; ++t) w.add(get(t));
  if (w.m2 <= 0.0) return std::nullopt;  // a constant series has no correlation to speak of
  double numerator = 0.0;
  for (std::size_t t = 0; t + lag < n; ++t)
    numerator += (get(t) - w.mean) * (get(t + lag) - w.mean);
  // The denominator recomputed around the final mean (m2 is the same quantity, but this keeps the
  // ratio exactly 1 at lag 0).
  double denominator = 0.0;
  for (std::size_t t = 0; t < n; ++t) denominator += (get(t) - w.mean) * (get(t) - w.mean);
  return numerator / denominator;
}

void count_run(std::vector<std::uint64_t>& lengths, std::uint64_t run) {
  if (lengths.size() <= run) lengths.resize(run + 1, 0);
  ++lengths[run];
}

std::optional<double> mean_run(const std::vector<std::uint64_t>& lengths, std::uint64_t runs) {
  if (runs == 0) return std::nullopt;
  double total = 0.0;
  for (std::size_t length = 1; length < lengths.size(); ++length) {
    total += static_cast<double>(length) * static_cast<double>(lengths[length]);
  }
  return total / static_cast<double>(runs);
}

}  // namespace

// Samples often come sorted already (quantiles picked from sorted samples, a table's entries): one
// look costs a fraction of the sort it saves, and leaves the same values in the same order.
void sort_samples(std::vector<Nanoseconds>& samples) {
  if (std::is_sorted(samples.begin(), samples.end())) return;
  // Below this a comparison sort wins: a radix pass costs a histogram and a buffer.
  constexpr std::size_t kRadixMinimum = 1 << 16;
  if (samples.size() < kRadixMinimum) {
    std::sort(samples.begin(), samples.end());
    return;
  }
  const auto [lo, hi] = std::minmax_element(samples.begin(), samples.end());
  const Nanoseconds low = *lo;
  // Keys are offsets from the smallest sample: unsigned, and only as wide as the range.
  const std::uint64_t range = span_between(low, *hi);
  const int bits = std::bit_width(range);
  constexpr int kMaxDigitBits = 12;
  const int passes = (bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = (bits + passes - 1) / passes;
  const std::uint64_t mask = (std::uint64_t{1} << digit_bits) - 1;
  const auto key = [low](Nanoseconds v) { return span_between(low, v); };
  std::vector<Nanoseconds> buffer(samples.size());
  std::vector<std::size_t> offsets(std::size_t{1} << digit_bits);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit_bits;
    std::fill(offsets.begin(), offsets.end(), 0);
    for (const Nanoseconds v : samples) ++offsets[(key(v) >> shift) & mask];
    std::size_t total = 0;
    for (auto& o : offsets) total += std::exchange(o, total);
    // Stable scatter: equal digits keep the previous passes' order.
    for (const Nanoseconds v : samples) buffer[offsets[(key(v) >> shift) & mask]++] = v;
    samples.swap(buffer);
  }
}

SortedSamples::SortedSamples(std::span<const Nanoseconds> samples)
    : values_(samples.begin(), samples.end()) {
  sort_samples(values_);
}

SortedSamples::SortedSamples(std::vector<Nanoseconds>&& samples) : values_(std::move(samples)) {
  sort_samples(values_);
}

Nanoseconds SortedSamples::min() const {
  if (values_.empty()) {
    std::fprintf(stderr, "internal error: SortedSamples::min() of no samples\n");
    std::abort();
  }
  return values_.front();
}

Nanoseconds SortedSamples::max() const {
  if (values_.empty()) {
    std::fprintf(stderr, "internal error: SortedSamples::max() of no samples\n");
    std::abort();
  }
  return values_.back();
}

std::optional<Nanoseconds> quantile_inverse_ecdf(const SortedSamples& samples, double p) {
  if (samples.empty() || !is_probability(p)) return std::nullopt;
  const auto x = samples.values();
  const double n = static_cast<double>(x.size());
  const double k = std::ceil(snap_to_integer(n * p));  // 1-based rank; 0 for p = 0
  const std::size_t rank = std::clamp<std::size_t>(static_cast<std::size_t>(k), 1, x.size());
  return x[rank - 1];
}

std::optional<FractionalNanoseconds> quantile(const SortedSamples& samples, double p,
                                              QuantileType type) {
  if (samples.empty() || !is_probability(p)) return std::nullopt;
  if (type == QuantileType::kInverseEcdf) {
    return FractionalNanoseconds(static_cast<double>(quantile_inverse_ecdf(samples, p)->count()));
  }
  const auto x = samples.values();
  const double h = snap_to_integer(static_cast<double>(x.size() - 1) * p);
  const double below = std::floor(h);
  const auto index = static_cast<std::size_t>(below);  // 0-based: x_(floor h + 1)
  const double fraction = h - below;
  const double base = static_cast<double>(x[index].count());
  if (fraction == 0.0 || index + 1 >= x.size()) return FractionalNanoseconds(base);
  return FractionalNanoseconds(
      base + fraction * static_cast<double>(span_between(x[index], x[index + 1])));
}

std::optional<TailQuantiles> tail_quantiles(const SortedSamples& samples, QuantileType type) {
  if (samples.empty()) return std::nullopt;
  TailQuantiles q;
  q.p50 = *quantile(samples, 0.5, type);
  q.p90 = *quantile(samples, 0.9, type);
  q.p99 = *quantile(samples, 0.99, type);
  q.p999 = *quantile(samples, 0.999, type);
  q.max = FractionalNanoseconds(static_cast<double>(samples.max().count()));
  return q;
}

std::optional<double> ecdf(const SortedSamples& samples, Nanoseconds x) {
  if (samples.empty()) return std::nullopt;
  const auto v = samples.values();
  const auto at_or_below = std::upper_bound(v.begin(), v.end(), x) - v.begin();
  return static_cast<double>(at_or_below) / static_cast<double>(v.size());
}

std::vector<EcdfStep> ecdf_steps(const SortedSamples& samples) {
  std::vector<EcdfStep> steps;
  const auto v = samples.values();
  const double n = static_cast<double>(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i + 1 < v.size() && v[i + 1] == v[i])
      continue;  // the last copy of a value carries its step
    steps.push_back({v[i], static_cast<double>(i + 1) / n});
  }
  return steps;
}

std::optional<Histogram> fixed_histogram(std::span<const Nanoseconds> samples, Nanoseconds origin,
                                         Nanoseconds width, std::size_t bins) {
  if (bins == 0 || width.count() <= 0) return std::nullopt;
  std::int64_t span = 0;
  std::int64_t top = 0;
  if (bins > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()) ||
      __builtin_mul_overflow(static_cast<std::int64_t>(bins), width.count(), &span) ||
      __builtin_add_overflow(origin.count(), span, &top)) {
    return std::nullopt;
  }
  Histogram h;
  h.edges.reserve(bins + 1);
  for (std::size_t i = 0; i <= bins; ++i) {
    h.edges.emplace_back(
        static_cast<double>(origin.count() + static_cast<std::int64_t>(i) * width.count()));
  }
  h.counts.assign(bins, 0);
  const auto w = static_cast<std::uint64_t>(width.count());
  for (const Nanoseconds x : samples) {
    ++h.total;
    if (x < origin) {
      ++h.underflow;
      continue;
    }
    const std::uint64_t bin = span_between(origin, x) / w;
    if (bin >= bins) {
      ++h.overflow;
    } else {
      ++h.counts[bin];
    }
  }
  return h;
}

std::optional<Histogram> log_histogram(std::span<const Nanoseconds> samples, Nanoseconds lo,
                                       Nanoseconds hi, std::size_t bins) {
  if (bins == 0 || lo.count() <= 0 || hi <= lo) return std::nullopt;
  const double low = static_cast<double>(lo.count());
  const double high = static_cast<double>(hi.count());
  const double log_ratio = std::log(high / low);
  Histogram h;
  h.edges.reserve(bins + 1);
  for (std::size_t i = 0; i <= bins; ++i) {
    const double edge =
        i == 0 ? low
        : i == bins
            ? high  // exact ends, whatever pow() rounds to
            : low * std::exp(log_ratio * static_cast<double>(i) / static_cast<double>(bins));
    h.edges.emplace_back(edge);
  }
  h.counts.assign(bins, 0);
  for (const Nanoseconds sample : samples) {
    ++h.total;
    const double x = static_cast<double>(sample.count());
    if (x < low) {
      ++h.underflow;
      continue;
    }
    if (x >= high) {
      ++h.overflow;
      continue;
    }
    // log() gives the bin up to rounding; the edges themselves decide.
    const double guess = std::floor(std::log(x / low) / log_ratio * static_cast<double>(bins));
    std::size_t k = static_cast<std::size_t>(std::clamp(guess, 0.0, static_cast<double>(bins - 1)));
    while (k > 0 && x < h.edges[k].count()) --k;
    while (k + 1 < bins && x >= h.edges[k + 1].count()) ++k;
    ++h.counts[k];
  }
  return h;
}

std::optional<FractionalNanoseconds> mean(std::span<const Nanoseconds> samples) {
  if (samples.empty()) return std::nullopt;
  return unshift(samples.front(), welford_shifted(samples).mean);
}

std::optional<FractionalNanoseconds> sample_stddev(std::span<const Nanoseconds> samples) {
  const auto m = moments(samples);
  if (!m) return std::nullopt;
  return m->sample_stddev;
}

std::optional<Moments> moments(std::span<const Nanoseconds> samples) {
  if (samples.size() < 2) return std::nullopt;
  const Welford w = welford_shifted(samples);
  Moments m;
  m.count = w.n;
  m.mean = unshift(samples.front(), w.mean);
  m.sample_stddev = FractionalNanoseconds(std::sqrt(w.m2 / static_cast<double>(w.n - 1)));
  return m;
}

std::optional<double> ks_distance(const SortedSamples& a, const SortedSamples& b) {
  if (a.empty() || b.empty() || a.size() >= kMaxExactSamples || b.size() >= kMaxExactSamples) {
    return std::nullopt;
  }
  const auto x = a.values();
  const auto y = b.values();
  const std::uint64_t n = x.size();
  const std::uint64_t m = y.size();
  // After consuming i of x and j of y, F - G = i/n - j/m = (i m - j n) / (n m).
  std::size_t i = 0;
  std::size_t j = 0;
  std::uint64_t largest = 0;
  while (i < n || j < m) {
    const Nanoseconds v = j == m || (i < n && x[i] <= y[j]) ? x[i] : y[j];
    while (i < n && x[i] == v) ++i;
    while (j < m && y[j] == v) ++j;
    const std::uint64_t fi = i * m;
    const std::uint64_t gj = j * n;
    largest = std::max(largest, fi > gj ? fi - gj : gj - fi);
  }
  return static_cast<double>(largest) / (static_cast<double>(n) * static_cast<double>(m));
}

std::optional<double> ks_critical_value(std::size_t n, std::size_t m, double alpha) {
  return ks_critical_value_effective(static_cast<double>(n), static_cast<double>(m), alpha);
}

std::optional<double> ks_critical_value_effective(double n, double m, double alpha) {
  if (!(n > 0.0) || !(m > 0.0) || !(alpha > 0.0 && alpha < 1.0)) return std::nullopt;
  const double c = std::sqrt(-std::log(alpha / 2.0) / 2.0);
  return c * std::sqrt((n + m) / (n * m));
}

std::optional<double> ks_distance_of_counts(std::span<const std::uint64_t> a,
                                            std::span<const std::uint64_t> b) {
  std::uint64_t total_a = 0, total_b = 0;
  for (const auto c : a) total_a += c;
  for (const auto c : b) total_b += c;
  if (total_a == 0 || total_b == 0) return std::nullopt;
  // F - G after every value k, as (i m - j n) / (n m) in integers, as ks_distance does.
  std::uint64_t i = 0, j = 0, largest = 0;
  for (std::size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
    if (k < a.size()) i += a[k];
    if (k < b.size()) j += b[k];
    const std::uint64_t fi = i * total_b;
    const std::uint64_t gj = j * total_a;
    largest = std::max(largest, fi > gj ? fi - gj : gj - fi);
  }
  return static_cast<double>(largest) /
         (static_cast<double>(total_a) * static_cast<double>(total_b));
}

std::optional<double> normal_quantile(double p) {
  if (!(p > 0.0 && p < 1.0)) return std::nullopt;
  // Phi(x) = erfc(-x / sqrt 2) / 2 is increasing; 200 halvings of [-40, 40] reach a double's
  // resolution long before the loop ends.
  double lo = -40.0, hi = 40.0;
  for (int k = 0; k < 200 && hi - lo > 1e-13; ++k) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

double effective_sample_size(std::size_t n, std::optional<double> lag1) {
  // Beyond 0.99 the estimate of rho itself decides everything; 1/199 of n is as few as we count.
  constexpr double kMaxRho = 0.99;
  const double rho = std::clamp(lag1.value_or(0.0), 0.0, kMaxRho);
  return static_cast<double>(n) * (1 - rho) / (1 + rho);
}

std::optional<double> batch_means_variance(std::span<const double> series, std::size_t batches) {
  const std::size_t length = batches == 0 ? 0 : series.size() / batches;
  if (batches < 2 || length < 2) return std::nullopt;
  std::vector<double> means(batches);
  for (std::size_t b = 0; b < batches; ++b) {
    const auto batch = series.subspan(b * length, length);
    means[b] = std::accumulate(batch.begin(), batch.end(), 0.0) / static_cast<double>(length);
  }
  const double k = static_cast<double>(batches);
  const double mean = std::accumulate(means.begin(), means.end(), 0.0) / k;
  double square = 0;
  for (const double m : means) square += (m - mean) * (m - mean);
  return square / (k - 1) / k;
}

std::optional<FractionalNanoseconds> wasserstein1(const SortedSamples& a, const SortedSamples& b) {
  if (a.empty() || b.empty() || a.size() >= kMaxExactSamples || b.size() >= kMaxExactSamples) {
    return std::nullopt;
  }
  const auto x = a.values();
  const auto y = b.values();
  const std::uint64_t n = x.size();
  const std::uint64_t m = y.size();
  // Between consecutive distinct merged values v < w, F and G are constant at i/n and j/m, so that
  // stretch contributes |i m - j n| (w - v) / (n m). Sum the numerators exactly, divide once.
  std::size_t i = 0;
  std::size_t j = 0;
  UInt128 total = 0;
  Nanoseconds previous{0};
  std::uint64_t step = 0;  // |i m - j n| after `previous`
  bool first = true;
  while (i < n || j < m) {
    const Nanoseconds v = j == m || (i < n && x[i] <= y[j]) ? x[i] : y[j];
    if (!first) total += static_cast<UInt128>(step) * span_between(previous, v);
    first = false;
    while (i < n && x[i] == v) ++i;
    while (j < m && y[j] == v) ++j;
    const std::uint64_t fi = i * m;
    const std::uint64_t gj = j * n;
    step = fi > gj ? fi - gj : gj - fi;
    previous = v;
  }
  const long double w1 =
      static_cast<long double>(total) / (static_cast<long double>(n) * static_cast<long double>(m));
  return FractionalNanoseconds(static_cast<double>(w1));
}

std::optional<double> autocorrelation(std::span<const Nanoseconds> series, std::size_t lag) {
  if (series.empty()) return std::nullopt;
  // Shifted by the first value (exactly) so that large offsets do not eat the precision.
  return acf(series.size(), lag, [&](std::size_t t) { return difference(series[t], series[0]); });
}

std::optional<double> autocorrelation(const std::vector<bool>& series, std::size_t lag) {
  return acf(series.size(), lag, [&](std::size_t t) { return series[t] ? 1.0 : 0.0; });
}

LossStatistics loss_statistics(const std::vector<bool>& lost) {
  LossStatistics s;
  s.packets = lost.size();
  std::uint64_t run = 0;
  for (std::size_t i = 0; i < lost.size(); ++i) {
    if (lost[i]) ++s.lost;
    ++run;
    if (i + 1 < lost.size()) {
      if (lost[i]) {
        ++s.lost_followed;
        if (!lost[i + 1]) ++s.lost_to_delivered;
      } else {
        ++s.delivered_followed;
        if (lost[i + 1]) ++s.delivered_to_lost;
      }
    }
    const bool run_ends = i + 1 == lost.size() || lost[i + 1] != lost[i];
    if (!run_ends) continue;
    if (lost[i]) {
      count_run(s.burst_lengths, run);
      ++s.bursts;
    } else {
      count_run(s.gap_lengths, run);
      ++s.gaps;
    }
    run = 0;
  }
  if (s.packets > 0) s.loss_rate = static_cast<double>(s.lost) / static_cast<double>(s.packets);
  s.mean_burst = mean_run(s.burst_lengths, s.bursts);
  s.mean_gap = mean_run(s.gap_lengths, s.gaps);
  return s;
}

LossNoise loss_noise(const std::vector<bool>& lost) {
  LossNoise out;
  const double n = static_cast<double>(lost.size());
  if (lost.empty()) return out;
  // The cycles' (losses, length), in order.
  std::vector<std::pair<double, double>> cycles;
  std::vector<double> bursts;
  std::size_t i = 0;
  double losses = 0;
  while (i < lost.size()) {
    double x = 0, y = 0;
    while (i < lost.size() && lost[i]) ++x, ++y, ++i;
    while (i < lost.size() && !lost[i]) ++y, ++i;
    if (x > 0) bursts.push_back(x);
    losses += x;
    cycles.emplace_back(x, y);
  }
  out.cycles = cycles.size();
  const double cycle_count = static_cast<double>(cycles.size());
  if (cycles.size() >= 2) {
    const double rate = losses / n;
    double sum = 0;
    for (const auto& [x, y] : cycles) sum += (x - rate * y) * (x - rate * y);
    out.loss_rate_variance_per_probe = cycle_count * (sum / (cycle_count - 1)) / n;
  }
  if (bursts.size() >= 2) {
    double mean_burst = 0;
    for (const double b : bursts) mean_burst += b;
    mean_burst /= static_cast<double>(bursts.size());
    double sum = 0;
    for (const double b : bursts) sum += (b - mean_burst) * (b - mean_burst);
    out.burst_variance = sum / static_cast<double>(bursts.size() - 1);
  }
  return out;
}

}  // namespace shaper
