#include "shaper/distribution_tables.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "shaper/statistics.hpp"

namespace shaper {

namespace {

constexpr double kS16Min = std::numeric_limits<std::int16_t>::min();
constexpr double kS16Max = std::numeric_limits<std::int16_t>::max();

std::int16_t to_entry(double sigmas) {
  // Table units are sigmas * 8192; the s16 range caps a table at about ±4 sigma.
  const double units = std::nearbyint(sigmas * kDistScale);
  return static_cast<std::int16_t>(std::clamp(units, kS16Min, kS16Max));
}

// Midpoint quantile level of entry i: each entry stands for probability 1/n.
double level(std::size_t i, std::size_t n) {
  return (static_cast<double>(i) + 0.5) / static_cast<double>(n);
}

// Standardised Pareto(shape 3, scale 1): quantile (1-u)^(-1/3) has mean 3/2 and standard deviation
// sqrt(3)/2 (variance a/((a-1)^2 (a-2)) = 3/4).
double standard_pareto_quantile(double u) {
  constexpr double kShape = 3.0;
  const double mean = kShape / (kShape - 1.0);
  const double stddev = std::sqrt(kShape / ((kShape - 1.0) * (kShape - 1.0) * (kShape - 2.0)));
  return (std::pow(1.0 - u, -1.0 / kShape) - mean) / stddev;
}

void require_entries(std::size_t entries) {
  if (entries == 0 || entries > kMaxTableEntries) {
    // Callers pass constants; a bad size is a programming error.
    std::abort();
  }
}

}  // namespace

double inverse_normal_cdf(double p) {
  if (p <= 0.0) return -std::numeric_limits<double>::infinity();
  if (p >= 1.0) return std::numeric_limits<double>::infinity();
  // Acklam's rational approximation (relative error < 1.15e-9) ...
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // ... refined by two Halley steps on Φ(x) = erfc(-x/√2)/2, which brings it to double precision.
  for (int i = 0; i < 2; ++i) {
    const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
    const double u = e * std::sqrt(2.0 * M_PI) * std::exp(x * x / 2.0);
    x = x - u / (1.0 + x * u / 2.0);
  }
  return x;
}

DistributionTable make_normal_table(std::size_t entries) {
  require_entries(entries);
  DistributionTable table(entries);
  for (std::size_t i = 0; i < entries; ++i)
    table[i] = to_entry(inverse_normal_cdf(level(i, entries)));
  return table;
}

DistributionTable make_pareto_table(std::size_t entries) {
  require_entries(entries);
  DistributionTable table(entries);
  for (std::size_t i = 0; i < entries; ++i) {
    table[i] = to_entry(standard_pareto_quantile(level(i, entries)));
  }
  return table;
}

DistributionTable make_paretonormal_table(std::size_t entries) {
  require_entries(entries);
  DistributionTable table(entries);
  for (std::size_t i = 0; i < entries; ++i) {
    const double u = level(i, entries);
    table[i] = to_entry(0.25 * inverse_normal_cdf(u) + 0.75 * standard_pareto_quantile(u));
  }
  return table;
}

DistributionTable make_uniform_table(std::size_t entries) {
  require_entries(entries);
  DistributionTable table(entries);
  // Entries spread evenly over [-8192, 8192): latency + jitter * t / 8192 then covers
  // [latency - jitter, latency + jitter) like netem's table-less uniform jitter.
  for (std::size_t i = 0; i < entries; ++i) {
    const double t =
        -kDistScale + 2.0 * kDistScale * static_cast<double>(i) / static_cast<double>(entries);
    table[i] = static_cast<std::int16_t>(std::floor(t));
  }
  return table;
}

std::int64_t netem_table_delay_ns(std::int64_t latency_ns, std::int32_t jitter_ns, std::int16_t t) {
  // Mirrors tabledist(): the remainder of sigma is scaled with rounding half away from zero, the
  // quotient exactly, and C division truncates toward zero.
  if (jitter_ns == 0) return latency_ns;
  std::int64_t x = static_cast<std::int64_t>(jitter_ns % kDistScale) * t;
  x += (x >= 0) ? kDistScale / 2 : -kDistScale / 2;
  return x / kDistScale + static_cast<std::int64_t>(jitter_ns / kDistScale) * t + latency_ns;
}

Nanoseconds mean_netem_delay(const DelaySpec& delay) {
  const std::int64_t mu = delay.latency.count();
  const std::int64_t sigma = delay.jitter.count();
  if (sigma == 0) return Nanoseconds{std::max<std::int64_t>(mu, 0)};
  if (!delay.distribution || delay.distribution->empty()) {
    // Uniform on [mu - sigma, mu + sigma): the mean of max(0, x) in closed form.
    const double lo = static_cast<double>(mu - sigma), hi = static_cast<double>(mu + sigma);
    if (lo >= 0) return Nanoseconds{mu};
    if (hi <= 0) return Nanoseconds{0};
    return Nanoseconds{static_cast<std::int64_t>(std::llround(hi * hi / (2 * (hi - lo))))};
  }
  long double sum = 0;
  for (const std::int16_t t : *delay.distribution) {
    sum += static_cast<long double>(
        std::max<std::int64_t>(0, netem_table_delay_ns(mu, static_cast<std::int32_t>(sigma), t)));
  }
  return Nanoseconds{static_cast<std::int64_t>(
      std::llround(sum / static_cast<long double>(delay.distribution->size())))};
}

ExactTableResult build_exact_delay_table(std::span<const Nanoseconds> samples,
                                         std::size_t max_entries) {
  ExactTableResult result;
  if (samples.empty()) {
    result.diagnostics.push_back({"samples", "no delay samples to build a table from"});
    return result;
  }
  if (max_entries == 0 || max_entries > kMaxTableEntries) {
    result.diagnostics.push_back(
        {"max_entries", std::to_string(max_entries) + " is outside 1..16384 (NETEM_DIST_MAX)"});
    return result;
  }
  // The compiler passes its delays sorted already: then they are read in place, not copied.
  std::vector<Nanoseconds> copy;
  std::span<const Nanoseconds> sorted = samples;
  if (!std::is_sorted(samples.begin(), samples.end())) {
    copy.assign(samples.begin(), samples.end());
    sort_samples(copy);
    sorted = copy;
  }
  if (sorted.front().count() < 0) {
    result.diagnostics.push_back(
        {"samples", "a delay sample is negative (" + format_duration(sorted.front()) +
                        "); remove the baseline before building a table, not after"});
    return result;
  }
  const std::int64_t lo = sorted.front().count();
  const std::int64_t range = sorted.back().count() - lo;
  // 65535 steps between the lowest entry (-32768) and the highest (32767).
  constexpr std::int64_t kSteps = 65535;
  const std::int64_t min_step = std::max<std::int64_t>(1, (range + kSteps - 1) / kSteps);
  // Captures are printed at a resolution (ping prints three significant digits: 1 µs steps below 10
  // ms, 10 µs below 100 ms), so the delays are often all multiples of some grain. A step that
  // divides the grain makes every sample land on an entry exactly; any other step shifts whole
  // blocks of tied samples to one side, which a KS distance notices (found on the bursty-loss
  // capture, docs/fidelity.md).
  std::int64_t grain = 0;
  for (const Nanoseconds d : sorted) {
    grain = std::gcd(grain, d.count() - lo);
    if (grain == 1) break;  // no coarser grain can come back
  }
  std::int64_t step = min_step;
  if (grain > min_step) {
    // The smallest divisor of the grain that is at least min_step: divisors come in pairs (d, g/d)
    // around sqrt(g), so this is O(sqrt(g)) even for a prime grain.
    step = grain;
    for (std::int64_t d = 1; d * d <= grain; ++d) {
      if (grain % d != 0) continue;
      if (d >= min_step) step = std::min(step, d);
      if (grain / d >= min_step) step = std::min(step, grain / d);
    }
    // A coarser step must still fit the kernel's jitter limit; if not, exactness yields to range.
    if (step * kDistScale > kMaxJitterNs) step = min_step;
  }
  if (step * kDistScale > kMaxJitterNs) {
    result.diagnostics.push_back(
        {"samples", "the delays span " + format_duration(Nanoseconds(range)) +
                        "; one table can span at most 17.17s (jitter <= INT_MAX ns). Split the "
                        "capture into phases"});
    return result;
  }
  ExactDelayTable table;
  table.resolution = Nanoseconds(step);
  table.jitter = Nanoseconds(step * kDistScale);
  table.latency = Nanoseconds(lo + 32768 * step);  // the minimum maps to entry -32768
  const std::int64_t mu = table.latency.count();

  auto entry_for = [&](std::int64_t delay) {
    const double units =
        std::nearbyint(static_cast<double>(delay - mu) / static_cast<double>(step));
    return static_cast<std::int16_t>(std::clamp(units, kS16Min, kS16Max));
  };

  const std::size_t n = sorted.size();
  if (n <= max_entries) {
    table.table.reserve(n);
    for (const Nanoseconds d : sorted) table.table.push_back(entry_for(d.count()));
  } else {
    table.table.reserve(max_entries);
    for (std::size_t i = 0; i < max_entries; ++i) {
      // Empirical quantile at the entry's midpoint level (type 1: the smallest sample whose ECDF
      // reaches the level), so every entry is a delay that actually occurred.
      const double u = level(i, max_entries);
      std::size_t k = static_cast<std::size_t>(std::ceil(u * static_cast<double>(n)));
      k = std::clamp<std::size_t>(k, 1, n) - 1;
      table.table.push_back(entry_for(sorted[k].count()));
    }
  }
  result.table = std::move(table);
  return result;
}

}  // namespace shaper
