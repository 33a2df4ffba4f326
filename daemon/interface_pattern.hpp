#pragma once
// Whether an interfaces.allow pattern lets through the interface a host is managed through whatever
// it is called, decided by what the fnmatch(3) pattern matches, not by how it is spelt: "*", "?*",
// "**", "[!.]*", "[a-z]*" and "??*" are all the same danger.

#include <cstddef>
#include <string_view>

namespace jitterd {

// The names the check covers: those the kernel and udev give interfaces (lo, em1, eth0, enp0s3,
// wlp2s0): a lowercase letter, then lowercase letters and digits, at most 15 bytes (IFNAMSIZ is 16
// with the NUL).
inline constexpr std::size_t kMaxInterfaceNameBytes = 15;
// Management interfaces have names of 2 bytes and more ("lo"); a pattern may take every
// one-letter name ("?") without taking one of them.
inline constexpr std::size_t kShortestManagementName = 2;

struct PatternVerdict {
  enum class Kind {
    kSelective,     // at every length some name is not matched: the pattern looks at the name
    kEveryName,     // every name of `length` bytes is matched
    kTooIntricate,  // not decided within the bound; refused like kEveryName
  };
  Kind kind = Kind::kSelective;
  std::size_t length = 0;     // kEveryName: the shortest such length
  bool every_length = false;  // kEveryName: and at every other length from 2 to 15 too ("*")
};

// Decides, for `pattern` as Config::interface_allowed uses it (fnmatch, flags 0), whether there is
// a length from kShortestManagementName to kMaxInterfaceNameBytes at which it matches every covered
// name. Exact, not sampled: the pattern becomes a small automaton, and every length is walked with
// the sets of automaton states the names of that length reach. Patterns of 64 bytes and more (the
// config refuses them first) are kTooIntricate.
PatternVerdict judge_interface_pattern(std::string_view pattern);

}  // namespace jitterd
