#pragma once
// NetemSpec: the whole netem surface of Linux 6.1 and later as typed values. One NetemSpec is the
// complete state of one netem qdisc; the engine always sends all of it (the kernel keeps attributes
// that a change leaves out, so a partial message would silently keep stale settings).

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/quantities.hpp"

namespace shaper {

// A netem distribution table: the kernel draws one entry uniformly and returns
// latency + jitter * entry / 8192 (exactly, when jitter is a multiple of 8192 ns). Order is
// irrelevant.
using DistributionTable = std::vector<std::int16_t>;

struct DelaySpec {
  Nanoseconds latency{0};
  // Without a table: the half-width of a uniform jitter (latency ± jitter).
  // With a table: the scale, in nanoseconds per 8192 table units (the distribution's "sigma").
  Nanoseconds jitter{0};
  // netem's delay "correlation". It does not produce autocorrelated delays (docs/netem-notes); kept
  // because it is part of the kernel surface and users migrating from tc expect it to round-trip.
  Probability correlation;
  std::optional<DistributionTable> distribution;
  friend bool operator==(const DelaySpec&, const DelaySpec&) = default;
};

// Independent (Bernoulli) loss, with netem's correlation (which is known to break the loss rate;
// the compiler never emits it, but the engine supports the whole surface).
struct RandomLoss {
  Probability probability;
  Probability correlation;
  friend bool operator==(const RandomLoss&, const RandomLoss&) = default;
};

// Gilbert–Elliott: two states. Each packet first moves the chain (Good→Bad with p, Bad→Good with
// r), then is lost with the loss probability of the state it was in before the move. The classic
// parameters are h and k (delivery probabilities in Bad and Good); we store the loss probabilities
// 1−h and 1−k because that is what people reason about (tc's CLI does the same).
struct GilbertElliottLoss {
  Probability p;                                // Good → Bad
  Probability r;                                // Bad → Good
  Probability loss_bad = Probability::one();    // 1 − h: loss probability in Bad
  Probability loss_good = Probability::zero();  // 1 − k: loss probability in Good
  friend bool operator==(const GilbertElliottLoss&, const GilbertElliottLoss&) = default;
};

// The 4-state Markov model of netem ("GI", Salsano et al.): 1 = delivered in gap, 2 = lost in
// burst, 3 = delivered in burst... named here as the kernel's transition probabilities pIJ.
struct FourStateLoss {
  Probability p13;
  Probability p31;
  Probability p32;
  Probability p23;
  Probability p14;
  friend bool operator==(const FourStateLoss&, const FourStateLoss&) = default;
};

using LossModel = std::variant<std::monostate, RandomLoss, GilbertElliottLoss, FourStateLoss>;

struct DuplicateSpec {
  Probability probability;
  Probability correlation;
  friend bool operator==(const DuplicateSpec&, const DuplicateSpec&) = default;
};

struct CorruptSpec {
  Probability probability;
  Probability correlation;
  friend bool operator==(const CorruptSpec&, const CorruptSpec&) = default;
};

// netem's explicit reordering: of every `gap` packets, the last is sent at once (ahead of the
// delayed ones) with `probability`. gap 0 turns the feature off.
struct ReorderSpec {
  Probability probability;
  Probability correlation;
  std::uint32_t gap = 0;
  friend bool operator==(const ReorderSpec&, const ReorderSpec&) = default;
};

struct RateSpec {
  BytesPerSecond rate;               // 0 = no rate limit
  std::int32_t packet_overhead = 0;  // bytes added (or removed, if negative) to every packet
  std::uint32_t cell_size = 0;       // 0 = no cell framing (e.g. 48 for ATM)
  std::int32_t cell_overhead = 0;    // bytes added per cell
  friend bool operator==(const RateSpec&, const RateSpec&) = default;
};

struct SlotDistribution {
  Nanoseconds delay{0};
  Nanoseconds jitter{0};
  DistributionTable table;
  friend bool operator==(const SlotDistribution&, const SlotDistribution&) = default;
};

// Slotting: packets leave in bursts ("slots", as on Wi-Fi or DOCSIS). The gap between slots is
// uniform in [min_delay, max_delay), or drawn from `distribution` when one is given.
struct SlotSpec {
  Nanoseconds min_delay{0};
  Nanoseconds max_delay{0};
  std::optional<SlotDistribution> distribution;
  std::int32_t max_packets = 0;  // per slot; 0 = unlimited
  std::int32_t max_bytes = 0;    // per slot; 0 = unlimited
  friend bool operator==(const SlotSpec&, const SlotSpec&) = default;
};

struct NetemSpec {
  DelaySpec delay;
  LossModel loss;
  DuplicateSpec duplicate;
  CorruptSpec corrupt;
  ReorderSpec reorder;
  RateSpec rate;
  std::optional<SlotSpec> slot;
  // Packets netem may hold. The kernel drops silently beyond it; 0 would drop everything.
  std::uint32_t limit = 1000;
  bool ecn = false;  // mark ECT packets CE instead of dropping them when the loss model says "lose"
  // Seeds netem's generator on kernels 6.6 and later; older kernels ignore the attribute.
  std::optional<std::uint64_t> prng_seed;
  friend bool operator==(const NetemSpec&, const NetemSpec&) = default;
};

// Kernel limits, from include/uapi/linux/pkt_sched.h and sch_netem.c.
inline constexpr int kDistScale = 8192;                 // NETEM_DIST_SCALE: table units per "sigma"
inline constexpr std::size_t kMaxTableEntries = 16384;  // NETEM_DIST_MAX
inline constexpr std::int64_t kMaxJitterNs = 2147483647;  // netem caps jitter to INT_MAX ns

// Every violation of the kernel's limits or of netem's meaning, with the field path, the allowed
// range and a fix. An empty result means the kernel will accept the spec and do what it says.
Diagnostics validate(const NetemSpec& spec);

}  // namespace shaper
