// The encoder's bytes, walked attribute by attribute with a TLV reader written here (independent of
// libnl's parser and of our decoder), against the layout drawn in netem_encoder.cpp; then decoded
// back with decode_netem_options.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>

#include <cstring>
#include <vector>

#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netem_encoder.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

struct Tlv {
  std::uint16_t type;  // with flag bits
  std::vector<std::uint8_t> payload;
};

std::uint16_t u16_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Walks netlink attributes in [begin, end): each is u16 len, u16 type, payload, padded to 4.
std::vector<Tlv> walk(const std::uint8_t* begin, const std::uint8_t* end) {
  std::vector<Tlv> out;
  while (begin + 4 <= end) {
    const std::uint16_t len = u16_at(begin);
    const std::uint16_t type = u16_at(begin + 2);
    EXPECT_GE(len, 4);
    EXPECT_LE(begin + len, end);
    if (len < 4 || begin + len > end) break;
    out.push_back({type, std::vector<std::uint8_t>(begin + 4, begin + len)});
    begin += (len + 3u) & ~3u;
  }
  EXPECT_EQ(begin, end) << "trailing bytes after the last attribute";
  return out;
}

template <typename T>
T as(const Tlv& tlv) {
  EXPECT_EQ(tlv.payload.size(), sizeof(T)) << "attribute " << (tlv.type & NLA_TYPE_MASK);
  T v{};
  std::memcpy(&v, tlv.payload.data(), std::min(sizeof(T), tlv.payload.size()));
  return v;
}

struct Encoded {
  nlmsghdr header;
  tcmsg tcm;
  std::vector<Tlv> top;  // TCA_KIND, TCA_OPTIONS
  tc_netem_qopt qopt;
  std::vector<Tlv> options;  // netem attributes after the qopt
  std::vector<std::uint8_t> options_payload;
};

Encoded encode(const NetemSpec& spec, const NetemEncodePlan& plan,
               int flags = NLM_F_CREATE | NLM_F_EXCL) {
  NlMsgPtr msg = build_netem_message(7, 0x1a7e0000, TC_H_ROOT, flags, spec, plan);
  const nlmsghdr* hdr = nlmsg_hdr(msg.get());
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(hdr);
  Encoded e{};
  std::memcpy(&e.header, bytes, sizeof e.header);
  std::memcpy(&e.tcm, bytes + NLMSG_HDRLEN, sizeof e.tcm);
  e.top = walk(bytes + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(tcmsg)), bytes + hdr->nlmsg_len);
  EXPECT_EQ(e.top.size(), 2u);
  if (e.top.size() == 2) {
    e.options_payload = e.top[1].payload;
    std::memcpy(&e.qopt, e.options_payload.data(), sizeof e.qopt);
    e.options =
        walk(e.options_payload.data() + 24, e.options_payload.data() + e.options_payload.size());
  }
  return e;
}

std::vector<int> types_of(const std::vector<Tlv>& tlvs) {
  std::vector<int> out;
  for (const auto& t : tlvs) out.push_back(t.type & NLA_TYPE_MASK);
  return out;
}

NetemSpec rich_spec() {
  NetemSpec spec;
  spec.delay.latency = 120007936ns;
  spec.delay.jitter = 25001984ns;
  spec.delay.correlation = Probability::checked(0.25);
  spec.delay.distribution = DistributionTable{-32768, -1, 0, 1, 32767};
  spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3),
                                 Probability::checked(0.9), Probability::checked(0.001)};
  spec.duplicate = {Probability::checked(0.02), Probability::checked(0.5)};
  spec.corrupt = {Probability::checked(0.003), Probability::checked(0.1)};
  spec.reorder = {Probability::checked(0.2), Probability::checked(0.05), 4};
  spec.rate = {BytesPerSecond{12'500'000'000ull}, -4, 48, 5};
  spec.slot =
      SlotSpec{1ms, 3ms, SlotDistribution{2ms, 500us, DistributionTable{-8192, 8191}}, 12, 30000};
  spec.limit = 20000;
  spec.ecn = true;
  spec.prng_seed = 0x1122334455667788ull;
  return spec;
}

}  // namespace

TEST(NetemEncoder, HeaderTcmsgAndKind) {
  const auto e = encode(NetemSpec{}, {});
  EXPECT_EQ(e.header.nlmsg_type, RTM_NEWQDISC);
  EXPECT_EQ(e.header.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL), NLM_F_CREATE | NLM_F_EXCL);
  EXPECT_EQ(e.tcm.tcm_family, AF_UNSPEC);
  EXPECT_EQ(e.tcm.tcm_ifindex, 7);
  EXPECT_EQ(e.tcm.tcm_handle, 0x1a7e0000u);
  EXPECT_EQ(e.tcm.tcm_parent, TC_H_ROOT);
  EXPECT_EQ(e.tcm.tcm_info, 0u);
  ASSERT_EQ(types_of(e.top), (std::vector<int>{TCA_KIND, TCA_OPTIONS}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(e.top[0].payload.data())), "netem");
  EXPECT_EQ(e.top[0].payload.size(), 6u);  // "netem\0", nla_len 10
}

TEST(NetemEncoder, MinimalSpecSendsTheFullFixedState) {
  // Absent attributes keep old values in the kernel, so even the default spec carries every one.
  const auto e = encode(NetemSpec{}, {});
  EXPECT_EQ(e.qopt.latency, 0u);
  EXPECT_EQ(e.qopt.limit, 1000u);
  EXPECT_EQ(e.qopt.loss, 0u);
  EXPECT_EQ(e.qopt.gap, 0u);
  EXPECT_EQ(e.qopt.duplicate, 0u);
  EXPECT_EQ(e.qopt.jitter, 0u);
  EXPECT_EQ(
      types_of(e.options),
      (std::vector<int>{TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64, TCA_NETEM_CORR, TCA_NETEM_REORDER,
                        TCA_NETEM_CORRUPT, TCA_NETEM_RATE, TCA_NETEM_ECN, TCA_NETEM_SLOT}));
  // Golden sizes: 24 B qopt + 12 + 12 + 16 + 12 + 12 + 20 + 8 + 44 = 160 B of payload.
  EXPECT_EQ(e.options_payload.size(), 160u);
  EXPECT_EQ(as<std::int64_t>(e.options[0]), 0);
  const auto slot = as<tc_netem_slot>(e.options[7]);
  EXPECT_EQ(slot.min_delay | slot.max_delay | slot.dist_delay | slot.dist_jitter, 0);  // slot off
  EXPECT_EQ(as<std::uint32_t>(e.options[6]), 0u);  // ECN off, explicitly
}

TEST(NetemEncoder, RichSpecGoldenLayout) {
  const NetemSpec spec = rich_spec();
  const auto e = encode(spec, {});
  EXPECT_EQ(e.qopt.latency, 120007936u >> 6);
  EXPECT_EQ(e.qopt.jitter, 25001984u >> 6);
  EXPECT_EQ(e.qopt.limit, 20000u);
  EXPECT_EQ(e.qopt.gap, 4u);
  EXPECT_EQ(e.qopt.duplicate, kernel_units::probability(Probability::checked(0.02)));
  EXPECT_EQ(e.qopt.loss, 0u);  // GE carries the loss, not the random-loss field
  ASSERT_EQ(types_of(e.options),
            (std::vector<int>{TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64, TCA_NETEM_CORR,
                              TCA_NETEM_REORDER, TCA_NETEM_CORRUPT, TCA_NETEM_RATE,
                              TCA_NETEM_RATE64, TCA_NETEM_ECN, TCA_NETEM_SLOT, TCA_NETEM_LOSS,
                              TCA_NETEM_DELAY_DIST, TCA_NETEM_SLOT_DIST, kTcaNetemPrngSeed}));
  EXPECT_EQ(as<std::int64_t>(e.options[0]), 120007936);
  EXPECT_EQ(as<std::int64_t>(e.options[1]), 25001984);
  const auto corr = as<tc_netem_corr>(e.options[2]);
  EXPECT_EQ(corr.delay_corr, 1073741824u);  // rint(0.25 * (2^32-1))
  EXPECT_EQ(corr.loss_corr, 0u);
  EXPECT_EQ(corr.dup_corr, 2147483648u);
  const auto reorder = as<tc_netem_reorder>(e.options[3]);
  EXPECT_EQ(reorder.probability, kernel_units::probability(Probability::checked(0.2)));
  EXPECT_EQ(reorder.correlation, kernel_units::probability(Probability::checked(0.05)));
  const auto corrupt = as<tc_netem_corrupt>(e.options[4]);
  EXPECT_EQ(corrupt.probability, kernel_units::probability(Probability::checked(0.003)));
  const auto rate = as<tc_netem_rate>(e.options[5]);
  EXPECT_EQ(rate.rate, 0xffffffffu);  // ~0U: RATE64 carries the value
  EXPECT_EQ(rate.packet_overhead, -4);
  EXPECT_EQ(rate.cell_size, 48u);
  EXPECT_EQ(rate.cell_overhead, 5);
  EXPECT_EQ(as<std::uint64_t>(e.options[6]), 12'500'000'000ull);
  EXPECT_EQ(as<std::uint32_t>(e.options[7]), 1u);
  const auto slot = as<tc_netem_slot>(e.options[8]);
  EXPECT_EQ(slot.min_delay, 1'000'000);
  EXPECT_EQ(slot.max_delay, 3'000'000);
  EXPECT_EQ(slot.max_packets, 12);
  EXPECT_EQ(slot.max_bytes, 30000);
  EXPECT_EQ(slot.dist_delay, 2'000'000);
  EXPECT_EQ(slot.dist_jitter, 500'000);
  // LOSS is a nest holding exactly one GE model of four u32.
  const auto loss =
      walk(e.options[9].payload.data(), e.options[9].payload.data() + e.options[9].payload.size());
  ASSERT_EQ(types_of(loss), (std::vector<int>{NETEM_LOSS_GE}));
  const auto ge = as<tc_netem_gemodel>(loss[0]);
  EXPECT_EQ(ge.p, kernel_units::probability(Probability::checked(0.01)));
  EXPECT_EQ(ge.r, kernel_units::probability(Probability::checked(0.3)));
  EXPECT_EQ(ge.h,
            0xffffffffu - kernel_units::probability(Probability::checked(0.9)));  // 1 - loss_bad
  EXPECT_EQ(ge.k1, kernel_units::probability(Probability::checked(0.001)));
  // Tables: raw host-endian s16, no header, no padding inside.
  ASSERT_EQ(e.options[10].payload.size(), 10u);
  std::int16_t table[5];
  std::memcpy(table, e.options[10].payload.data(), sizeof table);
  EXPECT_EQ(std::vector<std::int16_t>(table, table + 5), *spec.delay.distribution);
  EXPECT_EQ(e.options[11].payload.size(), 4u);
  EXPECT_EQ(as<std::uint64_t>(e.options[12]), 0x1122334455667788ull);
}

TEST(NetemEncoder, FourStateModelUsesTheKernelStructOrder) {
  NetemSpec spec;
  spec.loss = FourStateLoss{Probability::checked(0.13), Probability::checked(0.31),
                            Probability::checked(0.32), Probability::checked(0.23),
                            Probability::checked(0.14)};
  const auto e = encode(spec, {});
  const auto& nest = e.options.back();
  EXPECT_EQ(nest.type & NLA_TYPE_MASK, TCA_NETEM_LOSS);
  const auto models = walk(nest.payload.data(), nest.payload.data() + nest.payload.size());
  ASSERT_EQ(types_of(models), (std::vector<int>{NETEM_LOSS_GI}));
  const auto gi = as<tc_netem_gimodel>(models[0]);
  // struct order p13, p31, p32, p14, p23 (tc's command line says p13 p31 p32 p23 p14).
  EXPECT_EQ(gi.p13, kernel_units::probability(Probability::checked(0.13)));
  EXPECT_EQ(gi.p31, kernel_units::probability(Probability::checked(0.31)));
  EXPECT_EQ(gi.p32, kernel_units::probability(Probability::checked(0.32)));
  EXPECT_EQ(gi.p14, kernel_units::probability(Probability::checked(0.14)));
  EXPECT_EQ(gi.p23, kernel_units::probability(Probability::checked(0.23)));
}

TEST(NetemEncoder, KeepRunningSendsAnEmptyLossNestAndOmittedTables) {
  NetemSpec spec = rich_spec();
  NetemEncodePlan plan;
  plan.loss = LossEncoding::kKeepRunning;
  plan.send_delay_table = false;
  plan.send_slot_table = false;
  const auto e = encode(spec, plan, 0);
  EXPECT_EQ(e.header.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE), 0);
  const auto types = types_of(e.options);
  EXPECT_EQ(std::count(types.begin(), types.end(), TCA_NETEM_DELAY_DIST), 0);
  EXPECT_EQ(std::count(types.begin(), types.end(), TCA_NETEM_SLOT_DIST), 0);
  auto loss = std::find(types.begin(), types.end(), TCA_NETEM_LOSS);
  ASSERT_NE(loss, types.end());
  EXPECT_TRUE(
      e.options[static_cast<std::size_t>(loss - types.begin())].payload.empty());  // nla_len 4
}

TEST(NetemEncoder, RandomLossUsesQoptAndCorr) {
  NetemSpec spec;
  spec.loss = RandomLoss{Probability::checked(0.05), Probability::checked(0.25)};
  const auto e = encode(spec, {});
  EXPECT_EQ(e.qopt.loss, kernel_units::probability(Probability::checked(0.05)));
  EXPECT_EQ(as<tc_netem_corr>(e.options[2]).loss_corr, 1073741824u);
  const auto types = types_of(e.options);
  // No LOSS nest: its absence is what selects random loss in the kernel.
  EXPECT_EQ(std::count(types.begin(), types.end(), TCA_NETEM_LOSS), 0);
}

TEST(NetemEncoder, RateBelow4GiBHasNoRate64) {
  NetemSpec spec;
  spec.rate.rate = BytesPerSecond{125'000'000};
  const auto e = encode(spec, {});
  EXPECT_EQ(as<tc_netem_rate>(e.options[5]).rate, 125'000'000u);
  const auto types = types_of(e.options);
  EXPECT_EQ(std::count(types.begin(), types.end(), TCA_NETEM_RATE64), 0);
}

TEST(NetemEncoder, FullTableFitsAndIsCountedInTheOptionsLength) {
  NetemSpec spec;
  spec.delay.latency = 10ms;
  spec.delay.jitter = 1ms;
  spec.delay.distribution = make_normal_table(16384);
  const auto e = encode(spec, {});
  // The options length covers qopt + attributes exactly (libnl 3.7's netem code double-counts it).
  EXPECT_EQ(e.options_payload.size(), 160u + 4 + 32768);
  EXPECT_EQ(e.header.nlmsg_len, NLMSG_HDRLEN + sizeof(tcmsg) + 12 + 4 + e.options_payload.size());
}

TEST(NetemDecoder, RoundTripsEveryFieldInKernelUnits) {
  NetemSpec spec = rich_spec();
  const auto e = encode(spec, {});
  const DecodedNetem decoded = decode_netem_options(
      {reinterpret_cast<const std::byte*>(e.options_payload.data()), e.options_payload.size()},
      "decode", "the options encoded");
  // Tables are never dumped by the kernel, so the decoder has none; compare the rest after putting
  // the user's doubles through the kernel's u32 grid.
  NetemSpec expected = spec;
  expected.delay.distribution.reset();
  expected.slot->distribution->table.clear();
  auto grid = [](Probability p) {
    return kernel_units::probability_from(kernel_units::probability(p));
  };
  expected.delay.correlation = grid(expected.delay.correlation);
  auto& ge = std::get<GilbertElliottLoss>(expected.loss);
  ge = {grid(ge.p), grid(ge.r),
        kernel_units::loss_bad_from_ge_h(kernel_units::ge_h_from_loss_bad(ge.loss_bad)),
        grid(ge.loss_good)};
  expected.duplicate = {grid(expected.duplicate.probability), grid(expected.duplicate.correlation)};
  expected.corrupt = {grid(expected.corrupt.probability), grid(expected.corrupt.correlation)};
  expected.reorder.probability = grid(expected.reorder.probability);
  expected.reorder.correlation = grid(expected.reorder.correlation);
  EXPECT_EQ(decoded.spec, expected);
  EXPECT_TRUE(decoded.prng_seed_reported);
}

TEST(NetemDecoder, TruncatedOptionsAreTheKernelsErrorNamingTheReply) {
  std::vector<std::byte> short_payload(10);
  try {
    decode_netem_options(short_payload, "qdisc dump", "dev veth0 handle 1a7e:");
    ADD_FAILURE() << "no NetlinkError";
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.error_number(), EPROTO);
    EXPECT_EQ(e.kernel_message(), "netem options shorter than tc_netem_qopt");
    EXPECT_EQ(std::string(e.what()).rfind("qdisc dump (dev veth0 handle 1a7e:): ", 0), 0u)
        << e.what();
  }
}
