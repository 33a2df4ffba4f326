#include "sessions.hpp"

#include <algorithm>
#include <cstdlib>

#include "shaper/errors.hpp"

namespace jitterd {

namespace {

// How many transitions a status keeps (docs/protocol.md).
constexpr std::size_t kRecentTransitions = 32;

std::string phase_list(const shaper::Profile& profile) {
  std::string out;
  for (const auto& p : profile.phases) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

RequestError no_session(const std::string& interface) {
  return {"not-found", interface + " has no jitterd session", "/params/interface",
          "start one with apply; status lists the sessions"};
}

}  // namespace

struct SessionManager::Session {
  Session(asio::any_io_executor executor) : transition_timer(executor), lease_timer(executor) {}

  shaper::Interface interface;
  std::shared_ptr<const shaper::Profile> profile;  // null for a session adopted after a restart
  std::string profile_name;
  std::string digest;
  bool pending = true;
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
  asio::steady_timer transition_timer;
  asio::steady_timer lease_timer;
  std::uint64_t generation = 0;
  std::deque<TransitionRecord> recent;
  std::uint64_t transitions = 0;
  std::uint64_t missed = 0;
  Nanoseconds late_max{0};
  Peer client;
};

SessionManager::SessionManager(asio::any_io_executor executor, ShapingBackend& backend, Ledger& ledger,
                               EventBus& bus, const Config& config, Logger& log)
    : executor_(std::move(executor)), backend_(backend), ledger_(ledger), bus_(bus), config_(config), log_(log) {}

SessionManager::~SessionManager() = default;

SessionManager::Session* SessionManager::find(const std::string& interface) {
  for (auto& [index, s] : sessions_) {
    if (s->interface.name == interface) return s.get();
  }
  return nullptr;
}

Outcome<SessionManager::Session*> SessionManager::require(const std::string& interface) {
  if (Session* s = find(interface)) return s;
  return no_session(interface);
}

void SessionManager::log_request(const Peer& peer, const std::string& what) {
  log_.info(what + " (uid " + std::to_string(peer.uid) + ", pid " + std::to_string(peer.pid) +
            (peer.command.empty() ? "" : ", " + peer.command) + ")");
}

Event SessionManager::event_for(const Session& s, EventType type) const {
  Event e;
  e.type = type;
  e.interface = s.interface.name;
  e.profile = s.profile_name;
  e.digest = s.digest;
  e.phase = s.phase;
  e.at = now_stamp();
  return e;
}

// ---------------------------------------------------------------------------------------------
// Requests

Outcome<SessionStatus> SessionManager::apply(const ApplyRequest& request, const Peer& peer) {
  const std::string& name = request.interface;
  if (!config_.interface_allowed(name)) {
    return RequestError{"permission-denied", name + " is not in the interface allowlist", "/params/interface",
                        "add it (or a pattern such as \"veth*\") to interfaces.allow in the config and restart "
                        "jitterd; the allowlist keeps management interfaces safe"};
  }
  const auto interface = backend_.find_interface(name);
  if (!interface) {
    return RequestError{"not-found", "no interface " + name + " in jitterd's network namespace",
                        "/params/interface", "the interfaces method lists them"};
  }
  if (request.force && !config_.allow_force) {
    return RequestError{"permission-denied", "force is not allowed by this jitterd's config", "/params/force",
                        "set allow_force in the config, or remove the other root qdisc yourself"};
  }
  if (config_.lease_required && !request.lease) {
    return RequestError{"invalid-params", "this jitterd requires a lease", "/params/lease",
                        "pass \"lease\": \"60s\" and renew it while your run lasts"};
  }
  if (request.lease && (*request.lease <= Nanoseconds(0) || *request.lease > config_.max_lease)) {
    return RequestError{"invalid-params",
                        "lease " + shaper::format_duration(*request.lease) + " is out of range",
                        "/params/lease", "leases run from 1ns to " + shaper::format_duration(config_.max_lease) +
                                             " (leases.max in the config)"};
  }
  const shaper::Profile& profile = *request.profile;
  if (request.phase && !profile.find_phase(*request.phase)) {
    return RequestError{"not-found", "phase \"" + *request.phase + "\" is not in profile \"" + profile.name + "\"",
                        "/params/phase", "phases: " + phase_list(profile)};
  }
  if (request.schedule && !profile.schedule) {
    return RequestError{"invalid-params", "profile \"" + profile.name + "\" has no schedule", "/params/schedule",
                        "pick a phase instead: " + phase_list(profile)};
  }
  if (profile.phases.empty()) {
    return RequestError{"invalid-params", "profile \"" + profile.name + "\" has no phases", "/params/profile", ""};
  }
  // Say now, not at the start time, when the root belongs to someone else.
  if (!backend_.installed(*interface) && !request.force) {
    if (auto root = backend_.root_qdisc(*interface); root && !root->is_default() && !root->is_jitterd()) {
      return RequestError{"conflict",
                          "the root qdisc of " + name + " is " + root->kind + " " + shaper::format_handle(root->handle) +
                              ", installed by someone else; jitterd leaves it alone",
                          "/params/interface",
                          "remove it yourself, or pass \"force\": true if the config allows it (its queue is dropped)"};
    }
  }

  log_request(peer, "apply " + profile.name + " (" + request.digest + ") to " + name);
  auto owned = std::make_unique<Session>(executor_);
  Session& s = *owned;
  s.interface = *interface;
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
  if (s.lease) s.lease_expires = MonotonicClock::now() + *s.lease;
  const int index = interface->index;
  // A later apply supersedes a successor that has not started yet.
  drop_successor(index, EventType::kCleared, "replaced");

  if (request.start > MonotonicClock::now() && sessions_.contains(index)) {
    successors_.emplace(index, std::move(owned));
  } else if (request.start > MonotonicClock::now()) {
    sessions_.emplace(index, std::move(owned));
  } else {
    const bool was_installed = backend_.installed(*interface);
    try {
      // In place over whatever is installed: one netem change, no unshaped moment.
      start_session(s);
    } catch (...) {
      // The current session (if any) is untouched: the kernel refused the change. If the kernel took a
      // new qdisc and something after it failed (the ledger), take it back out: nothing half-done stays.
      if (!was_installed && backend_.installed(*interface)) {
        try {
          backend_.remove(*interface);
        } catch (const std::exception& e) {
          log_.error("removing the qdisc after a failed apply on " + name + ": " + e.what());
        }
      }
      throw;
    }
    end_session(index, EventType::kCleared, "replaced", false);
    sessions_.emplace(index, std::move(owned));
  }
  if (s.lease) arm_lease(s);
  arm(s);
  return describe(s);
}

void SessionManager::drop_successor(int index, EventType type, const std::string& reason) {
  auto it = successors_.find(index);
  if (it == successors_.end()) return;
  std::unique_ptr<Session> s = std::move(it->second);
  successors_.erase(it);
  s->transition_timer.cancel();
  s->lease_timer.cancel();
  Event e = event_for(*s, type);
  e.reason = reason;
  if (type == EventType::kLeaseExpired && s->lease) e.lease = *s->lease;
  bus_.publish(std::move(e));
}

void SessionManager::promote(int index) {
  auto it = successors_.find(index);
  if (it == successors_.end()) return;
  Session& s = *it->second;
  try {
    start_session(s);
  } catch (const std::exception& failure) {
    ++metrics_.transition_errors;
    Event e = event_for(s, EventType::kError);
    e.message = failure.what();
    bus_.publish(std::move(e));
    log_.error("starting the successor on " + s.interface.name + " failed: " + failure.what() +
               "; the current session goes on");
    drop_successor(index, EventType::kCleared, "start-failed");
    return;
  }
  std::unique_ptr<Session> owned = std::move(it->second);
  successors_.erase(it);
  end_session(index, EventType::kCleared, "replaced", false);
  Session& promoted = *owned;
  sessions_.emplace(index, std::move(owned));
  arm(promoted);
}

bool SessionManager::alive(const Session* s) const {
  const int index = s->interface.index;
  auto a = sessions_.find(index);
  if (a != sessions_.end() && a->second.get() == s) return true;
  auto b = successors_.find(index);
  return b != successors_.end() && b->second.get() == s;
}

Outcome<SessionStatus> SessionManager::switch_phase(const std::string& interface, const std::string& phase,
                                                    std::optional<MonotonicTime> at, const Peer& peer) {
  auto found = require(interface);
  if (auto* e = std::get_if<RequestError>(&found)) return *e;
  Session& s = *std::get<Session*>(found);
  if (!s.profile) {
    return RequestError{"invalid-params", interface + " was adopted after a restart; jitterd does not have its profile",
                        "/params/interface", "apply the profile again (in place, no unshaped moment), then switch"};
  }
  if (!s.profile->find_phase(phase)) {
    return RequestError{"not-found", "phase \"" + phase + "\" is not in profile \"" + s.profile_name + "\"",
                        "/params/phase", "phases: " + phase_list(*s.profile)};
  }
  log_request(peer, "switch " + interface + " to " + phase);
  const MonotonicTime now = MonotonicClock::now();
  if (s.schedule && !s.schedule->paused()) s.schedule->pause(now);
  if (s.pending) {
    // Not started yet: the switch decides the phase it starts with.
    s.schedule.reset();
    s.position.reset();
    s.hold_phase = phase;
    s.pending_switch.reset();
  } else if (!at || *at <= now) {
    s.pending_switch.reset();
    transition(s, phase, std::nullopt, at.value_or(now), EventType::kPhaseChanged);
  } else {
    s.pending_switch = Session::PendingSwitch{phase, *at};
  }
  arm(s);
  return describe(s);
}

Outcome<SessionStatus> SessionManager::pause(const std::string& interface, const Peer& peer) {
  auto found = require(interface);
  if (auto* e = std::get_if<RequestError>(&found)) return *e;
  Session& s = *std::get<Session*>(found);
  if (!s.schedule) {
    return RequestError{"invalid-params", interface + " holds a phase; there is no schedule to pause",
                        "/params/interface", ""};
  }
  log_request(peer, "pause " + interface);
  s.schedule->pause(MonotonicClock::now());
  arm(s);
  return describe(s);
}

Outcome<SessionStatus> SessionManager::resume(const std::string& interface, const Peer& peer) {
  auto found = require(interface);
  if (auto* e = std::get_if<RequestError>(&found)) return *e;
  Session& s = *std::get<Session*>(found);
  if (!s.schedule) {
    return RequestError{"invalid-params", interface + " holds a phase; there is no schedule to resume",
                        "/params/interface", "apply the profile with \"schedule\": true"};
  }
  log_request(peer, "resume " + interface);
  const MonotonicTime now = MonotonicClock::now();
  s.schedule->resume(now);
  s.pending_switch.reset();
  if (!s.pending && s.position) {
    *s.position = s.schedule->position(s.position->step, s.position->iteration);
    const std::string& phase = s.schedule->steps()[s.position->step].phase;
    // A switch while paused put another phase in force: the schedule's own comes back now.
    if (phase != s.phase) transition(s, phase, s.position->step, now, EventType::kPhaseChanged);
  }
  arm(s);
  return describe(s);
}

Outcome<SessionStatus> SessionManager::skip(const std::string& interface, std::optional<std::size_t> step,
                                            std::optional<std::string> phase, const Peer& peer) {
  auto found = require(interface);
  if (auto* e = std::get_if<RequestError>(&found)) return *e;
  Session& s = *std::get<Session*>(found);
  if (!s.schedule) {
    return RequestError{"invalid-params", interface + " holds a phase; there is no schedule to skip in",
                        "/params/interface", "use switch to change the phase"};
  }
  const auto& steps = s.schedule->steps();
  const std::size_t current = s.position ? s.position->step : 0;
  std::size_t target = 0;
  if (step) {
    if (*step >= steps.size()) {
      return RequestError{"invalid-params", "step " + std::to_string(*step) + " is out of range", "/params/step",
                          "the schedule has steps 0 to " + std::to_string(steps.size() - 1)};
    }
    target = *step;
  } else {
    // The next step (after the current one, wrapping) whose phase is the one asked for.
    bool found_step = false;
    for (std::size_t k = 1; k <= steps.size(); ++k) {
      const std::size_t candidate = (current + k) % steps.size();
      if (steps[candidate].phase == *phase) {
        target = candidate;
        found_step = true;
        break;
      }
    }
    if (!found_step) {
      return RequestError{"not-found", "no step of the schedule runs phase \"" + *phase + "\"", "/params/phase",
                          "pass a step number, or switch to hold a phase"};
    }
  }
  log_request(peer, "skip " + interface + " to step " + std::to_string(target));
  const MonotonicTime now = MonotonicClock::now();
  const std::uint64_t iteration = s.position ? s.position->iteration : 0;
  s.schedule->restart_at(target, iteration, now);
  s.pending_switch.reset();
  if (s.pending) {
    s.start = now;
    start_session(s);
  } else {
    s.position = s.schedule->position(target, iteration);
    transition(s, steps[target].phase, target, now, EventType::kPhaseChanged);
  }
  arm(s);
  return describe(s);
}

Outcome<SessionStatus> SessionManager::renew(const std::string& interface, std::optional<Nanoseconds> lease,
                                             const Peer& peer) {
  auto found = require(interface);
  if (auto* e = std::get_if<RequestError>(&found)) return *e;
  Session& s = *std::get<Session*>(found);
  const auto length = lease ? lease : s.lease;
  if (!length) {
    return RequestError{"invalid-params", interface + " has no lease to renew", "/params/lease",
                        "pass \"lease\": \"60s\" to give it one"};
  }
  if (*length <= Nanoseconds(0) || *length > config_.max_lease) {
    return RequestError{"invalid-params", "lease " + shaper::format_duration(*length) + " is out of range",
                        "/params/lease", "at most " + shaper::format_duration(config_.max_lease)};
  }
  (void)peer;  // renewals are frequent; they are not logged
  s.lease = length;
  s.lease_expires = MonotonicClock::now() + *length;
  arm_lease(s);
  return describe(s);
}

Outcome<std::vector<std::string>> SessionManager::clear(const std::string& interface, const Peer& peer) {
  std::vector<int> indices;
  if (interface.empty()) {
    for (const auto& [index, s] : sessions_) indices.push_back(index);
  } else {
    auto found = require(interface);
    if (auto* e = std::get_if<RequestError>(&found)) return *e;
    indices.push_back(std::get<Session*>(found)->interface.index);
  }
  std::vector<std::string> cleared;
  for (int index : indices) {
    const std::string name = sessions_.at(index)->interface.name;
    log_request(peer, "clear " + name);
    drop_successor(index, EventType::kCleared, "request");
    end_session(index, EventType::kCleared, "request", true);
    cleared.push_back(name);
  }
  return cleared;
}

Outcome<std::vector<SessionStatus>> SessionManager::status(const std::string& interface) {
  std::vector<SessionStatus> out;
  if (!interface.empty()) {
    auto found = require(interface);
    if (auto* e = std::get_if<RequestError>(&found)) return *e;
    Session* s = std::get<Session*>(found);
    out.push_back(describe(*s));
    if (auto it = successors_.find(s->interface.index); it != successors_.end()) {
      out.push_back(describe(*it->second));
    }
    return out;
  }
  if (sessions_.empty()) return out;
  const auto roots = backend_.root_qdiscs();
  for (auto& [index, s] : sessions_) {
    out.push_back(describe(*s, &roots));
    if (auto it = successors_.find(index); it != successors_.end()) out.push_back(describe(*it->second, &roots));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Transitions

void SessionManager::start_session(Session& s) {
  if (s.schedule) {
    s.position = s.schedule->at(std::max(s.start, s.schedule->origin()));
    if (!s.position) s.position = s.schedule->position(0, 0);
    transition(s, s.schedule->steps()[s.position->step].phase, s.position->step, s.position->start,
               EventType::kApplied);
    s.pending = false;
  } else {
    transition(s, *s.hold_phase, std::nullopt, s.start, EventType::kApplied);
    s.pending = false;
  }
}

void SessionManager::transition(Session& s, const std::string& phase, std::optional<std::size_t> step,
                                MonotonicTime deadline, EventType type) {
  const shaper::Phase* p = s.profile->find_phase(phase);
  if (!p) std::abort();  // phases were checked against the profile when the request was read
  const Stamp before = now_stamp();
  backend_.apply(s.interface, p->spec, s.force);
  const Stamp acked = now_stamp();

  TransitionRecord record;
  record.phase = phase;
  record.step = step;
  record.deadline = stamp_of(deadline);
  record.applied = acked;
  record.apply_time = acked.monotonic - before.monotonic;
  // Early (a request for "now" read before the deadline stamp) counts as on time.
  record.lateness = std::max(Nanoseconds(0), acked.monotonic - deadline.time_since_epoch());
  s.recent.push_back(record);
  if (s.recent.size() > kRecentTransitions) s.recent.pop_front();
  ++s.transitions;
  s.late_max = std::max(s.late_max, record.lateness);
  ++metrics_.transitions;
  const double late_seconds = std::chrono::duration<double>(record.lateness).count();
  metrics_.lateness_sum_seconds += late_seconds;
  for (std::size_t b = 0; b < std::size(SessionMetrics::kBuckets); ++b) {
    if (late_seconds <= SessionMetrics::kBuckets[b]) ++metrics_.lateness_buckets[b];
  }

  Event e = event_for(s, type);
  e.previous = s.phase;
  e.phase = phase;
  e.step = step;
  e.at = acked;
  e.deadline = record.deadline;
  e.lateness = record.lateness;
  e.apply_time = record.apply_time;
  s.phase = phase;
  s.phase_since = acked;
  ledger_.record(LedgerEntry{s.interface.index, s.interface.name, s.profile_name, s.digest, s.phase});
  bus_.publish(std::move(e));
}

void SessionManager::arm(Session& s) {
  s.generation = next_generation_++;
  s.transition_timer.cancel();
  std::optional<MonotonicTime> deadline;
  if (s.pending) {
    deadline = s.start;
  } else if (s.pending_switch) {
    deadline = s.pending_switch->at;
  } else if (s.schedule && !s.schedule->paused() && s.position) {
    // The end of this step: the next step's start, or the end of the schedule.
    deadline = s.position->end;
  }
  if (!deadline) return;
  s.transition_timer.expires_at(*deadline);
  s.transition_timer.async_wait([this, session = &s, generation = s.generation](
                                    const boost::system::error_code& ec) {
    if (!ec) on_timer(session, generation);
  });
}

void SessionManager::on_timer(Session* session, std::uint64_t generation) {
  // Ended, or re-armed since: the handler is stale.
  if (!alive(session) || session->generation != generation) return;
  Session& s = *session;
  const int index = s.interface.index;
  if (auto it = successors_.find(index); it != successors_.end() && it->second.get() == session) {
    promote(index);
    return;
  }
  try {
    if (s.pending) {
      start_session(s);
    } else if (s.pending_switch) {
      const auto sw = *s.pending_switch;
      s.pending_switch.reset();
      transition(s, sw.phase, std::nullopt, sw.at, EventType::kPhaseChanged);
    } else if (s.schedule && s.position) {
      const MonotonicTime now = MonotonicClock::now();
      auto next = s.schedule->next(*s.position);
      // Steps whose whole window has passed (the daemon was stalled, the machine suspended): each one
      // is reported, none silently skipped, and the step in force now is applied.
      while (next && next->end <= now) {
        ++s.missed;
        ++metrics_.missed_deadlines;
        Event e = event_for(s, EventType::kDeadlineMissed);
        e.phase = s.schedule->steps()[next->step].phase;
        e.step = next->step;
        e.deadline = stamp_of(next->start);
        e.lateness = now - next->start;
        bus_.publish(std::move(e));
        log_.warning("missed the deadline of step " + std::to_string(next->step) + " on " + s.interface.name +
                     " by " + shaper::format_duration(now - next->start));
        next = s.schedule->next(*next);
      }
      if (!next) {
        end_session(index, EventType::kCleared, "schedule-finished", true);
        return;
      }
      s.position = next;
      transition(s, s.schedule->steps()[next->step].phase, next->step, next->start, EventType::kPhaseChanged);
    }
  } catch (const std::exception& failure) {
    // No request to answer: the failure becomes an event, and the schedule goes on (the next step may
    // well succeed, e.g. after a transient ENOBUFS).
    ++metrics_.transition_errors;
    Event e = event_for(s, EventType::kError);
    e.message = failure.what();
    bus_.publish(std::move(e));
    log_.error("transition on " + s.interface.name + " failed: " + failure.what());
    if (s.pending) {
      // Nothing of this session may stay: remove what the kernel may hold for it.
      end_session(index, EventType::kCleared, "start-failed", backend_.installed(s.interface));
      return;
    }
  }
  if (alive(session)) arm(s);
}

void SessionManager::arm_lease(Session& s) {
  s.lease_timer.cancel();
  s.lease_timer.expires_at(s.lease_expires);
  s.lease_timer.async_wait([this, session = &s, expires = s.lease_expires](const boost::system::error_code& ec) {
    if (ec || !alive(session) || session->lease_expires != expires) return;
    ++metrics_.lease_expirations;
    const int index = session->interface.index;
    if (auto it = successors_.find(index); it != successors_.end() && it->second.get() == session) {
      // The client is gone before its successor started: the current session goes on.
      log_.warning("lease of the pending apply on " + session->interface.name + " ran out; it will not start");
      drop_successor(index, EventType::kLeaseExpired, "");
      return;
    }
    log_.warning("lease on " + session->interface.name + " ran out; removing its shaping");
    end_session(index, EventType::kLeaseExpired, "", true);
  });
}

void SessionManager::end_session(int index, EventType type, const std::string& reason, bool remove_qdisc) {
  auto it = sessions_.find(index);
  if (it == sessions_.end()) return;
  std::unique_ptr<Session> s = std::move(it->second);
  sessions_.erase(it);
  s->transition_timer.cancel();
  s->lease_timer.cancel();
  Event e = event_for(*s, type);
  e.reason = reason;
  if (type == EventType::kLeaseExpired && s->lease) e.lease = *s->lease;
  std::string failure;
  if (remove_qdisc) {
    try {
      backend_.remove(s->interface);
      ledger_.erase(index);
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  bus_.publish(std::move(e));
  if (!failure.empty()) {
    Event err = event_for(*s, EventType::kError);
    err.message = "removing the qdisc failed: " + failure;
    bus_.publish(std::move(err));
    log_.error("removing the qdisc on " + s->interface.name + " failed: " + failure);
  }
}

// ---------------------------------------------------------------------------------------------
// Status

SessionStatus SessionManager::describe(const Session& s, const std::vector<shaper::QdiscInfo>* roots) {
  SessionStatus out;
  const MonotonicTime now = MonotonicClock::now();
  out.interface = s.interface.name;
  out.index = s.interface.index;
  out.profile = s.profile_name;
  out.digest = s.digest;
  out.phase = s.phase;
  out.client = s.client;
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
    const std::string first = s.schedule ? s.schedule->steps().front().phase : s.hold_phase.value_or("");
    next(first, s.schedule ? std::optional<std::size_t>(0) : std::nullopt, s.start);
  } else if (s.pending_switch) {
    next(s.pending_switch->phase, std::nullopt, s.pending_switch->at);
  } else if (s.schedule && !s.schedule->paused() && s.position) {
    if (auto n = s.schedule->next(*s.position)) next(s.schedule->steps()[n->step].phase, n->step, n->start);
  }
  if (s.lease) {
    out.lease = SessionStatus::Lease{*s.lease, stamp_of(s.lease_expires), s.lease_expires - now};
  }
  if (!s.pending && backend_.installed(s.interface)) {
    std::optional<shaper::QdiscInfo> root;
    if (roots) {
      for (const auto& q : *roots) {
        if (q.ifindex == s.interface.index) root = q;
      }
    } else {
      root = backend_.root_qdisc(s.interface);
    }
    if (root && root->is_jitterd()) out.counters = root->stats;
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
  for (const auto& [index, s] : sessions_) indices.push_back(index);
  for (int index : indices) {
    log_.info("removing the shaping on " + sessions_.at(index)->interface.name);
    drop_successor(index, EventType::kCleared, "shutdown");
    end_session(index, EventType::kCleared, "shutdown", true);
  }
}

void SessionManager::recover() {
  std::string problem;
  const auto left = ledger_.load(&problem);
  if (!problem.empty()) log_.warning(problem);
  const auto interfaces = backend_.interfaces();
  auto name_of = [&](int index) -> std::string {
    for (const auto& i : interfaces) {
      if (i.index == index) return i.name;
    }
    return {};
  };
  for (const auto& root : backend_.root_qdiscs()) {
    if (!root.is_jitterd()) continue;
    const shaper::Interface interface{root.ifindex, name_of(root.ifindex)};
    const LedgerEntry* entry = nullptr;
    for (const auto& e : left) {
      if (e.index == interface.index && e.interface == interface.name) entry = &e;
    }
    const std::string what = entry ? " (profile " + entry->profile + ", phase " + entry->phase + ")" : "";
    // Adopted only where this config still allows shaping; elsewhere the leftover is removed.
    if (config_.recovery == Recovery::kAdopt && config_.interface_allowed(interface.name) &&
        backend_.adopt(interface)) {
      auto owned = std::make_unique<Session>(executor_);
      owned->interface = interface;
      owned->pending = false;
      owned->profile_name = entry ? entry->profile : "";
      owned->digest = entry ? entry->digest : "";
      owned->phase = entry ? entry->phase : "";
      owned->phase_since = now_stamp();
      ledger_.record(LedgerEntry{interface.index, interface.name, owned->profile_name, owned->digest, owned->phase});
      sessions_.emplace(interface.index, std::move(owned));
      log_.info("adopted the qdisc a previous jitterd left on " + interface.name + what);
    } else if (backend_.remove_leftover(interface)) {
      log_.info("removed the qdisc a previous jitterd left on " + interface.name + what);
    }
  }
  // The ledger now says what this process holds (nothing, or what it adopted).
  ledger_.save();
}

void SessionManager::on_interface_gone(int index) {
  auto it = sessions_.find(index);
  if (it == sessions_.end()) return;
  ++metrics_.interfaces_gone;
  log_.warning(it->second->interface.name + " is gone; its session ended");
  backend_.forget(it->second->interface);
  ledger_.erase(index);
  drop_successor(index, EventType::kInterfaceGone, "");
  end_session(index, EventType::kInterfaceGone, "", false);
}

void SessionManager::on_external_change(int index, const std::string& what, bool still_ours) {
  auto it = sessions_.find(index);
  // A pending session that installed nothing yet owns nothing there to be changed.
  if (it == sessions_.end() || !backend_.installed(it->second->interface)) return;
  ++metrics_.external_changes;
  Session& s = *it->second;
  log_.warning("someone else changed the root qdisc of " + s.interface.name + ": " + what);
  Event e = event_for(s, EventType::kExternalChange);
  e.message = what;
  e.ended = !still_ours;
  if (still_ours) {
    bus_.publish(std::move(e));
    return;
  }
  // Not ours any more: never touch it. The session ends without removing anything.
  backend_.forget(s.interface);
  ledger_.erase(index);
  bus_.publish(std::move(e));
  drop_successor(index, EventType::kCleared, "external-change");
  end_session(index, EventType::kCleared, "external-change", false);
}

}  // namespace jitterd
