// Every NetemSpec field round-trips through the kernel: installed, then read back through libshaper
// and through `tc -j -s qdisc show` (an independent reader), and equal.
#include <gtest/gtest.h>

#include <linux/rtnetlink.h>
#include <netlink/msg.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shaper/distribution_tables.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netem_encoder.hpp"
#include "shaper/netem_engine.hpp"
#include "shaper/profile.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;
using json = nlohmann::json;

namespace {

// What the kernel should report for `spec`: our own encoding decoded again (tables are never
// dumped, probabilities land on the kernel's u32 grid). The tc comparison below keeps this honest.
NetemSpec expected_readback(const NetemSpec& spec) {
  NlMsgPtr msg = build_netem_message(1, kJitterdRootHandle, 0xffffffff, 0, spec, {});
  const nlmsghdr* hdr = nlmsg_hdr(msg.get());
  const auto* base = reinterpret_cast<const std::byte*>(hdr);
  // TCA_OPTIONS follows tcmsg and TCA_KIND ("netem\0" padded to 12 bytes).
  const std::size_t options = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(tcmsg)) + 12;
  std::uint16_t len;
  std::memcpy(&len, base + options, 2);
  const DecodedNetem decoded = decode_netem_options(
      {base + options + 4, static_cast<std::size_t>(len - 4)}, "decode", "the message built");
  NetemSpec out = decoded.spec;
  out.prng_seed.reset();
  return out;
}

double seconds(Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e9;
}

// tc prints times as seconds and probabilities as fractions with limited precision.
void expect_near(const json& value, double expected, const std::string& what) {
  ASSERT_TRUE(value.is_number()) << what << " missing or not a number: " << value;
  EXPECT_NEAR(value.get<double>(), expected, std::max(1e-9, std::fabs(expected) * 1e-5)) << what;
}

// tc's JSON gives times in whole microseconds, truncated after its own floating-point conversion (a
// shipped profile's 8.418 ms latency reads as 0.008417): up to two microseconds of tolerance for
// times.
void expect_time_near(const json& value, double expected, const std::string& what) {
  ASSERT_TRUE(value.is_number()) << what << " missing or not a number: " << value;
  EXPECT_NEAR(value.get<double>(), expected, std::max(2e-6, std::fabs(expected) * 1e-5)) << what;
}

void expect_matches_tc(const NetemSpec& spec, const json& qdisc) {
  ASSERT_EQ(qdisc.at("kind"), "netem");
  EXPECT_EQ(qdisc.at("handle"), "1a7e:");
  EXPECT_EQ(qdisc.at("root"), true);
  const json& o = qdisc.at("options");
  EXPECT_EQ(o.at("limit"), spec.limit);
  if (spec.delay.latency.count() || spec.delay.jitter.count()) {
    // iproute2 6.1 prints the latency from the 32-bit tick field, which the kernel's dump saturates
    // at 2^32 ticks of 64 ns (274.877906944 s); the 64-bit value is checked through libshaper
    // above.
    constexpr double kTcLatencyCeiling = 4294967295.0 * 64 / 1e9;
    expect_time_near(o.at("delay").at("delay"),
                     std::min(seconds(spec.delay.latency), kTcLatencyCeiling), "delay");
    expect_time_near(o.at("delay").at("jitter"), seconds(spec.delay.jitter), "jitter");
    expect_near(o.at("delay").at("correlation"), spec.delay.correlation.value(),
                "delay correlation");
  }
  const bool ge = std::holds_alternative<GilbertElliottLoss>(spec.loss);
  const bool gi = std::holds_alternative<FourStateLoss>(spec.loss);
  const bool random = std::holds_alternative<RandomLoss>(spec.loss);
  EXPECT_EQ(o.contains("loss-gemodel"), ge);
  EXPECT_EQ(o.contains("loss-state"), gi);
  EXPECT_EQ(o.contains("loss-random"), random);
  if (ge) {
    const auto& m = std::get<GilbertElliottLoss>(spec.loss);
    expect_near(o["loss-gemodel"]["p"], m.p.value(), "ge p");
    expect_near(o["loss-gemodel"]["r"], m.r.value(), "ge r");
    expect_near(o["loss-gemodel"]["1-h"], m.loss_bad.value(), "ge 1-h");
    expect_near(o["loss-gemodel"]["1-k"], m.loss_good.value(), "ge 1-k");
  }
  if (gi) {
    const auto& m = std::get<FourStateLoss>(spec.loss);
    expect_near(o["loss-state"]["p13"], m.p13.value(), "p13");
    expect_near(o["loss-state"]["p31"], m.p31.value(), "p31");
    expect_near(o["loss-state"]["p32"], m.p32.value(), "p32");
    expect_near(o["loss-state"]["p23"], m.p23.value(), "p23");
    expect_near(o["loss-state"]["p14"], m.p14.value(), "p14");
  }
  if (random) {
    const auto& m = std::get<RandomLoss>(spec.loss);
    expect_near(o["loss-random"]["loss"], m.probability.value(), "loss");
    expect_near(o["loss-random"]["correlation"], m.correlation.value(), "loss correlation");
  }
  EXPECT_EQ(o.contains("duplicate"), !spec.duplicate.probability.is_zero());
  if (o.contains("duplicate")) {
    expect_near(o["duplicate"]["duplicate"], spec.duplicate.probability.value(), "duplicate");
    expect_near(o["duplicate"]["correlation"], spec.duplicate.correlation.value(),
                "duplicate correlation");
  }
  EXPECT_EQ(o.contains("reorder"), !spec.reorder.probability.is_zero());
  if (o.contains("reorder")) {
    expect_near(o["reorder"]["reorder"], spec.reorder.probability.value(), "reorder");
    expect_near(o["reorder"]["correlation"], spec.reorder.correlation.value(),
                "reorder correlation");
  }
  EXPECT_EQ(o.at("gap"), spec.reorder.gap);
  EXPECT_EQ(o.contains("corrupt"), !spec.corrupt.probability.is_zero());
  if (o.contains("corrupt")) {
    expect_near(o["corrupt"]["corrupt"], spec.corrupt.probability.value(), "corrupt");
    expect_near(o["corrupt"]["correlation"], spec.corrupt.correlation.value(),
                "corrupt correlation");
  }
  EXPECT_EQ(o.contains("rate"), spec.rate.rate.value != 0);
  if (o.contains("rate")) {
    EXPECT_EQ(o["rate"]["rate"], spec.rate.rate.value);
    EXPECT_EQ(o["rate"]["packetoverhead"], spec.rate.packet_overhead);
    EXPECT_EQ(o["rate"]["cellsize"], spec.rate.cell_size);
    EXPECT_EQ(o["rate"]["celloverhead"], spec.rate.cell_overhead);
  }
  EXPECT_EQ(o.contains("slot"), spec.slot.has_value());
  if (spec.slot && o.contains("slot")) {
    const json& s = o["slot"];
    if (spec.slot->distribution) {
      expect_near(s.at("distribution"), seconds(spec.slot->distribution->delay),
                  "slot distribution delay");
      expect_near(s.at("jitter"), seconds(spec.slot->distribution->jitter),
                  "slot distribution jitter");
    } else {
      expect_near(s.at("min-delay"), seconds(spec.slot->min_delay), "slot min-delay");
      expect_near(s.at("max-delay"), seconds(spec.slot->max_delay), "slot max-delay");
    }
    EXPECT_EQ(s.at("packets"), spec.slot->max_packets);
    EXPECT_EQ(s.at("bytes"), spec.slot->max_bytes);
  }
  EXPECT_EQ(o.value("ecn", false), spec.ecn);
}

struct NamedSpec {
  const char* name;
  NetemSpec spec;
};

std::vector<NamedSpec> specs() {
  std::vector<NamedSpec> out;
  {
    NetemSpec s;  // every field that can be set at once
    s.delay = {20ms, 5ms, Probability::checked(0.25), make_normal_table()};
    s.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3),
                                Probability::checked(0.9), Probability::checked(0.001)};
    s.duplicate = {Probability::checked(0.02), Probability::checked(0.5)};
    s.corrupt = {Probability::checked(0.003), Probability::checked(0.1)};
    s.reorder = {Probability::checked(0.2), Probability::checked(0.05), 4};
    s.rate = {BytesPerSecond{12'500'000'000ull}, -4, 48, 5};
    s.slot = SlotSpec{1ms, 3ms, std::nullopt, 12, 30000};
    s.limit = 20000;
    s.ecn = true;
    out.push_back({"rich_gilbert_elliott", s});
  }
  {
    NetemSpec
        s;  // 4-state loss, a slot distribution, a 32-bit rate, a 64-bit latency beyond u32 ticks
    s.delay = {300s, 0ns, Probability::zero(), std::nullopt};
    s.loss = FourStateLoss{Probability::checked(0.13), Probability::checked(0.31),
                           Probability::checked(0.32), Probability::checked(0.23),
                           Probability::checked(0.14)};
    s.rate = {BytesPerSecond{125'000'000}, 14, 0, 0};
    s.slot = SlotSpec{0ns, 0ns, SlotDistribution{2ms, 500us, make_pareto_table(4096)}, 0, 0};
    s.limit = 5000;
    out.push_back({"four_state_slot_distribution", s});
  }
  {
    NetemSpec s;  // random loss with correlation, uniform jitter, a seed (6.6+ kernels keep it)
    s.delay = {50ms, 10ms, Probability::zero(), std::nullopt};
    s.loss = RandomLoss{Probability::checked(0.05), Probability::checked(0.25)};
    s.prng_seed = 42;
    out.push_back({"random_loss_uniform_jitter", s});
  }
  {
    NetemSpec s;  // a custom table and a jitter above 2^32 ns / 64 ticks (64-bit attributes only)
    s.delay = {1s, 2147483647ns, Probability::zero(), DistributionTable{-32768, 0, 32767}};
    s.limit = 1;
    out.push_back({"extreme_delay_custom_table", s});
  }
  out.push_back({"defaults", NetemSpec{}});
  return out;
}

void PrintTo(const NamedSpec& named, std::ostream* os) {
  *os << named.name;
}

class NetemRoundTrip : public ::testing::TestWithParam<NamedSpec> {};

}  // namespace

TEST_P(NetemRoundTrip, InstalledSpecReadsBackThroughLibshaperAndTc) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  const NetemSpec& spec = GetParam().spec;
  NetemQdisc qdisc = engine.install(dev, spec);

  const auto root = engine.root_qdisc(dev);
  ASSERT_TRUE(root && root->netem);
  EXPECT_TRUE(root->is_jitterd());
  NetemSpec read = root->netem->spec;
  if (root->netem->prng_seed_reported) {
    EXPECT_EQ(read.prng_seed, spec.prng_seed.value_or(*read.prng_seed))
        << "6.6+ kernel dumped another seed";
  }
  read.prng_seed.reset();
  EXPECT_EQ(read, expected_readback(spec));

  const json tc = json::parse(jitterd_test::tc_json(net));
  ASSERT_EQ(tc.size(), 1u) << tc.dump();
  expect_matches_tc(spec, tc[0]);
}

INSTANTIATE_TEST_SUITE_P(AllFields, NetemRoundTrip, ::testing::ValuesIn(specs()),
                         [](const ::testing::TestParamInfo<NamedSpec>& p) {
                           return std::string(p.param.name);
                         });

TEST(NetemRoundTripChange, AChangeLeavesNothingOfThePreviousState) {
  // `tc qdisc change` keeps every attribute it does not mention (reorder, corrupt, rate, slot,
  // ecn); our change sends the full state, so going from everything to defaults really gives
  // defaults.
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  const auto all = specs();
  NetemQdisc qdisc = engine.install(dev, all.front().spec);
  for (const auto& next : all) {
    SCOPED_TRACE(next.name);
    qdisc.change(next.spec);
    NetemSpec read = engine.root_qdisc(dev)->netem->spec;
    read.prng_seed.reset();
    EXPECT_EQ(read, expected_readback(next.spec));
    expect_matches_tc(next.spec, json::parse(jitterd_test::tc_json(net))[0]);
  }
}

// Every phase of every shipped profile (profiles/*.json: exact tables up to 16384 entries,
// Gilbert-Elliott loss, large limits) is accepted by the kernel, installed and then changed in
// place phase after phase, and reads back through libshaper and tc as it was sent.
TEST(ShippedProfilesInTheKernel, EveryPhaseInstallsAndChangesInPlace) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  std::optional<NetemQdisc> qdisc;
  int phases = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(JITTERD_VM_SOURCE_DIR) + "/profiles")) {
    if (entry.path().extension() != ".json") continue;
    const ProfileLoad load = load_profile_file(entry.path().string());
    ASSERT_TRUE(load) << entry.path() << ": " << to_string(load.diagnostics());
    for (const auto& phase : load->profile.phases) {
      SCOPED_TRACE(load->profile.name + " phase " + phase.name);
      if (!qdisc) {
        qdisc.emplace(bed.engine.install(bed.dev, phase.spec));
      } else {
        qdisc->change(phase.spec);
      }
      ++phases;
      NetemSpec read = bed.engine.root_qdisc(bed.dev)->netem->spec;
      read.prng_seed.reset();
      EXPECT_EQ(read, expected_readback(phase.spec));
      expect_matches_tc(phase.spec, json::parse(jitterd_test::tc_json(bed.net))[0]);
    }
  }
  EXPECT_GE(phases, 11) << "profiles/ holds eleven profiles";
}

TEST(NetemStats, CountersMatchTc) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  NetemSpec spec;
  spec.delay.latency = 1ms;
  spec.loss = RandomLoss{Probability::checked(0.3), Probability::zero()};
  NetemQdisc qdisc = engine.install(dev, spec);
  const auto result = jitterd_test::ping(net, 50, 2ms);
  const QdiscStats stats = engine.root_qdisc(dev)->stats;
  const json tc = json::parse(jitterd_test::tc_json(net))[0];
  EXPECT_EQ(stats.packets, tc.at("packets").get<std::uint64_t>());
  EXPECT_EQ(stats.bytes, tc.at("bytes").get<std::uint64_t>());
  EXPECT_EQ(stats.drops, tc.at("drops").get<std::uint32_t>());
  EXPECT_EQ(stats.backlog, tc.at("backlog").get<std::uint32_t>());
  EXPECT_EQ(stats.qlen, tc.at("qlen").get<std::uint32_t>());
  EXPECT_EQ(stats.requeues, tc.at("requeues").get<std::uint32_t>());
  // And they mean what they say: every echo request was either sent on or dropped by netem.
  EXPECT_EQ(stats.packets + stats.drops, static_cast<std::uint64_t>(result.transmitted));
  EXPECT_GT(stats.drops, 0u);
  EXPECT_EQ(stats.packets, result.received_seq.size());
}
