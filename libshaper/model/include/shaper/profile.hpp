#pragma once
// The profile format (docs/profile-format.md): named phases, each a full netem spec, an optional
// schedule that replays them, the capture's provenance, and a content digest. JSON is converted to
// these typed structs here, at the edge; nothing else in the project handles profile JSON.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/expected.hpp"
#include "shaper/netem_spec.hpp"

namespace shaper {

inline constexpr int kProfileVersion = 1;

// Limits that keep a hostile or mistaken file from exhausting the daemon.
inline constexpr std::size_t kMaxProfileBytes = 8 * 1024 * 1024;
inline constexpr std::size_t kMaxPhases = 64;
inline constexpr std::size_t kMaxScheduleSteps = 10000;
inline constexpr std::size_t kMaxNameLength = 64;
inline constexpr std::size_t kMaxDescriptionLength = 4096;

struct Provenance {
  std::string capture;               // the capture's file name (no directories)
  std::string format;                // "ping", "fping", ...
  std::optional<Nanoseconds> start;  // first sample, since the Unix epoch
  std::optional<Nanoseconds> end;    // last sample
  std::uint64_t samples = 0;
  std::string sha256;  // of the capture file, lower-case hex
  // How RTTs became delays: this much was subtracted from every RTT, and the rest halved or not.
  // The validator needs both to put the capture next to the profile.
  Nanoseconds baseline{0};
  bool halved = false;
  friend bool operator==(const Provenance&, const Provenance&) = default;
};

// Standard tables are stored by name and generated on load, so a profile stays small and readable.
enum class TableSource { kNone, kCustom, kNormal, kPareto, kParetoNormal, kUniform };

struct Phase {
  std::string name;
  std::string description;
  NetemSpec spec;
  TableSource delay_table = TableSource::kNone;  // how spec.delay.distribution was given
  TableSource slot_table = TableSource::kNone;
  friend bool operator==(const Phase&, const Phase&) = default;
};

struct ScheduleStep {
  std::string phase;
  Nanoseconds duration{0};
  friend bool operator==(const ScheduleStep&, const ScheduleStep&) = default;
};

struct Schedule {
  std::vector<ScheduleStep> steps;
  bool loop = false;
  // Set when the schedule replays a capture's time line window by window (jitterctl compile
  // --replay): the window's length. The steps then follow the capture's times, so a timeline judge
  // (validate) may compare them probe by probe; nothing else changes how the schedule runs.
  std::optional<Nanoseconds> replay_window;
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

struct Profile {
  int version = kProfileVersion;
  std::string name;
  std::string description;
  std::optional<Provenance> provenance;
  // Whether jitter may reorder packets. When false, phases keep order through netem's rate (see
  // docs/profile-format.md for what that does to the delays).
  bool reorder = true;
  std::vector<Phase> phases;  // names unique; kept sorted by name (the canonical order)
  std::optional<Schedule> schedule;
  friend bool operator==(const Profile&, const Profile&) = default;

  const Phase* find_phase(std::string_view phase_name) const;
  // The profile cut down to one phase, held (no schedule), named "<name> (phase P)": what a link
  // shows while jitterd holds that phase. nullopt when there is no such phase.
  std::optional<Profile> held(std::string_view phase_name) const;
};

// A profile as loaded, with its digest (computed once, while loading).
struct LoadedProfile {
  Profile profile;
  std::string digest;  // "sha256:<hex>" of the canonical form
};

// A profile, or the diagnostics that refused it: each `where` is a JSON pointer
// ("/phases/high/loss/p").
using ProfileLoad = Expected<LoadedProfile>;

// Parses and strictly validates a profile: unknown keys, wrong types, out-of-range values and
// broken references are all reported, each with its JSON pointer and what is allowed. A "digest"
// member, if present, must match the content.
ProfileLoad parse_profile(std::string_view text);

// Reads and parses a profile file: at most kMaxProfileBytes are read (a larger file is a
// diagnostic, not a gigabyte in memory). Throws SystemError when the file cannot be opened or read.
ProfileLoad load_profile_file(const std::string& path);

// Every check that parse_profile makes on values, for profiles built in code (the compiler).
Diagnostics validate(const Profile& profile);

// The canonical form: compact JSON, keys sorted, without "digest". Its SHA-256 is the digest.
std::string canonical_profile_json(const Profile& profile);
std::string profile_digest(const Profile& profile);

// The file form: pretty-printed, with "digest" added.
std::string profile_to_json(const Profile& profile);

// RFC 3339 in UTC ("2026-11-30T20:00:00.25Z", up to 9 fraction digits) <-> time since the Unix
// epoch.
std::optional<Nanoseconds> parse_utc_timestamp(std::string_view text);
std::string format_utc_timestamp(Nanoseconds since_epoch);

}  // namespace shaper
