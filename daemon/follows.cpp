#include "follows.hpp"

#include <utility>

namespace jitterd {

using nlohmann::json;

Follows::Follows(asio::any_io_executor executor, EventBus& bus, Logger& log, Nanoseconds poll)
    : bus_(bus), log_(log), poll_(poll), timer_(std::move(executor)) {
  subscription_ = bus_.subscribe([this](const Event& e) { on_event(e); });
}

Follows::~Follows() {
  bus_.unsubscribe(subscription_);
}

Follows::Key Follows::key_of(const protocol::TargetInfo& t, const std::string& set) {
  return t.kind + '\n' + t.name + '\n' + t.interface + '\n' + set;
}

bool Follows::matches(const Follow& f, const std::string& kind, const std::string& name,
                      const std::string& interface) const {
  const protocol::TargetInfo& t = *f.first.target;
  return f.waiting && (kind.empty() || (t.kind == kind && t.name == name)) &&
         (interface.empty() || t.interface == interface);
}

void Follows::track(const json& params, const Peer& peer,
                    const std::vector<SessionStatus>& applied) {
  if (applied.empty() || !applied.front().target) return;
  const SessionStatus& first = applied.front();
  Follow f;
  f.params = params;
  f.params.erase("start");    // the follow applies at once when the target is back
  f.params.erase("confirm");  // nobody is there to confirm a re-apply
  f.peer = peer;
  f.first = first;
  if (first.lease) f.lease = first.lease->length;
  follows_[key_of(*first.target, first.set)] = std::move(f);
}

void Follows::on_event(const Event& e) {
  if (!e.target) return;
  const auto it = follows_.find(key_of(*e.target, e.set));
  if (it == follows_.end() || (reapplying_ && *reapplying_ == it->first)) return;
  Follow& f = it->second;
  if (f.waiting) {
    // The target is back and someone applied to it: that apply, not the follow, holds it now
    // (with "follow" it is tracked again once it took effect).
    if (e.type == EventType::kApplied) follows_.erase(it);
    return;
  }
  switch (e.type) {
    case EventType::kTargetGone: {
      const MonotonicTime now = MonotonicClock::now();
      f.waiting = true;
      f.gone_at = now;
      f.expires.reset();
      if (f.lease) f.expires = now + *f.lease;
      f.refusal.clear();
      log_.info("follow: " + e.target->kind + " " + e.target->name + " went (" +
                e.target->namespace_id + "); waiting for it to come back");
      arm();
      break;
    }
    case EventType::kCleared:
    case EventType::kLeaseExpired:
    case EventType::kRolledBack:
    case EventType::kInterfaceGone:
      follows_.erase(it);
      break;
    default:
      break;
  }
}

void Follows::arm() {
  if (armed_ || waiting_count() == 0) return;
  armed_ = true;
  timer_.expires_after(poll_);
  timer_.async_wait([this](const std::error_code& ec) {
    armed_ = false;
    if (ec) return;
    poll();
  });
}

void Follows::poll() {
  std::vector<Key> keys;
  for (const auto& [key, f] : follows_) {
    if (f.waiting) keys.push_back(key);
  }
  for (const Key& key : keys) try_follow(key);
  arm();
}

void Follows::try_follow(const Key& key) {
  auto it = follows_.find(key);
  if (it == follows_.end() || !it->second.waiting) return;
  Follow& f = it->second;
  const protocol::TargetInfo before = *f.first.target;
  const std::string what = before.kind + " " + before.name;
  if (f.expires && MonotonicClock::now() >= *f.expires) {
    Event e = event_of(f, EventType::kLeaseExpired);
    e.lease = f.lease;
    e.reason = "waiting";
    follows_.erase(it);
    log_.info("follow: " + what + " did not come back within its lease; the follow ended");
    bus_.publish(std::move(e));
    return;
  }
  if (!apply_) return;
  reapplying_ = key;
  const std::string line = apply_(f.params, f.peer);
  reapplying_.reset();
  const json reply = json::parse(line, nullptr, false);
  it = follows_.find(key);
  if (it == follows_.end()) return;
  if (reply.is_object() && reply.value("ok", false)) {
    Follow& now = it->second;  // track() replaced it with the new sessions
    now.waiting = false;
    Event e = event_of(now, EventType::kTargetFollowed);
    e.previous = before.namespace_id;
    const std::string& after = now.first.target->namespace_id;
    // The old namespace ended (that is what made the follow wait), so this is a new one even when
    // the kernel gave it the freed one's inode number, which it does (docs/daemon.md).
    e.message = what + " is back in a new namespace " + after +
                (after == before.namespace_id
                     ? " (the old one's inode number, reused by the kernel after it was freed"
                     : " (was " + before.namespace_id) +
                "; whatever now runs under the name is followed); the apply was made again";
    log_.info("follow: " + e.message);
    bus_.publish(std::move(e));
    return;
  }
  std::string why = "the reply was not JSON";
  if (reply.is_object() && reply.contains("error") && reply["error"].is_object()) {
    why = reply["error"].value("message", std::string("no message"));
  }
  if (why != it->second.refusal) {
    log_.info("follow: " + what + " still waiting: " + why);
    it->second.refusal = why;
  }
}

bool Follows::waiting(const std::string& kind, const std::string& name,
                      const std::string& interface) const {
  for (const auto& [key, f] : follows_) {
    if (matches(f, kind, name, interface)) return true;
  }
  return false;
}

std::vector<std::string> Follows::clear_waiting(const std::string& kind, const std::string& name,
                                                const std::string& interface) {
  std::vector<std::string> ended;
  std::vector<Event> events;
  for (auto it = follows_.begin(); it != follows_.end();) {
    if (!matches(it->second, kind, name, interface)) {
      ++it;
      continue;
    }
    const protocol::TargetInfo& t = *it->second.first.target;
    ended.push_back(t.interface + " of " + t.kind + " " + t.name + " (waiting)");
    Event e = event_of(it->second, EventType::kCleared);
    e.reason = "request";
    events.push_back(std::move(e));
    it = follows_.erase(it);
  }
  for (Event& e : events) bus_.publish(std::move(e));
  return ended;
}

std::vector<std::string> Follows::clear_all_waiting() {
  return clear_waiting("", "", "");
}

std::vector<SessionStatus> Follows::renew_waiting(const std::string& kind, const std::string& name,
                                                  const std::string& interface,
                                                  std::optional<Nanoseconds> lease) {
  std::vector<SessionStatus> out;
  for (auto& [key, f] : follows_) {
    if (!matches(f, kind, name, interface)) continue;
    if (lease) f.lease = *lease;
    if (f.lease) f.expires = MonotonicClock::now() + *f.lease;
    out.push_back(describe(f));
  }
  return out;
}

std::vector<SessionStatus> Follows::statuses(const std::string& kind, const std::string& name,
                                             const std::string& interface) const {
  std::vector<SessionStatus> out;
  for (const auto& [key, f] : follows_) {
    if (matches(f, kind, name, interface)) out.push_back(describe(f));
  }
  return out;
}

std::size_t Follows::waiting_count() const {
  std::size_t n = 0;
  for (const auto& [key, f] : follows_) n += f.waiting ? 1 : 0;
  return n;
}

SessionStatus Follows::describe(const Follow& f) const {
  // What it will apply again; nothing of it is installed.
  SessionStatus s;
  s.interface = f.first.interface;
  s.target = f.first.target;
  s.direction = f.first.direction;
  s.set = f.first.set;
  s.match = f.first.match;
  s.state = "waiting";
  s.profile = f.first.profile;
  s.digest = f.first.digest;
  if (f.expires) {
    const MonotonicTime now = MonotonicClock::now();
    s.lease = SessionStatus::Lease{*f.lease, stamp_of(*f.expires),
                                   *f.expires > now ? *f.expires - now : Nanoseconds{0}};
  }
  return s;
}

Event Follows::event_of(const Follow& f, EventType type) const {
  Event e;
  e.type = type;
  e.interface = f.first.interface;
  e.target = f.first.target;
  e.direction = std::string(to_string(f.first.direction));
  e.set = f.first.set;
  e.profile = f.first.profile;
  e.digest = f.first.digest;
  e.at = now_stamp();
  return e;
}

}  // namespace jitterd
