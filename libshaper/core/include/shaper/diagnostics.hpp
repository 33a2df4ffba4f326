#pragma once
// Bad user data (a trace line, a profile field, a spec value) is reported as returned diagnostics,
// never as exceptions: the caller decides whether one bad value is fatal. Each diagnostic says
// where (a file:line:column, a JSON pointer, a field path), what is wrong, and how to fix it.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shaper {

struct Diagnostic {
  std::string where;    // "capture.txt:812:17", "/phases/high/loss/p", "slot.max_delay"
  std::string message;  // what is wrong, with the allowed range and a fix where one exists

  std::string to_string() const { return where.empty() ? message : where + ": " + message; }
  // With the file it came from: "config.json:3:16: message" when `where` is a line:column (the form
  // editors and compilers use), "profile.json: /phases/0/delay: message" otherwise.
  std::string in_file(const std::string& file) const;
  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

using Diagnostics = std::vector<Diagnostic>;

// Joins diagnostics one per line, for messages shown to people; with `file`, each line names it
// (Diagnostic::in_file).
std::string to_string(const Diagnostics& diagnostics, const std::string& file = {});

// The `where` of a JSON syntax error, "3:16" (line and column from 1, for Diagnostic::in_file),
// from nlohmann's byte count: the error is at the `byte`-th byte of `text` (1-based; 0 is the
// start).
std::string json_error_where(std::string_view text, std::size_t byte);

}  // namespace shaper
