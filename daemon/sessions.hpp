#pragma once
// Sessions: one per shaped lane of an interface (a direction, and optionally a rule set in it),
// holding the profile, the phase in force, the schedule (on absolute deadlines, scheduler.hpp), the
// lease (a dead-man switch), the commit-confirm deadline and the record of transitions. The lanes
// of an interface share one kernel tree per direction: the manager computes the whole layout and
// the backend makes the kernel hold it, so a switch of several lanes is one step. Everything runs
// on the io_context thread. Requests arrive as typed values (the protocol layer converted the
// JSON); bad requests come back as RequestError; kernel failures are exceptions that the control
// session turns into error replies. Transitions that timers start catch their own failures and
// publish them as `error` events, since there is no request to answer.

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "asio.hpp"
#include "clock.hpp"
#include "config.hpp"
#include "events.hpp"
#include "ledger.hpp"
#include "logger.hpp"
#include "protocol/errors.hpp"
#include "protocol/results.hpp"
#include "scheduler.hpp"
#include "shaper/expected.hpp"
#include "shaper/profile.hpp"
#include "shaper/route_facts.hpp"
#include "shaping_backend.hpp"

namespace jitterd {

// Who asked (SO_PEERCRED).
struct Peer {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::int32_t pid = 0;
  std::string command;  // /proc/<pid>/comm, for the log
};

// A request the daemon refuses: a protocol error code (docs/protocol.md) and the usual
// what/where/fix.
using RequestError = protocol::Error;
using protocol::ErrorCode;

// What a request comes to: its result, or why it was refused (shaper/expected.hpp).
template <typename T>
using Outcome = shaper::Expected<T, RequestError>;

// Which sessions a request names: an interface, and optionally one direction and one rule set.
struct Target {
  Target() = default;
  // An interface alone: every lane of it.
  Target(std::string name) : interface(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  Target(const char* name) : interface(name) {}             // NOLINT(google-explicit-constructor)
  std::string interface;
  std::optional<Direction> direction;
  std::optional<std::string> set;  // "" = the session shaping the whole direction
};

struct ApplyRequest {
  std::string interface;  // of jitterd's namespace (for a target: where it is shaped)
  // A target's interface (target_resolver.hpp): `interface` is its host-side veth, and the target
  // allow-list (checked by the protocol layer) stands for the interface allow-list. Its direction
  // is unused: each session's is the opposite of the session's own.
  std::optional<protocol::TargetInfo> target;
  std::vector<Direction> directions{
      Direction::kEgress};                     // both: the same profile on each, as one apply
  std::string set;                             // "" = the whole direction
  std::vector<shaper::U32Selector> selectors;  // compiled match rules; empty when set == ""
  std::vector<std::string> match;              // the rules as text, for status
  bool protect_ssh = true;                     // spare SSH on an interface with the default route
  std::vector<shaper::SshConnection> ssh_connections;  // the requester's own ($SSH_CONNECTION)
  std::optional<Nanoseconds> confirm;  // commit-confirmed: rolled back unless confirmed
  bool offloads_off = false;           // TSO/GSO/GRO off until the interface is clear
  std::shared_ptr<const shaper::Profile> profile;
  std::string digest;
  std::optional<std::string> phase;  // hold this phase
  bool schedule = false;             // run the profile's schedule
  MonotonicTime start;               // <= now: start at once
  std::optional<Nanoseconds> lease;
  bool force = false;
};

using protocol::SessionStatus;
using protocol::TransitionRecord;

// Figures for the metrics endpoint, kept as running totals.
struct SessionMetrics {
  std::uint64_t transitions = 0;
  std::uint64_t missed_deadlines = 0;
  std::uint64_t lease_expirations = 0;
  std::uint64_t transition_errors = 0;
  std::uint64_t interfaces_gone = 0;
  std::uint64_t external_changes = 0;
  std::uint64_t rollbacks = 0;
  // Lateness (deadline to kernel acknowledgement) histogram, cumulative buckets in seconds.
  static constexpr double kBuckets[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                        0.0025,  0.005,  0.01,    0.1};
  std::uint64_t lateness_buckets[std::size(kBuckets)] = {};
  double lateness_sum_seconds = 0;

  // Adds another place's counts (the metrics are the sum over every place that shapes).
  SessionMetrics& operator+=(const SessionMetrics& other);
};

class SessionManager {
 public:
  SessionManager(asio::any_io_executor executor, ShapingBackend& backend, Ledger& ledger,
                 EventBus& bus, const Config& config, Logger& log);
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;
  ~SessionManager();

  // Requests naming a target act on every session it matches (an interface alone: all its lanes).
  using Statuses = std::vector<SessionStatus>;
  Outcome<Statuses> apply(const ApplyRequest& request, const Peer& peer);
  // Every matched session must have `phase`; they change together, as one whole-tree transition.
  Outcome<Statuses> switch_phase(const Target& target, const std::string& phase,
                                 std::optional<MonotonicTime> at, const Peer& peer);
  // What apply and switch_phase would refuse before they change anything, and nothing else done
  // (`stage`, docs/protocol.md "Two-phase changes").
  std::optional<RequestError> check_apply_request(const ApplyRequest& request);
  std::optional<RequestError> check_switch(const Target& target, const std::string& phase);
  Outcome<Statuses> pause(const Target& target, const Peer& peer);
  Outcome<Statuses> resume(const Target& target, const Peer& peer);
  // Exactly one of `step` and `phase`.
  Outcome<Statuses> skip(const Target& target, std::optional<std::size_t> step,
                         std::optional<std::string> phase, const Peer& peer);
  Outcome<Statuses> renew(const Target& target, std::optional<Nanoseconds> lease, const Peer& peer);
  // Keeps a commit-confirmed apply.
  Outcome<Statuses> confirm(const Target& target, const Peer& peer);
  // The matched sessions, or every session when `target.interface` is empty. Returns what ended
  // ("veth0 egress", "veth0 ingress redis").
  Outcome<std::vector<std::string>> clear(const Target& target, const Peer& peer);
  Outcome<Statuses> status(const Target& target);

  // Removes everything (SIGTERM); failures are logged, never thrown.
  void shutdown();

  // Startup: what an earlier jitterd left (ledger + handle scan), removed or adopted per the
  // config.
  void recover();

  // From the netlink monitor.
  void on_interface_gone(int index);
  // Someone else created, changed or deleted a root qdisc on `index`; `still_ours` says whether
  // jitterd's qdisc is still the root.
  void on_external_change(int index, const std::string& what, bool still_ours);

  // The target these sessions shape in (`--via inside`) has gone (a container stopped, a name
  // deleted) while jitterd still holds its namespace open: every session ends with `target-gone`,
  // and what it installed there is removed first, so nothing stays when the namespace lives on
  // (another process still in it).
  void end_target();

  bool has_session(int index) const;
  std::size_t session_count() const { return sessions_.size(); }
  const SessionMetrics& metrics() const { return metrics_; }

 private:
  struct Session;
  struct Key {
    int index = 0;
    Direction direction = Direction::kEgress;
    std::string set;
    auto operator<=>(const Key&) const = default;
  };
  struct Change {
    Session* session;
    std::string phase;
    std::optional<std::size_t> step;
  };

  // apply, in steps: the checks before anything is built (the interface, or why not); what the SSH
  // guard keeps unshaped; the sessions; then either waiting for the start time or installed now,
  // every lane in one step over whatever is installed (no unshaped moment), nothing left if that
  // fails.
  struct SshGuard {
    std::vector<shaper::U32Selector> bypass;
    std::vector<std::string> unshaped;  // the same, for status
  };
  Outcome<shaper::Interface> check_apply(const ApplyRequest& request);
  SshGuard ssh_guard(const ApplyRequest& request, const shaper::Interface& interface);
  std::vector<std::unique_ptr<Session>> make_sessions(const ApplyRequest& request,
                                                      const shaper::Interface& interface,
                                                      const SshGuard& guard, const Peer& peer,
                                                      MonotonicTime now);
  Statuses queue_for_start(std::vector<std::unique_ptr<Session>>& made);
  Statuses install_now(const ApplyRequest& request, const shaper::Interface& interface,
                       std::vector<std::unique_ptr<Session>>& made);
  static Key key_of(const Session& s);
  std::vector<Session*> find(const Target& target);
  Outcome<std::vector<Session*>> require(const Target& target);
  // The shape of the per-lane requests (pause, resume, skip, renew): find the target's lanes,
  // refuse the whole request if `refuse` objects to any lane (nothing is changed then), else `act`
  // on each lane in order and describe it.
  Outcome<Statuses> on_lanes(const Target& target,
                             const std::function<std::optional<RequestError>(Session&)>& refuse,
                             const std::function<void(Session&)>& act);
  // The refusal of a schedule request (`what`, e.g. "to pause") for a lane that holds a phase; none
  // for a lane with a schedule.
  static std::optional<RequestError> needs_schedule(const Session& s, const std::string& what,
                                                    const std::string& hint);
  // The layout of one direction of an interface: every started session's lane with its phase's
  // spec, `changes` applied, `without` left out.
  Outcome<Layout> layout_for(int index, Direction direction, const std::vector<Change>& changes,
                             const Session* without);
  // When the ledger hears of a transition: before the kernel is touched, all or nothing (every
  // request, every new lane), or, for a schedule's step or a switch at its later deadline on lanes
  // the ledger already names, noted after the kernel took it and written by the coalescing flush
  // (a label that cannot be written then does not stop the change: the lanes the file names are
  // still exact).
  enum class LedgerWrite { kBefore, kLabelAfter };
  // Several lanes of one interface changing phase as one step: one event, one transition record.
  struct Transition {
    std::vector<Change> changes;
    MonotonicTime deadline;
    EventType type = EventType::kPhaseChanged;
    LedgerWrite ledger_write = LedgerWrite::kBefore;
  };
  // Applies transitions of any number of interfaces as one batch: the ledger is written first
  // (once, for all that need it), then every direction they change goes to the backend in one
  // shape_batch() (the kernel gets every netem change back to back, then answers them all), then
  // each is recorded and published. Each transition succeeds or fails on its own, exactly as a
  // single one does: a failed one has its directions and its ledger entries put back, and result i
  // is its failure (null when it took effect). Two transitions on one interface go in successive
  // batches, in order (each interface's layout is computed from the phases in force).
  std::vector<std::exception_ptr> transition_batch(const std::vector<Transition>& transitions);
  // A batch of one; throws its failure.
  void transition_group(const std::vector<Change>& changes, MonotonicTime deadline, EventType type,
                        LedgerWrite ledger_write = LedgerWrite::kBefore);
  // One batch of transition_batch(): those of `all` at `round`, at most one per interface.
  void transition_round(const std::vector<Transition>& all, const std::vector<std::size_t>& round,
                        std::vector<std::exception_ptr>& failures);
  // One transition of a round: what each of its directions must become and what it is now (to put
  // back if another direction of it fails), its ledger entries, and its requests in the batch.
  struct RoundPlan {
    std::size_t t = 0;
    shaper::Interface interface;
    bool force = false;
    std::vector<std::pair<Direction, Layout>> previous;
    std::vector<LedgerEntry> entries;
    bool label_after = false;
    std::size_t first_request = 0;
  };
  // transition_round's steps: the plans and their requests (a lane whose layout cannot be computed
  // fails its transition here); the ledger written first, for the transitions that need it (those
  // it refuses fail and leave the round; returns what to put back); after the batch, the directions
  // of a transition refused in part put back.
  std::vector<RoundPlan> plan_round(const std::vector<Transition>& all,
                                    const std::vector<std::size_t>& round,
                                    std::vector<std::exception_ptr>& failures,
                                    std::vector<ShapeRequest>& requests);
  std::optional<Ledger::Entries> record_round(std::vector<RoundPlan>& plans,
                                              std::vector<ShapeRequest>& requests,
                                              std::vector<std::exception_ptr>& failures);
  void put_back_refused(const std::vector<RoundPlan>& plans,
                        const std::vector<std::exception_ptr>& results,
                        std::vector<std::exception_ptr>& failures);
  // A transition that took effect: the sessions' phases and records, the metrics, the event.
  // `landed`: the kernel's gate put the change in force at that time (an armed switch), so the
  // transition is recorded as applied then.
  void record_transition(const Transition& t, const Stamp& before, const Stamp& acked,
                         std::optional<MonotonicTime> landed);
  // Kernel-timed switches (switch_gate "kernel"): arms each direction's layout for `phase` at `at`
  // in the kernel (ShapingBackend::arm_switch); where it cannot, the timer does the switch.
  void arm_in_kernel(const std::vector<Session*>& list, const std::string& phase, MonotonicTime at);
  // Kernel-timed starts (switch_gate "kernel"): a pending session's direction installed now,
  // passing packets on unchanged, with its first phase armed for its start
  // (ShapingBackend::stage_start); where it cannot, the timer installs it at the start.
  void stage_in_kernel(Session& s);
  // Where a schedule stands when its session starts (install_now, start_session, stage_in_kernel).
  static SchedulePosition start_position(const Session& s);
  // Writes the phases the ledger noted, at most one write per kLedgerFlushDelay.
  void flush_ledger_soon();
  void flush_ledger();
  // Removes one session's lane from the kernel (the rest of the interface stays shaped).
  void remove_lane(const Session& s);
  // `all`: every qdisc from one dump, when describing many sessions (the kernel dumps all
  // interfaces whatever the filter, so one dump per session would be quadratic).
  SessionStatus describe(const Session& s, const std::vector<shaper::QdiscInfo>* all = nullptr);
  void arm(Session& s);
  // When the session's next transition is due (its start, a switch at a time, the end of its step);
  // nullopt when none is (a held phase, a paused schedule).
  static std::optional<MonotonicTime> next_deadline(const Session& s);
  // A transition timer fired: this session's transition and those of every other session due by now
  // go to the kernel as one batch (coincident deadlines on many interfaces), pending starts aside.
  void on_timer(Session* s, std::uint64_t generation);
  // A transition no request asked for failed: an error event on `s`, a count, a log line.
  void report_failure(const Session& s, const std::exception& failure);
  // A successor whose start time came: it takes over the interface in place.
  void promote(const Key& key);
  void drop_successor(const Key& key, EventType type, const std::string& reason);
  // A session taken out of its map: its timers cancelled and its end (`type`, `reason`) published.
  void stop_and_announce(Session& s, EventType type, const std::string& reason);
  void arm_lease(Session& s);
  bool alive(const Session* s) const;
  void start_session(Session& s);
  // Turns the interface's segmentation offloads off (once) and records what to restore in the
  // ledger.
  void turn_offloads_off(const shaper::Interface& interface);
  void arm_confirm(Session& s);
  void end_session(const Key& key, EventType type, const std::string& reason, bool remove_qdisc);
  // Ends every session and successor on an interface; for `cleared`, removes everything jitterd
  // holds there in one go first (otherwise the interface is gone and nothing is touched, unless
  // `remove_anyway`: a target that went while its namespace is still held). A removal
  // that fails is thrown with `throw_on_failure` (a request: nothing has ended, every session stays
  // as it was) and otherwise published as `error` while the sessions end anyway (shutdown).
  void drop_interface(int index, EventType type, const std::string& reason,
                      bool throw_on_failure = false, bool remove_anyway = false);
  // The ledger after the kernel let go of what it names (no lane: the whole interface). A write
  // that fails is logged, not thrown: the removal did happen, and an entry naming what is gone is
  // harmless (the next start finds nothing there) until a later write drops it.
  void erase_from_ledger(
      int index, const std::optional<std::pair<Direction, std::string>>& lane = std::nullopt);
  Event event_for(const Session& s, EventType type) const;
  void log_request(const Peer& peer, const std::string& what);

  asio::any_io_executor executor_;
  ShapingBackend& backend_;
  Ledger& ledger_;
  EventBus& bus_;
  const Config& config_;
  Logger& log_;
  std::map<Key, std::unique_ptr<Session>> sessions_;
  // An apply with a start time on a lane that has a session: it waits here, pending, while the
  // current session keeps running, and replaces it in place at its start (several hosts switch
  // together).
  std::map<Key, std::unique_ptr<Session>> successors_;
  SessionMetrics metrics_;
  asio::steady_timer ledger_timer_;
  bool ledger_flush_armed_ = false;
  bool ledger_flush_failing_ = false;  // warned once until a write works again
  std::uint64_t next_generation_ = 1;
  std::uint64_t next_sequence_ = 1;  // lanes are matched in the order they were applied
};

}  // namespace jitterd
