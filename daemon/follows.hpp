#pragma once
// `follow` (issue 23, docs/operations.md "Following a target across restarts"): an apply whose
// target is a name that survives a restart (a container name, an `ip netns` name) and that asked
// for "follow": true is applied again when the target comes back under that name.
//
// The sessions themselves know nothing of it: when the target goes they end with `target-gone`
// as any target's do (its event carries "following": true), and what they installed is removed,
// so nothing is left while the target is down. The follow stays, here, waiting:
//  - every kPollInterval it sends the apply request again, as first given (without "start" and
//    "confirm"), for the peer that first sent it; a refusal (no such container, not running, the
//    interface not there yet) keeps it waiting, and the refusal is logged when it changes;
//  - when the apply takes effect it publishes `target-followed`, naming the namespace before
//    ("previous_namespace") and now (the target's "namespace"), and the follow is active again.
//    A different container created under the same name is followed too: by design, the name is
//    what is followed, and the event says so when the namespace differs;
//  - `clear` of the target (or of everything) ends a waiting follow, with nothing to remove, and
//    a `cleared` event; `renew` restarts its lease; `status` lists it with state "waiting";
//  - its lease, when the apply had one, runs on from the moment the target went, for the apply's
//    whole lease length; when it runs out the follow ends with `lease-expired`.
// An active follow ends with its sessions: a clear, a lease that expired, a rollback, an apply
// that replaced them without "follow". Follows are not written to the ledger: a jitterd killed
// while one waits has nothing installed for it, and the restarted jitterd does not follow it.
//
// Why a poll and not the runtime's event stream: one path for containers (Docker, Podman, CRI) and
// `ip netns` names (no event stream at all), nothing held open to a runtime that may restart, and
// a return noticed within a second at the cost of one API request (or one failed open) a second
// per waiting follow.
//
// Everything runs on the io_context thread.

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "asio.hpp"
#include "clock.hpp"
#include "events.hpp"
#include "logger.hpp"
#include "sessions.hpp"

namespace jitterd {

class Follows {
 public:
  // Sends one apply request (its params) for `peer`; returns the reply line (Dispatcher::handle).
  using Apply = std::function<std::string(const nlohmann::json& params, const Peer& peer)>;
  static constexpr Nanoseconds kPollInterval = std::chrono::seconds{1};

  Follows(asio::any_io_executor executor, EventBus& bus, Logger& log,
          Nanoseconds poll = kPollInterval);
  Follows(const Follows&) = delete;
  Follows& operator=(const Follows&) = delete;
  ~Follows();

  void set_apply(Apply apply) { apply_ = std::move(apply); }

  // An apply with "follow": true took effect: `params` as sent, `applied` its sessions.
  void track(const nlohmann::json& params, const Peer& peer,
             const std::vector<SessionStatus>& applied);

  // The waiting follows of the target `kind name` on its interface `interface` ("": any).
  bool waiting(const std::string& kind, const std::string& name,
               const std::string& interface) const;
  // Ends them (a clear): what ended ("eth0 of container redis0 (waiting)").
  std::vector<std::string> clear_waiting(const std::string& kind, const std::string& name,
                                         const std::string& interface);
  std::vector<std::string> clear_all_waiting();
  // Their lease restarted, `lease` long (nullopt: the length they had).
  std::vector<SessionStatus> renew_waiting(const std::string& kind, const std::string& name,
                                           const std::string& interface,
                                           std::optional<Nanoseconds> lease);
  // Every waiting follow (interface "" and kind "": all), as status entries.
  std::vector<SessionStatus> statuses(const std::string& kind = "", const std::string& name = "",
                                      const std::string& interface = "") const;
  std::size_t size() const { return follows_.size(); }
  std::size_t waiting_count() const;

 private:
  struct Follow {
    nlohmann::json params;  // the apply's, without start and confirm
    Peer peer;
    SessionStatus first;  // the first session it made (profile, direction, target...)
    std::optional<Nanoseconds> lease;
    bool waiting = false;
    MonotonicTime gone_at{};
    std::optional<MonotonicTime> expires;  // waiting, with a lease
    std::string refusal;                   // the last re-apply's refusal, for the log
  };
  using Key = std::string;  // kind, name, interface as the target sees it, set
  static Key key_of(const protocol::TargetInfo& t, const std::string& set);
  bool matches(const Follow& f, const std::string& kind, const std::string& name,
               const std::string& interface) const;
  void on_event(const Event& e);
  void arm();
  void poll();
  // One waiting follow's turn: expired, re-applied, or still waiting.
  void try_follow(const Key& key);
  SessionStatus describe(const Follow& f) const;
  Event event_of(const Follow& f, EventType type) const;

  EventBus& bus_;
  Logger& log_;
  Nanoseconds poll_;
  asio::steady_timer timer_;
  bool armed_ = false;
  Apply apply_;
  std::map<Key, Follow> follows_;
  std::optional<Key> reapplying_;  // the follow whose apply is being sent again
  std::uint64_t subscription_ = 0;
};

}  // namespace jitterd
