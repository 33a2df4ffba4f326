#include "fleet_rollback.hpp"

namespace jitterctl {
namespace {

using Json = nlohmann::json;

// The lane's direction as the request names it: a target's own (the host side's is reversed
// through a host-veth), else the interface's.
Direction request_direction(const SessionStatus& s) {
  return s.target ? s.target->direction : s.direction;
}

// The params that name one lane of the host: the fleet's interface and target, narrowed to a
// direction and a rule set ("": the whole direction).
Json lane_params(const Json& params, Direction direction, const std::string& set) {
  Json out = {{"interface", params.at("interface")},
              {"direction", jitterd::protocol::to_string(direction)},
              {"set", set.empty() ? Json(nullptr) : Json(set)}};
  if (params.contains("target")) out["target"] = params.at("target");
  return out;
}

Json lane_params(const Json& params, const SessionStatus& s) {
  return lane_params(params, request_direction(s), s.set);
}

// Why `s` cannot be put back by a request, or "".
std::string unrestorable(const SessionStatus& s) {
  const std::string lane = std::string(jitterd::protocol::to_string(request_direction(s))) +
                           (s.set.empty() ? "" : " rule set " + s.set) + " lane of " + s.interface;
  if (!s.set.empty())
    return "the " + lane + " is a rule set, whose match rules status does not give back";
  if (s.state != "active" && s.state != "paused")
    return "the " + lane + " was " + s.state + ", which no request restores";
  if (s.profile.empty() || s.phase.empty()) return "the " + lane + " had no profile and phase";
  return "";
}

// An apply that recreates `s` as it ran.
RestoreStep reapply(const Json& params, const SessionStatus& s) {
  Json p = lane_params(params, s);
  p.erase("set");
  p["profile"] = s.profile;
  if (s.schedule) {
    p["schedule"] = true;
  } else {
    p["phase"] = s.phase;
  }
  if (s.lease) p["lease"] = s.lease->length.count();
  return {"apply", std::move(p)};
}

}  // namespace

RestorePlan restore_plan(const std::string& method, const Json& params,
                         const std::vector<SessionStatus>& prior) {
  RestorePlan plan;
  // A fleet apply names the egress whole-direction lane (apply's default): only that lane
  // changed. A switch and a clear name every lane of the interface.
  std::vector<const SessionStatus*> touched;
  for (const SessionStatus& s : prior) {
    if (method != "apply" || (request_direction(s) == Direction::kEgress && s.set.empty()))
      touched.push_back(&s);
  }
  for (const SessionStatus* s : touched) {
    if (const std::string why = unrestorable(*s); !why.empty()) {
      plan.impossible = why;
      plan.steps.clear();
      plan.resume.clear();
      return plan;
    }
    if (method == "switch") {
      Json p = lane_params(params, *s);
      p["phase"] = s->phase;
      plan.steps.push_back({"switch", std::move(p)});
      if (s->schedule && s->schedule->state == "running")
        plan.resume.push_back(lane_params(params, *s));
    } else {
      plan.steps.push_back(reapply(params, *s));
    }
  }
  if (method == "apply" && touched.empty()) {
    // The lane was unshaped: the apply made it, a clear of it undoes it.
    plan.steps.push_back({"clear", lane_params(params, Direction::kEgress, "")});
  }
  return plan;
}

}  // namespace jitterctl
