#include "sessions.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "shaper/errors.hpp"
#include "shaper/ifb.hpp"
#include "shaper/match_rules.hpp"

namespace jitterd {

namespace {

// How many transitions a status keeps (docs/protocol.md).
constexpr std::size_t kRecentTransitions = 32;
// How long a schedule's new phase may wait in memory before the ledger file names it (several
// steps, on every interface, share one write).
constexpr auto kLedgerFlushDelay = std::chrono::milliseconds(200);

std::string phase_list(const shaper::Profile& profile) {
  std::string out;
  for (const auto& p : profile.phases) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

// A lease (or a confirm window) outside 1ns to leases.max, said with both exactly: format_duration
// rounds to 9 digits, and "24h and 1ns" read as "86400s is out of range" (issue 21).
std::optional<RequestError> out_of_lease_range(const std::string& what, Nanoseconds length,
                                               Nanoseconds max) {
  if (length > Nanoseconds(0) && length <= max) return std::nullopt;
  const std::string shown = what + " " + shaper::duration_to_string(length);
  return RequestError{
      ErrorCode::kInvalidParams,
      length <= Nanoseconds(0)
          ? shown + " is not positive"
          : shown + " is longer than the limit, " + shaper::duration_to_string(max) +
                " (leases.max in the config)",
      "/params/" + what,
      "leases and confirm windows run from 1ns to " + shaper::duration_to_string(max)};
}

}  // namespace

struct SessionManager::Session {
  Session(asio::any_io_executor executor)
      : transition_timer(executor), lease_timer(executor), confirm_timer(executor) {}

  shaper::Interface interface;
  std::optional<protocol::TargetInfo> target;  // a target's interface, as the target sees it
  Direction direction = Direction::kEgress;
  std::string set;                             // "" = the whole direction
  std::vector<shaper::U32Selector> selectors;  // the lane's traffic; empty for the whole direction
  std::vector<std::string> match;              // the rules as the client gave them
  std::vector<shaper::U32Selector>
      bypass;  // the SSH guard's exclusions (interfaces with the default route)
  std::vector<std::string> unshaped;  // ... in words
  bool offloads_off = false;
  std::uint64_t sequence = 0;                      // apply order: earlier rule sets win
  std::shared_ptr<const shaper::Profile> profile;  // null for a session adopted after a restart
  std::string profile_name;
  std::string digest;
  bool pending = true;
  // Its start staged in the kernel (stage_in_kernel), and named in the ledger since.
  bool staged = false;
  MonotonicTime start;
  bool force = false;
  std::string phase;  // in force; empty while pending
  Stamp phase_since;
  std::optional<std::string> hold_phase;  // the phase to install at start when there is no schedule
  std::optional<ScheduleClock> schedule;
  std::optional<SchedulePosition> position;
  struct PendingSwitch {
    std::string phase;
    MonotonicTime at;
  };
  std::optional<PendingSwitch> pending_switch;
  std::optional<Nanoseconds> lease;
  MonotonicTime lease_expires;
  std::optional<MonotonicTime> confirm_by;  // commit-confirmed, not confirmed yet
  asio::steady_timer transition_timer;
  asio::steady_timer lease_timer;
  asio::steady_timer confirm_timer;
  std::uint64_t generation = 0;
  std::deque<TransitionRecord> recent;
  std::uint64_t transitions = 0;
  std::uint64_t missed = 0;
  Nanoseconds late_max{0};
  Peer client;

  // "veth0" for the whole egress (what most sessions are), "veth0 ingress", "veth0 egress redis".
  std::string label() const {
    if (direction == Direction::kEgress && set.empty()) return interface.name;
    return interface.name + " " + to_string(direction) + (set.empty() ? "" : " " + set);
  }
};

SessionManager::SessionManager(asio::any_io_executor executor, ShapingBackend& backend,
                               Ledger& ledger, EventBus& bus, const Config& config, Logger& log)
    : executor_(std::move(executor)),
      backend_(backend),
      ledger_(ledger),
      bus_(bus),
      config_(config),
      log_(log),
      ledger_timer_(executor_) {}

SessionManager::~SessionManager() = default;

SessionManager::Key SessionManager::key_of(const Session& s) {
  return Key{s.interface.index, s.direction, s.set};
}

bool SessionManager::has_session(int index) const {
  auto it = sessions_.lower_bound(Key{index, Direction::kEgress, ""});
  return it != sessions_.end() && it->first.index == index;
}

std::vector<SessionManager::Session*> SessionManager::find(const Target& target) {
  std::vector<Session*> out;
  for (auto& [key, s] : sessions_) {
    if (s->interface.name != target.interface) continue;
    if (target.direction && s->direction != *target.direction) continue;
    if (target.set && s->set != *target.set) continue;
    out.push_back(s.get());
  }
  return out;
}

Outcome<std::vector<SessionManager::Session*>> SessionManager::require(const Target& target) {
  auto found = find(target);
  if (!found.empty()) return found;
  std::string what = target.interface;
  if (target.direction) what += std::string(" ") + to_string(*target.direction);
  if (target.set)
    what += target.set->empty() ? " (whole direction)" : " rule set \"" + *target.set + "\"";
  std::string hint = "start one with apply; status lists the sessions";
  if (target.direction || target.set) {
    std::string lanes;
    for (const auto& [key, s] : sessions_) {
      if (s->interface.name == target.interface) lanes += (lanes.empty() ? "" : ", ") + s->label();
    }
    if (!lanes.empty()) hint = "sessions on " + target.interface + ": " + lanes;
  }
  return RequestError{ErrorCode::kNotFound, what + " has no jitterd session", "/params/interface",
                      hint};
}

void SessionManager::log_request(const Peer& peer, const std::string& what) {
  log_.info(what + " (uid " + std::to_string(peer.uid) + ", pid " + std::to_string(peer.pid) +
            (peer.command.empty() ? "" : ", " + peer.command) + ")");
}

Event SessionManager::event_for(const Session& s, EventType type) const {
  Event e;
  e.type = type;
  e.interface = s.interface.name;
  e.target = s.target;
  e.direction = to_string(s.direction);
  e.set = s.set;
  e.profile = s.profile_name;
  e.digest = s.digest;
  e.phase = s.phase;
  e.at = now_stamp();
  return e;
}

Outcome<Layout> SessionManager::layout_for(int index, Direction direction,
                                           const std::vector<Change>& changes,
                                           const Session* without) {
  struct Entry {
    const Session* s;
    std::string phase;
  };
  std::vector<Entry> entries;
  for (const auto& [key, s] : sessions_) {
    if (key.index != index || key.direction != direction || s.get() == without || s->pending)
      continue;
    // Replaced by a change for the same lane (an apply in place, a successor taking over).
    bool replaced = false;
    for (const auto& c : changes)
      replaced = replaced || (key_of(*c.session) == key && c.session != s.get());
    if (!replaced) entries.push_back({s.get(), s->phase});
  }
  for (const auto& c : changes) {
    if (c.session->interface.index != index || c.session->direction != direction) continue;
    bool present = false;
    for (auto& e : entries) {
      if (e.s == c.session) {
        e.phase = c.phase;
        present = true;
      }
    }
    if (!present) entries.push_back({c.session, c.phase});
  }
  // Rule sets in the order they were applied (the first match wins), the whole direction last.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.s->set.empty() != b.s->set.empty()) return b.s->set.empty();
    return a.s->sequence < b.s->sequence;
  });
  Layout layout;
  for (const auto& e : entries) {
    if (!e.s->profile) {
      return RequestError{
          ErrorCode::kConflict,
          e.s->label() + " was adopted after a restart; jitterd does not have its profile",
          "/params/interface",
          "apply a profile to it again (in place, no unshaped moment) before adding or "
          "removing other lanes on this interface"};
    }
    const shaper::Phase* p = e.s->profile->find_phase(e.phase);
    if (!p) std::abort();  // phases were checked against the profile when the request was read
    layout.lanes.push_back(Lane{e.s->set, e.s->selectors, p->spec});
    for (const auto& b : e.s->bypass) {
      if (std::find(layout.bypass.begin(), layout.bypass.end(), b) == layout.bypass.end())
        layout.bypass.push_back(b);
    }
  }
  return layout;
}

// ---------------------------------------------------------------------------------------------
// Requests

Outcome<SessionManager::Statuses> SessionManager::apply(const ApplyRequest& request,
                                                        const Peer& peer) {
  auto checked = check_apply(request);
  if (!checked) return checked.error();
  const shaper::Interface& interface = *checked;
  const SshGuard guard = ssh_guard(request, interface);
  const MonotonicTime now = MonotonicClock::now();
  std::vector<std::unique_ptr<Session>> made = make_sessions(request, interface, guard, peer, now);
  std::string lanes;
  for (const auto& m : made) lanes += (lanes.empty() ? "" : ", ") + m->label();
  log_request(peer, "apply " + request.profile->name + " (" + request.digest + ") to " + lanes +
                        (guard.unshaped.empty()
                             ? ""
                             : "; left unshaped: tcp port 22 and the requester's ssh connection") +
                        (request.confirm ? "; commit-confirmed within " +
                                               shaper::format_duration(*request.confirm)
                                         : ""));

  for (const auto& m : made) {
    // A later apply supersedes a successor that has not started yet.
    drop_successor(key_of(*m), EventType::kCleared, "replaced");
  }
  if (request.start > now) return queue_for_start(made);
  return install_now(request, interface, made);
}

Outcome<shaper::Interface> SessionManager::check_apply(const ApplyRequest& request) {
  const std::string& name = request.interface;
  if (!request.target && !config_.interface_allowed(name)) {
    return RequestError{
        ErrorCode::kPermissionDenied, name + " is not in the interface allowlist",
        "/params/interface",
        "add it (or a pattern such as \"veth*\") to interfaces.allow in the config and restart "
        "jitterd; the allowlist keeps management interfaces safe"};
  }
  auto interface = backend_.find_interface(name);
  if (!interface) {
    return RequestError{ErrorCode::kNotFound,
                        "no interface " + name + " in " +
                            (request.target ? request.target->kind + " " + request.target->name
                                            : std::string("jitterd's network namespace")),
                        "/params/interface", "the interfaces method lists them"};
  }
  if (request.force && !config_.allow_force) {
    return RequestError{ErrorCode::kPermissionDenied,
                        "force is not allowed by this jitterd's config", "/params/force",
                        "set allow_force in the config, or remove the other root qdisc yourself"};
  }
  if (config_.lease_required && !request.lease) {
    return RequestError{ErrorCode::kInvalidParams, "this jitterd requires a lease", "/params/lease",
                        "pass \"lease\": \"60s\" and renew it while your run lasts"};
  }
  if (request.lease) {
    if (auto e = out_of_lease_range("lease", *request.lease, config_.max_lease)) return *e;
  }
  if (request.confirm) {
    if (auto e = out_of_lease_range("confirm", *request.confirm, config_.max_lease)) {
      e->hint = "give the time you need to check the host is still reachable, e.g. \"30s\"";
      return *e;
    }
  }
  if (request.confirm && request.start > MonotonicClock::now()) {
    return RequestError{ErrorCode::kInvalidParams, "a commit-confirmed apply starts now",
                        "/params/start", "drop \"start\", or drop \"confirm\""};
  }
  const shaper::Profile& profile = *request.profile;
  if (request.phase && !profile.find_phase(*request.phase)) {
    return RequestError{
        ErrorCode::kNotFound,
        "phase \"" + *request.phase + "\" is not in profile \"" + profile.name + "\"",
        "/params/phase", "phases: " + phase_list(profile)};
  }
  if (request.schedule && !profile.schedule) {
    return RequestError{ErrorCode::kInvalidParams,
                        "profile \"" + profile.name + "\" has no schedule", "/params/schedule",
                        "pick a phase instead: " + phase_list(profile)};
  }
  if (profile.phases.empty()) {
    return RequestError{ErrorCode::kInvalidParams, "profile \"" + profile.name + "\" has no phases",
                        "/params/profile", ""};
  }
  // Say now, not at the start time, when the root belongs to someone else.
  const bool egress = std::find(request.directions.begin(), request.directions.end(),
                                Direction::kEgress) != request.directions.end();
  if (egress && !backend_.installed(*interface, Direction::kEgress) && !request.force) {
    if (auto root = backend_.root_qdisc(*interface);
        root && !root->is_default() && !root->is_jitterd()) {
      return RequestError{ErrorCode::kConflict,
                          "the root qdisc of " + name + " is " + root->kind + " " +
                              shaper::format_handle(root->handle) +
                              ", installed by someone else; jitterd leaves it alone",
                          "/params/interface",
                          "remove it yourself, or pass \"force\": true if the config allows it "
                          "(its queue is dropped)"};
    }
  }
  return std::move(*interface);
}

SessionManager::SshGuard SessionManager::ssh_guard(const ApplyRequest& request,
                                                   const shaper::Interface& interface) {
  // The SSH guard: on the interface the host is reached through, the operator's way in stays
  // unshaped.
  SshGuard guard;
  auto& bypass = guard.bypass;
  auto& unshaped = guard.unshaped;
  // Inside a target's namespace the operator's SSH is not on the way (it reaches the host, not the
  // container), and sshd's ports as this process sees them are the host's: no guard there.
  const bool inside = request.target && request.target->via == protocol::kViaInside;
  if (request.protect_ssh && !inside && backend_.carries_default_route(interface)) {
    // Port 22, and every port sshd listens on here: other operators' sessions stay up too.
    std::vector<std::uint16_t> ports = backend_.ssh_listening_ports();
    ports.insert(ports.begin(), shaper::kSshPort);
    std::sort(ports.begin(), ports.end());
    ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
    for (const auto& rule : shaper::ssh_protection_rules(request.ssh_connections, ports)) {
      const auto compiled = shaper::compile_match(rule);
      bypass.insert(bypass.end(), compiled.begin(), compiled.end());
    }
    std::string list;
    for (const auto port : ports) list += (list.empty() ? "" : ", ") + std::to_string(port);
    unshaped.push_back(std::string(ports.size() == 1 ? "tcp port " : "tcp ports ") + list +
                       " (either side)");
    for (const auto& c : request.ssh_connections) {
      unshaped.push_back("ssh connection from " + shaper::to_string(c.client) + " port " +
                         std::to_string(c.client_port) + " to " + shaper::to_string(c.server) +
                         " port " + std::to_string(c.server_port));
    }
  }
  return guard;
}

std::vector<std::unique_ptr<SessionManager::Session>> SessionManager::make_sessions(
    const ApplyRequest& request, const shaper::Interface& interface, const SshGuard& guard,
    const Peer& peer, MonotonicTime now) {
  const shaper::Profile& profile = *request.profile;
  std::vector<std::unique_ptr<Session>> made;
  for (Direction direction : request.directions) {
    auto owned = std::make_unique<Session>(executor_);
    Session& s = *owned;
    s.interface = interface;
    s.direction = direction;
    if (request.target) {
      // Through the host side (host-veth), the host side's ingress is what the target sends: the
      // opposite direction. Inside the target, a direction is the target's own.
      s.target = request.target;
      s.target->direction =
          request.target->via == protocol::kViaInside ? direction : protocol::reversed(direction);
    }
    s.set = request.set;
    s.selectors = request.selectors;
    s.match = request.match;
    s.bypass = guard.bypass;
    s.unshaped = guard.unshaped;
    s.offloads_off = request.offloads_off;
    s.sequence = next_sequence_++;
    s.profile = request.profile;
    s.profile_name = profile.name;
    s.digest = request.digest;
    s.start = request.start;
    s.force = request.force;
    s.lease = request.lease;
    s.client = peer;
    if (request.schedule) {
      std::vector<ScheduledStep> steps;
      for (const auto& step : profile.schedule->steps) steps.push_back({step.phase, step.duration});
      s.schedule.emplace(std::move(steps), profile.schedule->loop, request.start);
    } else {
      s.hold_phase = request.phase ? *request.phase : profile.phases.front().name;
    }
    if (s.lease) s.lease_expires = now + *s.lease;
    if (request.confirm) s.confirm_by = now + *request.confirm;
    made.push_back(std::move(owned));
  }
  return made;
}

SessionManager::Statuses SessionManager::queue_for_start(
    std::vector<std::unique_ptr<Session>>& made) {
  Statuses out;
  for (auto& m : made) {
    Session& s = *m;
    const Key key = key_of(s);
    if (sessions_.contains(key)) {
      successors_.emplace(key, std::move(m));
    } else {
      sessions_.emplace(key, std::move(m));
    }
    if (s.lease) arm_lease(s);
    arm(s);
    // Not a successor's: a running session holds that direction until the successor's start.
    if (sessions_.contains(key) && sessions_.at(key).get() == &s) stage_in_kernel(s);
    out.push_back(describe(s));
  }
  return out;
}

SessionManager::Statuses SessionManager::install_now(const ApplyRequest& request,
                                                     const shaper::Interface& interface,
                                                     std::vector<std::unique_ptr<Session>>& made) {
  Statuses out;
  // Now: every lane in one step, in place over whatever is installed (no unshaped moment).
  const bool was_installed = backend_.installed(interface);
  std::vector<Change> changes;
  MonotonicTime deadline = request.start;
  for (auto& m : made) {
    Session& s = *m;
    if (s.schedule) {
      s.position = start_position(s);
      changes.push_back({&s, s.schedule->steps()[s.position->step].phase, s.position->step});
      deadline = s.position->start;
    } else {
      changes.push_back({&s, *s.hold_phase, std::nullopt});
    }
  }
  try {
    // Inside the try: offloads turned off for an apply that then fails come back with the removal
    // below. A later start turns them off when it starts (start_session).
    if (request.offloads_off) turn_offloads_off(interface);
    transition_group(changes, deadline, EventType::kApplied);
  } catch (...) {
    // The sessions in place are untouched: the kernel refused the change (transition_group put back
    // what it had already changed). If the interface held nothing before, nothing stays.
    if (!was_installed) {
      try {
        backend_.remove(interface);
        erase_from_ledger(interface.index);
      } catch (const std::exception& e) {
        log_.error("removing the shaping after a failed apply on " + interface.name + ": " +
                   e.what());
      }
    }
    throw;
  }
  for (auto& m : made) {
    Session& s = *m;
    s.pending = false;
    const Key key = key_of(s);
    end_session(key, EventType::kCleared, "replaced", false);
    sessions_.emplace(key, std::move(m));
    if (s.lease) arm_lease(s);
    if (s.confirm_by) arm_confirm(s);
    arm(s);
    out.push_back(describe(s));
  }
  return out;
}

void SessionManager::drop_successor(const Key& key, EventType type, const std::string& reason) {
  auto it = successors_.find(key);
  if (it == successors_.end()) return;
  std::unique_ptr<Session> s = std::move(it->second);
  successors_.erase(it);
  stop_and_announce(*s, type, reason);
}

SessionMetrics& SessionMetrics::operator+=(const SessionMetrics& other) {
  transitions += other.transitions;
  missed_deadlines += other.missed_deadlines;
  lease_expirations += other.lease_expirations;
  transition_errors += other.transition_errors;
  interfaces_gone += other.interfaces_gone;
  external_changes += other.external_changes;
  rollbacks += other.rollbacks;
  for (std::size_t b = 0; b < std::size(kBuckets); ++b)
    lateness_buckets[b] += other.lateness_buckets[b];
  lateness_sum_seconds += other.lateness_sum_seconds;
  return *this;
}

void SessionManager::stop_and_announce(Session& s, EventType type, const std::string& reason) {
  s.transition_timer.cancel();
  s.lease_timer.cancel();
  s.confirm_timer.cancel();
  Event e = event_for(s, type);
  e.reason = reason;
  if (type == EventType::kLeaseExpired && s.lease) e.lease = *s.lease;
  bus_.publish(std::move(e));
}

void SessionManager::promote(const Key& key) {
  auto it = successors_.find(key);
  if (it == successors_.end()) return;
  Session& s = *it->second;
  try {
    start_session(s);
  } catch (const std::exception& failure) {
    ++metrics_.transition_errors;
    Event e = event_for(s, EventType::kError);
    e.message = failure.what();
    bus_.publish(std::move(e));
    log_.error("starting the successor on " + s.label() + " failed: " + failure.what() +
               "; the current session goes on");
    drop_successor(key, EventType::kCleared, "start-failed");
    return;
  }
  std::unique_ptr<Session> owned = std::move(it->second);
  successors_.erase(it);
  end_session(key, EventType::kCleared, "replaced", false);
  Session& promoted = *owned;
  sessions_.emplace(key, std::move(owned));
  arm(promoted);
}

bool SessionManager::alive(const Session* s) const {
  // By address alone: `s` may have ended (a timer already due when another handler of the same
  // turn ended its session), so it is not read before it is found here.
  for (const auto* owners : {&sessions_, &successors_}) {
    for (const auto& [key, owned] : *owners) {
      if (owned.get() == s) return true;
    }
  }
  return false;
}

std::optional<RequestError> SessionManager::check_switch(const Target& target,
                                                         const std::string& phase) {
  auto found = require(target);
  if (!found) return found.error();
  const auto& list = *found;
  for (Session* s : list) {
    if (!s->profile) {
      return RequestError{
          ErrorCode::kInvalidParams,
          s->label() + " was adopted after a restart; jitterd does not have its profile",
          "/params/interface",
          "apply the profile again (in place, no unshaped moment), then switch"};
    }
    if (!s->profile->find_phase(phase)) {
      return RequestError{
          ErrorCode::kNotFound,
          "phase \"" + phase + "\" is not in profile \"" + s->profile_name + "\"" +
              (list.size() > 1 ? " (" + s->label() + ")" : ""),
          "/params/phase",
          "phases: " + phase_list(*s->profile) +
              (list.size() > 1 ? "; name one lane with direction and set to switch it alone" : "")};
    }
  }
  return std::nullopt;
}

std::optional<RequestError> SessionManager::check_apply_request(const ApplyRequest& request) {
  auto checked = check_apply(request);
  if (!checked) return checked.error();
  return std::nullopt;
}

Outcome<SessionManager::Statuses> SessionManager::switch_phase(const Target& target,
                                                               const std::string& phase,
                                                               std::optional<MonotonicTime> at,
                                                               const Peer& peer) {
  if (auto refused = check_switch(target, phase)) return *refused;
  auto found = require(target);
  const auto& list = *found;
  std::string lanes;
  for (Session* s : list) lanes += (lanes.empty() ? "" : ", ") + s->label();
  log_request(peer, "switch " + lanes + " to " + phase);
  const MonotonicTime now = MonotonicClock::now();
  const bool immediate = !at || *at <= now;
  std::vector<Change> changes;
  for (Session* s : list) {
    if (!s->pending && immediate) changes.push_back({s, phase, std::nullopt});
  }
  // Every lane in one step: one event, one transition. The kernel first: if it refuses, nothing of
  // the request happens (the phase in force stays, a running schedule keeps running).
  if (!changes.empty()) transition_group(changes, at.value_or(now), EventType::kPhaseChanged);
  for (Session* s : list) {
    // Paused as of when the request was read.
    if (s->schedule && !s->schedule->paused()) s->schedule->pause(now);
    if (s->pending) {
      // Not started yet: the switch decides the phase it starts with.
      s->schedule.reset();
      s->position.reset();
      s->hold_phase = phase;
      s->pending_switch.reset();
      stage_in_kernel(*s);
    } else if (immediate) {
      s->pending_switch.reset();
    } else {
      s->pending_switch = Session::PendingSwitch{phase, *at};
    }
  }
  if (!immediate) arm_in_kernel(list, phase, *at);
  Statuses out;
  for (Session* s : list) {
    arm(*s);
    out.push_back(describe(*s));
  }
  return out;
}

void SessionManager::arm_in_kernel(const std::vector<Session*>& list, const std::string& phase,
                                   MonotonicTime at) {
  std::map<std::pair<int, Direction>, std::vector<Change>> by_direction;
  for (Session* s : list) {
    if (!s->pending) by_direction[{s->interface.index, s->direction}].push_back({s, phase, {}});
  }
  for (auto& [where, changes] : by_direction) {
    const Session& first = *changes.front().session;
    auto next = layout_for(where.first, where.second, changes, nullptr);
    if (!next) continue;  // the timer's transition will say why
    bool force = false;
    for (const auto& c : changes) force = force || c.session->force;
    try {
      backend_.arm_switch(ShapeRequest{first.interface, where.second, std::move(*next), force}, at);
    } catch (const std::exception& e) {
      log_.warning("the switch of " + first.label() + " could not be armed in the kernel (" +
                   e.what() + "); jitterd makes it itself at the deadline");
    }
  }
}

SchedulePosition SessionManager::start_position(const Session& s) {
  // The step in force at the start, or the first when the schedule's origin is later.
  return s.schedule->at(std::max(s.start, s.schedule->origin()))
      .value_or(s.schedule->position(0, 0));
}

void SessionManager::stage_in_kernel(Session& s) {
  if (!s.pending) return;
  std::string phase;
  if (s.schedule) {
    phase = s.schedule->steps()[start_position(s).step].phase;
  } else if (s.hold_phase) {
    phase = *s.hold_phase;
  } else {
    return;
  }
  // The layout as the start will ask for it: this session's lane over what the others hold.
  auto next =
      layout_for(s.interface.index, s.direction, {Change{&s, phase, std::nullopt}}, nullptr);
  if (!next) return;  // the start will say why
  try {
    if (!backend_.stage_start(ShapeRequest{s.interface, s.direction, std::move(*next), s.force},
                              s.start)) {
      return;
    }
    // Named in the ledger now, not at the start: the start then waits for no write (its label
    // follows within the flush delay, as a switch's), and a crash before it leaves a root that the
    // next start removes, saying whose it was.
    try {
      ledger_.record(LedgerEntry{s.interface.index, s.interface.name, to_string(s.direction), s.set,
                                 s.profile_name, s.digest, phase});
    } catch (...) {
      backend_.drop_staged(s.interface, s.direction);
      s.staged = false;
      throw;
    }
    s.staged = true;
  } catch (const std::exception& e) {
    log_.warning("the start of " + s.label() + " could not be staged in the kernel (" + e.what() +
                 "); jitterd installs it itself at the start");
  }
}

Outcome<SessionManager::Statuses> SessionManager::on_lanes(
    const Target& target, const std::function<std::optional<RequestError>(Session&)>& refuse,
    const std::function<void(Session&)>& act) {
  auto found = require(target);
  if (!found) return found.error();
  const auto& list = *found;
  for (Session* s : list) {
    if (auto objection = refuse(*s)) return *objection;
  }
  Statuses out;
  for (Session* s : list) {
    // A transition the kernel refuses leaves the lane as it was: its schedule's clock too
    // (otherwise a failed resume would say "running" with no timer armed, a failed skip would run a
    // moved clock).
    const auto schedule = s->schedule;
    const auto position = s->position;
    const auto pending_switch = s->pending_switch;
    const MonotonicTime start = s->start;
    try {
      act(*s);
    } catch (...) {
      s->schedule = schedule;
      s->position = position;
      s->pending_switch = pending_switch;
      s->start = start;
      arm(*s);
      throw;
    }
    out.push_back(describe(*s));
  }
  return out;
}

std::optional<RequestError> SessionManager::needs_schedule(const Session& s,
                                                           const std::string& what,
                                                           const std::string& hint) {
  if (s.schedule) return std::nullopt;
  return RequestError{ErrorCode::kInvalidParams,
                      s.label() + " holds a phase; there is no schedule " + what,
                      "/params/interface", hint};
}

Outcome<SessionManager::Statuses> SessionManager::pause(const Target& target, const Peer& peer) {
  return on_lanes(
      target, [](Session& s) { return needs_schedule(s, "to pause", ""); },
      [&](Session& s) {
        log_request(peer, "pause " + s.label());
        s.schedule->pause(MonotonicClock::now());
        arm(s);
      });
}

Outcome<SessionManager::Statuses> SessionManager::resume(const Target& target, const Peer& peer) {
  return on_lanes(
      target,
      [](Session& s) {
        return needs_schedule(s, "to resume", "apply the profile with \"schedule\": true");
      },
      [&](Session& s) {
        log_request(peer, "resume " + s.label());
        const MonotonicTime now = MonotonicClock::now();
        s.schedule->resume(now);
        s.pending_switch.reset();
        if (!s.pending && s.position) {
          *s.position = s.schedule->position(s.position->step, s.position->iteration);
          const std::string& phase = s.schedule->steps()[s.position->step].phase;
          // A switch while paused put another phase in force: the schedule's own comes back now.
          if (phase != s.phase)
            transition_group({{&s, phase, s.position->step}}, now, EventType::kPhaseChanged);
        }
        arm(s);
      });
}

Outcome<SessionManager::Statuses> SessionManager::skip(const Target& target,
                                                       std::optional<std::size_t> step,
                                                       std::optional<std::string> phase,
                                                       const Peer& peer) {
  // Each lane's step, found while checking (a request names a phase; lanes' schedules may differ).
  std::map<const Session*, std::size_t> targets;
  const bool several = find(target).size() > 1;
  return on_lanes(
      target,
      [&](Session& s) -> std::optional<RequestError> {
        if (auto refused = needs_schedule(s, "to skip in", "use switch to change the phase"))
          return refused;
        const auto& steps = s.schedule->steps();
        if (step) {
          if (*step >= steps.size()) {
            return RequestError{ErrorCode::kInvalidParams,
                                "step " + std::to_string(*step) + " is out of range",
                                "/params/step",
                                "the schedule" + (several ? " of " + s.label() : std::string()) +
                                    " has steps 0 to " + std::to_string(steps.size() - 1)};
          }
          targets[&s] = *step;
          return std::nullopt;
        }
        // The next step (after the current one, wrapping) whose phase is the one asked for.
        const std::size_t current = s.position ? s.position->step : 0;
        for (std::size_t k = 1; k <= steps.size(); ++k) {
          const std::size_t candidate = (current + k) % steps.size();
          if (steps[candidate].phase == *phase) {
            targets[&s] = candidate;
            return std::nullopt;
          }
        }
        return RequestError{
            ErrorCode::kNotFound,
            "no step of the schedule of " + s.label() + " runs phase \"" + *phase + "\"",
            "/params/phase", "pass a step number, or switch to hold a phase"};
      },
      [&](Session& s) {
        const std::size_t to = targets.at(&s);
        log_request(peer, "skip " + s.label() + " to step " + std::to_string(to));
        const MonotonicTime now = MonotonicClock::now();
        const std::uint64_t iteration = s.position ? s.position->iteration : 0;
        s.schedule->restart_at(to, iteration, now);
        s.pending_switch.reset();
        if (s.pending) {
          s.start = now;
          start_session(s);
        } else {
          s.position = s.schedule->position(to, iteration);
          transition_group({{&s, s.schedule->steps()[to].phase, to}}, now,
                           EventType::kPhaseChanged);
        }
        arm(s);
      });
}

Outcome<SessionManager::Statuses> SessionManager::renew(const Target& target,
                                                        std::optional<Nanoseconds> lease,
                                                        const Peer& peer) {
  (void)peer;  // renewals are frequent; they are not logged
  return on_lanes(
      target,
      [&](Session& s) -> std::optional<RequestError> {
        const auto length = lease ? lease : s.lease;
        if (!length) {
          return RequestError{ErrorCode::kInvalidParams, s.label() + " has no lease to renew",
                              "/params/lease", "pass \"lease\": \"60s\" to give it one"};
        }
        if (auto e = out_of_lease_range("lease", *length, config_.max_lease)) return e;
        return std::nullopt;
      },
      [&](Session& s) {
        s.lease = lease ? lease : s.lease;
        s.lease_expires = MonotonicClock::now() + *s.lease;
        arm_lease(s);
      });
}

Outcome<SessionManager::Statuses> SessionManager::confirm(const Target& target, const Peer& peer) {
  auto found = require(target);
  if (!found) return found.error();
  const auto& list = *found;
  bool any = false;
  for (Session* s : list) any = any || s->confirm_by.has_value();
  if (!any) {
    return RequestError{
        ErrorCode::kInvalidParams, target.interface + " has no apply waiting for confirmation",
        "/params/interface",
        "confirm keeps an apply made with \"confirm\"; it may have rolled back already"};
  }
  Statuses out;
  for (Session* s : list) {
    if (s->confirm_by) {
      log_request(peer, "confirm " + s->label());
      s->confirm_by.reset();
      s->confirm_timer.cancel();
      bus_.publish(event_for(*s, EventType::kConfirmed));
    }
    out.push_back(describe(*s));
  }
  return out;
}

Outcome<std::vector<std::string>> SessionManager::clear(const Target& target, const Peer& peer) {
  std::vector<std::string> cleared;
  if (target.interface.empty()) {
    std::vector<int> indices;
    for (const auto& [key, s] : sessions_) {
      if (indices.empty() || indices.back() != key.index) indices.push_back(key.index);
    }
    for (int index : indices) {
      for (const auto& [key, s] : sessions_) {
        if (key.index == index) cleared.push_back(s->label());
      }
      log_request(
          peer,
          "clear " +
              sessions_.lower_bound(Key{index, Direction::kEgress, ""})->second->interface.name);
      drop_interface(index, EventType::kCleared, "request", true);
    }
    return cleared;
  }
  auto found = require(target);
  if (!found) return found.error();
  const auto list = *found;
  const int index = list.front()->interface.index;
  if (!target.direction && !target.set) {
    // The whole interface: one removal of everything (no tree rebuilt lane by lane on the way out).
    for (Session* s : list) cleared.push_back(s->label());
    log_request(peer, "clear " + target.interface);
    // A removal the kernel refuses is the client's error reply, every session left as it was.
    drop_interface(index, EventType::kCleared, "request", true);
    return cleared;
  }
  std::vector<Key> keys;
  for (Session* s : list) keys.push_back(key_of(*s));
  for (const Key& key : keys) {
    Session& s = *sessions_.at(key);
    const std::string label = s.label();
    log_request(peer, "clear " + label);
    // The kernel first: if it refuses, this lane stays as it was (still shaping, still listed,
    // still in the ledger) and the client hears why.
    if (!s.pending) remove_lane(s);
    drop_successor(key, EventType::kCleared, "request");
    end_session(key, EventType::kCleared, "request", false);
    cleared.push_back(label);
  }
  return cleared;
}

Outcome<SessionManager::Statuses> SessionManager::status(const Target& target) {
  Statuses out;
  std::vector<Session*> list;
  if (!target.interface.empty()) {
    auto found = require(target);
    if (!found) return found.error();
    list = *found;
  } else {
    for (auto& [key, s] : sessions_) list.push_back(s.get());
  }
  if (list.empty()) return out;
  // One dump for the lot: the kernel dumps every interface whatever the filter.
  const auto all = backend_.all_qdiscs();
  for (Session* s : list) {
    out.push_back(describe(*s, &all));
    if (auto it = successors_.find(key_of(*s)); it != successors_.end())
      out.push_back(describe(*it->second, &all));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Transitions

void SessionManager::turn_offloads_off(const shaper::Interface& interface) {
  // Only the first time: a second lane or apply keeps the original, recorded then.
  const auto saved = backend_.offloads_to_save(interface);
  if (!saved) return;
  // Recorded before they change: a kill -9 between the two leaves a record that puts back what was
  // there anyway, never offloads turned off with no record of what they were.
  ledger_.record_offloads(
      LedgerOffloads{interface.index, interface.name, saved->tso, saved->gso, saved->gro});
  try {
    backend_.disable_offloads(interface, *saved);
  } catch (...) {
    try {
      ledger_.forget_offloads(interface.index);
    } catch (const std::exception&) {
      // The record stays: a restart would write back the values the interface still has.
    }
    throw;
  }
}

void SessionManager::start_session(Session& s) {
  if (s.offloads_off) turn_offloads_off(s.interface);
  // A staged start's lane is in the ledger already: its phase is written after the kernel has it.
  const LedgerWrite ledger_write = s.staged ? LedgerWrite::kLabelAfter : LedgerWrite::kBefore;
  if (s.schedule) {
    s.position = start_position(s);
    transition_group({{&s, s.schedule->steps()[s.position->step].phase, s.position->step}},
                     s.position->start, EventType::kApplied, ledger_write);
  } else {
    transition_group({{&s, *s.hold_phase, std::nullopt}}, s.start, EventType::kApplied,
                     ledger_write);
  }
  s.pending = false;
}

void SessionManager::transition_group(const std::vector<Change>& changes, MonotonicTime deadline,
                                      EventType type, LedgerWrite ledger_write) {
  if (changes.empty()) return;
  if (std::exception_ptr failure =
          transition_batch({Transition{changes, deadline, type, ledger_write}}).front()) {
    std::rethrow_exception(failure);
  }
}

std::vector<std::exception_ptr> SessionManager::transition_batch(
    const std::vector<Transition>& transitions) {
  std::vector<std::exception_ptr> failures(transitions.size());
  std::vector<std::size_t> waiting;
  for (std::size_t i = 0; i < transitions.size(); ++i) {
    if (!transitions[i].changes.empty()) waiting.push_back(i);
  }
  while (!waiting.empty()) {
    std::vector<std::size_t> round;
    std::vector<std::size_t> later;
    std::vector<int> interfaces;
    for (std::size_t i : waiting) {
      const int index = transitions[i].changes.front().session->interface.index;
      if (std::find(interfaces.begin(), interfaces.end(), index) != interfaces.end()) {
        later.push_back(i);
      } else {
        interfaces.push_back(index);
        round.push_back(i);
      }
    }
    transition_round(transitions, round, failures);
    waiting = std::move(later);
  }
  return failures;
}

void SessionManager::transition_round(const std::vector<Transition>& all,
                                      const std::vector<std::size_t>& round,
                                      std::vector<std::exception_ptr>& failures) {
  std::vector<ShapeRequest> requests;
  std::vector<RoundPlan> plans = plan_round(all, round, failures, requests);
  if (plans.empty()) return;
  const std::optional<Ledger::Entries> recorded = record_round(plans, requests, failures);
  if (plans.empty()) return;

  const Stamp before = now_stamp();
  std::vector<std::exception_ptr> results;
  try {
    results = backend_.shape_batch(requests);
  } catch (...) {
    results.assign(requests.size(), std::current_exception());
  }
  const Stamp acked = now_stamp();
  put_back_refused(plans, results, failures);
  bool noted = false;
  for (const auto& p : plans) {
    if (failures[p.t]) {
      if (p.label_after) continue;
      try {
        ledger_.put_back(p.entries, *recorded);
      } catch (const std::exception& e) {
        // The file names a phase or lane the kernel refused: more than is installed, which the next
        // start tolerates (it removes what the kernel holds).
        log_.warning("putting the ledger back after a failed transition on " + p.interface.name +
                     ": " + e.what());
      }
      continue;
    }
    if (p.label_after) {
      for (const auto& e : p.entries) ledger_.note_phase(e);
      noted = true;
    }
  }
  if (noted) flush_ledger_soon();
  for (const auto& p : plans) {
    if (failures[p.t]) continue;
    // Put in force by the kernel's gate when every direction it changed was (an armed switch).
    std::optional<MonotonicTime> landed;
    for (const auto& [direction, layout] : p.previous) {
      const auto at = backend_.landed(p.interface, direction);
      if (!at) {
        landed.reset();
        break;
      }
      landed = landed ? std::max(*landed, *at) : *at;
    }
    record_transition(all[p.t], before, acked, landed);
  }
}

std::vector<SessionManager::RoundPlan> SessionManager::plan_round(
    const std::vector<Transition>& all, const std::vector<std::size_t>& round,
    std::vector<std::exception_ptr>& failures, std::vector<ShapeRequest>& requests) {
  std::vector<RoundPlan> plans;
  for (std::size_t t : round) {
    const Transition& tr = all[t];
    RoundPlan p;
    p.t = t;
    p.interface = tr.changes.front().session->interface;
    std::vector<Direction> directions;
    for (const auto& c : tr.changes) {
      if (std::find(directions.begin(), directions.end(), c.session->direction) ==
          directions.end()) {
        directions.push_back(c.session->direction);
      }
      p.force = p.force || c.session->force;
    }
    std::sort(directions.begin(), directions.end());  // egress, then ingress
    std::vector<ShapeRequest> wanted;
    bool refused = false;
    for (Direction d : directions) {
      auto next = layout_for(p.interface.index, d, tr.changes, nullptr);
      if (!next) {
        const RequestError& e = next.error();
        failures[t] = std::make_exception_ptr(shaper::OwnershipError(e.message + "; " + e.hint));
        refused = true;
        break;
      }
      auto now = layout_for(p.interface.index, d, {}, nullptr);
      wanted.push_back(ShapeRequest{p.interface, d, std::move(*next), p.force});
      p.previous.emplace_back(d, now ? *now : Layout{});
    }
    if (refused) continue;
    for (const auto& c : tr.changes) {
      const Session& s = *c.session;
      p.entries.push_back(LedgerEntry{s.interface.index, s.interface.name, to_string(s.direction),
                                      s.set, s.profile_name, s.digest, c.phase});
    }
    p.label_after = tr.ledger_write == LedgerWrite::kLabelAfter &&
                    std::all_of(p.entries.begin(), p.entries.end(),
                                [&](const LedgerEntry& e) { return ledger_.names_lane(e); });
    p.first_request = requests.size();
    for (auto& w : wanted) requests.push_back(std::move(w));
    plans.push_back(std::move(p));
  }
  return plans;
}

std::optional<Ledger::Entries> SessionManager::record_round(
    std::vector<RoundPlan>& plans, std::vector<ShapeRequest>& requests,
    std::vector<std::exception_ptr>& failures) {
  // The ledger first: if jitterd dies the moment the kernel has taken the change, the next start
  // must find it named there. A ledger that cannot be written refuses the transitions before the
  // kernel is touched (record() leaves the ledger as it was), so nothing is ever shaped without an
  // entry. A schedule's step on lanes already named waits until the kernel has it (LedgerWrite).
  // One write for every transition of the batch that needs one.
  std::vector<LedgerEntry> to_record;
  for (const auto& p : plans) {
    if (!p.label_after) to_record.insert(to_record.end(), p.entries.begin(), p.entries.end());
  }
  std::optional<Ledger::Entries> recorded;  // what to put back if the kernel refuses
  if (!to_record.empty()) {
    recorded = ledger_.entries();
    try {
      ledger_.record(to_record);
    } catch (...) {
      const std::exception_ptr failure = std::current_exception();
      std::vector<RoundPlan> kept;
      std::vector<ShapeRequest> kept_requests;
      for (auto& p : plans) {
        if (!p.label_after) {
          failures[p.t] = failure;
          continue;
        }
        const std::size_t count = p.previous.size();
        const std::size_t first = p.first_request;
        p.first_request = kept_requests.size();
        for (std::size_t r = first; r < first + count; ++r)
          kept_requests.push_back(std::move(requests[r]));
        kept.push_back(std::move(p));
      }
      plans = std::move(kept);
      requests = std::move(kept_requests);
    }
  }
  return recorded;
}

void SessionManager::put_back_refused(const std::vector<RoundPlan>& plans,
                                      const std::vector<std::exception_ptr>& results,
                                      std::vector<std::exception_ptr>& failures) {
  // A transition the kernel refused in part: nothing half-done, the directions of it already
  // changed go back to what they were (one more batch for all such), and so do its ledger entries.
  std::vector<ShapeRequest> put_back;
  for (const auto& p : plans) {
    std::exception_ptr failure;
    for (std::size_t r = 0; r < p.previous.size() && !failure; ++r)
      failure = results[p.first_request + r];
    if (!failure) continue;
    failures[p.t] = failure;
    for (std::size_t r = 0; r < p.previous.size(); ++r) {
      if (!results[p.first_request + r]) {
        put_back.push_back(
            ShapeRequest{p.interface, p.previous[r].first, p.previous[r].second, p.force});
      }
    }
  }
  if (!put_back.empty()) {
    std::vector<std::exception_ptr> undone;
    try {
      undone = backend_.shape_batch(put_back);
    } catch (...) {
      undone.assign(put_back.size(), std::current_exception());
    }
    for (std::size_t r = 0; r < put_back.size(); ++r) {
      if (!undone[r]) continue;
      try {
        std::rethrow_exception(undone[r]);
      } catch (const std::exception& e) {
        log_.error("putting " + put_back[r].interface.name + " " +
                   to_string(put_back[r].direction) +
                   " back after a failed transition: " + e.what());
      }
    }
  }
}

void SessionManager::record_transition(const Transition& t, const Stamp& before, const Stamp& acked,
                                       std::optional<MonotonicTime> landed) {
  const std::vector<Change>& changes = t.changes;
  TransitionRecord record;
  record.deadline = stamp_of(t.deadline);
  record.applied = landed ? stamp_of(*landed) : acked;
  record.gated = landed.has_value();
  record.apply_time = acked.monotonic - before.monotonic;
  // Early (a request for "now" read before the deadline stamp) counts as on time.
  record.lateness =
      std::max(Nanoseconds(0), record.applied.monotonic - t.deadline.time_since_epoch());
  ++metrics_.transitions;
  const double late_seconds = std::chrono::duration<double>(record.lateness).count();
  metrics_.lateness_sum_seconds += late_seconds;
  for (std::size_t b = 0; b < std::size(SessionMetrics::kBuckets); ++b) {
    if (late_seconds <= SessionMetrics::kBuckets[b]) ++metrics_.lateness_buckets[b];
  }

  const Change& first = changes.front();
  Event e = event_for(*first.session, t.type);
  e.previous = first.session->phase;
  e.phase = first.phase;
  e.step = first.step;
  e.at = record.applied;
  e.deadline = record.deadline;
  e.lateness = record.lateness;
  e.apply_time = record.apply_time;
  e.gated = record.gated;
  for (const auto& c : changes) {
    Session& s = *c.session;
    if (changes.size() > 1) {
      e.lanes.push_back({to_string(s.direction), s.set, s.profile_name, s.phase, c.phase});
    }
    TransitionRecord r = record;
    r.phase = c.phase;
    r.step = c.step;
    s.recent.push_back(r);
    if (s.recent.size() > kRecentTransitions) s.recent.pop_front();
    ++s.transitions;
    s.late_max = std::max(s.late_max, record.lateness);
    s.phase = c.phase;
    s.phase_since = record.applied;
  }
  bus_.publish(std::move(e));
}

void SessionManager::flush_ledger_soon() {
  if (ledger_flush_armed_ || !ledger_.dirty()) return;
  ledger_flush_armed_ = true;
  ledger_timer_.expires_after(kLedgerFlushDelay);
  ledger_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the manager is going away
    ledger_flush_armed_ = false;
    flush_ledger();
  });
}

void SessionManager::flush_ledger() {
  try {
    ledger_.flush();
    if (ledger_flush_failing_) log_.info("the ledger names the phases in force again");
    ledger_flush_failing_ = false;
  } catch (const std::exception& e) {
    // The lanes the file names are still exact; only the name of the phase in force is behind. Said
    // once, and tried again at the next step.
    if (!ledger_flush_failing_) {
      log_.warning(
          std::string("the ledger could not be rewritten with the phases in force: ") + e.what() +
          " (the schedules go on; after a crash the next start would name an earlier phase)");
    }
    ledger_flush_failing_ = true;
  }
}

std::optional<MonotonicTime> SessionManager::next_deadline(const Session& s) {
  if (s.pending) return s.start;
  if (s.pending_switch) return s.pending_switch->at;
  // The end of this step: the next step's start, or the end of the schedule.
  if (s.schedule && !s.schedule->paused() && s.position) return s.position->end;
  return std::nullopt;
}

void SessionManager::arm(Session& s) {
  if (!s.pending_switch && !s.pending) {
    // No switch at a time any more (made, replaced or cancelled): none stays armed in the kernel.
    try {
      backend_.disarm_switch(s.interface, s.direction);
    } catch (const std::exception& e) {
      log_.warning("disarming the kernel-timed switch of " + s.label() + ": " + e.what());
    }
  }
  s.generation = next_generation_++;
  s.transition_timer.cancel();
  const std::optional<MonotonicTime> deadline = next_deadline(s);
  if (!deadline) return;
  s.transition_timer.expires_at(*deadline);
  s.transition_timer.async_wait(
      [this, session = &s, generation = s.generation](const boost::system::error_code& ec) {
        if (!ec) on_timer(session, generation);
      });
}

void SessionManager::report_failure(const Session& s, const std::exception& failure) {
  ++metrics_.transition_errors;
  Event e = event_for(s, EventType::kError);
  e.message = failure.what();
  bus_.publish(std::move(e));
  log_.error("transition on " + s.label() + " failed: " + failure.what());
}

void SessionManager::on_timer(Session* session, std::uint64_t generation) {
  // Ended, or re-armed since: the handler is stale.
  if (!alive(session) || session->generation != generation) return;
  Session& s = *session;
  const Key key = key_of(s);
  if (auto it = successors_.find(key); it != successors_.end() && it->second.get() == session) {
    promote(key);
    return;
  }
  if (s.pending) {
    try {
      start_session(s);
    } catch (const std::exception& failure) {
      // No request to answer: the failure becomes an event. Nothing of this session may stay
      // (transition_group put back what it had changed).
      report_failure(s, failure);
      end_session(key, EventType::kCleared, "start-failed", false);
      return;
    }
    arm(s);
    return;
  }
  // This session's transition and every other one due by now (the same deadline on other
  // interfaces, or one whose timer has not run yet) reach the kernel as one batch: the last of N
  // coincident changes then waits for one netlink round trip, not N. Each is re-armed afterwards,
  // which makes its own timer's handler, if already queued, stale. Pending starts keep their own
  // timers (they may turn offloads off and end their session on failure).
  const MonotonicTime now = MonotonicClock::now();
  std::vector<Session*> due{&s};
  for (auto& [k, other] : sessions_) {
    if (other.get() == &s || other->pending) continue;
    if (const auto deadline = next_deadline(*other); deadline && *deadline <= now)
      due.push_back(other.get());
  }
  std::vector<Transition> transitions;
  std::vector<Session*> reported_on;  // whose error event a failed transition is, by transition
  std::vector<Key> finished;
  std::vector<Session*> handled;
  for (Session* d : due) {
    if (std::find(handled.begin(), handled.end(), d) != handled.end()) continue;
    if (d->pending_switch) {
      // A switch at a time: every lane of the interface switched by the same request moves
      // together.
      const auto sw = *d->pending_switch;
      std::vector<Change> changes;
      for (auto& [k, other] : sessions_) {
        if (k.index != d->interface.index || !other->pending_switch ||
            other->pending_switch->at != sw.at || other->pending_switch->phase != sw.phase) {
          continue;
        }
        other->pending_switch.reset();
        changes.push_back({other.get(), sw.phase, std::nullopt});
        handled.push_back(other.get());
      }
      // The request was answered when it was read: at its deadline (a fleet's commit) the switch
      // is like a schedule's step, the kernel first and the ledger's label within the flush
      // delay, so that the deadline does not wait for the file's rewrite (write, fsync, rename).
      transitions.push_back(Transition{std::move(changes), sw.at, EventType::kPhaseChanged,
                                       LedgerWrite::kLabelAfter});
      reported_on.push_back(d);
      continue;
    }
    handled.push_back(d);
    if (!d->schedule || !d->position) continue;
    auto next = d->schedule->next(*d->position);
    // Steps whose whole window has passed (the daemon was stalled, the machine suspended): each one
    // is reported, none silently skipped, and the step in force now is applied. The log says it
    // once per catch-up: a stall of a minute under 1 ms steps is 60 000 events, not 60 000 lines.
    const auto first = next;  // the first step missed, if the loop below runs at all
    std::uint64_t missed_now = 0;
    while (next && next->end <= now) {
      ++d->missed;
      ++metrics_.missed_deadlines;
      Event e = event_for(*d, EventType::kDeadlineMissed);
      e.phase = d->schedule->steps()[next->step].phase;
      e.step = next->step;
      e.deadline = stamp_of(next->start);
      e.lateness = now - next->start;
      bus_.publish(std::move(e));
      ++missed_now;
      next = d->schedule->next(*next);
    }
    if (missed_now == 1) {
      log_.warning("missed the deadline of step " + std::to_string(first->step) + " on " +
                   d->label() + " by " + shaper::format_duration(now - first->start));
    } else if (missed_now > 1) {
      log_.warning("missed the deadlines of " + std::to_string(missed_now) + " steps on " +
                   d->label() + ", the first (step " + std::to_string(first->step) + ") by " +
                   shaper::format_duration(now - first->start) +
                   " (each is a deadline-missed event)");
    }
    if (!next) {
      finished.push_back(key_of(*d));
      continue;
    }
    d->position = next;
    transitions.push_back(Transition{{{d, d->schedule->steps()[next->step].phase, next->step}},
                                     next->start,
                                     EventType::kPhaseChanged,
                                     LedgerWrite::kLabelAfter});
    reported_on.push_back(d);
  }
  // A failure has no request to answer: it becomes an event, and the schedule goes on (the next
  // step may well succeed, e.g. after a transient ENOBUFS).
  const auto failures = transition_batch(transitions);
  for (std::size_t i = 0; i < failures.size(); ++i) {
    if (!failures[i]) continue;
    try {
      std::rethrow_exception(failures[i]);
    } catch (const std::exception& failure) {
      report_failure(*reported_on[i], failure);
    }
  }
  for (const Key& k : finished) end_session(k, EventType::kCleared, "schedule-finished", true);
  for (Session* d : handled) {
    if (alive(d)) arm(*d);
  }
}

void SessionManager::arm_lease(Session& s) {
  s.lease_timer.cancel();
  s.lease_timer.expires_at(s.lease_expires);
  s.lease_timer.async_wait([this, session = &s,
                            expires = s.lease_expires](const boost::system::error_code& ec) {
    if (ec || !alive(session) || session->lease_expires != expires) return;
    ++metrics_.lease_expirations;
    const Key key = key_of(*session);
    if (auto it = successors_.find(key); it != successors_.end() && it->second.get() == session) {
      // The client is gone before its successor started: the current session goes on.
      log_.warning("lease of the pending apply on " + session->label() +
                   " ran out; it will not start");
      drop_successor(key, EventType::kLeaseExpired, "");
      return;
    }
    log_.warning("lease on " + session->label() + " ran out; removing its shaping");
    end_session(key, EventType::kLeaseExpired, "", true);
  });
}

void SessionManager::arm_confirm(Session& s) {
  s.confirm_timer.cancel();
  s.confirm_timer.expires_at(*s.confirm_by);
  s.confirm_timer.async_wait(
      [this, session = &s, deadline = *s.confirm_by](const boost::system::error_code& ec) {
        // The deadline too, as for the lease: a later session at the same address is not this one.
        if (ec || !alive(session) || session->confirm_by != deadline) return;
        ++metrics_.rollbacks;
        log_.warning("the apply on " + session->label() +
                     " was not confirmed in time; rolling it back");
        end_session(key_of(*session), EventType::kRolledBack, "not-confirmed", true);
      });
}

void SessionManager::remove_lane(const Session& s) {
  const shaper::Interface& interface = s.interface;
  bool other_lanes = false;
  for (const auto& [key, other] : sessions_) {
    if (key.index == interface.index && other.get() != &s && !other->pending) other_lanes = true;
  }
  if (!other_lanes) {
    // The last lane: everything goes, the IFB and the offloads included.
    backend_.remove(interface);
    erase_from_ledger(interface.index);
    return;
  }
  auto rest = layout_for(interface.index, s.direction, {}, &s);
  if (!rest) throw shaper::OwnershipError(rest.error().message + "; " + rest.error().hint);
  backend_.shape(interface, s.direction, *rest, s.force);
  erase_from_ledger(interface.index, std::pair(s.direction, s.set));
}

void SessionManager::end_session(const Key& key, EventType type, const std::string& reason,
                                 bool remove_qdisc) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  std::string failure;
  if (remove_qdisc && !it->second->pending) {
    // Removed from the kernel first, while the session still counts in the layout of the others.
    try {
      remove_lane(*it->second);
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  if (const Session& ending = *it->second; ending.pending && ending.staged) {
    // An apply that never started: what its start had staged in the kernel goes with it (unless
    // a later apply took that direction over), and so does its ledger entry.
    try {
      if (backend_.drop_staged(ending.interface, ending.direction))
        erase_from_ledger(ending.interface.index, std::pair(ending.direction, ending.set));
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  std::unique_ptr<Session> s = std::move(it->second);
  sessions_.erase(it);
  stop_and_announce(*s, type, reason);
  if (!failure.empty()) {
    Event err = event_for(*s, EventType::kError);
    err.message = "removing the shaping failed: " + failure;
    bus_.publish(std::move(err));
    log_.error("removing the shaping of " + s->label() + " failed: " + failure);
  }
}

void SessionManager::end_target() {
  std::set<int> indices;
  for (const auto& [key, s] : sessions_) indices.insert(key.index);
  for (const auto& [key, s] : successors_) indices.insert(key.index);
  for (int index : indices) drop_interface(index, EventType::kTargetGone, "", false, true);
}

void SessionManager::drop_interface(int index, EventType type, const std::string& reason,
                                    bool throw_on_failure, bool remove_anyway) {
  std::vector<Key> keys;
  for (const auto& [key, s] : sessions_) {
    if (key.index == index) keys.push_back(key);
  }
  std::vector<Key>
      waiting;  // successors (dropping one erases it from the map: not while iterating)
  for (const auto& [key, s] : successors_) {
    if (key.index == index) waiting.push_back(key);
  }
  if (keys.empty()) {
    for (const Key& key : waiting) drop_successor(key, type, reason);
    return;
  }
  const shaper::Interface interface = sessions_.at(keys.front())->interface;
  std::string failure;
  if (type == EventType::kCleared || remove_anyway) {
    try {
      backend_.remove(interface);
    } catch (const std::exception& error) {
      if (throw_on_failure) throw;  // nothing has ended yet
      failure = error.what();
    }
    if (failure.empty()) erase_from_ledger(index);
  }
  for (const Key& key : waiting) drop_successor(key, type, reason);
  for (const Key& key : keys) end_session(key, type, reason, false);
  if (!failure.empty()) {
    Event err;
    err.type = EventType::kError;
    err.interface = interface.name;
    err.at = now_stamp();
    err.message = "removing the shaping failed: " + failure;
    bus_.publish(std::move(err));
    log_.error("removing the shaping on " + interface.name + " failed: " + failure);
  }
}

void SessionManager::erase_from_ledger(
    int index, const std::optional<std::pair<Direction, std::string>>& lane) {
  try {
    if (lane) {
      ledger_.erase(index, to_string(lane->first), lane->second);
    } else {
      ledger_.erase(index);
    }
  } catch (const std::exception& e) {
    log_.warning(std::string("the shaping is removed but the ledger could not be rewritten: ") +
                 e.what() +
                 " (harmless until it can be: the next start finds nothing of what it names)");
  }
}

// ---------------------------------------------------------------------------------------------
// Status

SessionStatus SessionManager::describe(const Session& s,
                                       const std::vector<shaper::QdiscInfo>* all) {
  SessionStatus out;
  const MonotonicTime now = MonotonicClock::now();
  out.interface = s.interface.name;
  out.target = s.target;
  out.index = s.interface.index;
  out.direction = s.direction;
  out.set = s.set;
  out.match = s.match;
  out.unshaped = s.unshaped;
  out.offloads_off = s.offloads_off;
  out.profile = s.profile_name;
  out.digest = s.digest;
  out.phase = s.phase;
  out.client = {s.client.uid, s.client.pid};
  if (s.pending) {
    out.state = "pending";
  } else {
    out.state = s.schedule && s.schedule->paused() ? "paused" : "active";
    out.phase_since = s.phase_since;
    out.time_in_phase = now.time_since_epoch() - s.phase_since.monotonic;
  }
  if (s.schedule) {
    SessionStatus::Schedule sched;
    sched.state = s.schedule->paused() ? "paused" : "running";
    sched.step = s.position ? s.position->step : 0;
    sched.steps = s.schedule->steps().size();
    sched.loop = s.schedule->loop();
    sched.iteration = s.position ? s.position->iteration : 0;
    out.schedule = sched;
  }
  auto next = [&](std::string phase, std::optional<std::size_t> step, MonotonicTime at) {
    out.next_transition = SessionStatus::Next{std::move(phase), step, stamp_of(at), at - now};
  };
  if (s.pending) {
    const std::string first =
        s.schedule ? s.schedule->steps().front().phase : s.hold_phase.value_or("");
    next(first, s.schedule ? std::optional<std::size_t>(0) : std::nullopt, s.start);
  } else if (s.pending_switch) {
    next(s.pending_switch->phase, std::nullopt, s.pending_switch->at);
  } else if (s.schedule && !s.schedule->paused() && s.position) {
    if (auto n = s.schedule->next(*s.position))
      next(s.schedule->steps()[n->step].phase, n->step, n->start);
  }
  if (s.lease) {
    out.lease = SessionStatus::Lease{*s.lease, stamp_of(s.lease_expires), s.lease_expires - now};
  }
  if (s.confirm_by)
    out.confirm = SessionStatus::Confirm{stamp_of(*s.confirm_by), *s.confirm_by - now};
  if (!s.pending && backend_.installed(s.interface, s.direction)) {
    const auto counters =
        all ? backend_.lane_counters(s.interface, s.direction, s.set, *all)
            : backend_.lane_counters(s.interface, s.direction, s.set, backend_.all_qdiscs());
    if (counters) {
      out.counters = protocol::Counters{counters->packets, counters->bytes, counters->drops,
                                        counters->backlog, counters->qlen};
    }
  }
  out.transitions = s.transitions;
  out.missed = s.missed;
  out.late_max = s.late_max;
  out.recent.assign(s.recent.begin(), s.recent.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Shutdown, recovery, the outside world

void SessionManager::shutdown() {
  std::vector<int> indices;
  for (const auto& [key, s] : sessions_) {
    if (indices.empty() || indices.back() != key.index) indices.push_back(key.index);
  }
  for (int index : indices) {
    log_.info("removing the shaping on " +
              sessions_.lower_bound(Key{index, Direction::kEgress, ""})->second->interface.name);
    drop_interface(index, EventType::kCleared, "shutdown");
  }
  ledger_timer_.cancel();
  ledger_flush_armed_ = false;
  flush_ledger();
}

void SessionManager::recover() {
  const auto loaded = ledger_.load();
  for (const auto& warning : loaded.diagnostics()) log_.warning(warning.to_string());
  const LedgerContents& left = *loaded;
  const auto interfaces = backend_.interfaces();
  auto name_of = [&](int index) -> std::string {
    for (const auto& i : interfaces) {
      if (i.index == index) return i.name;
    }
    return {};
  };
  // Offloads an earlier jitterd turned off come back first (the interface may still exist).
  for (const auto& o : left.offloads) {
    if (name_of(o.index) != o.interface) continue;
    try {
      backend_.restore_offloads(shaper::Interface{o.index, o.interface},
                                shaper::Offloads{o.tso, o.gso, o.gro});
      log_.info("restored the offloads a previous jitterd turned off on " + o.interface);
    } catch (const std::exception& e) {
      log_.error("restoring the offloads of " + o.interface + ": " + e.what());
    }
  }
  std::vector<int> seen;
  auto leftover = [&](const shaper::Interface& interface) {
    if (std::find(seen.begin(), seen.end(), interface.index) != seen.end()) return;
    seen.push_back(interface.index);
    std::string what;
    for (const auto& e : left.sessions) {
      if (e.index == interface.index && e.interface == interface.name) {
        const bool whole_egress = e.direction == "egress" && e.set.empty();
        what += (what.empty() ? " (" : "; ") +
                (whole_egress ? "" : e.direction + (e.set.empty() ? "" : " " + e.set) + ": ") +
                "profile " + e.profile + ", phase " + e.phase;
      }
    }
    if (!what.empty()) what += ")";
    // Adopted only where this config still allows shaping (and only a plain egress netem: trees and
    // IFBs are removed); elsewhere the leftover is removed.
    if (config_.recovery == Recovery::kAdopt && config_.interface_allowed(interface.name) &&
        backend_.adopt(interface)) {
      auto owned = std::make_unique<Session>(executor_);
      owned->interface = interface;
      owned->pending = false;
      owned->sequence = next_sequence_++;
      for (const auto& e : left.sessions) {
        if (e.index == interface.index && e.interface == interface.name &&
            e.direction == "egress" && e.set.empty()) {
          owned->profile_name = e.profile;
          owned->digest = e.digest;
          owned->phase = e.phase;
        }
      }
      owned->phase_since = now_stamp();
      ledger_.record(LedgerEntry{interface.index, interface.name, "egress", "", owned->profile_name,
                                 owned->digest, owned->phase});
      sessions_.emplace(key_of(*owned), std::move(owned));
      log_.info("adopted the qdisc a previous jitterd left on " + interface.name + what);
    } else if (backend_.remove_leftover(interface)) {
      log_.info("removed the qdisc a previous jitterd left on " + interface.name + what);
    }
  };
  for (const auto& root : backend_.root_qdiscs()) {
    if (root.is_jitterd()) leftover(shaper::Interface{root.ifindex, name_of(root.ifindex)});
  }
  // IFBs (and their interface's redirect filters, which exist only while the IFB does) left without
  // a jitterd root on them: a crash in the middle of an apply.
  for (const auto& i : interfaces) {
    if (i.name.starts_with(shaper::kIfbNamePrefix)) leftover(i);
  }
  // The ledger now says what this process holds (nothing, or what it adopted).
  ledger_.save();
}

void SessionManager::on_interface_gone(int index) {
  if (!has_session(index)) return;
  ++metrics_.interfaces_gone;
  const Session& first = *sessions_.lower_bound(Key{index, Direction::kEgress, ""})->second;
  const shaper::Interface interface = first.interface;
  // A target's host-side veth goes with its namespace: the target is what is gone. Inside a
  // target, jitterd holds the namespace (end_target() tells its end): only the interface went.
  const bool target = first.target.has_value() && first.target->via != protocol::kViaInside;
  log_.warning(interface.name + " is gone" +
               (target ? " with " + first.target->kind + " " + first.target->name : "") +
               "; its sessions ended");
  backend_.forget(interface, std::nullopt);
  erase_from_ledger(index);
  drop_interface(index, target ? EventType::kTargetGone : EventType::kInterfaceGone, "");
}

void SessionManager::on_external_change(int index, const std::string& what, bool still_ours) {
  // Only the egress root is watched here.
  std::vector<Key> keys;
  Session* staged = nullptr;
  for (const auto& [key, s] : sessions_) {
    if (key.index != index || key.direction != Direction::kEgress) continue;
    if (!s->pending) keys.push_back(key);
    if (s->pending && s->staged) staged = s.get();
  }
  if (keys.empty() && staged && !still_ours &&
      backend_.installed(staged->interface, Direction::kEgress)) {
    // A pending apply's staged root (stage_in_kernel) taken over by someone else: not touched
    // again; the start installs its own at the start time, or says why it cannot.
    log_.warning("someone else changed the root qdisc of " + staged->interface.name + " (" + what +
                 ") before " + staged->label() + " started; its start is no longer staged");
    backend_.forget(staged->interface, Direction::kEgress);
    erase_from_ledger(index, std::pair(Direction::kEgress, staged->set));
    staged->staged = false;
    return;
  }
  if (keys.empty() ||
      !backend_.installed(sessions_.at(keys.front())->interface, Direction::kEgress))
    return;
  ++metrics_.external_changes;
  const shaper::Interface interface = sessions_.at(keys.front())->interface;
  log_.warning("someone else changed the root qdisc of " + interface.name + ": " + what);
  if (still_ours) {
    for (const Key& key : keys) {
      Event e = event_for(*sessions_.at(key), EventType::kExternalChange);
      e.message = what;
      e.ended = false;
      bus_.publish(std::move(e));
    }
    return;
  }
  // Not ours any more: never touch it. The egress sessions end without removing anything.
  backend_.forget(interface, Direction::kEgress);
  for (const Key& key : keys) {
    Event e = event_for(*sessions_.at(key), EventType::kExternalChange);
    e.message = what;
    e.ended = true;
    bus_.publish(std::move(e));
    erase_from_ledger(index, std::pair(Direction::kEgress, key.set));
    drop_successor(key, EventType::kCleared, "external-change");
    end_session(key, EventType::kCleared, "external-change", false);
  }
}

}  // namespace jitterd
