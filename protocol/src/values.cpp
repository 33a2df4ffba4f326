#include "protocol/values.hpp"

#include <nlohmann/json.hpp>

namespace jitterd::protocol {

void to_json(nlohmann::json& j, const Stamp& s) {
  j = {{"monotonic_ns", s.monotonic.count()}, {"realtime_ns", s.realtime.count()}};
}

const char* to_string(Direction d) {
  return d == Direction::kIngress ? "ingress" : "egress";
}

Direction reversed(Direction d) {
  return d == Direction::kEgress ? Direction::kIngress : Direction::kEgress;
}

std::optional<Direction> direction_from_string(std::string_view text) {
  if (text == "egress") return Direction::kEgress;
  if (text == "ingress") return Direction::kIngress;
  return std::nullopt;
}

}  // namespace jitterd::protocol
