#include "shaper/netem_simulator.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <set>

#include "shaper/change_plan.hpp"
#include "shaper/distribution_tables.hpp"
#include "shaper/kernel_units.hpp"

namespace shaper {

// ---- Pcg32 -------------------------------------------------------------------------------------

Pcg32::Pcg32(std::uint64_t seed, std::uint64_t stream) : increment_((stream << 1u) | 1u) {
  // pcg32_srandom_r: step, add the seed, step.
  (*this)();
  state_ += seed;
  (*this)();
}

std::uint32_t Pcg32::operator()() {
  // The LCG multiplier of PCG's 64-bit generators (Knuth's MMIX constant).
  constexpr std::uint64_t kMultiplier = 6364136223846793005ULL;
  const std::uint64_t old = state_;
  state_ = old * kMultiplier + increment_;
  const auto xorshifted = static_cast<std::uint32_t>(((old >> 18u) ^ old) >> 27u);
  const auto rotation = static_cast<std::uint32_t>(old >> 59u);
  return (xorshifted >> rotation) | (xorshifted << ((0u - rotation) & 31u));
}

// ---- netem's arithmetic ------------------------------------------------------------------------

namespace {

// The kernel's s64/u64 time arithmetic wraps (it builds with -fno-strict-overflow); so does ours,
// which keeps absurd inputs from being undefined behaviour here.
std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}

}  // namespace

namespace netem_arith {

std::uint32_t get_crandom(CorrelatedRandom& state, std::uint32_t value) {
  if (state.rho == 0) return value;  // no correlation
  const std::uint64_t rho = std::uint64_t{state.rho} + 1;
  // Cannot overflow: the two weights add up to 2^32 and both values are below 2^32.
  const std::uint64_t answer =
      (std::uint64_t{value} * ((std::uint64_t{1} << 32) - rho) + std::uint64_t{state.last} * rho) >>
      32;
  state.last = static_cast<std::uint32_t>(answer);
  return state.last;
}

std::int64_t tabledist(std::int64_t mu, std::int32_t sigma, std::uint32_t rnd,
                       std::span<const std::int16_t> table) {
  if (table.empty()) {
    // ((rnd % (2 * (u32)sigma)) + mu) - sigma, in the kernel's u32 then s64 types.
    const std::uint32_t width = 2u * static_cast<std::uint32_t>(sigma);
    if (width == 0)
      return mu;  // sigma 0 (or INT_MIN, which netem never passes: it caps at INT_MAX)
    return wrapping_add(wrapping_add(static_cast<std::int64_t>(rnd % width), mu),
                        -std::int64_t{sigma});
  }
  return netem_table_delay_ns(mu, sigma, table[rnd % table.size()]);
}

std::uint64_t packet_time_ns(std::uint64_t len, std::uint64_t rate, std::int32_t packet_overhead,
                             std::uint32_t cell_size, std::int32_t cell_overhead) {
  constexpr std::uint64_t kNsPerSecond = 1000000000;
  len +=
      static_cast<std::uint64_t>(std::int64_t{packet_overhead});  // u64 += s32: wraps if negative
  if (cell_size != 0) {
    // reciprocal_divide() takes a u32 and is an exact division; the products are u32 in the kernel.
    std::uint32_t cells = static_cast<std::uint32_t>(len) / cell_size;
    if (len > static_cast<std::uint32_t>(cells * cell_size)) ++cells;  // a partial cell is a cell
    len =
        static_cast<std::uint32_t>(cells * (cell_size + static_cast<std::uint32_t>(cell_overhead)));
  }
  return len * kNsPerSecond / rate;  // u64 product, as div64_u64(len * NSEC_PER_SEC, rate)
}

bool loss_gilb_ell(GilbertElliottChain& chain, std::uint32_t transition_rnd,
                   std::uint32_t loss_rnd) {
  switch (chain.state) {
    case GilbertElliottChain::State::kGood:
      if (transition_rnd < chain.p) chain.state = GilbertElliottChain::State::kBad;
      return loss_rnd < chain.k1;
    case GilbertElliottChain::State::kBad:
      if (transition_rnd < chain.r) chain.state = GilbertElliottChain::State::kGood;
      return loss_rnd > chain.h;
  }
  return false;
}

bool loss_4state(FourStateChain& chain, std::uint32_t rnd, FourStateComparisons comparisons) {
  using State = FourStateChain::State;
  const bool strict = comparisons == FourStateComparisons::kStrictGaps;
  switch (chain.state) {
    case State::kTxInGap: {
      const std::uint32_t upper = chain.p13 + chain.p14;  // u32 sum, wraps as in the kernel
      if (rnd < chain.p14) {
        chain.state = State::kLostInGap;
        return true;
      }
      if (strict ? (chain.p14 < rnd && rnd < upper) : rnd < upper) {
        chain.state = State::kLostInBurst;
        return true;
      }
      if (!strict || upper < rnd)
        chain.state = State::kTxInGap;  // strict: rnd == upper changes nothing
      return false;
    }
    case State::kTxInBurst:
      if (rnd < chain.p23) {
        chain.state = State::kLostInBurst;
        return true;
      }
      return false;
    case State::kLostInBurst: {
      const std::uint32_t upper = chain.p31 + chain.p32;
      if (rnd < chain.p32) {
        chain.state = State::kTxInBurst;
        return false;
      }
      if (strict ? (chain.p32 < rnd && rnd < upper) : rnd < upper) {
        chain.state = State::kTxInGap;
        return false;
      }
      if (!strict || upper < rnd) {
        chain.state = State::kLostInBurst;
        return true;
      }
      return false;  // strict and rnd on a boundary: state unchanged, packet delivered
    }
    case State::kLostInGap:
      chain.state = State::kTxInGap;
      return false;
  }
  return false;
}

}  // namespace netem_arith

// ---- The simulator -----------------------------------------------------------------------------

namespace {

using namespace netem_arith;

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();
// Latencies and slot delays beyond ±2^62 ns (146 years) would overflow netem_table_delay_ns's
// signed arithmetic; they mean nothing for a link, so the simulator refuses them.
constexpr std::int64_t kMaxDelayMagnitude = std::int64_t{1} << 62;

// Phase boundaries: durations are >= 0 (checked), so the end of time is the only overflow.
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<std::int64_t>::max() : sum;
}

// netem_change's caps: min(abs(jitter), INT_MAX).
std::int32_t capped_jitter(Nanoseconds jitter) {
  const std::int64_t j = jitter.count();
  if (j <= -kIntMax || j >= kIntMax) return static_cast<std::int32_t>(kIntMax);
  return static_cast<std::int32_t>(j < 0 ? -j : j);
}

std::span<const std::int16_t> table_of(const std::optional<DistributionTable>& table) {
  if (!table) return {};
  return *table;
}

// A packet held by netem: its time_to_send, an insertion number (tfifo breaks ties first come,
// first served), where its outcome is, and its length (slots count bytes).
struct Held {
  std::int64_t time_to_send = 0;
  std::uint64_t sequence = 0;
  std::size_t outcome = 0;
  std::uint32_t length = 0;
  bool operator<(const Held& other) const {
    return time_to_send != other.time_to_send ? time_to_send < other.time_to_send
                                              : sequence < other.sequence;
  }
};

// One netem qdisc: its configuration in kernel units, its random state, its queues.
class Netem {
 public:
  Netem(const SimOptions& options, SimResult& result)
      : rng_(options.seed), four_state_comparisons_(options.four_state), result_(result) {}

  // netem_init / netem_change with the full state the engine always sends. `keep_loss_chain`: the
  // engine sent an empty LOSS nest (model unchanged), so a GE / 4-state chain keeps its state.
  // The tables are referenced, not copied: `spec` must outlive the next configure().
  void configure(const NetemSpec& spec, std::int64_t now, bool keep_loss_chain);
  // netem_enqueue of one input packet (and, recursively, of netem's copy of it).
  void enqueue(const SimPacket& packet, std::size_t index, std::size_t phase, std::int64_t now) {
    ++result_.counters.offered;
    enqueue_one(packet, index, phase, now, false, false);
  }
  // qdisc_run: netem_dequeue until it returns nothing.
  void dequeue(std::int64_t now);
  // The watchdog hrtimer: one timer, the last programmed expiry wins, firing clears it.
  std::optional<std::int64_t> watchdog() const { return watchdog_; }
  void fire_watchdog() {
    const std::int64_t at = *watchdog_;
    watchdog_.reset();
    dequeue(at);
  }

 private:
  enum class LossKind : std::uint8_t { kRandom, kGilbertElliott, kFourState };

  void enqueue_one(const SimPacket& packet, std::size_t index, std::size_t phase, std::int64_t now,
                   bool copy, bool ce);
  bool loss_event();
  std::size_t qlen() const { return list_.size() + tree_.size() + head_.size(); }
  std::optional<std::int64_t> last_time_to_send() const;
  void tfifo_enqueue(const Held& held);
  void get_slot_next(std::int64_t now);
  void deliver(const Held& held, std::int64_t now);
  // init_crandom: the kernel seeds `last` from get_random_u32(); we draw it from our generator.
  CorrelatedRandom init_crandom(Probability rho) {
    return {kernel_units::probability(rho), rng_()};
  }

  Pcg32 rng_;
  FourStateComparisons four_state_comparisons_;
  SimResult& result_;

  // Configuration (struct netem_sched_data's fields, same names where they exist).
  std::int64_t latency_ = 0;
  std::int32_t jitter_ = 0;
  std::span<const std::int16_t> delay_dist_;
  std::uint32_t limit_ = 0;
  std::uint32_t loss_ = 0;
  std::uint32_t gap_ = 0;
  std::uint32_t duplicate_ = 0;
  std::uint32_t reorder_ = 0;
  std::uint32_t corrupt_ = 0;
  std::uint64_t rate_ = 0;
  std::int32_t packet_overhead_ = 0;
  std::uint32_t cell_size_ = 0;
  std::int32_t cell_overhead_ = 0;
  bool ecn_ = false;
  CorrelatedRandom delay_cor_, loss_cor_, dup_cor_, reorder_cor_, corrupt_cor_;

  LossKind loss_kind_ = LossKind::kRandom;
  GilbertElliottChain ge_;
  FourStateChain four_state_;

  // Slot configuration and state (slot_config / struct slotstate). The kernel marks "off" with
  // slot_next == 0, which a real clock never reads; our clock starts at 0, hence the flag.
  bool slot_on_ = false;
  std::int64_t slot_min_delay_ = 0;
  std::int64_t slot_max_delay_ = 0;
  std::int32_t slot_max_packets_ = 0;
  std::int32_t slot_max_bytes_ = 0;
  std::int64_t slot_dist_delay_ = 0;
  std::int32_t slot_dist_jitter_ = 0;
  std::span<const std::int16_t> slot_dist_;
  std::int64_t slot_next_ = 0;
  std::int64_t packets_left_ = 0;
  std::int64_t bytes_left_ = 0;

  std::uint32_t counter_ = 0;  // reorder counter

  // tfifo: a linear list for packets arriving in time_to_send order, an rbtree (here a set) for the
  // rest; sch->q for packets sent ahead by reordering (enqueued at the head, dequeued first).
  std::deque<Held> list_;
  std::set<Held> tree_;
  std::deque<Held> head_;
  std::uint64_t sequence_ = 0;
  std::optional<std::int64_t> watchdog_;
};

void Netem::configure(const NetemSpec& spec, std::int64_t now, bool keep_loss_chain) {
  // LOSS: a full GE / GI attribute restarts the chain in its first state (get_loss_clg); an empty
  // nest keeps model and state; no LOSS attribute at all (random loss or none) is CLG_RANDOM.
  const bool restart = !keep_loss_chain;
  if (const auto* ge = std::get_if<GilbertElliottLoss>(&spec.loss)) {
    loss_kind_ = LossKind::kGilbertElliott;
    if (restart) {
      ge_ = GilbertElliottChain{GilbertElliottChain::State::kGood, kernel_units::probability(ge->p),
                                kernel_units::probability(ge->r),
                                kernel_units::ge_h_from_loss_bad(ge->loss_bad),
                                kernel_units::ge_k1_from_loss_good(ge->loss_good)};
    }
  } else if (const auto* gi = std::get_if<FourStateLoss>(&spec.loss)) {
    loss_kind_ = LossKind::kFourState;
    if (restart) {
      four_state_ =
          FourStateChain{FourStateChain::State::kTxInGap,    kernel_units::probability(gi->p13),
                         kernel_units::probability(gi->p31), kernel_units::probability(gi->p32),
                         kernel_units::probability(gi->p14), kernel_units::probability(gi->p23)};
    }
  } else {
    loss_kind_ = LossKind::kRandom;
  }

  // A table present in the spec is the one in force: the spec is what the engine sent, and its
  // plan_change() already put a uniform table in place of one that had to be turned off.
  delay_dist_ = table_of(spec.delay.distribution);
  slot_dist_ = spec.slot && spec.slot->distribution
                   ? std::span<const std::int16_t>(spec.slot->distribution->table)
                   : std::span<const std::int16_t>{};

  // qopt
  limit_ = spec.limit;
  gap_ = spec.reorder.gap;
  counter_ = 0;
  const auto* random = std::get_if<RandomLoss>(&spec.loss);
  loss_ = random ? kernel_units::probability(random->probability) : 0;
  duplicate_ = kernel_units::probability(spec.duplicate.probability);

  // CORR, REORDER, CORRUPT: always sent, so every change re-seeds their `last`, in this order.
  delay_cor_ = init_crandom(spec.delay.correlation);
  loss_cor_ = init_crandom(random ? random->correlation : Probability::zero());
  dup_cor_ = init_crandom(spec.duplicate.correlation);
  reorder_ = kernel_units::probability(spec.reorder.probability);
  reorder_cor_ = init_crandom(spec.reorder.correlation);
  corrupt_ = kernel_units::probability(spec.corrupt.probability);
  corrupt_cor_ = init_crandom(spec.corrupt.correlation);

  // RATE (+RATE64: the kernel takes the larger, which is the spec's rate either way).
  rate_ = spec.rate.rate.value;
  packet_overhead_ = spec.rate.packet_overhead;
  cell_size_ = spec.rate.cell_size;
  cell_overhead_ = spec.rate.cell_overhead;

  latency_ = spec.delay.latency.count();
  ecn_ = spec.ecn;

  // SLOT (get_slot): 0 packets/bytes mean unlimited; slotting is on when any delay is set, and
  // then the first slot opens now.
  slot_min_delay_ = spec.slot ? spec.slot->min_delay.count() : 0;
  slot_max_delay_ = spec.slot ? spec.slot->max_delay.count() : 0;
  slot_max_packets_ = spec.slot && spec.slot->max_packets != 0 ? spec.slot->max_packets
                                                               : static_cast<std::int32_t>(kIntMax);
  slot_max_bytes_ = spec.slot && spec.slot->max_bytes != 0 ? spec.slot->max_bytes
                                                           : static_cast<std::int32_t>(kIntMax);
  const bool slot_distribution = spec.slot && spec.slot->distribution;
  slot_dist_delay_ = slot_distribution ? spec.slot->distribution->delay.count() : 0;
  slot_dist_jitter_ = slot_distribution ? capped_jitter(spec.slot->distribution->jitter) : 0;
  packets_left_ = slot_max_packets_;
  bytes_left_ = slot_max_bytes_;
  slot_on_ = slot_min_delay_ != 0 || slot_max_delay_ != 0 || slot_dist_jitter_ != 0;
  slot_next_ = slot_on_ ? now : 0;

  jitter_ = capped_jitter(spec.delay.jitter);
}

bool Netem::loss_event() {
  switch (loss_kind_) {
    case LossKind::kRandom:
      // "0 => none, ~0 => all": no draw at all when loss is off.
      return loss_ != 0 && loss_ >= get_crandom(loss_cor_, rng_());
    case LossKind::kGilbertElliott: {
      const std::uint32_t transition = rng_();
      const std::uint32_t loss = rng_();
      return loss_gilb_ell(ge_, transition, loss);
    }
    case LossKind::kFourState:
      return loss_4state(four_state_, rng_(), four_state_comparisons_);
  }
  return false;
}

std::optional<std::int64_t> Netem::last_time_to_send() const {
  // netem_enqueue with rate: the latest of sch->q.tail, the rbtree's last and the tfifo tail.
  std::optional<std::int64_t> last;
  if (!head_.empty()) last = head_.back().time_to_send;
  if (!tree_.empty() && (!last || tree_.rbegin()->time_to_send > *last)) {
    last = tree_.rbegin()->time_to_send;
  }
  if (!list_.empty() && (!last || list_.back().time_to_send > *last)) {
    last = list_.back().time_to_send;
  }
  return last;
}

void Netem::tfifo_enqueue(const Held& held) {
  if (list_.empty() || held.time_to_send >= list_.back().time_to_send) {
    list_.push_back(held);
  } else {
    tree_.insert(held);
  }
}

void Netem::enqueue_one(const SimPacket& packet, std::size_t index, std::size_t phase,
                        std::int64_t now, bool copy, bool ce) {
  SimCounters& counters = result_.counters;
  const std::size_t entry = result_.outcomes.size();
  {
    SimOutcome outcome;
    outcome.packet = index;
    outcome.phase = phase;
    outcome.sent = Nanoseconds(now);
    outcome.duplicate = copy;
    result_.outcomes.push_back(outcome);
  }
  // (Outcomes are addressed by index: the copy's recursive push_back may reallocate.)
  auto outcome = [&]() -> SimOutcome& { return result_.outcomes[entry]; };

  int count = 1;
  if (!copy && duplicate_ != 0 && duplicate_ >= get_crandom(dup_cor_, rng_())) ++count;

  if (loss_event()) {
    if (ecn_ && packet.ect) {
      ce = true;  // INET_ECN_set_ce succeeds on any ECT or CE packet
      ++counters.ecn_marked;
      ++counters.qdisc_drops;  // the kernel counts a mark as a drop
    } else {
      --count;
    }
  }
  if (count == 0) {
    outcome().fate = SimFate::kLost;
    ++counters.lost;
    ++counters.qdisc_drops;
    return;
  }
  outcome().ce_marked = ce;
  const bool make_copy = count > 1;  // cloned here, before corruption: the copy is never corrupted

  if (corrupt_ != 0 && corrupt_ >= get_crandom(corrupt_cor_, rng_())) {
    outcome().corrupted = true;
    ++counters.corrupted;
  }

  if (qlen() >= limit_) {
    outcome().fate = SimFate::kDroppedLimit;
    ++counters.limit_dropped;
    ++counters.qdisc_drops;
    if (make_copy) {  // the clone is freed with it, uncounted by the kernel's drops
      ++counters.duplicated;
      ++counters.limit_dropped;
      SimOutcome lost_copy = outcome();
      lost_copy.duplicate = true;
      lost_copy.corrupted = false;
      result_.outcomes.push_back(lost_copy);
    }
    return;
  }

  if (make_copy) {
    // Re-enqueued at the root (netem is the root here), where its own duplication is suppressed.
    ++counters.duplicated;
    enqueue_one(packet, index, phase, now, true, ce);
  }

  Held held;
  held.sequence = sequence_++;
  held.outcome = entry;
  held.length = packet.length;
  if (gap_ == 0 || counter_ < gap_ - 1 || reorder_ < get_crandom(reorder_cor_, rng_())) {
    std::int64_t delay =
        jitter_ == 0 ? latency_
                     : tabledist(latency_, jitter_, get_crandom(delay_cor_, rng_()), delay_dist_);
    std::int64_t base = now;
    if (rate_ != 0) {
      if (const auto last = last_time_to_send()) {
        // The last queued packet is the reference point: subtract its head start from the delay.
        delay = std::max<std::int64_t>(0, wrapping_sub(delay, wrapping_sub(*last, now)));
        base = *last;
      }
      delay = wrapping_add(
          delay, static_cast<std::int64_t>(packet_time_ns(packet.length, rate_, packet_overhead_,
                                                          cell_size_, cell_overhead_)));
    }
    held.time_to_send = wrapping_add(base, delay);
    ++counter_;
    tfifo_enqueue(held);
  } else {
    held.time_to_send = now;
    counter_ = 0;
    head_.push_front(held);
    outcome().reordered = true;
    ++counters.reordered;
  }
  outcome().delay = Nanoseconds(wrapping_sub(held.time_to_send, now));
}

void Netem::get_slot_next(std::int64_t now) {
  std::int64_t next_delay;
  if (slot_dist_.empty()) {
    // min + mul_u64_u32_shr(max - min, rnd, 32): a uniform fraction of the range, 96-bit exact.
    const auto range = static_cast<std::uint64_t>(slot_max_delay_ - slot_min_delay_);
    const std::uint64_t rnd = rng_();
    const std::uint64_t scaled = (range >> 32) * rnd + (((range & 0xffffffffULL) * rnd) >> 32);
    next_delay = wrapping_add(slot_min_delay_, static_cast<std::int64_t>(scaled));
  } else {
    next_delay = slot_dist_jitter_ == 0
                     ? slot_dist_delay_
                     : tabledist(slot_dist_delay_, slot_dist_jitter_, rng_(), slot_dist_);
  }
  slot_next_ = wrapping_add(now, next_delay);
  packets_left_ = slot_max_packets_;
  bytes_left_ = slot_max_bytes_;
}

void Netem::deliver(const Held& held, std::int64_t now) {
  SimOutcome& outcome = result_.outcomes[held.outcome];
  outcome.fate = SimFate::kDelivered;
  outcome.departure = Nanoseconds(now);
  ++result_.counters.delivered;
}

void Netem::dequeue(std::int64_t now) {
  for (;;) {
    if (!head_.empty()) {  // packets sent ahead leave first
      deliver(head_.front(), now);
      head_.pop_front();
      continue;
    }
    // netem_peek: the rbtree's first unless the list head is due no later.
    const bool from_tree = !tree_.empty() && (list_.empty() || tree_.begin()->time_to_send <
                                                                   list_.front().time_to_send);
    if (!from_tree && list_.empty()) return;
    const Held next = from_tree ? *tree_.begin() : list_.front();
    if (slot_on_ && slot_next_ < next.time_to_send) get_slot_next(now);
    if (next.time_to_send <= now && (!slot_on_ || slot_next_ <= now)) {
      if (from_tree) {
        tree_.erase(tree_.begin());
      } else {
        list_.pop_front();
      }
      if (slot_on_) {
        --packets_left_;
        bytes_left_ -= next.length;
        if (packets_left_ <= 0 || bytes_left_ <= 0) get_slot_next(now);
      }
      deliver(next, now);
      continue;
    }
    watchdog_ = slot_on_ ? std::max(next.time_to_send, slot_next_) : next.time_to_send;
    return;
  }
}

// ---- Input checks ------------------------------------------------------------------------------

void check_table(const DistributionTable& table, const std::string& where, Diagnostics& out) {
  if (table.empty() || table.size() > kMaxTableEntries) {
    out.push_back({where, "has " + std::to_string(table.size()) +
                              " entries; the kernel accepts 1 to 16384 (NETEM_DIST_MAX)"});
  }
}

void check_delay(Nanoseconds d, const std::string& where, Diagnostics& out) {
  if (d.count() > kMaxDelayMagnitude || d.count() < -kMaxDelayMagnitude) {
    out.push_back({where, format_duration(d) + " is beyond the simulator's range (±2^62 ns)"});
  }
}

void check_phase(const SimPhase& phase, const std::string& prefix, Diagnostics& out) {
  const NetemSpec& spec = phase.spec;
  if (phase.duration.count() < 0) {
    out.push_back({prefix + ".duration", format_duration(phase.duration) + " is negative"});
  }
  check_delay(spec.delay.latency, prefix + ".spec.delay.latency", out);
  if (spec.delay.distribution)
    check_table(*spec.delay.distribution, prefix + ".spec.delay.distribution", out);
  if (!spec.slot) return;
  const SlotSpec& slot = *spec.slot;
  if (slot.min_delay.count() < 0 || slot.max_delay.count() < 0) {
    out.push_back({prefix + ".spec.slot", "slot delays must be 0 or more"});
  } else if (slot.max_delay < slot.min_delay) {
    out.push_back({prefix + ".spec.slot.max_delay", format_duration(slot.max_delay) +
                                                        " is below slot.min_delay " +
                                                        format_duration(slot.min_delay)});
  }
  check_delay(slot.max_delay, prefix + ".spec.slot.max_delay", out);
  if (slot.max_packets < 0 || slot.max_bytes < 0) {
    out.push_back(
        {prefix + ".spec.slot", "max_packets and max_bytes must be 0 (unlimited) or more"});
  }
  if (slot.distribution) {
    if (slot.distribution->delay.count() < 0) {
      out.push_back({prefix + ".spec.slot.distribution.delay", "must be 0 or more"});
    }
    check_delay(slot.distribution->delay, prefix + ".spec.slot.distribution.delay", out);
    check_table(slot.distribution->table, prefix + ".spec.slot.distribution.table", out);
  }
}

Diagnostics check_input(std::span<const SimPhase> schedule, std::span<const SimPacket> packets) {
  Diagnostics out;
  if (schedule.empty()) out.push_back({"schedule", "is empty; give at least one phase"});
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    std::string prefix = "schedule[" + std::to_string(i) + "]";
    check_phase(schedule[i], prefix, out);
  }
  for (std::size_t i = 0; i < packets.size(); ++i) {
    const Nanoseconds t = packets[i].send_time;
    if (t.count() < 0 || (i > 0 && t < packets[i - 1].send_time)) {
      out.push_back({"packets[" + std::to_string(i) + "].send_time",
                     format_duration(t) + (t.count() < 0 ? " is negative; the schedule starts at 0"
                                                         : " is earlier than the packet before; "
                                                           "send times must not decrease")});
      break;  // one is enough: the rest of the input is suspect anyway
    }
  }
  return out;
}

}  // namespace

std::vector<SimPacket> periodic_packets(std::size_t count, Nanoseconds interval,
                                        std::uint32_t length, bool ect) {
  std::vector<SimPacket> packets(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Wrapping multiplication: an absurd interval wraps instead of being undefined behaviour, and
    // simulate() then refuses the send times that went negative or backwards.
    packets[i].send_time = Nanoseconds(static_cast<std::int64_t>(
        static_cast<std::uint64_t>(interval.count()) * static_cast<std::uint64_t>(i)));
    packets[i].length = length;
    packets[i].ect = ect;
  }
  return packets;
}

SimResult simulate(const NetemSpec& spec, std::span<const SimPacket> packets,
                   const SimOptions& options) {
  const SimPhase only{Nanoseconds(0), spec, ""};
  return simulate(std::span<const SimPhase>(&only, 1), packets, options);
}

SimResult simulate(std::span<const SimPhase> schedule, std::span<const SimPacket> packets,
                   const SimOptions& options) {
  SimResult result;
  result.diagnostics = check_input(schedule, packets);
  if (!result.diagnostics.empty()) return result;
  result.outcomes.reserve(packets.size());

  Netem netem(options, result);
  std::size_t phase = 0;
  std::int64_t phase_end = schedule[0].duration.count();  // start of the next phase
  // What jitterd has installed: the first phase as given, then at each switch what the engine's
  // plan_change() sends (the netem state then follows from netem_change's rules).
  NetemSpec installed = schedule[0].spec;
  netem.configure(installed, 0, false);

  // Moves the clock to `t`: every watchdog expiry and phase change at or before t, in time order;
  // at equal times the dequeue runs before the change (departures first, then the new config).
  auto advance_to = [&](std::int64_t t) {
    for (;;) {
      const auto watchdog = netem.watchdog();
      const bool change_due = phase + 1 < schedule.size() && phase_end <= t;
      const bool watchdog_due = watchdog && *watchdog <= t;
      if (watchdog_due && (!change_due || *watchdog <= phase_end)) {
        netem.fire_watchdog();
      } else if (change_due) {
        ++phase;
        // tables_known: the simulated qdisc is ours from the start, so its tables are known.
        ChangePlan plan = plan_change(installed, schedule[phase].spec, true);
        installed = std::move(plan.to_send);
        netem.configure(installed, phase_end, plan.encode.loss == LossEncoding::kKeepRunning);
        phase_end = saturating_add(phase_end, schedule[phase].duration.count());
      } else {
        return;
      }
    }
  };

  for (std::size_t i = 0; i < packets.size(); ++i) {
    const std::int64_t now = packets[i].send_time.count();
    advance_to(now);
    netem.enqueue(packets[i], i, phase, now);
    netem.dequeue(now);  // the stack runs the qdisc right after every enqueue
  }
  // Drain: keep the timer (and the schedule) running until nothing is held.
  while (const auto watchdog = netem.watchdog()) advance_to(*watchdog);
  return result;
}

}  // namespace shaper
