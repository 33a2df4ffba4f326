#pragma once
// The results and events of docs/protocol.md as typed structs, read at the edge so that the
// commands and tables never look into JSON. Reading is lenient where jitterd may grow (unknown
// members are ignored, absent or null members take their defaults) and strict about types: a member
// of the wrong type is a ProtocolError that names it ("/sessions/0/time_in_phase_ns: expected an
// integer").

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "shaper/quantities.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

// A moment as jitterd reports it (docs/protocol.md, "Times").
struct Timestamp {
  std::int64_t monotonic_ns = 0;
  std::int64_t realtime_ns = 0;
};

struct NextTransition {
  std::string phase;
  std::int64_t step = 0;
  std::optional<Timestamp> deadline;
  Nanoseconds in{0};
};

struct ScheduleStatus {
  std::string state;  // "running" or "paused"
  std::int64_t step = 0;
  std::int64_t steps = 0;
  bool loop = false;
  std::int64_t iteration = 0;
};

struct LeaseStatus {
  std::optional<Timestamp> expires;
  Nanoseconds remaining{0};
};

struct Counters {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;
  std::uint64_t drops = 0;
  std::uint64_t backlog_bytes = 0;
  std::uint64_t backlog_packets = 0;
};

struct TransitionRecord {
  std::string phase;
  std::optional<Timestamp> deadline;
  std::optional<Timestamp> applied;
  Nanoseconds lateness{0};
  Nanoseconds apply{0};
};

struct Transitions {
  std::uint64_t count = 0;
  std::uint64_t missed = 0;
  Nanoseconds late_max{0};
  std::vector<TransitionRecord> recent;  // oldest first
};

// One entry of `status` (and the result of apply, switch, pause, resume, skip, renew).
struct SessionStatus {
  std::string interface;
  std::int64_t index = 0;
  std::string direction;  // "egress" or "ingress" (empty from an older jitterd: egress)
  std::string set;        // the rule set; empty: the whole direction
  std::vector<std::string> match;
  std::vector<std::string> unshaped;  // what the SSH guard keeps out of the shaping
  std::optional<Nanoseconds> confirm_remaining;  // a commit-confirmed apply not confirmed yet
  std::string state;  // "pending", "active" or "paused"
  std::string profile;
  std::string digest;
  std::string phase;
  std::optional<Timestamp> phase_since;
  Nanoseconds time_in_phase{0};
  std::optional<ScheduleStatus> schedule;  // nullopt: a held phase
  // The next change: the start of a pending session, a switch at a time, or the next schedule step.
  std::optional<NextTransition> next_transition;
  std::optional<LeaseStatus> lease;        // nullopt: no lease
  Counters counters;
  Transitions transitions;
};

struct RootQdisc {
  std::string kind;
  std::string handle;
  std::string owner;  // "jitterd", "kernel" or "other"
};

struct InterfaceInfo {
  std::string name;
  std::int64_t index = 0;
  bool allowed = false;
  bool session = false;
  std::optional<RootQdisc> root;
};

struct ScheduleSummary {
  std::int64_t steps = 0;
  bool loop = false;
  Nanoseconds duration{0};
};

struct ProfileSummary {
  std::string name;
  std::string file;
  std::string digest;
  std::string description;
  std::vector<std::string> phases;
  std::optional<ScheduleSummary> schedule;
};

struct InvalidProfile {
  std::string file;
  std::vector<std::string> errors;
};

struct ProfileListing {
  std::vector<ProfileSummary> profiles;
  std::vector<InvalidProfile> invalid;
};

struct VersionInfo {
  std::string version;
  std::int64_t protocol = 0;
  std::int64_t pid = 0;
  std::string kernel;
  std::optional<Timestamp> started;
};

struct CommandInfo {
  std::string name;
  std::string summary;
  bool mutating = false;
};

// One event line; members that the event does not carry stay empty.
struct Event {
  std::string event;  // "applied", "phase-changed", ... (docs/protocol.md, "subscribe")
  std::uint64_t seq = 0;
  std::string interface;
  std::string profile;
  std::string phase;
  std::string previous;
  std::optional<std::int64_t> step;
  std::optional<Timestamp> at;
  std::optional<Timestamp> deadline;
  std::optional<Nanoseconds> lateness;
  std::optional<Nanoseconds> apply;
  std::optional<Nanoseconds> lease;
  std::string reason;  // cleared
  std::string what;    // external-change
  std::optional<bool> ended;
  std::string message;  // error
};

// Each reads one method's `result` (or one event line) and throws ProtocolError on a wrong type.
SessionStatus read_session_status(const nlohmann::json& status);
// apply, switch ... name one session (a status object) or several ({"sessions": [...]}).
std::vector<SessionStatus> read_session_statuses(const nlohmann::json& result);
std::vector<SessionStatus> read_status_result(const nlohmann::json& result);
std::vector<InterfaceInfo> read_interfaces_result(const nlohmann::json& result);
ProfileListing read_profiles_result(const nlohmann::json& result);
VersionInfo read_version_result(const nlohmann::json& result);
std::vector<CommandInfo> read_list_commands_result(const nlohmann::json& result);
std::vector<std::string> read_clear_result(const nlohmann::json& result);
std::string read_metrics_result(const nlohmann::json& result);
Event read_event(const nlohmann::json& event);

}  // namespace jitterctl
