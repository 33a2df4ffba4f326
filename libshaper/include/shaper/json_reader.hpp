#pragma once
// Reading JSON into typed structs at the edge (profiles, the daemon's config and requests), reporting
// every problem as a diagnostic with its JSON pointer and what is allowed, instead of throwing.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shaper/diagnostics.hpp"
#include "shaper/quantities.hpp"

namespace shaper {

// "a/b" -> "a~1b", "~" -> "~0" (RFC 6901), for keys that become pointer tokens.
std::string pointer_escape(std::string_view token);

// Why `text` is not JSON ("syntax error while parsing value - invalid literal; last read: 'x'") and
// the 1-based byte where the parser stopped; empty when it is JSON. nlohmann's non-throwing parse only
// says "discarded", so the failure is parsed once more for the words.
std::string json_syntax_error(std::string_view text, std::size_t* byte = nullptr);

class JsonReader {
 public:
  using json = nlohmann::json;

  explicit JsonReader(Diagnostics& out) : out_(out) {}

  void error(const std::string& pointer, std::string message) { out_.push_back({pointer, std::move(message)}); }

  // Reports the type mismatch and returns false unless `j` is an object; reports (and returns true
  // for) every key that is not in `allowed`.
  bool object(const json& j, const std::string& pointer, std::initializer_list<std::string_view> allowed);

  // The member `key` of `obj`, or nullptr (reported when `required`).
  const json* member(const json& obj, const std::string& pointer, const char* key, bool required);

  // Absent: zero. Not a number in [0, 1]: reported, nullopt.
  std::optional<Probability> probability(const json& obj, const std::string& pointer, const char* key);

  // "20ms", "1.5s", "2m", "1h" (parse_duration). Absent and not required: zero.
  std::optional<Nanoseconds> duration(const json& obj, const std::string& pointer, const char* key, bool required);

  std::optional<bool> boolean(const json& obj, const std::string& pointer, const char* key, bool fallback);

  // Absent and not required: "".
  std::optional<std::string> string(const json& obj, const std::string& pointer, const char* key, bool required,
                                    std::size_t max_length);

  // An integer in [min, max]; absent: `fallback`.
  template <typename Int>
  std::optional<Int> integer(const json& obj, const std::string& pointer, const char* key, Int min, Int max,
                             Int fallback) {
    const json* v = member(obj, pointer, key, false);
    if (!v) return fallback;
    if (!v->is_number_integer()) {
      error(pointer + "/" + key, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) +
                                     ", found " + v->dump());
      return std::nullopt;
    }
    bool in_range;
    Int value{};
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      in_range = u <= static_cast<std::uint64_t>(max) && (min <= 0 || u >= static_cast<std::uint64_t>(min));
      value = static_cast<Int>(u);
    } else {
      const auto s = v->get<std::int64_t>();
      in_range = s >= static_cast<std::int64_t>(min) &&
                 (max > static_cast<Int>(std::numeric_limits<std::int64_t>::max()) ||
                  s <= static_cast<std::int64_t>(max));
      value = static_cast<Int>(s);
    }
    if (!in_range) {
      error(pointer + "/" + key, v->dump() + " is out of range; expected " + std::to_string(min) + " to " +
                                     std::to_string(max));
      return std::nullopt;
    }
    return value;
  }

 private:
  Diagnostics& out_;
};

}  // namespace shaper
