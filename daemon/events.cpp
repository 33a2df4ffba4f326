#include "events.hpp"

#include <array>
#include <utility>
#include <vector>

namespace jitterd {
namespace {

constexpr std::array<std::pair<EventType, std::string_view>, 12> kNames = {{
    {EventType::kApplied, "applied"},
    {EventType::kPhaseChanged, "phase-changed"},
    {EventType::kDeadlineMissed, "deadline-missed"},
    {EventType::kCleared, "cleared"},
    {EventType::kLeaseExpired, "lease-expired"},
    {EventType::kInterfaceGone, "interface-gone"},
    {EventType::kTargetGone, "target-gone"},
    {EventType::kTargetFollowed, "target-followed"},
    {EventType::kExternalChange, "external-change"},
    {EventType::kRolledBack, "rolled-back"},
    {EventType::kConfirmed, "confirmed"},
    {EventType::kError, "error"},
}};

}  // namespace

std::string_view to_string(EventType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "error";
}

std::optional<EventType> event_type_from_string(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

std::vector<std::string_view> event_type_names() {
  std::vector<std::string_view> names;
  for (const auto& [t, name] : kNames) names.push_back(name);
  return names;
}

std::uint64_t EventBus::subscribe(Callback callback) {
  const std::uint64_t token = next_token_++;
  subscribers_.emplace(token, std::move(callback));
  return token;
}

void EventBus::unsubscribe(std::uint64_t token) {
  subscribers_.erase(token);
}

void EventBus::publish(Event event) {
  event.seq = next_seq_++;
  // A callback may unsubscribe (a connection that overflowed closes itself), so iterate over a copy
  // of the tokens.
  std::vector<std::uint64_t> tokens;
  tokens.reserve(subscribers_.size());
  for (const auto& [token, callback] : subscribers_) tokens.push_back(token);
  for (auto token : tokens) {
    if (auto it = subscribers_.find(token); it != subscribers_.end()) it->second(event);
  }
}

}  // namespace jitterd
