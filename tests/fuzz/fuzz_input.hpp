#pragma once
// What the JSON fuzz targets (fuzz_profile, fuzz_config) share: the input format that reaches large
// and deep texts, and the check that diagnostics stay short whatever the text quotes.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shaper/diagnostics.hpp"

namespace jitterd::fuzz {

// The bytes as they are, unless they start with 0xFF: then 0xFF, two bytes N (big-endian), PREFIX,
// 0x01, UNIT, 0x01, SUFFIX is PREFIX + UNIT * (4 * N) + SUFFIX, cut at `max_bytes` (a reader's own
// size limit plus one, so that limit is reached too).
inline std::string expand(const std::uint8_t* data, std::size_t size, std::size_t max_bytes) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (size < 3 || data[0] != 0xFF) return std::string(bytes);
  const std::size_t repeat = 4 * ((std::size_t{data[1]} << 8) | data[2]);
  std::string_view rest = bytes.substr(3);
  auto take = [&rest]() {
    const std::size_t end = rest.find('\x01');
    const std::string_view part = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    return part;
  };
  const std::string_view prefix = take(), unit = take(), suffix = rest;
  std::string text(prefix);
  for (std::size_t i = 0; i < repeat && !unit.empty() && text.size() < max_bytes; ++i) text += unit;
  text += suffix;
  if (text.size() > max_bytes) text.resize(max_bytes);
  return text;
}

// Every diagnostic quotes at most an excerpt of the input (json_reader.hpp): a message of at most
// 2 KiB (the longest jitterd writes is a few hundred characters), a `where` of at most 16 KiB (64
// levels of pointer, each key cut to a 60-character excerpt, "~" and "/" escaped to two).
inline void check_bounded(const shaper::Diagnostics& diagnostics) {
  constexpr std::size_t kMaxMessage = 2048, kMaxWhere = 16384;
  for (const auto& d : diagnostics) {
    if (d.message.size() > kMaxMessage || d.where.size() > kMaxWhere) {
      std::fprintf(stderr, "diagnostic too long (where %zu, message %zu bytes): %.300s: %.300s\n",
                   d.where.size(), d.message.size(), d.where.c_str(), d.message.c_str());
      std::abort();
    }
  }
}

}  // namespace jitterd::fuzz
