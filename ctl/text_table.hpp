#pragma once
// Output for people: aligned text tables and human-readable durations and local times.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "shaper/quantities.hpp"

namespace jitterctl {

// Rows of cells printed in columns as wide as their widest cell (in characters, so "µs" counts as
// two), two spaces apart, without trailing blanks.
class TextTable {
 public:
  struct Column {
    std::string header;
    bool right_aligned = false;  // for numbers, so that digits line up
  };

  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // `cells` has one entry per column (missing ones print empty).
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "95 µs", "812 ms", "1.19 s", "4 min 5 s", "3 h 2 min", "2 d 3 h": three significant digits below
// a minute, whole units above.
std::string format_human_duration(shaper::Nanoseconds d);

// A CLOCK_REALTIME instant in the local time zone: "2026-11-30 20:00:00" with `date`, "20:00:00"
// without, followed by `fraction_digits` (0 to 9) digits of the second.
std::string format_local_time(std::int64_t realtime_ns, bool date, int fraction_digits);

// The number of characters (UTF-8 code points) in `text`: its width in a terminal for the text that
// jitterctl prints.
std::size_t display_width(const std::string& text);

}  // namespace jitterctl
