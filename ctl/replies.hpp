#pragma once
// The results and events of docs/protocol.md as typed structs (protocol/results.hpp), read at the
// edge so that the commands and tables never look into JSON. Reading is lenient where jitterd may
// grow (unknown members are ignored, absent or null members take their defaults) and strict about
// types: a member of the wrong type is a ProtocolError that names it
// ("/sessions/0/time_in_phase_ns: expected an integer").

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "protocol/results.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

// The results are protocol/'s structs, the ones jitterd writes.
using jitterd::protocol::ClockReading;
using jitterd::protocol::CommandInfo;
using jitterd::protocol::CommittedChange;
using jitterd::protocol::Counters;
using jitterd::protocol::Direction;
using jitterd::protocol::InterfaceInfo;
using jitterd::protocol::InvalidProfile;
using jitterd::protocol::ProfileListing;
using jitterd::protocol::ProfileSummary;
using jitterd::protocol::SessionStatus;
using jitterd::protocol::StagedChange;
using jitterd::protocol::Stamp;
using jitterd::protocol::TransitionRecord;
using jitterd::protocol::VersionInfo;

// One event line; members that the event does not carry stay empty.
struct Event {
  std::string event;  // "applied", "phase-changed", ... (docs/protocol.md, "subscribe")
  std::uint64_t seq = 0;
  std::string interface;
  std::string profile;
  std::string phase;
  std::string previous;
  std::optional<std::int64_t> step;
  std::optional<Stamp> at;
  std::optional<Stamp> deadline;
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
ClockReading read_clock_result(const nlohmann::json& result);
StagedChange read_stage_result(const nlohmann::json& result);
CommittedChange read_commit_result(const nlohmann::json& result);

}  // namespace jitterctl
