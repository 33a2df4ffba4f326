#pragma once
// The methods of docs/protocol.md: one table, in the order `list-commands` lists them, and the
// protocol version. The daemon's dispatcher pairs each entry with its handler (daemon/protocol.cpp
// checks at compile time that its handler table follows this one).

#include <cstddef>
#include <string>
#include <string_view>

namespace jitterd::protocol {

// What `version` reports and jitterctl compares with its own.
inline constexpr int kProtocolVersion = 1;

enum class Method {
  kListCommands,
  kVersion,
  kInterfaces,
  kProfiles,
  kApply,
  kSwitch,
  kConfirm,
  kPause,
  kResume,
  kSkip,
  kStatus,
  kClear,
  kRenew,
  kSubscribe,
  kMetrics,
  kClock,
  kStage,
  kCommit,
  kAbort,
  kProbe,
};

struct MethodInfo {
  Method method;
  std::string_view name;
  std::string_view summary;
  bool mutating;  // changes shaping (logged with the peer)
};

inline constexpr MethodInfo kMethods[] = {
    {Method::kListCommands, "list-commands", "the methods, with a line each", false},
    {Method::kVersion, "version", "jitterd's version, protocol version, pid and kernel", false},
    {Method::kInterfaces, "interfaces",
     "interfaces with their root qdisc and whether jitterd may shape or owns them", false},
    {Method::kProfiles, "profiles", "the profiles in the profile folders, with digests", false},
    {Method::kApply, "apply",
     "shape an interface (egress, ingress or both; all traffic or a matched rule set) with a "
     "profile: a held "
     "phase or its schedule, now or at a time, with a lease or commit-confirmed",
     true},
    {Method::kSwitch, "switch",
     "change the phase of an interface (every lane at once) or of one lane, now or at a time, in "
     "place",
     true},
    {Method::kConfirm, "confirm",
     "keep a commit-confirmed apply (otherwise it rolls back by itself)", true},
    {Method::kPause, "pause", "pause an interface's schedule", true},
    {Method::kResume, "resume", "resume a paused schedule", true},
    {Method::kSkip, "skip", "jump to a step of the schedule", true},
    {Method::kStatus, "status",
     "sessions: phase, next transition, lease, kernel counters, transitions", false},
    {Method::kClear, "clear", "remove jitterd's shaping from an interface, or from all", true},
    {Method::kRenew, "renew", "renew a session's lease", true},
    {Method::kSubscribe, "subscribe",
     "stream events (applied, phase-changed, cleared, ...) on this connection", false},
    {Method::kMetrics, "metrics", "Prometheus text exposition", false},
    {Method::kClock, "clock",
     "both clocks when the request was read and when the reply was made (a clock offset "
     "estimate)",
     false},
    {Method::kStage, "stage",
     "check an apply, switch or clear without doing it; a token to commit or abort it", false},
    {Method::kCommit, "commit", "do a staged change, at a wall-clock deadline", true},
    {Method::kAbort, "abort", "drop a staged change", false},
    {Method::kProbe, "probe",
     "ICMP echo probes from this host to a few addresses: each probe's round trip or its loss",
     false},
};

// The table entry of `name`; null for no such method.
const MethodInfo* find_method(std::string_view name);
// "list-commands, version, ...": every name, for a hint.
std::string method_names();

}  // namespace jitterd::protocol
