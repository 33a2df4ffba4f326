#include "event_merge.hpp"

#include <algorithm>
#include <cstdint>

namespace jitterctl {

void EventMerge::push(std::size_t host, Nanoseconds time, Nanoseconds arrived,
                      nlohmann::json event) {
  auto& mark = watermark_.at(host);
  mark = mark ? std::max(*mark, time) : time;
  Entry entry{host, time, arrived, std::move(event), false};
  const auto at = std::upper_bound(held_.begin(), held_.end(), entry,
                                   [](const Entry& a, const Entry& b) { return a.time < b.time; });
  held_.insert(at, std::move(entry));
}

bool EventMerge::every_host_passed(Nanoseconds time) const {
  for (std::size_t h = 0; h < watermark_.size(); ++h) {
    if (ended_[h]) continue;
    if (!watermark_[h] || *watermark_[h] < time) return false;
  }
  return true;
}

std::optional<EventMerge::Entry> EventMerge::pop_due(Nanoseconds now) {
  if (held_.empty()) return std::nullopt;
  // Any event held for the window lets out every event before it, the first one first.
  const bool expired = std::any_of(held_.begin(), held_.end(),
                                   [&](const Entry& e) { return now >= e.arrived + window_; });
  if (!expired && !every_host_passed(held_.front().time)) return std::nullopt;
  Entry out = std::move(held_.front());
  held_.erase(held_.begin());
  out.late = last_out_ && out.time < *last_out_;
  last_out_ = last_out_ ? std::max(*last_out_, out.time) : out.time;
  return out;
}

std::optional<Nanoseconds> EventMerge::next_due() const {
  if (held_.empty()) return std::nullopt;
  Nanoseconds first = held_.front().arrived;
  for (const Entry& e : held_) first = std::min(first, e.arrived);
  return first + window_;
}

Nanoseconds client_time_of(const nlohmann::json& event, std::optional<Nanoseconds> offset,
                           Nanoseconds fallback) {
  const auto at = event.find("at");
  if (at == event.end() || !at->is_object()) return fallback;
  const auto realtime = at->find("realtime_ns");
  if (realtime == at->end() || !realtime->is_number_integer()) return fallback;
  return Nanoseconds(realtime->get<std::int64_t>()) - offset.value_or(Nanoseconds(0));
}

}  // namespace jitterctl
