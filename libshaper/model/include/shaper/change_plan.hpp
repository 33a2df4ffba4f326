#pragma once
// How one netem change is sent: what goes into the message beyond the full state (tables, whether
// the loss chain keeps running), planned from the spec the kernel holds and the one wanted. Pure:
// the engine (libshaper/kernel) sends what it plans and the simulator replays the same plan
// offline.

#include "shaper/netem_spec.hpp"

namespace shaper {

enum class LossEncoding {
  kFull,         // send the loss model (restarts a GE/4-state chain in its initial state)
  kKeepRunning,  // send an empty LOSS nest: the kernel keeps the model and its current state
};

// What to put in one message beyond the always-sent full state.
struct NetemEncodePlan {
  bool send_delay_table = true;  // tables are large and the kernel keeps the old one when absent
  bool send_slot_table = true;
  LossEncoding loss = LossEncoding::kFull;
};

// Plans a change from `applied` to `wanted`: which tables to send, whether the loss chain may keep
// running, and the spec to send (a uniform table stands in when a table must be turned off, since
// the kernel cannot drop one). Pure: unit-tested without a kernel.
struct ChangePlan {
  NetemSpec to_send;
  NetemEncodePlan encode;
};
ChangePlan plan_change(const NetemSpec& applied, const NetemSpec& wanted, bool tables_known);

}  // namespace shaper
