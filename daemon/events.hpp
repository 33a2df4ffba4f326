#pragma once
// Events the daemon publishes (docs/protocol.md, "subscribe"), as typed values. The session manager
// publishes; each subscriber (a control connection) filters and serialises them.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clock.hpp"
#include "protocol/results.hpp"

namespace jitterd {

enum class EventType {
  kApplied,
  kPhaseChanged,
  kDeadlineMissed,
  kCleared,
  kLeaseExpired,
  kInterfaceGone,
  kTargetGone,      // the interface went with the target (a container stopped, a namespace deleted)
  kTargetFollowed,  // a followed target came back (new namespace, same name) and was re-applied
  kExternalChange,
  kRolledBack,  // a commit-confirmed apply was not confirmed in time
  kConfirmed,
  kError,
};

std::string_view to_string(EventType type);
std::optional<EventType> event_type_from_string(std::string_view name);
// Every event's name, in the order docs/protocol.md lists them (for messages that list them).
std::vector<std::string_view> event_type_names();

struct Event {
  EventType type = EventType::kError;
  std::uint64_t seq = 0;  // assigned by the bus, strictly increasing
  std::string interface;
  std::optional<protocol::TargetInfo> target;  // a session of a target (status's "target")
  std::string direction;                       // egress, ingress
  std::string set;                             // the rule set; "" = the whole direction
  std::string profile;
  std::string digest;
  std::string phase;
  std::string previous;  // phase-changed: the phase before; target-followed: the namespace before
  std::optional<std::size_t> step;  // schedule step, when a schedule drove it
  Stamp at;  // when it happened (for a transition: the kernel's acknowledgement)
  std::optional<Stamp> deadline;  // when it was due
  std::optional<Nanoseconds> lateness;
  std::optional<Nanoseconds> apply_time;
  bool gated = false;  // a transition the kernel's gate put in force at its deadline
  std::optional<Nanoseconds> lease;
  std::string reason;         // cleared: request, replaced, shutdown, schedule-finished
  std::string message;        // error, external-change
  std::optional<bool> ended;  // external-change: whether the session ended
  // A whole-tree transition (one switch for several lanes of an interface): every lane it changed,
  // in the order the kernel took them; the members above describe the first.
  struct LaneChange {
    std::string direction;
    std::string set;
    std::string profile;
    std::string previous;
    std::string phase;
  };
  std::vector<LaneChange> lanes;
};

// Fan-out to subscribers. Single-threaded (the io_context thread); a subscriber's callback must not
// block (connections queue and write asynchronously).
class EventBus {
 public:
  using Callback = std::function<void(const Event&)>;

  // Returns a token for unsubscribe().
  std::uint64_t subscribe(Callback callback);
  void unsubscribe(std::uint64_t token);
  void publish(Event event);
  std::size_t subscribers() const { return subscribers_.size(); }
  std::uint64_t published() const { return next_seq_ - 1; }

 private:
  std::map<std::uint64_t, Callback> subscribers_;
  std::uint64_t next_token_ = 1;
  std::uint64_t next_seq_ = 1;
};

}  // namespace jitterd
