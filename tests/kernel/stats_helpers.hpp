#pragma once
// Small statistics for the kernel tests' assertions. (libshaper's statistics module arrives with
// the compiler; these stay independent of it on purpose, as a second implementation.)

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace jitterd_test {

inline double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

inline double stddev(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Lengths of the runs of `true` in a loss sequence.
inline std::vector<int> burst_lengths(const std::vector<bool>& lost) {
  std::vector<int> out;
  int run = 0;
  for (bool l : lost) {
    if (l) {
      ++run;
    } else if (run) {
      out.push_back(run);
      run = 0;
    }
  }
  if (run) out.push_back(run);
  return out;
}

}  // namespace jitterd_test
