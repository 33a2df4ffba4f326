#pragma once
// An offline netem: draws packets through a NetemSpec (or a schedule of them) with sch_netem's own
// integer arithmetic, from a seeded generator, so a profile's fidelity can be scored without a
// kernel. What is reproduced exactly and what is simplified: docs/simulator.md.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/quantities.hpp"

namespace shaper {

// PCG32 (O'Neill 2014, XSH-RR output, 64-bit LCG state, pcg32_srandom_r seeding): a small, fast,
// statistically strong u32 source whose sequence depends only on (seed, stream), on every platform.
// It is deliberately not the kernel's prandom_u32_state: that generator and its seeding differ
// between kernel versions, and 6.1 has no PRNG_SEED at all, so no kernel sequence could be matched.
class Pcg32 {
 public:
  // Any stream will do; 54 is the one of pcg32's published demo output (seed 42), which the tests
  // check this implementation against.
  static constexpr std::uint64_t kDefaultStream = 54;

  explicit Pcg32(std::uint64_t seed, std::uint64_t stream = kDefaultStream);
  std::uint32_t operator()();

 private:
  std::uint64_t state_ = 0;
  std::uint64_t increment_ = 0;
};

// sch_netem's arithmetic as pure functions of the random numbers it draws, named after the kernel
// functions they reproduce. The simulator is built from them; tests drive them with chosen numbers.
namespace netem_arith {

// struct crndstate and get_crandom(): rho == 0 passes `value` through; otherwise
//   answer = (value * (2^32 - rho') + last * rho') >> 32, rho' = rho + 1, and last = answer.
struct CorrelatedRandom {
  std::uint32_t rho = 0;
  std::uint32_t last = 0;
};
std::uint32_t get_crandom(CorrelatedRandom& state, std::uint32_t value);

// tabledist(): mu + uniform or table draw, for sigma != 0 (sigma == 0 returns mu and draws nothing,
// so the simulator never calls it then). `table` empty means netem's built-in uniform:
// ((rnd % (2 sigma)) + mu) - sigma; otherwise netem_table_delay_ns(mu, sigma, table[rnd % size]).
std::int64_t tabledist(std::int64_t mu, std::int32_t sigma, std::uint32_t rnd,
                       std::span<const std::int16_t> table);

// packet_time_ns(): serialisation time of `len` bytes at `rate` bytes/s (rate > 0), with the
// per-packet overhead and cell framing, in the kernel's u64/u32 integer types (so a negative
// overhead larger than the packet wraps, as it does in the kernel).
std::uint64_t packet_time_ns(std::uint64_t len, std::uint64_t rate, std::int32_t packet_overhead,
                             std::uint32_t cell_size, std::int32_t cell_overhead);

// Gilbert–Elliott, loss_gilb_ell(), kernel parameter names: a1 = p, a2 = r, a3 = h (delivery
// probability in Bad), a4 = k1 (loss probability in Good). Two draws per packet: the first moves
// the chain, the second decides the loss with the probability of the state the packet started in.
struct GilbertElliottChain {
  enum class State : std::uint8_t { kGood, kBad };
  State state = State::kGood;
  std::uint32_t p = 0;
  std::uint32_t r = 0;
  std::uint32_t h = 0;
  std::uint32_t k1 = 0;
};
bool loss_gilb_ell(GilbertElliottChain& chain, std::uint32_t transition_rnd,
                   std::uint32_t loss_rnd);

// The 4-state GI model, loss_4state(). States as in Salsano et al.; the packet's fate is that of
// the state it moves into. a1 = p13, a2 = p31, a3 = p32, a4 = p14, a5 = p23; sums wrap in u32 as in
// the kernel.
enum class FourStateComparisons : std::uint8_t {
  // Linux up to 6.1.y and every kernel before the April 2026 fix: `a4 < rnd && rnd < a1 + a4` and
  // `a1 + a4 < rnd`, so a draw exactly on a boundary changes nothing and the packet is delivered.
  kStrictGaps,
  // After 20260418032027.900913-2 ("4-state boundary gaps"): plain `else if (rnd < a1 +
  // a4)`/`else`.
  kClosed,
};
struct FourStateChain {
  enum class State : std::uint8_t {
    kTxInGap = 1,      // delivered, within a gap
    kTxInBurst = 2,    // delivered, within a burst
    kLostInBurst = 3,  // lost, within a burst
    kLostInGap = 4,    // isolated loss within a gap
  };
  State state = State::kTxInGap;
  std::uint32_t p13 = 0;
  std::uint32_t p31 = 0;
  std::uint32_t p32 = 0;
  std::uint32_t p14 = 0;
  std::uint32_t p23 = 0;
};
bool loss_4state(FourStateChain& chain, std::uint32_t rnd, FourStateComparisons comparisons);

}  // namespace netem_arith

// One packet offered to netem.
struct SimPacket {
  Nanoseconds send_time{0};     // when it reaches the qdisc; non-decreasing along the input
  std::uint32_t length = 1500;  // qdisc_pkt_len: bytes including the link-layer header
  // ECN-capable (ECT(0), ECT(1) or already CE). With `ecn` on, a packet the loss model picks is
  // CE-marked and delivered instead of dropped if this is set (INET_ECN_set_ce succeeds).
  bool ect = false;
};

// `count` packets of `length` bytes, one every `interval`, the first at time 0.
std::vector<SimPacket> periodic_packets(std::size_t count, Nanoseconds interval,
                                        std::uint32_t length = 1500, bool ect = false);

// One step of a schedule: `spec` is in force for `duration`. The schedule starts at time 0; a
// packet sent after its end sees the last phase (netem keeps its last configuration). The first
// phase is installed as given; each switch applies what the engine sends for it (plan_change():
// full state, a uniform table where a table must be turned off, an empty LOSS nest when the loss
// model is unchanged in kernel units), with netem_change's rules: a GE / 4-state chain keeps its
// state only then, the reorder counter restarts, correlation states are re-seeded, a slot restarts
// now, queued packets keep their time_to_send.
struct SimPhase {
  Nanoseconds duration{0};
  NetemSpec spec;
  std::string name;
};

enum class SimFate : std::uint8_t {
  kDelivered,     // left netem (possibly CE-marked, corrupted or reordered)
  kLost,          // dropped by the loss model
  kDroppedLimit,  // dropped because netem already held `limit` packets
};

// What happened to one packet, or to netem's copy of it (`duplicate`).
struct SimOutcome {
  std::size_t packet = 0;  // index into the input
  std::size_t phase = 0;   // index of the phase in force when it was sent
  Nanoseconds sent{0};
  SimFate fate = SimFate::kDelivered;
  bool duplicate = false;  // netem's copy (follows its original in the output)
  bool ce_marked = false;
  bool corrupted = false;
  bool reordered = false;  // sent ahead by reorder/gap: time_to_send = now, at the queue's head
  // time_to_send - sent, as netem computed it at enqueue (can be negative with a wide table).
  // Zero unless delivered.
  Nanoseconds delay{0};
  // When netem's dequeue released it: time_to_send, or later when a slot held it; never before
  // `sent`. Zero unless delivered.
  Nanoseconds departure{0};

  bool delivered() const { return fate == SimFate::kDelivered; }
  friend bool operator==(const SimOutcome&, const SimOutcome&) = default;
};

struct SimCounters {
  std::uint64_t offered = 0;     // input packets
  std::uint64_t duplicated = 0;  // copies netem made
  std::uint64_t delivered = 0;   // originals and copies that left
  std::uint64_t lost = 0;        // loss-model drops (originals and copies)
  std::uint64_t ecn_marked = 0;  // loss-model picks turned into CE marks
  std::uint64_t limit_dropped = 0;
  std::uint64_t corrupted = 0;
  std::uint64_t reordered = 0;  // the kernel's qstats.requeues
  // What the kernel's qstats.drops would read: loss drops + ECN marks + limit drops of packets that
  // reached the limit check (a copy discarded with its original is not counted, as in the kernel).
  std::uint64_t qdisc_drops = 0;
  friend bool operator==(const SimCounters&, const SimCounters&) = default;
};

struct SimOptions {
  std::uint64_t seed = 1;
  netem_arith::FourStateComparisons four_state = netem_arith::FourStateComparisons::kStrictGaps;
};

struct SimResult {
  // One entry per input packet in input order, each duplicate right after its original. Empty when
  // `diagnostics` is not.
  std::vector<SimOutcome> outcomes;
  SimCounters counters;
  Diagnostics diagnostics;  // input the simulator refuses (see simulate())
};

// Runs the packets through netem. Refused with diagnostics (and no outcomes): send times that
// decrease or are negative, an empty schedule or a phase with a negative duration, and specs the
// kernel would reject or could not give a meaning to (an empty or oversized table, a negative slot
// value, slot max_delay < min_delay, a latency or slot delay beyond ±2^62 ns).
SimResult simulate(const NetemSpec& spec, std::span<const SimPacket> packets,
                   const SimOptions& options = {});
SimResult simulate(std::span<const SimPhase> schedule, std::span<const SimPacket> packets,
                   const SimOptions& options = {});

}  // namespace shaper
