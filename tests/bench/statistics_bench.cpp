// Cost of the validator's statistics and of the offline simulator, at the sizes they meet:
//   KS and W1 between two captures of 10^6 delays each (pre-sorted: sorting is paid once per
//   capture); sorting 2.6 M delays (a day of 30 pings/s) and reading p50/p90/p99/p99.9/max from
//   them; simulated packets per second through typical specs.
// Runs anywhere (no root, no kernel). Figures: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "shaper/distribution_tables.hpp"
#include "shaper/netem_simulator.hpp"
#include "shaper/statistics.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// Delays ~ 20 ms + |N(0, 5 ms)| with a 1% tail of up to +200 ms, in whole nanoseconds: realistic
// spread, many distinct values, a few ties.
std::vector<Nanoseconds> delays(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> body(0.0, 5e6);
  std::uniform_real_distribution<double> tail(0.0, 2e8);
  std::bernoulli_distribution spike(0.01);
  std::vector<Nanoseconds> out(n);
  for (auto& d : out) {
    const double extra = spike(rng) ? tail(rng) : std::abs(body(rng));
    d = Nanoseconds(20'000'000 + static_cast<std::int64_t>(extra));
  }
  return out;
}

void BM_KsDistance(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const SortedSamples a(delays(n, 1)), b(delays(n, 2));
  for (auto _ : state) benchmark::DoNotOptimize(ks_distance(a, b));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * n));
}
BENCHMARK(BM_KsDistance)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

void BM_Wasserstein1(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const SortedSamples a(delays(n, 1)), b(delays(n, 2));
  for (auto _ : state) benchmark::DoNotOptimize(wasserstein1(a, b));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * n));
}
BENCHMARK(BM_Wasserstein1)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

// Sorting dominates: this is what one capture costs before any quantile, ECDF, KS or W1.
void BM_SortThenTailQuantiles(benchmark::State& state) {
  const auto raw = delays(static_cast<std::size_t>(state.range(0)), 3);
  for (auto _ : state) {
    std::vector<Nanoseconds> copy = raw;
    const SortedSamples sorted(std::move(copy));
    benchmark::DoNotOptimize(tail_quantiles(sorted, QuantileType::kInverseEcdf));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SortThenTailQuantiles)->Arg(2'600'000)->Unit(benchmark::kMillisecond);

void BM_TailQuantilesOnSorted(benchmark::State& state) {
  const SortedSamples sorted(delays(static_cast<std::size_t>(state.range(0)), 3));
  for (auto _ : state) {
    benchmark::DoNotOptimize(tail_quantiles(sorted, QuantileType::kInverseEcdf));
    benchmark::DoNotOptimize(tail_quantiles(sorted, QuantileType::kLinear));
  }
}
BENCHMARK(BM_TailQuantilesOnSorted)->Arg(2'600'000);

void BM_MomentsAndAutocorrelation(benchmark::State& state) {
  const auto d = delays(static_cast<std::size_t>(state.range(0)), 4);
  for (auto _ : state) {
    benchmark::DoNotOptimize(moments(d));
    benchmark::DoNotOptimize(autocorrelation(d, 1));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MomentsAndAutocorrelation)->Arg(2'600'000)->Unit(benchmark::kMillisecond);

// ---- Simulator ---------------------------------------------------------------------------------

NetemSpec simulator_spec(int kind) {
  NetemSpec spec;
  spec.delay.latency = 40ms;
  spec.limit = 100'000;
  switch (kind) {
    case 0:  // uniform jitter, Bernoulli loss: the cheapest path
      spec.delay.jitter = 5ms;
      spec.loss = RandomLoss{Probability::checked(0.01), Probability::zero()};
      break;
    case 1:  // a compiled profile's shape: normal table, GE loss
      spec.delay.jitter = Nanoseconds(8192 * 600);
      spec.delay.distribution = make_normal_table();
      spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3)};
      break;
    case 2:  // order kept by rate: every packet looks at the queue's tail
      spec.delay.jitter = 5ms;
      spec.delay.distribution = make_normal_table();
      spec.rate.rate = BytesPerSecond{12'500'000'000};
      spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3)};
      break;
    default:  // slots: the dequeue side does the work
      spec.slot = SlotSpec{1ms, 3ms, std::nullopt, 8, 0};
      break;
  }
  return spec;
}

void BM_Simulator(benchmark::State& state) {
  const NetemSpec spec = simulator_spec(static_cast<int>(state.range(0)));
  // 10^6 packets at 10 kpps: ~400 packets held at 40 ms, as on a busy link.
  const auto packets = periodic_packets(1'000'000, 100us);
  for (auto _ : state) {
    const SimResult r = simulate(spec, packets, SimOptions{42});
    benchmark::DoNotOptimize(r.counters.delivered);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(packets.size()));
}
BENCHMARK(BM_Simulator)
    ->ArgName("spec")  // 0 uniform+loss, 1 table+GE, 2 table+GE+rate, 3 slots
    ->DenseRange(0, 3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
