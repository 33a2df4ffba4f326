#pragma once
// The results of docs/protocol.md's methods as structs: the daemon fills them and writes them with
// to_json, jitterctl reads them with read_members (reader.hpp). A member added here is added to
// both ends; what is left out of a result is its reader's default.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/reader.hpp"
#include "protocol/values.hpp"

namespace jitterd::protocol {

// What the kernel counts for jitterd's qdisc of a lane.
struct Counters {
  std::uint64_t packets = 0;  // sent on by the qdisc
  std::uint64_t bytes = 0;
  std::uint64_t drops = 0;  // loss model and queue limit
  std::uint64_t backlog_bytes = 0;
  std::uint64_t backlog_packets = 0;
};

struct TransitionRecord {
  std::string phase;
  std::optional<std::size_t> step;  // nullopt: not a schedule step (a switch)
  Stamp deadline;
  Stamp applied;
  Nanoseconds lateness{0};
  Nanoseconds apply_time{0};
  // Put in force by the kernel's gate at the deadline (a kernel-timed switch, armed ahead): then
  // `applied` is the deadline itself, not a wake-up's acknowledgement.
  bool gated = false;
};

// Who started a session (SO_PEERCRED).
struct Client {
  std::uint32_t uid = 0;
  std::int32_t pid = 0;
};

// Where a session shapes when the request named a target other than jitterd's own namespace (a
// network namespace, a process's, a container's): the target as the user named it, the interface
// and direction as the target sees them, the namespace's identity, and how it is reached. The
// session's own interface and direction are where jitterd's qdiscs are (for `host-veth`: the host
// side of the target's veth, whose ingress is the target's egress; for `inside`: the target's own).
// How a target is reached (docs/protocol.md, "Targets"): netlink inside its own namespace, or its
// veth's host side in jitterd's namespace.
inline constexpr std::string_view kViaInside = "inside";
inline constexpr std::string_view kViaHostVeth = "host-veth";

struct TargetInfo {
  std::string kind;                          // netns, netns-path, pid, container
  std::string name;                          // as given: "blue", "/proc/42/ns/net", "42", "redis0"
  std::string interface;                     // inside the target: "eth0"
  Direction direction = Direction::kEgress;  // as the target sees it
  std::string namespace_id;                  // "net:[4026532281]"
  std::string via;                           // kViaInside or kViaHostVeth
  bool follow = false;  // re-applied when the target comes back after it went (apply's "follow")
  friend bool operator==(const TargetInfo&, const TargetInfo&) = default;
};

// One entry of `status`, and the result of apply, switch, pause, resume, skip, renew and confirm.
struct SessionStatus {
  std::string interface;
  std::optional<TargetInfo> target;  // nullopt: an interface of jitterd's own namespace
  std::int64_t index = 0;
  Direction direction = Direction::kEgress;
  std::string set;  // the rule set; empty: the whole direction
  std::vector<std::string> match;
  std::vector<std::string> unshaped;  // what the SSH guard keeps out of the shaping
  bool offloads_off = false;
  std::string state;  // pending, active, paused; waiting: a followed target that is gone
  std::string profile;
  std::string digest;
  std::string phase;  // empty while pending
  std::optional<Stamp> phase_since;
  Nanoseconds time_in_phase{0};
  // The next change: the start of a pending session, a switch at a time, or the next schedule step.
  struct Next {
    std::string phase;
    std::optional<std::size_t> step;  // nullopt: no schedule step drives it
    Stamp deadline;
    Nanoseconds in{0};
  };
  struct Schedule {
    std::string state;  // running, paused
    std::size_t step = 0;
    std::size_t steps = 0;
    bool loop = false;
    std::uint64_t iteration = 0;
  };
  std::optional<Schedule> schedule;  // nullopt: a held phase
  std::optional<Next> next_transition;
  struct Lease {
    Nanoseconds length{0};
    Stamp expires;
    Nanoseconds remaining{0};
  };
  std::optional<Lease> lease;
  struct Confirm {
    Stamp deadline;
    Nanoseconds remaining{0};
  };
  std::optional<Confirm> confirm;    // a commit-confirmed apply still waiting for confirm
  std::optional<Counters> counters;  // nullopt while pending
  std::uint64_t transitions = 0;
  std::uint64_t missed = 0;
  Nanoseconds late_max{0};
  std::vector<TransitionRecord> recent;  // oldest first
  Client client;
};

struct RootQdisc {
  std::string kind;
  std::string handle;
  std::string owner;  // jitterd, kernel or other
};

struct InterfaceInfo {
  std::string name;
  std::int64_t index = 0;
  bool allowed = false;
  bool session = false;
  std::optional<RootQdisc> root;
};

struct ScheduleSummary {
  std::size_t steps = 0;
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

// The result of `profiles`.
struct ProfileListing {
  std::vector<ProfileSummary> profiles;
  std::vector<InvalidProfile> invalid;
};

// The result of `version`.
struct VersionInfo {
  std::string version;
  std::int64_t protocol = 0;
  std::int64_t pid = 0;
  std::string kernel;
  std::optional<Stamp> started;
};

// An entry of `list-commands`.
struct CommandInfo {
  std::string name;
  std::string summary;
  bool mutating = false;
};

// The results that are one list: `status` ({"sessions": [...]}), `interfaces`, `list-commands`,
// `clear` (what ended: "veth0 egress") and `metrics` (the Prometheus text).
struct SessionList {
  std::vector<SessionStatus> sessions;
};
struct InterfaceList {
  std::vector<InterfaceInfo> interfaces;
};
struct CommandList {
  std::vector<CommandInfo> commands;
};
struct Cleared {
  std::vector<std::string> cleared;
};
struct MetricsText {
  std::string text;
};

// `clock`: both clocks when jitterd read the request and when it made the reply; with the client's
// own times of sending and receiving, the four timestamps of an NTP-style offset estimate.
struct ClockReading {
  Stamp received;
  Stamp replied;
};
// `stage`: the token that commits or aborts a checked change, and when it stops being valid.
struct StagedChange {
  std::string token;
  std::string method;  // apply, switch or clear
  Stamp expires;
};
// `commit`: the staged change, done at (apply, switch) or after (clear) `at`: what its method
// answered, `sessions` or `cleared`.
struct CommittedChange {
  std::string token;
  std::string method;
  Stamp at;
  std::vector<SessionStatus> sessions;
  std::vector<std::string> cleared;
};
// `abort`: the token dropped.
struct AbortedChange {
  std::string token;
};

void to_json(nlohmann::json& j, const Counters& c);
void to_json(nlohmann::json& j, const TransitionRecord& t);
void to_json(nlohmann::json& j, const TargetInfo& t);
void to_json(nlohmann::json& j, const SessionStatus& s);
void to_json(nlohmann::json& j, const InterfaceInfo& i);
void to_json(nlohmann::json& j, const ProfileSummary& p);
void to_json(nlohmann::json& j, const InvalidProfile& p);
void to_json(nlohmann::json& j, const ProfileListing& l);
void to_json(nlohmann::json& j, const VersionInfo& v);
void to_json(nlohmann::json& j, const CommandInfo& c);
void to_json(nlohmann::json& j, const SessionList& l);
void to_json(nlohmann::json& j, const InterfaceList& l);
void to_json(nlohmann::json& j, const CommandList& l);
void to_json(nlohmann::json& j, const Cleared& c);
void to_json(nlohmann::json& j, const MetricsText& m);
void to_json(nlohmann::json& j, const ClockReading& c);
void to_json(nlohmann::json& j, const StagedChange& s);
void to_json(nlohmann::json& j, const CommittedChange& c);
void to_json(nlohmann::json& j, const AbortedChange& a);

void read_members(const Members& m, Counters& out);
void read_members(const Members& m, TransitionRecord& out);
void read_members(const Members& m, Client& out);
void read_members(const Members& m, SessionStatus::Schedule& out);
void read_members(const Members& m, SessionStatus::Next& out);
void read_members(const Members& m, SessionStatus::Lease& out);
void read_members(const Members& m, SessionStatus::Confirm& out);
void read_members(const Members& m, TargetInfo& out);
void read_members(const Members& m, SessionStatus& out);
void read_members(const Members& m, RootQdisc& out);
void read_members(const Members& m, InterfaceInfo& out);
void read_members(const Members& m, ScheduleSummary& out);
void read_members(const Members& m, ProfileSummary& out);
void read_members(const Members& m, InvalidProfile& out);
void read_members(const Members& m, ProfileListing& out);
void read_members(const Members& m, VersionInfo& out);
void read_members(const Members& m, CommandInfo& out);
void read_members(const Members& m, SessionList& out);
void read_members(const Members& m, InterfaceList& out);
void read_members(const Members& m, CommandList& out);
void read_members(const Members& m, Cleared& out);
void read_members(const Members& m, MetricsText& out);
void read_members(const Members& m, ClockReading& out);
void read_members(const Members& m, StagedChange& out);
void read_members(const Members& m, CommittedChange& out);
void read_members(const Members& m, AbortedChange& out);

// A request that names lanes (apply, switch ...) is answered with one status when it touched one
// session, and with {"sessions": [...]} when it touched several (both directions, a whole-tree
// switch).
nlohmann::json lanes_result(const std::vector<SessionStatus>& sessions);
std::vector<SessionStatus> read_lanes_result(const nlohmann::json& result,
                                             const std::string& pointer, WrongType wrong_type);

}  // namespace jitterd::protocol
