#pragma once
// What the daemon needs from the kernel, as an interface: the real one (KernelBackend) drives
// shaper::NetemEngine, NetemTree and IngressRedirect; protocol tests use a fake. Calls are
// synchronous (a netlink request is answered in microseconds) and throw shaper's exceptions on
// environment failures.
//
// The daemon says what one direction of an interface must look like (a Layout: lanes of traffic,
// each with its netem spec, and traffic that must stay unshaped); the backend makes the kernel hold
// exactly that: a plain netem root when one lane covers everything and nothing is spared, a
// classful tree otherwise, and for ingress an IFB that the backend creates, owns and removes.

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "clock.hpp"
#include "protocol/values.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/tc_types.hpp"
#include "shaper/u32_match.hpp"

namespace jitterd {

using protocol::Direction;
using protocol::direction_from_string;
using protocol::to_string;

// One slice of a direction's traffic and the netem spec it gets.
struct Lane {
  std::string set;  // "" = the whole direction (everything no other lane takes)
  std::vector<shaper::U32Selector> selectors;  // empty when set == ""
  shaper::NetemSpec spec;
  friend bool operator==(const Lane&, const Lane&) = default;
};

struct Layout {
  std::vector<Lane> lanes;  // at most one with set == ""; earlier lanes win
  std::vector<shaper::U32Selector>
      bypass;  // never shaped, whatever else matches (the operator's SSH)
  friend bool operator==(const Layout&, const Layout&) = default;

  bool empty() const { return lanes.empty(); }
  // Same lanes, selectors and bypass: a change of specs only, done in place.
  bool same_structure(const Layout& other) const;
};

// One direction of one interface and the layout it must hold (ShapingBackend::shape_batch).
struct ShapeRequest {
  shaper::Interface interface;
  Direction direction = Direction::kEgress;
  Layout layout;
  bool force = false;
};

class ShapingBackend {
 public:
  virtual ~ShapingBackend() = default;

  virtual std::vector<shaper::Interface> interfaces() = 0;
  virtual std::optional<shaper::Interface> find_interface(const std::string& name) = 0;
  // Root qdisc of every interface (index -> info), in one dump.
  virtual std::vector<shaper::QdiscInfo> root_qdiscs() = 0;
  virtual std::optional<shaper::QdiscInfo> root_qdisc(const shaper::Interface& interface) = 0;
  // Every qdisc of every interface, in one dump (the kernel dumps them all whatever the filter).
  virtual std::vector<shaper::QdiscInfo> all_qdiscs() = 0;
  // Counters of one lane's netem (the root for a plain layout, the lane's leaf in a tree), found in
  // `all` (from all_qdiscs()); nullopt when this process holds no such lane.
  virtual std::optional<shaper::QdiscStats> lane_counters(
      const shaper::Interface& interface, Direction direction, const std::string& set,
      const std::vector<shaper::QdiscInfo>& all) = 0;

  // Whether this process holds anything on the interface (either direction).
  virtual bool installed(const shaper::Interface& interface) const = 0;
  virtual bool installed(const shaper::Interface& interface, Direction direction) const = 0;
  // Makes the kernel hold `layout` for `direction` of `interface`. When only specs changed, every
  // lane is changed in place in one step (one netem change per leaf: each packet meets the old or
  // the new spec, never none and never both). A different structure is rebuilt. An empty layout
  // removes that direction. On failure the previous state stands (or nothing, if nothing was
  // there). A batch of one: throws what the kernel (or the engine) refused.
  void shape(const shaper::Interface& interface, Direction direction, const Layout& layout,
             bool force);
  // Several shape()s as one batch, the way `tc -batch` sends many changes: the in-place changes of
  // every request are built first, sent to the kernel together, and then every answer is read, so
  // the last of N coincident changes waits for one round trip instead of N. (Installs, removals and
  // new structures are not on that path: they are done one request at a time, as shape() did.) Each
  // request succeeds or fails on its own, as shape() would: result i is null, or the exception
  // shape() would have thrown for request i, whose direction then holds what it held before. At
  // most one request per direction of an interface.
  virtual std::vector<std::exception_ptr> shape_batch(std::span<const ShapeRequest> requests) = 0;

  // Kernel-timed switches (config switch_gate "kernel"): makes the kernel put `request`'s layout in
  // force by itself at `at` (CLOCK_MONOTONIC), with no wake-up then. True when armed: the direction
  // holds a gated root and the layout is a spec change of its one lane. False when this backend or
  // this direction cannot (the caller's timer does the switch as usual). Throws what the kernel
  // refused (nothing is armed then). The shape_batch() that brings the same layout at or after `at`
  // finds it in force and sends nothing; landed() then says when it landed.
  virtual bool arm_switch(const ShapeRequest& /*request*/, MonotonicTime /*at*/) { return false; }
  // Cancels a switch armed on that direction if its deadline has not come; no-op otherwise.
  virtual void disarm_switch(const shaper::Interface& /*interface*/, Direction /*direction*/) {}
  // Kernel-timed starts (switch_gate "kernel"): for an apply that starts at `at` on a direction
  // this process does not hold yet, installs that direction's gated root now, passing packets on
  // unchanged (no delay, loss or rate), with `request`'s layout armed for `at`. The shape_batch()
  // that brings that layout at or after `at` finds it in force, as for arm_switch(). On a direction
  // already staged this way, re-arms it with `request`'s layout. True when staged; false when this
  // backend or direction cannot (another lane holds it, the layout is not one gateable lane: the
  // caller's timer installs it at `at` as usual). Throws what the kernel refused (nothing is left
  // installed then).
  virtual bool stage_start(const ShapeRequest& /*request*/, MonotonicTime /*at*/) { return false; }
  // Removes a direction stage_start() installed that no shape_batch() has taken over since (its
  // apply was cleared or replaced before it started, or failed to start): true then; false and
  // no-op otherwise.
  virtual bool drop_staged(const shaper::Interface& /*interface*/, Direction /*direction*/) {
    return false;
  }
  // When the last shape_batch() found that direction's layout already put in force by an armed
  // switch: its deadline. nullopt when that shape was done by the request itself.
  virtual std::optional<MonotonicTime> landed(const shaper::Interface& /*interface*/,
                                              Direction /*direction*/) const {
    return std::nullopt;
  }
  // Removes everything this process holds on the interface (both directions, the IFB, and restores
  // offloads it turned off). No-op when none.
  virtual void remove(const shaper::Interface& interface) = 0;
  // The interface is gone (nullopt: both directions) or the root of one direction was replaced
  // behind our back: drop the owners, touch nothing, but for a gone interface's IFB (a device of
  // its own, created by this process), which is deleted.
  virtual void forget(const shaper::Interface& interface, std::optional<Direction> direction) = 0;

  // The interface's TSO, GSO and GRO as they are now, for the caller to record before
  // disable_offloads() changes them; nullopt when this process has already turned them off (their
  // original settings are recorded then). Throws when they cannot be read.
  virtual std::optional<shaper::Offloads> offloads_to_save(const shaper::Interface& interface) = 0;
  // Turns TSO, GSO and GRO off on the interface until remove(), which restores `saved` (what
  // offloads_to_save() returned). Throws when the driver refuses, having put back what it changed.
  virtual void disable_offloads(const shaper::Interface& interface,
                                const shaper::Offloads& saved) = 0;
  // Crash recovery: puts back what an earlier jitterd turned off.
  virtual void restore_offloads(const shaper::Interface& interface,
                                const shaper::Offloads& saved) = 0;
  // Whether the interface carries a default route (the SSH guard applies there).
  virtual bool carries_default_route(const shaper::Interface& interface) = 0;
  // The TCP ports sshd listens on here (its sessions on them stay unshaped too); empty when
  // unknown.
  virtual std::vector<std::uint16_t> ssh_listening_ports() = 0;

  // Crash recovery: jitterd objects (root 1a7e:, IFB jdifb<N>, redirect filters) this process does
  // not hold. `interface` may be the IFB itself. adopt() takes plain egress netem roots only.
  virtual bool remove_leftover(const shaper::Interface& interface) = 0;
  virtual bool adopt(const shaper::Interface& interface) = 0;

  // The netlink port id of the socket that makes our changes (0 for a fake): notifications carrying
  // it are our own.
  virtual std::uint32_t netlink_port() const = 0;
};

}  // namespace jitterd
