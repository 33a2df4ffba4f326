#include "shaper/netem_encoder.hpp"

#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "shaper/errors.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netlink_message.hpp"

namespace shaper {

// TCA_OPTIONS for netem, as the kernel parses it (sch_netem.c parse_attr): NOT a clean nest. The
// payload starts with a bare struct, and netem's attributes follow it at NLA_ALIGN(24):
//
//   nlattr TCA_OPTIONS (2) ──────────────────────────────────────────────── nla_len covers all
//   │ struct tc_netem_qopt (24 B) { u32 latency; u32 limit; u32 loss; u32 gap; u32 duplicate;
//   │                               u32 jitter; }        latency/jitter in 64 ns psched ticks
//   │ nlattr LATENCY64 (10)  s64 ns                      overrides qopt.latency (>= 4.15)
//   │ nlattr JITTER64  (11)  s64 ns                      overrides qopt.jitter
//   │ nlattr CORR      (1)   { u32 delay, loss, dup }    correlations (u32 probabilities)
//   │ nlattr REORDER   (3)   { u32 probability, correlation }
//   │ nlattr CORRUPT   (4)   { u32 probability, correlation }
//   │ nlattr RATE      (6)   { u32 rate; s32 packet_overhead; u32 cell_size; s32 cell_overhead }
//   │ nlattr RATE64    (8)   u64 bytes/s                 only when rate >= 2^32 (RATE.rate = ~0U)
//   │ nlattr ECN       (7)   u32 0/1
//   │ nlattr SLOT      (12)  { s64 min_delay, max_delay; s32 max_packets, max_bytes;
//   │                          s64 dist_delay, dist_jitter }     all-zero delays = slotting off
//   │ nlattr LOSS      (5)   nest:                       absent = back to qopt.loss (random)
//   │ │ nlattr NETEM_LOSS_GE (2) { u32 p, r, h, k1 }     h = delivery in Bad, k1 = loss in Good
//   │ │ nlattr NETEM_LOSS_GI (1) { u32 p13, p31, p32, p14, p23 }   (struct order, not tc's CLI's)
//   │ │ (empty nest)                                    keeps the model AND its Markov state
//   │ nlattr DELAY_DIST (2)  s16[1..16384]              only when the table changed
//   │ nlattr SLOT_DIST  (13) s16[1..16384]
//   │ nlattr PRNG_SEED  (14) u64                        6.6+; older kernels ignore it
//
// The kernel keeps every attribute a change leaves out, so everything but the tables and the seed
// is sent every time. RATE is sent even when 0, or a rate set earlier would stay in force.

namespace {

tc_netem_slot encode_slot(const std::optional<SlotSpec>& slot) {
  tc_netem_slot out{};
  if (!slot) return out;  // all zeros: slotting off
  out.min_delay = kernel_units::nanoseconds(slot->min_delay);
  out.max_delay = kernel_units::nanoseconds(slot->max_delay);
  out.max_packets = slot->max_packets;
  out.max_bytes = slot->max_bytes;
  if (slot->distribution) {
    out.dist_delay = kernel_units::nanoseconds(slot->distribution->delay);
    out.dist_jitter = kernel_units::nanoseconds(slot->distribution->jitter);
  }
  return out;
}

// The LOSS nest's model: Gilbert-Elliott or 4-state, in the kernel's struct order.
void put_loss_model(NetlinkMessage& msg, const LossModel& loss) {
  using namespace kernel_units;
  if (const auto* ge = std::get_if<GilbertElliottLoss>(&loss)) {
    tc_netem_gemodel model{};
    model.p = probability(ge->p);
    model.r = probability(ge->r);
    model.h = ge_h_from_loss_bad(ge->loss_bad);
    model.k1 = ge_k1_from_loss_good(ge->loss_good);
    msg.put_value(NETEM_LOSS_GE, model);
  } else {
    const auto& gi = std::get<FourStateLoss>(loss);
    tc_netem_gimodel model{};
    model.p13 = probability(gi.p13);
    model.p31 = probability(gi.p31);
    model.p32 = probability(gi.p32);
    model.p14 = probability(gi.p14);
    model.p23 = probability(gi.p23);
    msg.put_value(NETEM_LOSS_GI, model);
  }
}

}  // namespace

std::size_t netem_options_size_hint(const NetemSpec& spec, const NetemEncodePlan& plan) {
  std::size_t bytes = 512;
  if (plan.send_delay_table && spec.delay.distribution)
    bytes += spec.delay.distribution->size() * 2;
  if (plan.send_slot_table && spec.slot && spec.slot->distribution) {
    bytes += spec.slot->distribution->table.size() * 2;
  }
  return bytes;
}

void append_netem_options(NetlinkMessage& msg, const NetemSpec& spec, const NetemEncodePlan& plan) {
  using namespace kernel_units;
  const NetlinkMessage::Nest options = msg.begin_nest(TCA_OPTIONS);

  tc_netem_qopt qopt{};
  qopt.latency = psched_ticks(spec.delay.latency);
  qopt.jitter = psched_ticks(spec.delay.jitter);
  qopt.limit = spec.limit;
  qopt.gap = spec.reorder.gap;
  qopt.duplicate = probability(spec.duplicate.probability);
  if (const auto* random = std::get_if<RandomLoss>(&spec.loss))
    qopt.loss = probability(random->probability);
  msg.append(qopt, "tc_netem_qopt");

  const std::int64_t latency = nanoseconds(spec.delay.latency);
  const std::int64_t jitter = nanoseconds(spec.delay.jitter);
  msg.put_value(TCA_NETEM_LATENCY64, latency);
  msg.put_value(TCA_NETEM_JITTER64, jitter);

  tc_netem_corr corr{};
  corr.delay_corr = probability(spec.delay.correlation);
  corr.dup_corr = probability(spec.duplicate.correlation);
  if (const auto* random = std::get_if<RandomLoss>(&spec.loss)) {
    corr.loss_corr = probability(random->correlation);
  }
  msg.put_value(TCA_NETEM_CORR, corr);

  tc_netem_reorder reorder{};
  reorder.probability = probability(spec.reorder.probability);
  reorder.correlation = probability(spec.reorder.correlation);
  msg.put_value(TCA_NETEM_REORDER, reorder);

  tc_netem_corrupt corrupt{};
  corrupt.probability = probability(spec.corrupt.probability);
  corrupt.correlation = probability(spec.corrupt.correlation);
  msg.put_value(TCA_NETEM_CORRUPT, corrupt);

  tc_netem_rate rate{};
  rate.rate = rate32(spec.rate.rate);
  rate.packet_overhead = spec.rate.packet_overhead;
  rate.cell_size = spec.rate.cell_size;
  rate.cell_overhead = spec.rate.cell_overhead;
  msg.put_value(TCA_NETEM_RATE, rate);
  if (needs_rate64(spec.rate.rate)) msg.put_value(TCA_NETEM_RATE64, spec.rate.rate.value);

  const std::uint32_t ecn = spec.ecn ? 1 : 0;
  msg.put_value(TCA_NETEM_ECN, ecn);

  msg.put_value(TCA_NETEM_SLOT, encode_slot(spec.slot));

  const bool markov = std::holds_alternative<GilbertElliottLoss>(spec.loss) ||
                      std::holds_alternative<FourStateLoss>(spec.loss);
  if (markov) {
    const NetlinkMessage::Nest loss = msg.begin_nest(TCA_NETEM_LOSS);
    if (plan.loss == LossEncoding::kFull) put_loss_model(msg, spec.loss);
    // An empty nest must survive (it keeps the chain running): libnl's plain end drops it.
    msg.end_nest(loss, /*keep_empty=*/true);
  }

  if (plan.send_delay_table && spec.delay.distribution) {
    const auto& table = *spec.delay.distribution;
    msg.put(TCA_NETEM_DELAY_DIST, table.data(), table.size() * sizeof(std::int16_t));
  }
  if (plan.send_slot_table && spec.slot && spec.slot->distribution) {
    const auto& table = spec.slot->distribution->table;
    msg.put(TCA_NETEM_SLOT_DIST, table.data(), table.size() * sizeof(std::int16_t));
  }
  if (spec.prng_seed) msg.put_value(kTcaNetemPrngSeed, *spec.prng_seed);

  // The end sets TCA_OPTIONS' length to cover the qopt and every attribute, and refuses (and trims)
  // options longer than the 65535 bytes of one attribute (validate() reports that first).
  msg.end_nest(options);
}

NlMsgPtr build_netem_message(int ifindex, std::uint32_t handle, std::uint32_t parent, int flags,
                             const NetemSpec& spec, const NetemEncodePlan& plan) {
  NetlinkMessage msg(RTM_NEWQDISC, flags, "netem qdisc", netem_options_size_hint(spec, plan));
  msg.append_tcmsg(ifindex, handle, parent);
  msg.put_string(TCA_KIND, "netem");
  append_netem_options(msg, spec, plan);
  return std::move(msg).release();
}

namespace {

template <typename T>
bool read_struct(const nlattr* attr, T* out) {
  if (!attr) return false;
  if (nla_len(attr) < static_cast<int>(sizeof(T))) return false;
  std::memcpy(out, nla_data(attr), sizeof(T));
  return true;
}

}  // namespace

DecodedNetem decode_netem_options(std::span<const std::byte> payload, const std::string& operation,
                                  const std::string& object) {
  using namespace kernel_units;
  auto fail = [&](const std::string& why) -> DecodedNetem {
    throw NetlinkError(operation, object, EPROTO, why);
  };
  if (payload.size() < sizeof(tc_netem_qopt))
    return fail("netem options shorter than tc_netem_qopt");
  tc_netem_qopt qopt;
  std::memcpy(&qopt, payload.data(), sizeof qopt);

  constexpr int kMaxType = kTcaNetemPrngSeed;
  nlattr* tb[kMaxType + 1] = {};
  const std::size_t offset = NLA_ALIGN(sizeof qopt);
  if (payload.size() > offset) {
    // nla_parse takes a non-const head but does not write through it.
    auto* head = reinterpret_cast<nlattr*>(const_cast<std::byte*>(payload.data() + offset));
    const int rc =
        nla_parse(tb, kMaxType, head, static_cast<int>(payload.size() - offset), nullptr);
    if (rc < 0) return fail(std::string("netem attributes do not parse: ") + nl_geterror(rc));
  }

  DecodedNetem out;
  NetemSpec& spec = out.spec;
  spec.limit = qopt.limit;
  spec.delay.latency = Nanoseconds(std::int64_t{qopt.latency} << 6);
  spec.delay.jitter = Nanoseconds(std::int64_t{qopt.jitter} << 6);
  std::int64_t ns64;
  if (read_struct(tb[TCA_NETEM_LATENCY64], &ns64)) spec.delay.latency = Nanoseconds(ns64);
  if (read_struct(tb[TCA_NETEM_JITTER64], &ns64)) spec.delay.jitter = Nanoseconds(ns64);

  tc_netem_corr corr{};
  read_struct(tb[TCA_NETEM_CORR], &corr);
  spec.delay.correlation = probability_from(corr.delay_corr);
  spec.duplicate.probability = probability_from(qopt.duplicate);
  spec.duplicate.correlation = probability_from(corr.dup_corr);

  tc_netem_reorder reorder{};
  if (read_struct(tb[TCA_NETEM_REORDER], &reorder)) {
    spec.reorder.probability = probability_from(reorder.probability);
    spec.reorder.correlation = probability_from(reorder.correlation);
  } else if (qopt.gap) {
    spec.reorder.probability = Probability::one();  // the kernel's legacy meaning of a bare gap
  }
  spec.reorder.gap = qopt.gap;

  tc_netem_corrupt corrupt{};
  read_struct(tb[TCA_NETEM_CORRUPT], &corrupt);
  spec.corrupt.probability = probability_from(corrupt.probability);
  spec.corrupt.correlation = probability_from(corrupt.correlation);

  tc_netem_rate rate{};
  read_struct(tb[TCA_NETEM_RATE], &rate);
  spec.rate.rate = BytesPerSecond{rate.rate};
  spec.rate.packet_overhead = rate.packet_overhead;
  spec.rate.cell_size = rate.cell_size;
  spec.rate.cell_overhead = rate.cell_overhead;
  std::uint64_t rate64;
  if (read_struct(tb[TCA_NETEM_RATE64], &rate64) && rate64 > spec.rate.rate.value) {
    spec.rate.rate = BytesPerSecond{rate64};
  }

  std::uint32_t ecn = 0;
  read_struct(tb[TCA_NETEM_ECN], &ecn);
  spec.ecn = ecn != 0;

  tc_netem_slot slot{};
  if (read_struct(tb[TCA_NETEM_SLOT], &slot) &&
      (slot.min_delay != 0 || slot.max_delay != 0 || slot.dist_jitter != 0)) {
    SlotSpec s;
    s.min_delay = Nanoseconds(slot.min_delay);
    s.max_delay = Nanoseconds(slot.max_delay);
    s.max_packets = slot.max_packets;
    s.max_bytes = slot.max_bytes;
    if (slot.dist_delay != 0 || slot.dist_jitter != 0) {
      // The table itself is never dumped; the caller knows whether it sent one.
      s.distribution =
          SlotDistribution{Nanoseconds(slot.dist_delay), Nanoseconds(slot.dist_jitter), {}};
    }
    spec.slot = s;
  }

  if (const nlattr* loss = tb[TCA_NETEM_LOSS]) {
    const nlattr* model;
    int remaining;
    nla_for_each_nested(model, loss, remaining) {
      if (nla_type(model) == NETEM_LOSS_GE) {
        tc_netem_gemodel ge{};
        if (!read_struct(model, &ge)) return fail("NETEM_LOSS_GE shorter than tc_netem_gemodel");
        spec.loss = GilbertElliottLoss{probability_from(ge.p), probability_from(ge.r),
                                       loss_bad_from_ge_h(ge.h), probability_from(ge.k1)};
      } else if (nla_type(model) == NETEM_LOSS_GI) {
        tc_netem_gimodel gi{};
        if (!read_struct(model, &gi)) return fail("NETEM_LOSS_GI shorter than tc_netem_gimodel");
        spec.loss = FourStateLoss{probability_from(gi.p13), probability_from(gi.p31),
                                  probability_from(gi.p32), probability_from(gi.p23),
                                  probability_from(gi.p14)};
      } else {
        return fail("unknown loss model type " + std::to_string(nla_type(model)));
      }
    }
  }
  if (std::holds_alternative<std::monostate>(spec.loss) &&
      (qopt.loss != 0 || corr.loss_corr != 0)) {
    spec.loss = RandomLoss{probability_from(qopt.loss), probability_from(corr.loss_corr)};
  }

  std::uint64_t seed;
  if (read_struct(tb[kTcaNetemPrngSeed], &seed)) {
    spec.prng_seed = seed;
    out.prng_seed_reported = true;
  }
  return out;
}

}  // namespace shaper
