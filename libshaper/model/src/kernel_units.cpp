#include "shaper/kernel_units.hpp"

#include <cmath>
#include <limits>

namespace shaper::kernel_units {

namespace {
constexpr double kU32Max = static_cast<double>(std::numeric_limits<std::uint32_t>::max());
}

std::uint32_t probability(Probability p) {
  // rint(p * UINT32_MAX), as tc's set_percent; p is in [0, 1] by construction so this cannot
  // overflow.
  return static_cast<std::uint32_t>(std::nearbyint(p.value() * kU32Max));
}

Probability probability_from(std::uint32_t value) {
  // Division by the same constant makes probability(probability_from(v)) == v for every u32.
  return Probability::checked(static_cast<double>(value) / kU32Max);
}

std::uint32_t psched_ticks(Nanoseconds d) {
  const std::int64_t ns = d.count();
  if (ns <= 0) return 0;
  const std::uint64_t ticks = static_cast<std::uint64_t>(ns) >> 6;  // PSCHED_SHIFT
  return ticks > std::numeric_limits<std::uint32_t>::max()
             ? std::numeric_limits<std::uint32_t>::max()
             : static_cast<std::uint32_t>(ticks);
}

std::int64_t nanoseconds(Nanoseconds d) {
  return d.count();
}

std::uint32_t rate32(BytesPerSecond rate) {
  return needs_rate64(rate) ? std::numeric_limits<std::uint32_t>::max()
                            : static_cast<std::uint32_t>(rate.value);
}

bool needs_rate64(BytesPerSecond rate) {
  return rate.value >= (std::uint64_t{1} << 32);
}

std::uint32_t ge_h_from_loss_bad(Probability loss_bad) {
  // The complement taken on the u32 grid, not in doubles (1 - 0.9 is 0.09999999999999998), so that
  // loss_bad_from_ge_h inverts it exactly.
  return std::numeric_limits<std::uint32_t>::max() - probability(loss_bad);
}

std::uint32_t ge_k1_from_loss_good(Probability loss_good) {
  return probability(loss_good);
}

Probability loss_bad_from_ge_h(std::uint32_t h) {
  // Inverse of ge_h_from_loss_bad through the same u32 grid: 1 - v/UINT32_MAX, computed as
  // (UINT32_MAX - v)/UINT32_MAX so that re-encoding gives v back exactly.
  return probability_from(std::numeric_limits<std::uint32_t>::max() - h);
}

}  // namespace shaper::kernel_units
