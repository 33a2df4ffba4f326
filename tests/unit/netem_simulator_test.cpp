// The offline netem simulator: netem's arithmetic on chosen random numbers (exact), tiny runs whose
// every departure is worked out by hand, and statistical checks whose tolerances are derived from
// the sample size and the model (z = 4.5 standard errors: a false alarm about once in 150 000
// runs).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "shaper/distribution_tables.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netem_simulator.hpp"
#include "shaper/statistics.hpp"

using namespace shaper;
using namespace shaper::netem_arith;
using namespace std::chrono_literals;

namespace {

constexpr double kZ = 4.5;
constexpr std::uint32_t kU32Max = std::numeric_limits<std::uint32_t>::max();

Probability P(double p) {
  return Probability::checked(p);
}

SimResult run(const NetemSpec& spec, std::size_t count, Nanoseconds interval,
              std::uint64_t seed = 1) {
  const auto packets = periodic_packets(count, interval);
  SimResult r = simulate(spec, packets, SimOptions{seed});
  EXPECT_TRUE(r.diagnostics.empty()) << to_string(r.diagnostics);
  return r;
}

// Delays of delivered originals, in send order.
std::vector<Nanoseconds> delays(const SimResult& r) {
  std::vector<Nanoseconds> out;
  for (const auto& o : r.outcomes) {
    if (!o.duplicate && o.delivered()) out.push_back(o.delay);
  }
  return out;
}

// One entry per original: lost (by any cause) or not.
std::vector<bool> loss_sequence(const SimResult& r) {
  std::vector<bool> out;
  for (const auto& o : r.outcomes) {
    if (!o.duplicate) out.push_back(!o.delivered());
  }
  return out;
}

double ms(FractionalNanoseconds d) {
  return d.count() / 1e6;
}

// Population mean, standard deviation and kurtosis of a table's entries: the exact law of one draw
// (every entry has probability 1/size, and size divides 2^32 for the tables used here).
struct TableLaw {
  double mean = 0, sd = 0, kurtosis = 0;
};
TableLaw law_of(const DistributionTable& t) {
  TableLaw law;
  for (auto v : t) law.mean += v;
  law.mean /= static_cast<double>(t.size());
  double m2 = 0, m4 = 0;
  for (auto v : t) {
    const double d = v - law.mean;
    m2 += d * d;
    m4 += d * d * d * d;
  }
  m2 /= static_cast<double>(t.size());
  m4 /= static_cast<double>(t.size());
  law.sd = std::sqrt(m2);
  law.kurtosis = m4 / (m2 * m2);
  return law;
}

// Standard error of a sample standard deviation from n independent draws of a law with kurtosis k
// (delta method: Var(s) ~ sd^2 (k - 1) / (4 n)).
double se_of_sd(double sd, double kurtosis, std::size_t n) {
  return sd * std::sqrt((kurtosis - 1.0) / (4.0 * static_cast<double>(n)));
}

// Batch-means standard error of the mean of an autocorrelated series: batches much longer than the
// correlation length are nearly independent, so their spread estimates the spread of the mean.
double batch_means_se(const std::vector<double>& x, std::size_t batches) {
  const std::size_t k = x.size() / batches;
  std::vector<double> means(batches, 0.0);
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < k; ++i) means[b] += x[b * k + i];
    means[b] /= static_cast<double>(k);
  }
  const double m = std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(batches);
  double ss = 0;
  for (double v : means) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(batches - 1) / static_cast<double>(batches));
}

// Stationary law and asymptotic variance of the mean of f(state) for a small Markov chain, by
// linear algebra (independent of the closed forms the tests compare against):
//   pi (P - I) = 0, sum pi = 1;  (I - P + 1 pi^T) g = f - pi.f;  sigma^2 = 2 <f~, g>_pi - <f~,
//   f~>_pi.
template <std::size_t N>
std::array<double, N> solve(std::array<std::array<double, N>, N> a, std::array<double, N> b) {
  for (std::size_t c = 0; c < N; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < N; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    }
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (std::size_t r = 0; r < N; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k < N; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = 0; c < N; ++c) b[c] /= a[c][c];
  return b;
}

template <std::size_t N>
struct ChainLaw {
  std::array<double, N> pi{};
  double mean = 0;      // pi . f
  double variance = 0;  // asymptotic variance of the sample mean of f, times n
};
template <std::size_t N>
ChainLaw<N> chain_law(const std::array<std::array<double, N>, N>& p,
                      const std::array<double, N>& f) {
  ChainLaw<N> law;
  std::array<std::array<double, N>, N> a{};
  std::array<double, N> b{};
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = 0; j < N; ++j)
      a[i][j] = p[j][i] - (i == j ? 1.0 : 0.0);  // (P^T - I) pi = 0
  }
  for (std::size_t j = 0; j < N; ++j) a[N - 1][j] = 1.0;  // replace one equation by sum pi = 1
  b[N - 1] = 1.0;
  law.pi = solve(a, b);
  for (std::size_t i = 0; i < N; ++i) law.mean += law.pi[i] * f[i];
  std::array<double, N> centred{};
  for (std::size_t i = 0; i < N; ++i) centred[i] = f[i] - law.mean;
  std::array<std::array<double, N>, N> z{};
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = 0; j < N; ++j) z[i][j] = (i == j ? 1.0 : 0.0) - p[i][j] + law.pi[j];
  }
  const auto g = solve(z, centred);
  for (std::size_t i = 0; i < N; ++i) {
    law.variance += law.pi[i] * centred[i] * (2.0 * g[i] - centred[i]);
  }
  return law;
}

NetemSpec with_latency(Nanoseconds latency) {
  NetemSpec spec;
  spec.delay.latency = latency;
  spec.limit = 1'000'000;
  return spec;
}

}  // namespace

// ---- The random source -------------------------------------------------------------------------

TEST(Pcg32, ReproducesThePublishedReferenceOutput) {
  // pcg32-demo (pcg-c-basic), seed 42, stream 54, "Round 1".
  Pcg32 rng(42, 54);
  for (std::uint32_t expected :
       {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu}) {
    EXPECT_EQ(rng(), expected);
  }
}

// ---- netem's arithmetic on chosen random numbers -----------------------------------------------

TEST(NetemArith, GetCrandom) {
  CorrelatedRandom none{0, 12345};
  EXPECT_EQ(get_crandom(none, 777), 777u);  // rho 0: the draw itself
  EXPECT_EQ(none.last, 12345u);             // and last is untouched
  // rho = 2^31 - 1, rho' = 2^31: answer = (v (2^32 - 2^31) + last 2^31) >> 32 = (v + last) / 2.
  CorrelatedRandom half{0x7fffffffu, 0};
  EXPECT_EQ(get_crandom(half, 1000), 500u);
  EXPECT_EQ(get_crandom(half, 3000), 1750u);  // (3000 + 500) / 2
  EXPECT_EQ(half.last, 1750u);
  // rho = ~0: rho' = 2^32, the value's weight is 0: the generator is stuck at `last` forever.
  CorrelatedRandom stuck{kU32Max, 42};
  EXPECT_EQ(get_crandom(stuck, kU32Max), 42u);
  EXPECT_EQ(get_crandom(stuck, 0), 42u);
}

TEST(NetemArith, Tabledist) {
  // Uniform: ((rnd % 20) + 1000) - 10 covers 990 .. 1009.
  EXPECT_EQ(tabledist(1000, 10, 0, {}), 990);
  EXPECT_EQ(tabledist(1000, 10, 19, {}), 1009);
  EXPECT_EQ(tabledist(1000, 10, 20, {}), 990);
  // Table: sigma = 3 * 8192, so entries decode to mu + 3 t exactly; index rnd % size.
  const DistributionTable two{-32768, 32767};
  EXPECT_EQ(tabledist(1'000'000, 3 * 8192, 0, two), 1'000'000 - 3 * 32768);
  EXPECT_EQ(tabledist(1'000'000, 3 * 8192, 5, two), 1'000'000 + 3 * 32767);
}

TEST(NetemArith, PacketTime) {
  // 1500 B at 125e6 B/s (1 Gbit/s): 12 us.
  EXPECT_EQ(packet_time_ns(1500, 125'000'000, 0, 0, 0), 12'000u);
  // ATM: 48-byte cells with 5 bytes of overhead. 100 B = 2 full cells + 4 B -> 3 cells = 159 B;
  // 96 B is exactly 2 cells = 106 B; 100 - 20 B overhead = 80 B -> 2 cells.
  EXPECT_EQ(packet_time_ns(100, 1'000'000, 0, 48, 5), 159'000u);
  EXPECT_EQ(packet_time_ns(96, 1'000'000, 0, 48, 5), 106'000u);
  EXPECT_EQ(packet_time_ns(100, 1'000'000, -20, 48, 5), 106'000u);
  // The kernel's u64 wrap for an overhead larger than the packet: len = 2^64 - 10, times 1e9 wraps
  // to 2^64 - 1e10, divided by 1e9 B/s: 18446744063 ns.
  EXPECT_EQ(packet_time_ns(10, 1'000'000'000, -20, 0, 0), 18'446'744'063u);
}

TEST(NetemArith, GilbertElliottUsesTheStartingStatesLossProbability) {
  GilbertElliottChain c{GilbertElliottChain::State::kGood, /*p*/ 10, /*r*/ 20, /*h*/ 30, /*k1*/ 40};
  EXPECT_TRUE(loss_gilb_ell(c, 9, 39));  // moves to Bad, but the loss is Good's k1: 39 < 40
  EXPECT_EQ(c.state, GilbertElliottChain::State::kBad);
  EXPECT_FALSE(loss_gilb_ell(c, 25, 30));  // stays Bad; lost only if rnd > h, and 30 is not > 30
  EXPECT_TRUE(loss_gilb_ell(c, 25, 31));
  EXPECT_TRUE(loss_gilb_ell(c, 19, 31));  // moves to Good, lost with Bad's h
  EXPECT_EQ(c.state, GilbertElliottChain::State::kGood);
  EXPECT_FALSE(loss_gilb_ell(c, 10, 40));  // stays Good (10 is not < p), 40 is not < k1
}

TEST(NetemArith, FourStateStrictBoundaryGapsOf61) {
  using S = FourStateChain::State;
  const FourStateChain base{S::kTxInGap, /*p13*/ 50,  /*p31*/ 20,
                            /*p32*/ 10,  /*p14*/ 100, /*p23*/ 5};
  auto step = [&](S from, std::uint32_t rnd, FourStateComparisons cmp) {
    FourStateChain c = base;
    c.state = from;
    const bool lost = loss_4state(c, rnd, cmp);
    return std::pair{lost, c.state};
  };
  constexpr auto kStrict = FourStateComparisons::kStrictGaps;
  constexpr auto kClosed = FourStateComparisons::kClosed;
  // State 1: [0, p14) -> 4 lost; (p14, p14 + p13) -> 3 lost; above -> stays, delivered.
  EXPECT_EQ(step(S::kTxInGap, 99, kStrict), std::pair(true, S::kLostInGap));
  EXPECT_EQ(step(S::kTxInGap, 100, kStrict), std::pair(false, S::kTxInGap));  // the gap at p14
  EXPECT_EQ(step(S::kTxInGap, 100, kClosed), std::pair(true, S::kLostInBurst));
  EXPECT_EQ(step(S::kTxInGap, 149, kStrict), std::pair(true, S::kLostInBurst));
  EXPECT_EQ(step(S::kTxInGap, 150, kStrict), std::pair(false, S::kTxInGap));  // the gap at p13+p14
  EXPECT_EQ(step(S::kTxInGap, 151, kStrict), std::pair(false, S::kTxInGap));
  // State 2: [0, p23) -> 3 lost.
  EXPECT_EQ(step(S::kTxInBurst, 4, kStrict), std::pair(true, S::kLostInBurst));
  EXPECT_EQ(step(S::kTxInBurst, 5, kStrict), std::pair(false, S::kTxInBurst));
  // State 3: [0, p32) -> 2; (p32, p32 + p31) -> 1; above -> stays 3, lost.
  EXPECT_EQ(step(S::kLostInBurst, 9, kStrict), std::pair(false, S::kTxInBurst));
  EXPECT_EQ(step(S::kLostInBurst, 10, kStrict),
            std::pair(false, S::kLostInBurst));  // delivered in 3
  EXPECT_EQ(step(S::kLostInBurst, 10, kClosed), std::pair(false, S::kTxInGap));
  EXPECT_EQ(step(S::kLostInBurst, 29, kStrict), std::pair(false, S::kTxInGap));
  EXPECT_EQ(step(S::kLostInBurst, 30, kStrict),
            std::pair(false, S::kLostInBurst));  // the gap at p31+p32
  EXPECT_EQ(step(S::kLostInBurst, 30, kClosed), std::pair(true, S::kLostInBurst));
  EXPECT_EQ(step(S::kLostInBurst, 31, kStrict), std::pair(true, S::kLostInBurst));
  // State 4 always returns to 1, delivered.
  EXPECT_EQ(step(S::kLostInGap, 0, kStrict), std::pair(false, S::kTxInGap));
}

// ---- Exact runs --------------------------------------------------------------------------------

TEST(NetemSimulator, IsDeterministicForASeed) {
  NetemSpec spec = with_latency(20ms);
  spec.delay.jitter = 5ms;
  spec.delay.distribution = make_paretonormal_table();
  spec.loss = GilbertElliottLoss{P(0.02), P(0.3), P(0.8), P(0.001)};
  spec.duplicate.probability = P(0.01);
  spec.reorder = {P(0.2), Probability::zero(), 3};
  spec.rate.rate = BytesPerSecond{10'000'000};
  const auto a = run(spec, 20000, 100us, 7);
  const auto b = run(spec, 20000, 100us, 7);
  const auto c = run(spec, 20000, 100us, 8);
  EXPECT_EQ(a.outcomes, b.outcomes);
  EXPECT_EQ(a.counters, b.counters);
  EXPECT_NE(a.outcomes, c.outcomes);
  // The counters add up: every original and copy is delivered, lost or dropped at the limit.
  EXPECT_EQ(a.counters.offered, 20000u);
  EXPECT_EQ(a.counters.offered + a.counters.duplicated,
            a.counters.delivered + a.counters.lost + a.counters.limit_dropped);
  EXPECT_EQ(a.outcomes.size(), a.counters.offered + a.counters.duplicated);
  EXPECT_GT(a.counters.duplicated, 0u);
  EXPECT_GT(a.counters.reordered, 0u);
}

TEST(NetemSimulator, NoJitterMeansEveryDelayIsTheLatency) {
  const auto r = run(with_latency(25ms), 1000, 1ms);
  ASSERT_EQ(r.outcomes.size(), 1000u);
  for (const auto& o : r.outcomes) {
    ASSERT_TRUE(o.delivered());
    EXPECT_EQ(o.delay, 25ms);
    EXPECT_EQ(o.departure, o.sent + 25ms);
  }
}

TEST(NetemSimulator, TwoEntryTableGivesExactlyTwoDelays) {
  // jitter = 8192 k makes every entry decode exactly to latency + k t.
  constexpr std::int64_t k = 1000;
  NetemSpec spec = with_latency(100ms);
  spec.delay.jitter = Nanoseconds(8192 * k);
  spec.delay.distribution = DistributionTable{-32768, 32767};
  const auto r = run(spec, 10000, 1ms);
  const Nanoseconds low = 100ms - Nanoseconds(32768 * k);
  const Nanoseconds high = 100ms + Nanoseconds(32767 * k);
  std::size_t lows = 0;
  for (const auto d : delays(r)) {
    ASSERT_TRUE(d == low || d == high) << d.count();
    lows += d == low;
  }
  // Each entry has probability 1/2: binomial SE sqrt(n / 4) = 50.
  EXPECT_NEAR(static_cast<double>(lows), 5000.0, kZ * 50.0);
}

TEST(NetemSimulator, NegativeTableDelaysLeaveAtOnceAndOvertake) {
  NetemSpec spec = with_latency(1ms);
  spec.delay.jitter = Nanoseconds(8192 * 1000);
  spec.delay.distribution = DistributionTable{-32768};  // 1 ms - 32.768 ms
  const auto r = run(spec, 3, 10ms);
  for (const auto& o : r.outcomes) {
    EXPECT_EQ(o.delay, 1ms - 32768us);  // time_to_send in the past, as netem computes it
    EXPECT_EQ(o.departure, o.sent);     // released by the dequeue right after the enqueue
  }
}

TEST(NetemSimulator, RateSerialisesBackToBackPackets) {
  // 1000 B at 1e6 B/s = 1 ms each. Three packets at t = 0: 10 + 1, then each 1 ms after the last.
  NetemSpec spec = with_latency(10ms);
  spec.rate.rate = BytesPerSecond{1'000'000};
  std::vector<SimPacket> packets(4, SimPacket{0ns, 1000, false});
  packets[3].send_time = 20ms;  // the queue has drained by then: 20 + 10 + 1
  const auto r = simulate(spec, packets);
  ASSERT_EQ(r.outcomes.size(), 4u);
  EXPECT_EQ(r.outcomes[0].departure, 11ms);
  EXPECT_EQ(r.outcomes[1].departure, 12ms);
  EXPECT_EQ(r.outcomes[2].departure, 13ms);
  EXPECT_EQ(r.outcomes[3].departure, 31ms);
  EXPECT_EQ(r.outcomes[2].delay, 13ms);
  // ATM framing: 100 B -> 3 cells of 53 B = 159 us at 1e6 B/s.
  spec.rate = RateSpec{BytesPerSecond{1'000'000}, 0, 48, 5};
  const SimPacket small{0ns, 100, false};
  EXPECT_EQ(simulate(spec, std::span(&small, 1)).outcomes[0].delay, 10ms + 159us);
}

TEST(NetemSimulator, ReorderSendsEveryGapthPacketAheadAndAChangeResetsTheCounter) {
  // gap 5, probability 1: packets 0-3 delayed (counter 0..3 < gap - 1 = 4), packet 4 sees
  // counter 4 and `reorder < rnd` is false for reorder = ~0, so it goes to the head; counter 0.
  NetemSpec spec = with_latency(10ms);
  spec.reorder = {Probability::one(), Probability::zero(), 5};
  const auto r = run(spec, 15, 1ms);
  for (std::size_t i = 0; i < 15; ++i) {
    const bool ahead = i % 5 == 4;
    EXPECT_EQ(r.outcomes[i].reordered, ahead) << i;
    EXPECT_EQ(r.outcomes[i].delay, ahead ? 0ms : 10ms) << i;
  }
  EXPECT_EQ(r.counters.reordered, 3u);

  // The same spec in two phases switching at 7 ms: packets 0-3, 4 ahead, 5-6 (counter 2); the
  // change resets the counter, so the next ahead is packet 7 + 4 = 11, not 9.
  const std::vector<SimPhase> schedule{{7ms, spec, "a"}, {1s, spec, "b"}};
  const auto packets = periodic_packets(15, 1ms);
  const auto s = simulate(schedule, packets);
  std::vector<std::size_t> ahead;
  for (const auto& o : s.outcomes) {
    if (o.reordered) ahead.push_back(o.packet);
  }
  EXPECT_EQ(ahead, (std::vector<std::size_t>{4, 11}));
}

TEST(NetemSimulator, LimitDropsWhileTheQueueIsFull) {
  // limit 10, 100 ms delay, a packet per ms: 0-9 fill the queue, 10-99 are dropped, at 100 ms the
  // watchdog releases packet 0 before packet 100 arrives, and so on: 0-9, 100-109, 200-209 pass.
  NetemSpec spec = with_latency(100ms);
  spec.limit = 10;
  const auto r = run(spec, 300, 1ms);
  for (std::size_t i = 0; i < 300; ++i) {
    const bool accepted = i % 100 < 10;
    EXPECT_EQ(r.outcomes[i].fate, accepted ? SimFate::kDelivered : SimFate::kDroppedLimit) << i;
  }
  EXPECT_EQ(r.counters.limit_dropped, 270u);
  EXPECT_EQ(r.counters.qdisc_drops, 270u);
}

TEST(NetemSimulator, EcnMarksEctPacketsInsteadOfDroppingThem) {
  NetemSpec spec = with_latency(1ms);
  spec.loss = RandomLoss{Probability::one(), Probability::zero()};  // u32 ~0: every packet
  spec.ecn = true;
  auto packets = periodic_packets(100, 1ms);
  for (std::size_t i = 0; i < packets.size(); i += 2) packets[i].ect = true;
  const auto r = simulate(spec, packets);
  for (std::size_t i = 0; i < 100; ++i) {
    EXPECT_EQ(r.outcomes[i].fate, i % 2 == 0 ? SimFate::kDelivered : SimFate::kLost) << i;
    EXPECT_EQ(r.outcomes[i].ce_marked, i % 2 == 0) << i;
  }
  EXPECT_EQ(r.counters.ecn_marked, 50u);
  EXPECT_EQ(r.counters.lost, 50u);
  EXPECT_EQ(r.counters.qdisc_drops, 100u);  // the kernel counts marks as drops
  spec.ecn = false;
  EXPECT_EQ(simulate(spec, packets).counters.lost, 100u);
}

TEST(NetemSimulator, DuplicatesFollowTheirOriginalAndAreNotDuplicatedAgain) {
  NetemSpec spec = with_latency(5ms);
  spec.duplicate.probability = Probability::one();
  const auto r = run(spec, 50, 1ms);
  ASSERT_EQ(r.outcomes.size(), 100u);
  for (std::size_t i = 0; i < 50; ++i) {
    EXPECT_FALSE(r.outcomes[2 * i].duplicate);
    EXPECT_TRUE(r.outcomes[2 * i + 1].duplicate);
    EXPECT_EQ(r.outcomes[2 * i + 1].packet, i);
    EXPECT_TRUE(r.outcomes[2 * i + 1].delivered());
  }
  EXPECT_EQ(r.counters.duplicated, 50u);
  EXPECT_EQ(r.counters.delivered, 100u);
  // netem's quirk: duplicate and loss both certain gives count = 1 + 1 - 1: the original goes
  // through once and no copy is made.
  spec.loss = RandomLoss{Probability::one(), Probability::zero()};
  const auto q = run(spec, 50, 1ms);
  EXPECT_EQ(q.counters.delivered, 50u);
  EXPECT_EQ(q.counters.duplicated, 0u);
  EXPECT_EQ(q.counters.lost, 0u);
}

TEST(NetemSimulator, SlotsReleasePacketsInBursts) {
  // Slots every 10 ms (min = max), 3 packets per slot, no delay, a packet per ms from t = 0.
  //   t=0: the first slot opened at the install (t=0): packet 0 leaves at once (2 left).
  //   t=1: the head (tts 1) is due after slot_next (0), so a new slot is drawn from now: 11 ms.
  //   t=11: packets 1-3 leave, exhausting the slot: next at 21; then 4-6 at 21, 7-9 at 31, 10
  //   at 41.
  NetemSpec spec;
  spec.slot = SlotSpec{10ms, 10ms, std::nullopt, 3, 0};
  const auto r = run(spec, 11, 1ms);
  const std::vector<Nanoseconds> expected{0ms,  11ms, 11ms, 11ms, 21ms, 21ms,
                                          21ms, 31ms, 31ms, 31ms, 41ms};
  std::vector<Nanoseconds> departures;
  for (const auto& o : r.outcomes) departures.push_back(o.departure);
  EXPECT_EQ(departures, expected);
}

TEST(NetemSimulator, ScheduleMapsPacketsToPhasesAndKeepsTheLastOne) {
  const std::vector<SimPhase> schedule{{10ms, with_latency(5ms), "low"},
                                       {10ms, with_latency(50ms), "high"}};
  const auto packets = periodic_packets(30, 1ms);
  const auto r = simulate(schedule, packets);
  ASSERT_TRUE(r.diagnostics.empty()) << to_string(r.diagnostics);
  for (std::size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(r.outcomes[i].phase, i < 10 ? 0u : 1u) << i;  // after 20 ms the last phase stays
    EXPECT_EQ(r.outcomes[i].delay, i < 10 ? 5ms : 50ms) << i;
  }
  // Queued packets keep the time_to_send they got: packet 9 (sent 9 ms, +5) leaves before
  // packet 10.
  EXPECT_EQ(r.outcomes[9].departure, 14ms);
}

TEST(NetemSimulator, GilbertElliottChainSurvivesAnUnchangedModelAndRestartsOnAChange) {
  // p = 1, r = 0, loss in Bad certain, none in Good: the first packet (in Good) moves the chain to
  // Bad and is delivered; every later packet is lost. (The draws that could break this have
  // probability 2^-32 each.)
  NetemSpec ge = with_latency(1ms);
  ge.loss = GilbertElliottLoss{Probability::one(), Probability::zero(), Probability::one(),
                               Probability::zero()};
  NetemSpec same = ge;
  same.delay.latency = 2ms;  // a change elsewhere does not touch the chain
  // r = 1e-9 is 4 on the kernel's u32 grid: a new model for the engine (it compares kernel units),
  // which restarts the chain, yet leaving Bad has probability 4/2^32 per packet.
  NetemSpec changed = ge;
  changed.loss =
      GilbertElliottLoss{Probability::one(), P(1e-9), Probability::one(), Probability::zero()};
  // r = 1e-12 rounds to 0: the same model in kernel units, so the engine keeps the chain running.
  NetemSpec rounds_to_same = ge;
  rounds_to_same.loss =
      GilbertElliottLoss{Probability::one(), P(1e-12), Probability::one(), Probability::zero()};
  const std::vector<SimPhase> schedule{{5ms, ge, ""},      {5ms, same, ""},
                                       {5ms, changed, ""}, {5ms, with_latency(1ms), ""},
                                       {5ms, ge, ""},      {5ms, rounds_to_same, ""}};
  const auto packets = periodic_packets(30, 1ms);
  const auto r = simulate(schedule, packets);
  std::vector<std::size_t> delivered;
  for (const auto& o : r.outcomes) {
    if (o.delivered()) delivered.push_back(o.packet);
  }
  // 0 (first in Good); none of 5-9 (the chain stays in Bad); 10 (restart in Good); 15-19 (no loss
  // model: CLG_RANDOM with loss 0); 20 (GE again after random: a new chain in Good); none of 25-29.
  EXPECT_EQ(delivered, (std::vector<std::size_t>{0, 10, 15, 16, 17, 18, 19, 20}));
}

TEST(NetemSimulator, FourStateChainSurvivesAnUnchangedModelAndRestartsOnAChange) {
  // p13 = 1, p32 = 1, p23 = 1: 1 -> 3 (lost), 3 -> 2 (delivered), 2 -> 3 (lost), ...: L D L D ...
  NetemSpec gi = with_latency(1ms);
  gi.loss = FourStateLoss{Probability::one(), Probability::zero(), Probability::one(),
                          Probability::one(), Probability::zero()};
  NetemSpec changed = gi;
  // p31 = 1e-9 is 4 on the u32 grid: a new model for the engine, while state 3 still goes to 2
  // (rnd < p32 = ~0) but for a 2^-32 chance.
  std::get<FourStateLoss>(changed.loss).p31 = P(1e-9);
  const std::vector<SimPhase> schedule{{5ms, gi, ""}, {4ms, gi, ""}, {5ms, changed, ""}};
  const auto packets = periodic_packets(14, 1ms);
  const auto lost = loss_sequence(simulate(schedule, packets));
  // Phase 0: L D L D L, ending in state 3. Phase 1 (unchanged) continues from 3: D L D L, ending in
  // 3 again (a restart would have lost packet 5). Phase 2 (changed) restarts in state 1: L D L D L
  // (continuing from 3 would have delivered packet 9).
  const std::vector<bool> expected{true,  false, true, false, true, false, true,
                                   false, true,  true, false, true, false, true};
  EXPECT_EQ(lost, expected);
}

TEST(NetemSimulator, SchedulesRunWhatTheEngineSendsIncludingItsUniformTable) {
  // The kernel cannot drop a delay table, so when a table phase is followed by plain uniform
  // jitter the engine sends a uniform table over [-8192, 8192) instead (plan_change). With jitter
  // 8192 k that table decodes to latency + k t exactly: every delay is a multiple of k away from
  // the latency, which netem's built-in uniform ((rnd % 2 sigma) + mu - sigma) almost never is.
  constexpr std::int64_t k = 1000;
  NetemSpec table = with_latency(50ms);
  table.delay.jitter = Nanoseconds(8192 * k);
  table.delay.distribution = make_normal_table();
  NetemSpec uniform = table;
  uniform.delay.distribution.reset();
  auto off_grid = [&](const SimResult& r) {
    std::size_t n = 0;
    for (const auto& o : r.outcomes) n += (o.delay - 50ms).count() % k != 0;
    return n;
  };
  const auto packets = periodic_packets(2000, 1ms);
  const std::vector<SimPhase> schedule{{1s, table, "table"}, {1s, uniform, "uniform"}};
  EXPECT_EQ(off_grid(simulate(schedule, packets)), 0u);
  // Installed fresh, the same spec gets the kernel's own uniform: on the grid 1 time in 1000.
  EXPECT_GT(off_grid(simulate(uniform, packets)), 1900u);
}

TEST(NetemSimulator, RefusesInputItCannotGiveAMeaningTo) {
  auto packets = periodic_packets(3, 1ms);
  packets[2].send_time = 0ms;
  auto r = simulate(with_latency(1ms), packets);
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].where, "packets[2].send_time");
  EXPECT_TRUE(r.outcomes.empty());

  packets = periodic_packets(3, 1ms);
  packets[0].send_time = -1ns;
  EXPECT_EQ(simulate(with_latency(1ms), packets).diagnostics.at(0).where, "packets[0].send_time");

  packets = periodic_packets(3, 1ms);
  EXPECT_EQ(simulate(std::span<const SimPhase>{}, packets).diagnostics.at(0).where, "schedule");

  NetemSpec bad = with_latency(1ms);
  bad.delay.jitter = 1ms;
  bad.delay.distribution = DistributionTable{};
  bad.slot = SlotSpec{5ms, 1ms, std::nullopt, 0, 0};
  const std::vector<SimPhase> schedule{{-1ms, with_latency(1ms), "neg"}, {1ms, bad, "bad"}};
  const auto d = simulate(schedule, packets).diagnostics;
  ASSERT_EQ(d.size(), 3u) << to_string(d);
  EXPECT_EQ(d[0].where, "schedule[0].duration");
  EXPECT_EQ(d[1].where, "schedule[1].spec.delay.distribution");
  EXPECT_EQ(d[2].where, "schedule[1].spec.slot.max_delay");
}

// ---- Statistical checks ------------------------------------------------------------------------

TEST(NetemSimulatorStatistics, UniformJitterMeanAndStandardDeviation) {
  // sigma = 2^23 ns so that 2 sigma divides 2^32: rnd % (2 sigma) is then exactly uniform on
  // 0 .. 2 sigma - 1, and delays on mu - sigma .. mu + sigma - 1: mean mu - 1/2, variance
  // ((2 sigma)^2 - 1) / 12 (~ sigma / sqrt 3), kurtosis 9/5.
  constexpr std::int64_t kSigma = std::int64_t{1} << 23;
  constexpr std::size_t kN = 200'000;
  NetemSpec spec = with_latency(50ms);
  spec.delay.jitter = Nanoseconds(kSigma);
  const auto d = delays(run(spec, kN, 1ms));
  ASSERT_EQ(d.size(), kN);
  const auto m = moments(d).value();
  const double sd = std::sqrt((4.0 * kSigma * kSigma - 1.0) / 12.0);
  EXPECT_NEAR(m.mean.count(), 50e6 - 0.5, kZ * sd / std::sqrt(kN));
  EXPECT_NEAR(m.sample_stddev.count(), sd, kZ * se_of_sd(sd, 1.8, kN));
  const SortedSamples sorted(d);
  EXPECT_GE(sorted.min(), 50ms - Nanoseconds(kSigma));
  EXPECT_LE(sorted.max(), 50ms + Nanoseconds(kSigma - 1));
}

TEST(NetemSimulatorStatistics, NormalTableStandardDeviation) {
  // With jitter 8192 k, a draw is exactly latency + k t for a uniformly chosen entry t (16384
  // entries divide 2^32: no modulo bias), so the delay law is the table's law scaled by k.
  constexpr std::int64_t k = 1220;  // sigma ~ 10 ms
  constexpr std::size_t kN = 200'000;
  const auto table = make_normal_table();
  const TableLaw law = law_of(table);
  NetemSpec spec = with_latency(50ms);
  spec.delay.jitter = Nanoseconds(8192 * k);
  spec.delay.distribution = table;
  const auto m = moments(delays(run(spec, kN, 1ms))).value();
  const double sd = k * law.sd;
  EXPECT_NEAR(m.mean.count(), 50e6 + k * law.mean, kZ * sd / std::sqrt(kN));
  EXPECT_NEAR(m.sample_stddev.count(), sd, kZ * se_of_sd(sd, law.kurtosis, kN));
}

TEST(NetemSimulatorStatistics, BernoulliLossRate) {
  constexpr std::size_t kN = 1'000'000;
  NetemSpec spec = with_latency(1ms);
  spec.loss = RandomLoss{P(0.1), Probability::zero()};
  const auto lost = loss_sequence(run(spec, kN, 10us));
  // The kernel loses when loss >= rnd: probability (v + 1) / 2^32 for v = rint(0.1 (2^32 - 1)).
  const double p = (kernel_units::probability(P(0.1)) + 1.0) / 4294967296.0;
  const auto s = loss_statistics(lost);
  EXPECT_NEAR(*s.loss_rate, p, kZ * std::sqrt(p * (1 - p) / kN));
  // Independent draws: lag-1 autocorrelation ~ N(0, 1/n).
  EXPECT_NEAR(autocorrelation(lost, 1).value(), 0.0, kZ / std::sqrt(kN));
}

TEST(NetemSimulatorStatistics, GilbertElliottLossRate) {
  // Loss of packet n depends on the state before its transition: stationary pi_B = p / (p + r) and
  // loss = pi_G (1 - k) + pi_B (1 - h). The loss indicator's covariances are those of q(state),
  // Var_pi(q) lambda^k with lambda = 1 - p - r, so the variance of the mean is
  //   [loss (1 - loss) + 2 Var_pi(q) lambda / (1 - lambda)] / n.
  constexpr double p = 0.05, r = 0.3, q_bad = 0.7, q_good = 0.02;
  constexpr std::size_t kN = 1'000'000;
  NetemSpec spec = with_latency(1ms);
  spec.loss = GilbertElliottLoss{P(p), P(r), P(q_bad), P(q_good)};
  const auto s = loss_statistics(loss_sequence(run(spec, kN, 10us)));
  const double pi_bad = p / (p + r), pi_good = 1 - pi_bad;
  const double loss = pi_good * q_good + pi_bad * q_bad;
  const double lambda = 1 - p - r;
  const double var_q = pi_good * pi_bad * (q_bad - q_good) * (q_bad - q_good);
  const double variance = loss * (1 - loss) + 2 * var_q * lambda / (1 - lambda);
  EXPECT_NEAR(*s.loss_rate, loss, kZ * std::sqrt(variance / kN));
}

TEST(NetemSimulatorStatistics, SimpleGilbertBurstsAndGaps) {
  // h = 0, k = 1 (loss certain in Bad, none in Good): the loss sequence is itself a Markov chain,
  // bursts are geometric with mean 1/r (variance (1 - r)/r^2), gaps geometric with mean 1/p; the
  // loss rate p/(p + r) has variance pi (1 - pi)(1 + lambda)/(1 - lambda) / n.
  constexpr double p = 0.01, r = 0.25;
  constexpr std::size_t kN = 1'000'000;
  NetemSpec spec = with_latency(1ms);
  spec.loss = GilbertElliottLoss{P(p), P(r)};
  const auto s = loss_statistics(loss_sequence(run(spec, kN, 10us)));
  const double pi = p / (p + r), lambda = 1 - p - r;
  EXPECT_NEAR(*s.loss_rate, pi, kZ * std::sqrt(pi * (1 - pi) * (1 + lambda) / (1 - lambda) / kN));
  EXPECT_NEAR(*s.mean_burst, 1 / r, kZ * std::sqrt((1 - r) / (r * r) / s.bursts));
  EXPECT_NEAR(*s.mean_gap, 1 / p, kZ * std::sqrt((1 - p) / (p * p) / s.gaps));
  // The transition counts recover the parameters (reference §2's fit).
  EXPECT_NEAR(static_cast<double>(s.delivered_to_lost) / s.delivered_followed, p,
              kZ * std::sqrt(p * (1 - p) / s.delivered_followed));
  EXPECT_NEAR(static_cast<double>(s.lost_to_delivered) / s.lost_followed, r,
              kZ * std::sqrt(r * (1 - r) / s.lost_followed));
}

TEST(NetemSimulatorStatistics, FourStateStationaryLoss) {
  // Closed form (Salsano et al.): pi_1 = 1 / (1 + p14 + p13/p31 + p13 p32 / (p23 p31)),
  // loss = pi_3 + pi_4 = pi_1 (p13/p31 + p14). The chain's own linear algebra checks it and gives
  // the asymptotic variance of the loss rate for the tolerance.
  constexpr double p13 = 0.02, p31 = 0.3, p32 = 0.2, p23 = 0.6, p14 = 0.01;
  constexpr std::size_t kN = 1'000'000;
  const std::array<std::array<double, 4>, 4> chain{{
      {1 - p13 - p14, 0, p13, p14},  // 1: -> 3 with p13, -> 4 with p14
      {0, 1 - p23, p23, 0},          // 2: -> 3 with p23
      {p31, p32, 1 - p31 - p32, 0},  // 3: -> 1 with p31, -> 2 with p32
      {1, 0, 0, 0},                  // 4: -> 1
  }};
  const auto law = chain_law(chain, std::array<double, 4>{0, 0, 1, 1});  // lost in 3 and 4
  const double pi1 = 1 / (1 + p14 + p13 / p31 + p13 * p32 / (p23 * p31));
  ASSERT_NEAR(law.mean, pi1 * (p13 / p31 + p14), 1e-12);

  NetemSpec spec = with_latency(1ms);
  spec.loss = FourStateLoss{P(p13), P(p31), P(p32), P(p23), P(p14)};
  const auto s = loss_statistics(loss_sequence(run(spec, kN, 10us)));
  EXPECT_NEAR(*s.loss_rate, law.mean, kZ * std::sqrt(law.variance / kN));
}

TEST(NetemSimulatorStatistics, LossCorrelationCollapsesTheLossRate) {
  // reference/netem-kernel.md §4: get_crandom's AR(1) output concentrates around 2^31, so
  // P(ans <= loss) collapses. The stationary law of ans/2^32 = 0.75 U + 0.25 ans' integrated
  // numerically (a 4000-point density grid iterated to convergence, Python) gives
  // P(<= 0.01) = 2.4e-6 and P(<= 0.10) = 0.01750.
  constexpr std::size_t kN = 1'000'000;
  NetemSpec spec = with_latency(1ms);
  spec.loss = RandomLoss{P(0.01), P(0.25)};
  const auto one_percent = loss_statistics(loss_sequence(run(spec, kN, 10us)));
  EXPECT_LT(*one_percent.loss_rate, 1e-4);  // configured 1e-2; expected 2.4e-6 (2.4 of 10^6)

  spec.loss = RandomLoss{P(0.1), P(0.25)};
  const auto ten_percent = loss_sequence(run(spec, kN, 10us));
  // The indicator is positively correlated (P(loss | loss) ~ 10.5% vs 1.75%: lag-1 correlation
  // ~0.09, decaying at least as fast as 0.25^k), which inflates the variance of the mean by at most
  // 1 + 2 (0.09 / 0.75) = 1.24; we allow 1.5.
  const double l = 0.0175;
  EXPECT_NEAR(*loss_statistics(ten_percent).loss_rate, l, kZ * std::sqrt(1.5 * l * (1 - l) / kN));
}

TEST(NetemSimulatorStatistics, DelayCorrelationLeavesDelaysUncorrelated) {
  // §4: the correlated u32 is reduced modulo the table size, which scrambles it: lag-1
  // autocorrelation ~ N(0, 1/n), and the marginal is the table's (checked as in the normal test).
  constexpr std::int64_t k = 1220;
  constexpr std::size_t kN = 200'000;
  const auto table = make_normal_table();
  NetemSpec spec = with_latency(50ms);
  spec.delay.jitter = Nanoseconds(8192 * k);
  spec.delay.distribution = table;
  spec.delay.correlation = P(0.9);
  const auto d = delays(run(spec, kN, 1ms));
  EXPECT_NEAR(autocorrelation(d, 1).value(), 0.0, kZ / std::sqrt(kN));
  const TableLaw law = law_of(table);
  EXPECT_NEAR(sample_stddev(d)->count(), k * law.sd, kZ * se_of_sd(k * law.sd, law.kurtosis, kN));
}

TEST(NetemSimulatorStatistics, RateKeepsOrderAndSkewsDelaysUpward) {
  // Uniform jitter ±sigma around 50 ms, a packet per ms (gap << 2 sigma), 1500 B at 125e6 B/s
  // (tau = 12 us). With rate, time_to_send = max(now + X, last) + tau, so E_n = delay_n - tau obeys
  // E_n = max(X_n, E_{n-1} - (gap - tau)): a running maximum with stationary law
  //   F(e) = prod_{j >= 0} P(X <= e + j (gap - tau)),   E[delay] = tau + lo + int_lo^hi (1 - F).
  constexpr std::int64_t kSigma = std::int64_t{1} << 23;  // 2 sigma divides 2^32: X exactly uniform
  constexpr std::size_t kN = 100'000;
  NetemSpec spec = with_latency(50ms);
  spec.delay.jitter = Nanoseconds(kSigma);
  const auto without_rate = run(spec, kN, 1ms);
  spec.rate.rate = BytesPerSecond{125'000'000};
  const auto with_rate = run(spec, kN, 1ms);

  // Order: with rate no packet leaves before the one sent before it; without, many do
  // (P(swap) = (2 sigma - gap)^2 / (8 sigma^2) ~ 0.44 for neighbours).
  auto overtaken = [](const SimResult& r) {
    std::size_t n = 0;
    for (std::size_t i = 1; i < r.outcomes.size(); ++i)
      n += r.outcomes[i].departure < r.outcomes[i - 1].departure;
    return n;
  };
  EXPECT_EQ(overtaken(with_rate), 0u);
  EXPECT_GT(overtaken(without_rate), kN / 4);

  const double lo = 50e6 - kSigma, width = 2.0 * kSigma, step = 1e6 - 12e3;
  auto cdf = [&](double e) {
    double f = 1;
    for (double v = e; v < lo + width; v += step) f *= std::max(0.0, (v - lo) / width);
    return f;
  };
  double integral = 0;
  constexpr int kSteps = 20000;
  for (int i = 0; i < kSteps; ++i)
    integral += (1 - cdf(lo + (i + 0.5) * width / kSteps)) * width / kSteps;
  const double expected_mean = 12e3 + lo + integral;  // 54.1 ms: most of the lower half is absorbed

  auto d = delays(with_rate);
  d.erase(d.begin(), d.begin() + 1000);  // start-up transient (the queue starts empty)
  // Delays are strongly autocorrelated (a running maximum over ~20 packets), so standard errors
  // come from 50 batches of ~2000 packets each, for the mean and for the fraction below 50 ms.
  std::vector<double> values, below;
  for (auto x : d) {
    values.push_back(static_cast<double>(x.count()));
    below.push_back(x <= 50ms ? 1.0 : 0.0);
  }
  EXPECT_NEAR(mean(d)->count(), expected_mean, kZ * batch_means_se(values, 50));
  // Few delays stay below the latency: F(50 ms - tau) = 3% by the product formula, against 50% for
  // the raw uniform; without rate the mean stays the latency.
  EXPECT_NEAR(ecdf(SortedSamples(d), 50ms).value(), cdf(50e6 - 12e3),
              kZ * batch_means_se(below, 50));
  EXPECT_NEAR(ms(*mean(delays(without_rate))), 50.0, kZ * kSigma / std::sqrt(3.0 * kN) / 1e6);
}
