#include "replies.hpp"

#include "control_client.hpp"
#include "shaper/json_reader.hpp"

namespace jitterctl {

namespace {

using Json = nlohmann::json;
using jitterd::protocol::Members;
using jitterd::protocol::read_as;

// protocol::WrongType for every reply: a ProtocolError that says jitterd broke the protocol.
[[noreturn]] void wrong_type(const std::string& pointer, const char* expected, const Json& found) {
  const std::string shown = shaper::json_excerpt(found);
  throw ProtocolError(
      "unexpected reply from jitterd: " + (pointer.empty() ? std::string("/") : pointer) +
      ": expected " + expected + ", found " + shown);
}

// The result of a method, as a T.
template <typename T>
T read_result(const Json& result) {
  return read_as<T>(result, "/result", wrong_type);
}

}  // namespace

SessionStatus read_session_status(const Json& status) {
  return read_result<SessionStatus>(status);
}

std::vector<SessionStatus> read_session_statuses(const Json& result) {
  return jitterd::protocol::read_lanes_result(result, "/result", wrong_type);
}

std::vector<SessionStatus> read_status_result(const Json& result) {
  return read_result<jitterd::protocol::SessionList>(result).sessions;
}

std::vector<InterfaceInfo> read_interfaces_result(const Json& result) {
  return read_result<jitterd::protocol::InterfaceList>(result).interfaces;
}

ProfileListing read_profiles_result(const Json& result) {
  return read_result<ProfileListing>(result);
}

VersionInfo read_version_result(const Json& result) {
  return read_result<VersionInfo>(result);
}

std::vector<CommandInfo> read_list_commands_result(const Json& result) {
  return read_result<jitterd::protocol::CommandList>(result).commands;
}

ClockReading read_clock_result(const Json& result) {
  return read_result<ClockReading>(result);
}

StagedChange read_stage_result(const Json& result) {
  return read_result<StagedChange>(result);
}

CommittedChange read_commit_result(const Json& result) {
  return read_result<CommittedChange>(result);
}

std::vector<std::string> read_clear_result(const Json& result) {
  return read_result<jitterd::protocol::Cleared>(result).cleared;
}

std::string read_metrics_result(const Json& result) {
  return read_result<jitterd::protocol::MetricsText>(result).text;
}

Event read_event(const Json& event) {
  const Members f(event, "", wrong_type);
  Event e;
  e.event = f.text("event");
  e.seq = f.count("seq");
  e.interface = f.text("interface");
  e.profile = f.text("profile");
  e.phase = f.text("phase");
  e.previous = f.text("previous");
  e.step = f.optional_integer("step");
  e.at = f.time("at");
  e.deadline = f.time("deadline");
  e.lateness = f.optional_duration("lateness_ns");
  e.apply = f.optional_duration("apply_ns");
  e.lease = f.optional_duration("lease_ns");
  e.reason = f.text("reason");
  e.what = f.text("what");
  e.ended = f.optional_flag("ended");
  e.message = f.text("message");
  return e;
}

}  // namespace jitterctl
