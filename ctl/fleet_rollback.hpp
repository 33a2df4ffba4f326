#pragma once
// What puts one fleet host back after a fleet change that did not land everywhere
// (docs/operations.md, "Fleets", "Rollback"): from the host's `status` of the inventory's
// interface read before the change was staged, the requests that restore it, each to be staged
// and committed as the change was. The client re-applies the recorded state; jitterd keeps no
// history of its own (a staged change is a request kept, docs/protocol.md), so nothing new is
// asked of the protocol.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replies.hpp"

namespace jitterctl {

// One request to stage and commit ("now") on the host: `method` is apply, switch or clear.
struct RestoreStep {
  std::string method;
  nlohmann::json params;
};

struct RestorePlan {
  std::vector<RestoreStep> steps;
  // Lanes whose schedule ran before a fleet switch paused it: `resume` after the steps, with
  // these params (direction and set narrow it to the lane).
  std::vector<nlohmann::json> resume;
  // Why the host cannot be put back as it was ("" when it can): what is lost is named, and
  // nothing is attempted for that host.
  std::string impossible;
};

// The plan for undoing `method` ("apply", "switch" or "clear", as the fleet staged it with
// `params`: its interface and target) on a host whose sessions on that interface were `prior`
// (empty: unshaped). Restored: each lane's profile (by name, so a profile given inline cannot be),
// its held phase or its running schedule (from the schedule's first step: the step and its
// remaining time are not restored), and its lease at full length. Not restored: a rule set's lane
// (its match rules are not in `status` as the request gave them), a pending or waiting session, a
// commit-confirmed apply's confirmation time, `offloads` and `protect_ssh` (their defaults apply).
RestorePlan restore_plan(const std::string& method, const nlohmann::json& params,
                         const std::vector<SessionStatus>& prior);

}  // namespace jitterctl
