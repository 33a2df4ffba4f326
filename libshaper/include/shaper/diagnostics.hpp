#pragma once
// Bad user data (a trace line, a profile field, a spec value) is reported as returned diagnostics,
// never as exceptions: the caller decides whether one bad value is fatal. Each diagnostic says where
// (a file:line:column, a JSON pointer, a field path), what is wrong, and how to fix it.

#include <string>
#include <vector>

namespace shaper {

struct Diagnostic {
  std::string where;    // "capture.txt:812:17", "/phases/high/loss/p", "slot.max_delay"
  std::string message;  // what is wrong, with the allowed range and a fix where one exists

  std::string to_string() const { return where.empty() ? message : where + ": " + message; }
  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

using Diagnostics = std::vector<Diagnostic>;

// Joins diagnostics one per line, for messages shown to people.
std::string to_string(const Diagnostics& diagnostics);

}  // namespace shaper
