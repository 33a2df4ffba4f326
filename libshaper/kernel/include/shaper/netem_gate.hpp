#pragma once
// A netem root whose next change can be armed for a deadline that the kernel keeps by itself: the
// switch reaches the datapath at the deadline whatever user space is doing then (asleep, preempted,
// one of sixteen daemons on one CPU). netem's parameters change only by a netlink request, so the
// gate holds both phases at once and a classifier picks between them by the clock:
//
//   root qdisc  prio   1a7e:   two bands, every priority to band 1a7e:1 unless classified
//   band 0             1a7e:1  netem 2001:   one phase
//   band 1             1a7e:2  netem 2002:   the other
//   filter      bpf    parent 1a7e: prio 1 protocol all: the gate program (below)
//
// The gate program (SCHED_CLS, 20 instructions, built here; no compiler, no object file) reads one
// 64-bit word from a one-entry BPF array map: its low bit is the band "after", the rest a deadline
// on CLOCK_MONOTONIC in nanoseconds. A packet enqueued at or after the deadline (bpf_ktime_get_ns)
// goes to band "after", an earlier one to the other band. Word 0 sends everything to band 0. An
// immediate change writes the band with a deadline of 0, an armed one its deadline: one 8-byte map
// write either way, which no packet can see half done. The idle band is changed (netlink) before
// the word points at it, so the band a packet meets is always complete.
//
// What differs from a plain netem root (docs/architecture.md, "Kernel-timed switches"): a switch
// starts the new phase's loss model (Gilbert-Elliott, 4-state) from its initial state, as a
// loss-model change would on a plain root; packets queued before the switch leave by their own
// times from the old band (as after an in-place change). The kernel refuses a duplicating netem
// next to another netem (CVE-2025-38553's fix), so a gated root cannot hold a phase with
// duplication. Loading the program needs CAP_BPF (or CAP_SYS_ADMIN) besides CAP_NET_ADMIN.

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "shaper/files.hpp"
#include "shaper/netem_engine.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/netlink.hpp"

namespace shaper {

inline constexpr std::uint32_t kGateBandClass0 = kJitterdRootHandle | 1;  // 1a7e:1
inline constexpr std::uint32_t kGateBands = 2;
constexpr std::uint32_t gate_band_class(int band) {
  return kGateBandClass0 + static_cast<std::uint32_t>(band);
}
// The netem of band b: 2001: and 2002: (the leaf handle range of tc_tree.hpp).
constexpr std::uint32_t gate_band_handle(int band) {
  return (0x2001u + static_cast<std::uint32_t>(band)) << 16;
}

// The map word: `deadline` (CLOCK_MONOTONIC, ns; its lowest bit is dropped) and the band after it.
constexpr std::uint64_t gate_word(std::chrono::nanoseconds deadline, int after) {
  return (static_cast<std::uint64_t>(deadline.count()) & ~std::uint64_t{1}) |
         static_cast<std::uint64_t>(after & 1);
}
// The band a packet enqueued at `now` goes to under `word`: what the gate program computes.
constexpr int gate_band_at(std::uint64_t word, std::chrono::nanoseconds now) {
  const int after = static_cast<int>(word & 1);
  const std::uint64_t deadline = word & ~std::uint64_t{1};
  return static_cast<std::uint64_t>(now.count()) >= deadline ? after : 1 - after;
}

// The gate program's instructions for a map file descriptor, as bpf(BPF_PROG_LOAD) takes them
// (struct bpf_insn, 8 bytes each). Pure, for the unit test of its encoding.
std::vector<std::uint64_t> gate_program(int map_fd);

// The gate program loaded, with its map: two file descriptors, owned. The filter holds its own
// reference to the program once attached; the map stays reachable through `map`.
class GateProgram {
 public:
  // Creates the map (word 0) and loads the program. SystemError on failure, with the verifier's
  // log in the message when the kernel refused the program, and a hint for EPERM (CAP_BPF).
  static GateProgram load();
  int program_fd() const { return program_.get(); }
  // One BPF_MAP_UPDATE_ELEM of the word: atomic for the gate program (an aligned 8-byte store).
  void write(std::uint64_t word);
  // The word as the kernel holds it (tests, diagnostics).
  std::uint64_t read() const;

 private:
  GateProgram(UniqueFd map, UniqueFd program)
      : map_(std::move(map)), program_(std::move(program)) {}
  UniqueFd map_;
  UniqueFd program_;
};

// An installed gated root, owned: removed (one RTM_DELQDISC of 1a7e: takes bands, netems and the
// filter along, and the last reference to the program with the filter) on destruction, unless
// release() was called. Move-only.
class GatedNetem {
 public:
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as bpf_ktime_get_ns

  // Validates `spec` (std::invalid_argument), checks the root as NetemEngine::install does, then
  // builds the prio root, both netems with `spec`, the program and the filter. Whatever was built
  // is removed again if a step fails.
  static GatedNetem install(NetemEngine& engine, const Interface& interface, const NetemSpec& spec,
                            const InstallOptions& options = {});

  GatedNetem(GatedNetem&& other) noexcept;
  GatedNetem& operator=(GatedNetem&& other) noexcept;
  GatedNetem(const GatedNetem&) = delete;
  GatedNetem& operator=(const GatedNetem&) = delete;
  ~GatedNetem();

  // An immediate change, built and not sent (NetemEngine::change batches it): the idle band's
  // netem changed in place to `spec`; on the kernel's ACK the gate points at it. Throws
  // std::logic_error while a switch is armed and due later (disarm() first).
  PreparedChange prepare_change(const NetemSpec& spec);
  void change(const NetemSpec& spec);

  // Arms a switch: the idle band's netem takes `spec` now (no packet enters it), then the gate
  // sends every packet enqueued from `deadline` on to it. An earlier armed switch not yet due is
  // disarmed first. Throws the kernel's refusal (nothing armed then).
  void arm(const NetemSpec& spec, Clock::time_point deadline);
  // Cancels the armed switch: the band in force before it stays in force, or comes back if the
  // deadline passed meanwhile (the packets enqueued since met the armed phase; settle() first to
  // keep a switch that landed). True when something was armed.
  bool disarm();
  // Records an armed switch whose deadline has passed as done; returns when it landed (nullopt
  // when none was due): its deadline, or, when the arm itself came after the deadline, the moment
  // the arm's map write returned (the gate moved the traffic then, not at the deadline).
  std::optional<Clock::time_point> settle(Clock::time_point now);
  std::optional<Clock::time_point> armed() const { return armed_; }

  // The spec in force at `now` (an armed switch due by then counts).
  const NetemSpec& spec(Clock::time_point now) const;
  // The band in force at `now`: 0 or 1.
  int band(Clock::time_point now) const;
  const NetemSpec& band_spec(int band) const { return specs_[band & 1]; }
  const GateProgram& program() const { return program_; }

  void remove();
  void release() { engine_ = nullptr; }
  const Interface& interface() const { return interface_; }
  bool owns() const { return engine_ != nullptr; }

 private:
  GatedNetem(NetemEngine& engine, Interface interface, GateProgram program, const NetemSpec& spec);
  void remove_quietly() noexcept;
  PreparedChange prepare_band_change(int band, const NetemSpec& spec);

  NetemEngine* engine_;
  Interface interface_;
  GateProgram program_;
  NetemSpec specs_[2];
  int active_ = 0;  // the band in force, an armed switch aside
  std::optional<Clock::time_point> armed_;
  Clock::time_point lands_{};  // the armed switch's landing: its deadline, or a late arm's write
};

}  // namespace shaper
