#pragma once
// The protocol's vocabulary that the daemon's core uses too: a time as both clocks
// (docs/protocol.md, "Times") and a direction of an interface.

#include <chrono>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string_view>

namespace jitterd::protocol {

using Nanoseconds = std::chrono::nanoseconds;

// A moment on CLOCK_MONOTONIC (deadlines, a harness on the same host) and CLOCK_REALTIME (ping -D
// stamps, other hosts); on the wire {"monotonic_ns": ..., "realtime_ns": ...}.
struct Stamp {
  Nanoseconds monotonic{0};
  Nanoseconds realtime{0};
};
void to_json(nlohmann::json& j, const Stamp& s);

// Packets leaving the interface, or arriving (shaped on the IFB jitterd owns).
enum class Direction { kEgress, kIngress };

const char* to_string(Direction d);
std::optional<Direction> direction_from_string(std::string_view text);
// The other direction: what a veth's one end sends, its peer receives.
Direction reversed(Direction d);

}  // namespace jitterd::protocol
