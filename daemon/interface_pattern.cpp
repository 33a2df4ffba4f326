#include "interface_pattern.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace jitterd {
namespace {

// The alphabet of the covered names, first byte apart (a letter; see the header).
constexpr std::string_view kFirstBytes = "abcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kLaterBytes = "abcdefghijklmnopqrstuvwxyz0123456789";

// One element of a pattern: `*` (any run of bytes) or one byte out of `bytes` (a literal, `?`, or a
// bracket expression).
struct Element {
  bool star = false;
  std::bitset<256> bytes;
};

// Where the bracket expression that opens at `open` ends (the index of its `]`), or npos when it
// does not close, in which case fnmatch takes the `[` for itself. As glibc reads it: a `!` or `^`
// first negates, a `]` right after that is a member, `[:class:]`, `[=c=]` and `[.c.]` are single
// members, and a backslash quotes the next byte.
std::size_t bracket_end(std::string_view p, std::size_t open) {
  std::size_t i = open + 1;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) ++i;
  if (i < p.size() && p[i] == ']') ++i;
  while (i < p.size()) {
    if (p[i] == '\\') {
      i += 2;
    } else if (p[i] == '[' && i + 1 < p.size() &&
               (p[i + 1] == ':' || p[i + 1] == '=' || p[i + 1] == '.')) {
      const char kind = p[i + 1];
      const std::size_t close = p.find(std::string{kind, ']'}, i + 2);
      if (close == std::string_view::npos) return std::string_view::npos;
      i = close + 2;
    } else if (p[i] == ']') {
      return i;
    } else {
      ++i;
    }
  }
  return std::string_view::npos;
}

// The pattern as elements. A bracket's members are what fnmatch itself says of each byte, so
// ranges, classes and negation mean here exactly what they mean to interface_allowed().
std::vector<Element> elements(std::string_view p) {
  std::vector<Element> out;
  for (std::size_t i = 0; i < p.size();) {
    Element e;
    if (p[i] == '*') {
      e.star = true;
      ++i;
    } else if (p[i] == '?') {
      e.bytes.set();
      e.bytes.reset(0);
      ++i;
    } else if (p[i] == '[' && bracket_end(p, i) != std::string_view::npos) {
      const std::size_t end = bracket_end(p, i);
      const std::string bracket(p.substr(i, end + 1 - i));
      for (int b = 1; b < 256; ++b) {
        const char name[2] = {static_cast<char>(b), '\0'};
        if (::fnmatch(bracket.c_str(), name, 0) == 0) e.bytes.set(static_cast<std::size_t>(b));
      }
      i = end + 1;
    } else {
      // A literal; a backslash quotes the byte after it (a trailing one stands for itself).
      if (p[i] == '\\' && i + 1 < p.size()) ++i;
      e.bytes.set(static_cast<unsigned char>(p[i]));
      ++i;
    }
    out.push_back(e);
  }
  return out;
}

// Far more distinct state sets than any real allow-list pattern reaches at one length ("veth*": 6;
// "*[0-9]": 3), and few enough that the walk takes milliseconds: a pattern that remembers 12 bytes
// back ("*a???????????") needs 2^12.
constexpr std::size_t kMaxStateSets = 4096;

// A set of automaton states: bit i means "the first i elements have matched so far".
using States = std::uint64_t;

// Adds the states reachable without consuming a byte (a `*` may match nothing).
States closure(States s, const std::vector<Element>& pattern) {
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if ((s >> i & 1) && pattern[i].star) s |= States{1} << (i + 1);
  }
  return s;
}

States step(States s, unsigned char byte, const std::vector<Element>& pattern) {
  States next = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (!(s >> i & 1)) continue;
    if (pattern[i].star) {
      next |= States{1} << i;
    } else if (pattern[i].bytes.test(byte)) {
      next |= States{1} << (i + 1);
    }
  }
  return closure(next, pattern);
}

}  // namespace

PatternVerdict judge_interface_pattern(std::string_view pattern) {
  using Kind = PatternVerdict::Kind;
  // 64 states fit a word: a pattern of up to 63 elements. The config refuses longer patterns first.
  if (pattern.size() >= 64) return {Kind::kTooIntricate, 0, false};
  const std::vector<Element> p = elements(pattern);
  const States accepting = States{1} << p.size();
  // Every set of states some name of the current length reaches: the pattern matches every name of
  // that length exactly when each of these sets holds the accepting state. Distinct sets only, so
  // the walk stays small: at most 36 successors per set and 15 lengths.
  std::set<States> reached = {closure(1, p)};
  std::size_t first_full = 0;  // the shortest length at which every name matches
  bool every_length = true;
  for (std::size_t length = 1; length <= kMaxInterfaceNameBytes; ++length) {
    std::set<States> next;
    for (const States s : reached) {
      for (const char c : length == 1 ? kFirstBytes : kLaterBytes)
        next.insert(step(s, static_cast<unsigned char>(c), p));
    }
    reached = std::move(next);
    const bool all =
        std::all_of(reached.begin(), reached.end(), [&](States s) { return (s & accepting) != 0; });
    if (length >= kShortestManagementName) {
      if (all && first_full == 0) first_full = length;
      every_length = every_length && all;
    }
    // Bounded in time as any user data is: a pattern whose sets keep multiplying is refused rather
    // than walked (no usable allow-list pattern comes near; "veth*" reaches 6 sets).
    if (reached.size() > kMaxStateSets) return {Kind::kTooIntricate, 0, false};
  }
  if (first_full == 0) return {Kind::kSelective, 0, false};
  return {Kind::kEveryName, first_full, every_length};
}

}  // namespace jitterd
