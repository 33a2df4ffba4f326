#pragma once
// Reading JSON into typed structs at the edge (profiles, the daemon's config and requests),
// reporting every problem as a diagnostic with its JSON pointer and what is allowed, instead of
// throwing.

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

// How deep any JSON read from users (profiles, the config, requests, ctl's --file) may nest. The
// deepest valid document is a request with an inline profile, 8 levels (request, params, profile,
// phases, a phase, delay, its distribution, a table); 64 leaves room and keeps every recursive walk
// of a document (nlohmann's dump(), copies, comparisons) far from the end of the stack: a profile
// nested 100 000 deep crashed jitterctl and jitterd when an error quoted it (issue 21).
constexpr std::size_t kMaxJsonDepth = 64;

// How many characters an error message quotes of a bad value: enough to recognise it, never a
// megabyte line in a log or a reply.
constexpr std::size_t kExcerptChars = 60;

// The JSON text of `value` for an error message, cut at `max_chars` characters with "..." after
// it. Written without recursion, so a value nested 100 000 deep costs what a short one does; bytes
// that are not UTF-8 become U+FFFD.
std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars = kExcerptChars);

// Raw text for an error message (a token the parser stopped at, a line that is not JSON): at most
// `max_chars` bytes, cut before a UTF-8 sequence rather than inside it, control bytes shown as
// \xNN.
std::string text_excerpt(std::string_view text, std::size_t max_chars = kExcerptChars);

// nlohmann's exception text for a message: without "[json.exception.parse_error.101] parse error at
// line 1, column 3: " (the caller says where), and with the token it quotes ("last read: '...'",
// the digits of an overflowing number), which can be the rest of the text, cut to an excerpt.
std::string json_parser_words(std::string what);

// What kept a text from becoming a document; kNone when it did.
enum class JsonProblem {
  kNone,
  kSyntax,        // not JSON (a NUL byte included: nlohmann would stop reading at it, silently)
  kTooDeep,       // nests deeper than the limit
  kDuplicateKey,  // a key twice in one object: nlohmann would keep the last one silently
};

struct JsonDocument {
  nlohmann::json value;  // null unless problem is kNone
  JsonProblem problem = JsonProblem::kNone;
  // kSyntax: "3:16" (line:column, as json_error_where gives it); kTooDeep: the JSON pointer of the
  // first value too deep; kDuplicateKey: the pointer of the second occurrence. Keys in pointers are
  // cut to an excerpt.
  std::string where;
  std::string
      message;  // what is wrong, without "invalid JSON" or the file: callers add their context
};

// Reads user JSON in bounded depth, memory and time: a first pass that builds nothing (nlohmann's
// SAX parser, which keeps one bit per level) stops at the first syntax error, NUL byte, level
// deeper than `max_depth` or repeated key; only a text that passes it becomes a document. Both
// passes are linear in the text. For every reader of user data: profiles, the config, requests,
// jitterctl's files, and capture JSON (mtr, iperf3).
JsonDocument parse_json_bounded(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

// The text as one JSON object (parse_json_bounded); nullopt, with a diagnostic in `out`, when it is
// not JSON ("WHAT is not JSON: ...", at the error's place) or not an object. For replies read from
// other programs: a runtime's API, the CRI.
std::optional<nlohmann::json> parse_json_object(std::string_view text, std::string_view what,
                                                Diagnostics& out);

class JsonReader {
 public:
  using json = nlohmann::json;

  explicit JsonReader(Diagnostics& out) : out_(out) {}

  void error(const std::string& pointer, std::string message) {
    out_.push_back({pointer, std::move(message)});
  }

  // Reports the type mismatch and returns false unless `j` is an object; reports (and returns true
  // for) every key that is not in `allowed`.
  bool object(const json& j, const std::string& pointer,
              std::initializer_list<std::string_view> allowed);

  // The member `key` of `obj`, or nullptr (reported when `required`).
  const json* member(const json& obj, const std::string& pointer, const char* key, bool required);

  // Absent: zero. Not a number in [0, 1]: reported, nullopt.
  std::optional<Probability> probability(const json& obj, const std::string& pointer,
                                         const char* key);

  // "20ms", "1.5s", "2m", "1h" (parse_duration). Absent and not required: zero.
  std::optional<Nanoseconds> duration(const json& obj, const std::string& pointer, const char* key,
                                      bool required);

  std::optional<bool> boolean(const json& obj, const std::string& pointer, const char* key,
                              bool fallback);

  // Absent and not required: "".
  std::optional<std::string> string(const json& obj, const std::string& pointer, const char* key,
                                    bool required, std::size_t max_length);

  // An integer in [min, max]; absent: `fallback`.
  template <typename Int>
  std::optional<Int> integer(const json& obj, const std::string& pointer, const char* key, Int min,
                             Int max, Int fallback) {
    const json* v = member(obj, pointer, key, false);
    if (!v) return fallback;
    if (!v->is_number_integer()) {
      error(pointer + "/" + key, "expected an integer from " + std::to_string(min) + " to " +
                                     std::to_string(max) + ", found " + json_excerpt(*v));
      return std::nullopt;
    }
    bool in_range;
    Int value{};
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      in_range = u <= static_cast<std::uint64_t>(max) &&
                 (min <= 0 || u >= static_cast<std::uint64_t>(min));
      value = static_cast<Int>(u);
    } else {
      const auto s = v->get<std::int64_t>();
      in_range = s >= static_cast<std::int64_t>(min) &&
                 (max > static_cast<Int>(std::numeric_limits<std::int64_t>::max()) ||
                  s <= static_cast<std::int64_t>(max));
      value = static_cast<Int>(s);
    }
    if (!in_range) {
      error(pointer + "/" + key, json_excerpt(*v) + " is out of range; expected " +
                                     std::to_string(min) + " to " + std::to_string(max));
      return std::nullopt;
    }
    return value;
  }

 private:
  Diagnostics& out_;
};

}  // namespace shaper
