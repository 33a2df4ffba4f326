#pragma once
// `fleet subscribe`'s one stream (docs/operations.md, "Fleets"): every host's events in the order
// of their own time, each event's `at` moved onto the client's clock by its host's clock offset,
// with a bounded reorder window. An event is let out once every host still streaming has passed
// its time (a host's events come in its own order, so one of its events at time T says none of
// its later ones is earlier), or once it or an event after it has been held for the window: a
// quiet host holds the others' events that long at most. An event that arrives after later ones
// went out is let out at once, marked late. Not thread-safe: fleet.cpp's queue holds it under its
// lock.

#include <cstddef>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "shaper/quantities.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

class EventMerge {
 public:
  struct Entry {
    std::size_t host = 0;
    Nanoseconds time{0};     // the event's `at` on the client's clock
    Nanoseconds arrived{0};  // when it was read, by the caller's steady clock
    nlohmann::json event;
    bool late = false;  // an event of an earlier time had gone out before it
  };

  EventMerge(std::size_t hosts, Nanoseconds window)
      : watermark_(hosts), ended_(hosts), window_(window) {}

  void push(std::size_t host, Nanoseconds time, Nanoseconds arrived, nlohmann::json event);
  // The host's stream ended: it holds nothing back any more.
  void end(std::size_t host) { ended_.at(host) = true; }
  // The next event that may go out at `now` (the steady clock of `arrived`), or nullopt.
  std::optional<Entry> pop_due(Nanoseconds now);
  // When the first held event goes out by the window alone; nullopt when none is held.
  std::optional<Nanoseconds> next_due() const;
  bool empty() const { return held_.empty(); }

 private:
  bool every_host_passed(Nanoseconds time) const;

  // By time, then arrival (an insertion after its equals keeps arrival order): the first goes out
  // first. A few events per host at a time, so a sorted
  // vector.
  std::vector<Entry> held_;
  std::vector<std::optional<Nanoseconds>> watermark_;  // each host's latest event time
  std::vector<bool> ended_;
  Nanoseconds window_;
  std::optional<Nanoseconds> last_out_;  // the time of the last event let out
};

// The event's `at` (CLOCK_REALTIME of its host) on the client's clock: minus the host's offset
// (the host's clock minus the client's, from `clock`). Without an `at`, `fallback` (when it was
// read, by the client's clock).
Nanoseconds client_time_of(const nlohmann::json& event, std::optional<Nanoseconds> offset,
                           Nanoseconds fallback);

}  // namespace jitterctl
