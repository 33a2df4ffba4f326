#include "kernel_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <utility>

#include "shaper/errors.hpp"
#include "shaper/route_facts.hpp"

namespace jitterd {

namespace {

// One lane for everything and nothing spared: a plain netem root is enough (and what the kernel
// tests and every earlier jitterd installed).
bool is_plain(const Layout& layout) {
  return layout.bypass.empty() && layout.lanes.size() == 1 && layout.lanes.front().set.empty();
}

// A gated root holds two netems, and the kernel refuses a duplicating netem next to another one
// (CVE-2025-38553's fix): a lane that duplicates stays a plain root, switched when asked.
bool gateable(const Layout& layout) {
  return is_plain(layout) && layout.lanes.front().spec.duplicate.probability.value() == 0.0;
}

}  // namespace

void KernelBackend::Shaped::remove() {
  if (tree) tree->remove();
  if (plain) plain->remove();
  if (gated) gated->remove();
  tree.reset();
  plain.reset();
  gated.reset();
  armed.reset();
}

void KernelBackend::Shaped::release() {
  if (tree) tree->release();
  if (plain) plain->release();
  if (gated) gated->release();
}

std::optional<MonotonicTime> KernelBackend::Shaped::settle_armed() {
  if (!gated || !armed) return std::nullopt;
  if (const auto deadline = gated->settle(MonotonicClock::now())) {
    layout = *std::exchange(armed, std::nullopt);
    return deadline;
  }
  gated->disarm();
  armed.reset();
  return std::nullopt;
}

KernelBackend::KernelBackend(SwitchGate gate) : gate_(gate), engine_(socket_) {}

KernelBackend::KernelBackend(shaper::RouteSocket socket, SwitchGate gate)
    : gate_(gate), socket_(std::move(socket)), engine_(socket_) {}

KernelBackend::~KernelBackend() = default;

std::vector<shaper::Interface> KernelBackend::interfaces() {
  return engine_.interfaces();
}

std::optional<shaper::Interface> KernelBackend::find_interface(const std::string& name) {
  for (auto& i : engine_.interfaces()) {
    if (i.name == name) return i;
  }
  return std::nullopt;
}

std::vector<shaper::QdiscInfo> KernelBackend::root_qdiscs() {
  return engine_.all_root_qdiscs();
}

std::optional<shaper::QdiscInfo> KernelBackend::root_qdisc(const shaper::Interface& interface) {
  return engine_.root_qdisc(interface);
}

std::vector<shaper::QdiscInfo> KernelBackend::all_qdiscs() {
  return engine_.all_qdiscs();
}

std::optional<shaper::QdiscStats> KernelBackend::lane_counters(
    const shaper::Interface& interface, Direction direction, const std::string& set,
    const std::vector<shaper::QdiscInfo>& all) {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return std::nullopt;
  const State& state = it->second;
  const std::optional<Shaped>& shaped =
      direction == Direction::kEgress ? state.egress : state.ingress;
  if (!shaped) return std::nullopt;
  const int device =
      direction == Direction::kEgress ? interface.index : state.plumbing->ifb().index;
  if (shaped->gated) {
    // Both bands: the lane's packets went through one or the other.
    std::optional<shaper::QdiscStats> sum;
    for (const auto& q : all) {
      if (q.ifindex != device ||
          (q.handle != shaper::gate_band_handle(0) && q.handle != shaper::gate_band_handle(1))) {
        continue;
      }
      if (!sum) sum.emplace();
      sum->packets += q.stats.packets;
      sum->bytes += q.stats.bytes;
      sum->drops += q.stats.drops;
      sum->backlog += q.stats.backlog;
      sum->qlen += q.stats.qlen;
      sum->requeues += q.stats.requeues;
      sum->overlimits += q.stats.overlimits;
    }
    return sum;
  }
  std::uint32_t handle = shaper::kJitterdRootHandle;
  if (shaped->tree) {
    if (set.empty()) {
      handle = shaper::tree_leaf_handle(shaper::kDefaultClassMinor);
    } else if (auto m = shaped->minors.find(set); m != shaped->minors.end()) {
      handle = shaper::tree_leaf_handle(m->second);
    } else {
      return std::nullopt;
    }
  }
  for (const auto& q : all) {
    if (q.ifindex == device && q.handle == handle) return q.stats;
  }
  return std::nullopt;
}

bool KernelBackend::installed(const shaper::Interface& interface) const {
  auto it = states_.find(interface.index);
  return it != states_.end() && (it->second.egress || it->second.ingress || it->second.plumbing);
}

bool KernelBackend::installed(const shaper::Interface& interface, Direction direction) const {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return false;
  return direction == Direction::kEgress ? it->second.egress.has_value()
                                         : it->second.ingress.has_value();
}

KernelBackend::Shaped KernelBackend::build(const shaper::Interface& device, const Layout& layout,
                                           bool force) {
  Shaped out;
  out.layout = layout;
  const shaper::InstallOptions options{.force = force};
  if (gate_ == SwitchGate::kKernel && gateable(layout)) {
    out.gated.emplace(
        shaper::GatedNetem::install(engine_, device, layout.lanes.front().spec, options));
    return out;
  }
  if (is_plain(layout)) {
    out.plain.emplace(engine_.install(device, layout.lanes.front().spec, options));
    return out;
  }
  out.minors = plan(layout, nullptr).minors;
  out.tree.emplace(shaper::NetemTree::install(engine_, device, tree_spec(out, layout), options));
  return out;
}

KernelBackend::Shaped KernelBackend::plan(const Layout& layout,
                                          const std::map<std::string, std::uint16_t>* existing) {
  // A rule set keeps its minor for as long as it lives (so an update leaves its class alone); new
  // sets take the lowest free one.
  Shaped out;
  std::set<std::uint16_t> used;
  for (const auto& lane : layout.lanes) {
    if (lane.set.empty() || !existing) continue;
    if (auto it = existing->find(lane.set); it != existing->end()) {
      out.minors[lane.set] = it->second;
      used.insert(it->second);
    }
  }
  std::uint16_t next = 1;
  for (const auto& lane : layout.lanes) {
    if (lane.set.empty() || out.minors.contains(lane.set)) continue;
    while (used.contains(next)) ++next;
    out.minors[lane.set] = next;
    used.insert(next);
  }
  return out;
}

shaper::TreeSpec KernelBackend::tree_spec(const Shaped& shaped, const Layout& layout) {
  shaper::TreeSpec spec;
  spec.bypass = layout.bypass;
  for (const auto& lane : layout.lanes) {
    if (lane.set.empty()) {
      spec.unmatched = lane.spec;
    } else {
      spec.leaves.push_back(
          shaper::TreeLeaf{shaped.minors.at(lane.set), lane.spec, lane.selectors});
    }
  }
  return spec;
}

std::map<std::uint16_t, shaper::NetemSpec> KernelBackend::netem_specs(const Shaped& shaped,
                                                                      const Layout& layout) {
  std::map<std::uint16_t, shaper::NetemSpec> out;
  if (shaped.plain || shaped.gated) {
    out[0] = layout.lanes.front().spec;
    return out;
  }
  for (const auto& lane : layout.lanes) {
    out[lane.set.empty() ? shaper::kDefaultClassMinor : shaped.minors.at(lane.set)] = lane.spec;
  }
  return out;
}

std::vector<std::pair<std::uint16_t, shaper::PreparedChange>> KernelBackend::prepare_changes(
    Shaped& shaped, const std::map<std::uint16_t, shaper::NetemSpec>& specs) {
  std::vector<std::pair<std::uint16_t, shaper::PreparedChange>> out;
  for (const auto& [minor, spec] : specs) {
    if (shaped.gated) {
      out.emplace_back(minor, shaped.gated->prepare_change(spec));
    } else {
      out.emplace_back(minor, shaped.plain ? shaped.plain->prepare_change(spec)
                                           : shaped.tree->prepare_change(minor, spec));
    }
  }
  return out;
}

KernelBackend::Shaped* KernelBackend::held(const shaper::Interface& interface,
                                           Direction direction) {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return nullptr;
  std::optional<Shaped>& slot =
      direction == Direction::kEgress ? it->second.egress : it->second.ingress;
  return slot ? &*slot : nullptr;
}

std::vector<std::exception_ptr> KernelBackend::shape_batch(std::span<const ShapeRequest> requests) {
  std::vector<std::exception_ptr> out = shape_all(requests);
  // A staged direction that a request shaped (its start landed, or another apply took it over) is
  // no longer dropped with its pending apply.
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (out[i]) continue;
    if (Shaped* slot = held(requests[i].interface, requests[i].direction)) slot->staged = false;
  }
  return out;
}

std::vector<std::exception_ptr> KernelBackend::shape_all(std::span<const ShapeRequest> requests) {
  std::vector<std::exception_ptr> out(requests.size());
  // Specs only, on a direction this process holds: every netem changed in place (each packet meets
  // the old or the new spec, never none and never both), the changes of all such requests in one
  // batch. The other requests go first, one at a time (they may add or drop the states the batch
  // points into).
  // Decided before anything is done: a request rebuilt below is not changed in place again.
  std::vector<bool> in_place(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ShapeRequest& r = requests[i];
    Shaped* slot = held(r.interface, r.direction);
    if (slot) slot->landed.reset();
    in_place[i] = slot && !r.layout.empty() && slot->layout.same_structure(r.layout);
    // A phase that duplicates cannot be held by a gated root: rebuilt as a plain one.
    if (in_place[i] && slot->gated && !gateable(r.layout)) in_place[i] = false;
    // A gated root with a switch armed: one that has landed is in force now; one still to come is
    // cancelled, since this request decides what the direction holds.
    if (in_place[i]) {
      if (const auto deadline = slot->settle_armed(); deadline && slot->layout == r.layout) {
        slot->landed = *deadline;  // nothing to send: the kernel did it at the deadline
        in_place[i] = false;
      }
    }
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (in_place[i]) continue;
    if (const Shaped* slot = held(requests[i].interface, requests[i].direction);
        slot && slot->landed) {
      continue;  // landed by its armed switch
    }
    try {
      rebuild(requests[i]);
    } catch (...) {
      out[i] = std::current_exception();
    }
  }
  struct Changed {
    std::size_t request;
    Shaped* shaped;
    std::size_t first;  // its changes in `batch`, one per minor
    std::vector<std::uint16_t> minors;
  };
  std::vector<Changed> changed;
  std::vector<shaper::PreparedChange> batch;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!in_place[i]) continue;
    Shaped* shaped = held(requests[i].interface, requests[i].direction);
    try {
      auto prepared = prepare_changes(*shaped, netem_specs(*shaped, requests[i].layout));
      Changed c{i, shaped, batch.size(), {}};
      for (auto& [minor, change] : prepared) {
        c.minors.push_back(minor);
        batch.push_back(std::move(change));
      }
      changed.push_back(std::move(c));
    } catch (...) {
      out[i] = std::current_exception();  // refused before anything was sent
    }
  }
  if (batch.empty()) return out;
  std::vector<std::optional<shaper::NetlinkError>> results;
  try {
    results = engine_.change(batch);
  } catch (...) {
    for (const auto& c : changed) out[c.request] = std::current_exception();
    return out;
  }
  // A request the kernel refused in part (a tree, one leaf refused): the previous state stands, so
  // its netems that did change go back, in one more batch for every such request.
  std::vector<shaper::PreparedChange> put_back;
  for (const auto& c : changed) {
    std::optional<shaper::NetlinkError> refusal;
    std::map<std::uint16_t, shaper::NetemSpec> revert;
    const auto before = netem_specs(*c.shaped, c.shaped->layout);
    for (std::size_t k = 0; k < c.minors.size(); ++k) {
      auto& result = results[c.first + k];
      if (!result) {
        revert[c.minors[k]] = before.at(c.minors[k]);
      } else if (!refusal) {
        refusal = std::move(result);
      }
    }
    if (!refusal) {
      c.shaped->layout = requests[c.request].layout;
      continue;
    }
    out[c.request] = std::make_exception_ptr(*refusal);
    if (revert.empty()) continue;
    try {
      for (auto& [minor, change] : prepare_changes(*c.shaped, revert))
        put_back.push_back(std::move(change));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "jitterd: putting back a refused change: %s\n", e.what());
    }
  }
  if (put_back.empty()) return out;
  try {
    for (const auto& error : engine_.change(put_back)) {
      if (error)
        std::fprintf(stderr, "jitterd: putting back a refused change: %s\n", error->what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitterd: putting back a refused change: %s\n", e.what());
  }
  return out;
}

bool KernelBackend::arm_switch(const ShapeRequest& request, MonotonicTime at) {
  Shaped* slot = held(request.interface, request.direction);
  // Not a spec change of a gated lane, or to a phase a gated root cannot hold (duplication): the
  // caller's timer makes it (a duplicating phase then rebuilds the lane as a plain root).
  if (!slot || !slot->gated || request.layout.empty() ||
      !slot->layout.same_structure(request.layout) || !gateable(request.layout)) {
    return false;
  }
  // A switch armed earlier that has landed is in force; one still to come is replaced.
  slot->settle_armed();
  slot->gated->arm(request.layout.lanes.front().spec, at);
  slot->armed = request.layout;
  return true;
}

bool KernelBackend::stage_start(const ShapeRequest& request, MonotonicTime at) {
  if (gate_ != SwitchGate::kKernel || request.layout.empty() || !gateable(request.layout))
    return false;
  Shaped* slot = held(request.interface, request.direction);
  if (slot && !slot->staged) return false;  // a running lane's: arm_switch's ground
  if (!slot) {
    // Until the deadline the gate's band holds a netem that passes packets on as they come (no
    // delay, loss, rate or reordering), with the phase's limit.
    Layout pass = request.layout;
    shaper::NetemSpec through;
    through.limit = request.layout.lanes.front().spec.limit;
    pass.lanes.front().spec = through;
    rebuild(ShapeRequest{request.interface, request.direction, pass, request.force});
    slot = held(request.interface, request.direction);
    slot->staged = true;
  }
  try {
    slot->settle_armed();
    slot->gated->arm(request.layout.lanes.front().spec, at);
  } catch (...) {
    drop_staged(request.interface, request.direction);
    throw;
  }
  slot->armed = request.layout;
  return true;
}

bool KernelBackend::drop_staged(const shaper::Interface& interface, Direction direction) {
  const Shaped* slot = held(interface, direction);
  if (!slot || !slot->staged) return false;
  // The direction's removal (and its IFB's, for ingress), as for a lane's clear.
  rebuild(ShapeRequest{interface, direction, Layout{}, false});
  return true;
}

void KernelBackend::disarm_switch(const shaper::Interface& interface, Direction direction) {
  Shaped* slot = held(interface, direction);
  if (!slot || !slot->armed) return;
  // Cancelled: even one whose deadline passed goes back (the session still holds the old phase).
  slot->gated->disarm();
  slot->armed.reset();
}

std::optional<MonotonicTime> KernelBackend::landed(const shaper::Interface& interface,
                                                   Direction direction) const {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return std::nullopt;
  const std::optional<Shaped>& slot =
      direction == Direction::kEgress ? it->second.egress : it->second.ingress;
  return slot ? slot->landed : std::nullopt;
}

void KernelBackend::rebuild(const ShapeRequest& request) {
  const shaper::Interface& interface = request.interface;
  const Direction direction = request.direction;
  const Layout& layout = request.layout;
  const bool force = request.force;
  State& state = states_[interface.index];
  state.interface = interface;
  std::optional<Shaped>& slot = direction == Direction::kEgress ? state.egress : state.ingress;
  try {
    if (layout.empty()) {
      if (slot) {
        slot->remove();
        slot.reset();
      }
      if (direction == Direction::kIngress && state.plumbing) {
        state.plumbing->remove();
        state.plumbing.reset();
      }
      drop_if_empty(interface.index);
      return;
    }
    if (slot && slot->tree && !is_plain(layout)) {
      // A rule set added or removed, the bypass changed: the tree is updated in place (new classes
      // before their filters, old filters before their classes), so unchanged lanes never notice.
      Shaped next = plan(layout, &slot->minors);
      slot->tree->update(tree_spec(next, layout));
      slot->layout = layout;
      slot->minors = std::move(next.minors);
      return;
    }
    // Between a plain netem root and a tree: rebuilt. The old root goes first, so the traffic is
    // unshaped for the microseconds between the two requests and what the old root held is dropped
    // (the kernel cannot swap a root qdisc for another kind in place).
    shaper::Interface device = interface;
    if (direction == Direction::kIngress) {
      if (!state.plumbing)
        state.plumbing.emplace(shaper::IngressRedirect::install(engine_, interface));
      device = state.plumbing->ifb();
    }
    if (slot) {
      slot->remove();
      slot.reset();
    }
    slot.emplace(build(device, layout, force));
  } catch (...) {
    // An IFB without shaping on it is of no use: nothing half-built stays.
    if (direction == Direction::kIngress && !state.ingress && state.plumbing) {
      try {
        state.plumbing->remove();
      } catch (...) {
      }
      state.plumbing.reset();
    }
    drop_if_empty(interface.index);
    throw;
  }
}

void KernelBackend::drop_if_empty(int index) {
  auto it = states_.find(index);
  if (it != states_.end() && it->second.empty()) states_.erase(it);
}

void KernelBackend::remove(const shaper::Interface& interface) {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return;
  State& state = it->second;
  // Each owner is dropped only once the kernel agreed: a failed removal stays owned and is retried
  // at shutdown. Ingress first (its IFB is ours alone), then egress, then the offloads come back.
  if (state.ingress) {
    state.ingress->remove();
    state.ingress.reset();
  }
  if (state.plumbing) {
    state.plumbing->remove();
    state.plumbing.reset();
  }
  if (state.egress) {
    state.egress->remove();
    state.egress.reset();
  }
  if (state.offloads) {
    state.offloads->restore();
    state.offloads.reset();
  }
  states_.erase(it);
}

void KernelBackend::forget(const shaper::Interface& interface, std::optional<Direction> direction) {
  auto it = states_.find(interface.index);
  if (it == states_.end()) return;
  State& state = it->second;
  if (!direction || *direction == Direction::kEgress) {
    if (state.egress) state.egress->release();
    state.egress.reset();
  }
  if (!direction || *direction == Direction::kIngress) {
    if (state.ingress) state.ingress->release();
    state.ingress.reset();
    if (state.plumbing) {
      // A gone interface took its filters along but not the IFB: that one is ours, and goes too.
      if (!direction) {
        state.plumbing->interface_gone();
      } else {
        state.plumbing->release();
      }
    }
    state.plumbing.reset();
  }
  if (!direction && state.offloads) {
    state.offloads->release();  // the interface is gone: nothing to restore
    state.offloads.reset();
  }
  drop_if_empty(interface.index);
}

std::optional<shaper::Offloads> KernelBackend::offloads_to_save(
    const shaper::Interface& interface) {
  if (auto it = states_.find(interface.index); it != states_.end() && it->second.offloads)
    return std::nullopt;
  return shaper::read_offloads(interface.name);
}

void KernelBackend::disable_offloads(const shaper::Interface& interface,
                                     const shaper::Offloads& saved) {
  State& state = states_[interface.index];
  state.interface = interface;
  if (state.offloads) return;
  try {
    state.offloads.emplace(interface.name, saved);
  } catch (...) {
    drop_if_empty(interface.index);
    throw;
  }
}

void KernelBackend::restore_offloads(const shaper::Interface& interface,
                                     const shaper::Offloads& saved) {
  shaper::write_offloads(interface.name, saved);
}

bool KernelBackend::carries_default_route(const shaper::Interface& interface) {
  const auto indices = shaper::default_route_interfaces(socket_);
  return std::find(indices.begin(), indices.end(), interface.index) != indices.end();
}

std::vector<std::uint16_t> KernelBackend::ssh_listening_ports() {
  // sshd's sockets where this process can see sshd, and sshd's configured ports where it cannot
  // (the shipped unit's ProtectProc=invisible hides root's processes from the jitterd user).
  std::vector<std::uint16_t> ports = shaper::sshd_listening_ports();
  for (std::uint16_t port : shaper::sshd_config_ports()) {
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

bool KernelBackend::remove_leftover(const shaper::Interface& interface) {
  if (states_.contains(interface.index)) return false;
  bool removed = false;
  const std::string prefix = shaper::kIfbNamePrefix;
  if (interface.name.starts_with(prefix)) {
    // One of our IFBs: its interface's redirect filters go first, then the IFB itself.
    const std::string digits = interface.name.substr(prefix.size());
    if (!digits.empty() &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const int parent = std::stoi(digits);
      for (const auto& i : engine_.interfaces()) {
        if (i.index == parent)
          removed = shaper::IngressRedirect::remove_leftover(engine_, i) || removed;
      }
      for (const auto& ifb : shaper::IngressRedirect::leftover_ifbs(engine_)) {
        if (ifb.index == interface.index) {
          shaper::IngressRedirect::remove_ifb(engine_, ifb);
          removed = true;
        }
      }
    }
    return removed;
  }
  removed = engine_.remove_if_ours(interface);
  removed = shaper::IngressRedirect::remove_leftover(engine_, interface) || removed;
  return removed;
}

bool KernelBackend::adopt(const shaper::Interface& interface) {
  if (states_.contains(interface.index)) return true;
  // Only a plain egress netem can be taken over (its spec is read back from the kernel); trees and
  // ingress plumbing are removed instead.
  auto root = engine_.root_qdisc(interface);
  if (!root || !root->is_jitterd() || root->kind != "netem") return false;
  if (interface.name.starts_with(shaper::kIfbNamePrefix)) return false;
  auto owner = engine_.adopt(interface);
  if (!owner) return false;
  State& state = states_[interface.index];
  state.interface = interface;
  Shaped shaped;
  shaped.layout.lanes.push_back(Lane{"", {}, owner->spec()});
  shaped.plain.emplace(std::move(*owner));
  state.egress.emplace(std::move(shaped));
  return true;
}

std::uint32_t KernelBackend::netlink_port() const {
  return socket_.local_port();
}

}  // namespace jitterd
