#pragma once
// Typed quantities shared by every layer: durations are std::chrono nanoseconds, probabilities are
// a checked type, rates are bytes per second. Conversions to kernel units live in kernel_units.hpp.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shaper {

using Nanoseconds = std::chrono::nanoseconds;

// A probability in [0, 1]. Construction through `make` never throws: bad user data comes back as
// std::nullopt so the caller can produce a diagnostic that names where the value came from.
class Probability {
 public:
  constexpr Probability() = default;

  static constexpr std::optional<Probability> make(double value) {
    // NaN fails both comparisons and is therefore rejected too.
    if (!(value >= 0.0 && value <= 1.0)) return std::nullopt;
    return Probability(value);
  }
  // For constants known to be valid at compile time (0, 1, 0.5 ...). Aborts on a programming error.
  static Probability checked(double value);

  static constexpr Probability zero() { return Probability(0.0); }
  static constexpr Probability one() { return Probability(1.0); }

  constexpr double value() const { return value_; }
  constexpr Probability complement() const { return Probability(1.0 - value_); }
  constexpr bool is_zero() const { return value_ == 0.0; }

  friend constexpr bool operator==(Probability a, Probability b) = default;

 private:
  constexpr explicit Probability(double value) : value_(value) {}
  double value_ = 0.0;
};

// Link rate in bytes per second (netem's unit). 0 means "no rate limit".
struct BytesPerSecond {
  std::uint64_t value = 0;
  friend constexpr bool operator==(BytesPerSecond, BytesPerSecond) = default;
};

// "12.5ms", "3us", "250ns", "1.2s": used in messages so that units never live only in format
// strings.
std::string format_duration(Nanoseconds d);
std::string format_probability(Probability p);

// "20ms", "1.5s", "250us", "100ns" <-> Nanoseconds, exactly (no floating point). Parsing also takes
// minutes and hours ("10m", "24h"); writing uses s and smaller, so canonical forms never change.
std::optional<Nanoseconds> parse_duration(std::string_view text);
std::string duration_to_string(Nanoseconds d);

}  // namespace shaper
