#pragma once
// What the kernel holds, as values: interfaces, qdiscs with their counters and decoded netem state,
// an interface's offloads, and jitterd's reserved handle. The kernel layer (netem_engine.hpp,
// tc_tree.hpp, offloads.hpp) reads and writes them; the daemon's ShapingBackend seam and its fakes
// use them without seeing netlink.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "shaper/netem_spec.hpp"

namespace shaper {

// What the kernel reports for a netem qdisc. Tables are never dumped by the kernel, so the decoded
// spec has none; `has_slot` distinguishes "slot off" from an all-default slot.
struct DecodedNetem {
  NetemSpec spec;
  bool prng_seed_reported = false;  // 6.6+ kernels dump the seed in use
};

// Fixed so that a restarted daemon recognises its own qdiscs; chosen away from the handles people
// and tools use by hand (1:, 10:, ffff:) and from the kernel's automatic ones (8000: and up).
inline constexpr std::uint32_t kJitterdHandleMajor = 0x1a7e;
inline constexpr std::uint32_t kJitterdRootHandle = kJitterdHandleMajor << 16;

struct Interface {
  int index = 0;
  std::string name;
  friend bool operator==(const Interface&, const Interface&) = default;
};

// "veth0" or an ifindex.
using InterfaceRef = std::variant<std::string, int>;

struct QdiscStats {
  std::uint64_t packets = 0;  // dequeued (sent on) by this qdisc
  std::uint64_t bytes = 0;
  std::uint32_t drops = 0;     // loss-model drops, ECN marks, limit drops
  std::uint32_t backlog = 0;   // bytes held
  std::uint32_t qlen = 0;      // packets held
  std::uint32_t requeues = 0;  // for netem: reorder (gap) events
  std::uint32_t overlimits = 0;
};

struct QdiscInfo {
  int ifindex = 0;
  std::string kind;  // "netem", "noqueue", "htb" ...
  std::uint32_t handle = 0;
  std::uint32_t parent = 0;
  QdiscStats stats;
  std::optional<DecodedNetem> netem;  // when kind == "netem"

  bool is_root() const;
  bool is_default() const { return handle == 0; }  // the kernel's own qdiscs have handle 0:
  bool is_jitterd() const { return (handle >> 16) == kJitterdHandleMajor; }
};

// "1a7e:", "ffff:", "1:3".
std::string format_handle(std::uint32_t handle);

// Each is on when any of its feature bits is on; setting one sets all its changeable bits.
struct Offloads {
  bool tso = false;  // TCP segmentation offload: every tx-tcp*-segmentation flavour (ecn, mangleid,
                     // tcp6, accecn)
  bool gso = false;  // generic segmentation offload (tx-generic-segmentation)
  bool gro = false;  // generic receive offload (rx-gro)
  friend bool operator==(const Offloads&, const Offloads&) = default;
};

}  // namespace shaper
