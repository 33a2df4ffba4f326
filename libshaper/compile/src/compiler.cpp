#include "shaper/compiler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <span>

#include "shaper/distribution_tables.hpp"
#include "shaper/sha256.hpp"
#include "shaper/statistics.hpp"

namespace shaper {

namespace {

using namespace std::chrono_literals;

// One probe of the merged capture: when it was sent (on the merged time line) and its one-way
// delay.
struct Probe {
  Nanoseconds sent{0};
  std::optional<Nanoseconds> delay;  // nullopt = lost
};

// Send times at or after this are read as wall-clock (since the Unix epoch, 1973 on); smaller ones
// count from the capture's first probe.
constexpr Nanoseconds kEpochThreshold{100'000'000'000'000'000};

// Used when `reorder` is false: 100 Gbit/s adds 120 ns per 1500-byte packet, far below any delay we
// replay, yet makes netem compute departures in order (reference §4: rate is the only in-kernel
// way).
constexpr BytesPerSecond kOrderKeepingRate{12'500'000'000};

struct Segment {
  Nanoseconds start{0};
  std::string phase;
};

// A stretch of the time line: [start, end).
struct Span {
  Nanoseconds start{0}, end{0};
};

// The time line `segments` (sorted by start) with `name` in force over each of `spans` (sorted, not
// overlapping), and the phase that was in force coming back after each.
std::vector<Segment> overlay(const std::vector<Segment>& segments, const std::vector<Span>& spans,
                             const std::string& name) {
  auto phase_at = [&](Nanoseconds t) {
    auto it = std::upper_bound(segments.begin(), segments.end(), t,
                               [](Nanoseconds v, const Segment& seg) { return v < seg.start; });
    return it == segments.begin() ? segments.front().phase : std::prev(it)->phase;
  };
  auto in_span = [&](Nanoseconds t) {
    const auto it =
        std::upper_bound(spans.begin(), spans.end(), t,
                         [](Nanoseconds v, const Span& span) { return v < span.start; });
    return it != spans.begin() && t < std::prev(it)->end;
  };
  // Every boundary of either time line, in order; each gets the phase in force from it on.
  std::vector<Nanoseconds> bounds;
  for (const auto& seg : segments) bounds.push_back(seg.start);
  for (const auto& span : spans) {
    bounds.push_back(span.start);
    bounds.push_back(span.end);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::vector<Segment> out;
  for (Nanoseconds b : bounds) {
    if (b < segments.front().start) continue;
    std::string phase = in_span(b) ? name : phase_at(b);
    if (out.empty() || out.back().phase != phase) out.push_back({b, std::move(phase)});
  }
  return out;
}

std::uint32_t queue_limit(Nanoseconds max_delay, double packet_rate) {
  const double seconds = static_cast<double>(max_delay.count()) / 1e9;
  const double packets = std::ceil(2.0 * packet_rate * seconds);
  return static_cast<std::uint32_t>(std::clamp(packets, 1000.0, 4294967295.0));
}

struct BuiltPhase {
  Phase phase;
  PhaseReport report;
  std::vector<const Probe*> tail;  // probes whose delays the table does not hold, in send order
};

// What a table's resolution costs: the KS distance between the delays its entries stand for (every
// sample when there are no more than entries, else the sample quantile at each entry's midpoint
// level, as build_exact_delay_table picks them) and the delays those entries decode to. A quantile
// table's own coarseness (1/entries of probability per entry) is not counted: no step could remove
// it.
double rounding_ks(std::span<const Nanoseconds> sorted, const ExactDelayTable& table) {
  std::vector<Nanoseconds> intended, decoded;
  const std::size_t n = sorted.size(), entries = table.table.size();
  for (std::size_t i = 0; i < entries; ++i) {
    if (n <= entries) {
      intended.push_back(sorted[i]);
    } else {
      const double u = (static_cast<double>(i) + 0.5) / static_cast<double>(entries);
      const auto k = static_cast<std::size_t>(std::ceil(u * static_cast<double>(n)));
      intended.push_back(sorted[std::clamp<std::size_t>(k, 1, n) - 1]);
    }
    decoded.push_back(Nanoseconds(netem_table_delay_ns(
        table.latency.count(), static_cast<std::int32_t>(table.jitter.count()), table.table[i])));
  }
  return ks_distance(SortedSamples(std::move(intended)), SortedSamples(std::move(decoded)))
      .value_or(0.0);
}

// One int16 table has one step for its whole range: a tight body under a tail of stalls gets the
// step the stalls need (a 1 ms body under a 13.4 s tail: 204 us steps, 5 for the whole body). The
// table may move the delays' law by at most this much (KS) before the rarest delays are split off
// into a tail phase with its own table and step: a quarter of validate's KS limit of 0.02, so that
// what is left of it covers the sampling noise of the capture itself.
constexpr double kTableKsBudget = 0.005;

// The largest delay the body table keeps: all of `sorted` when one table over them keeps within the
// budget, otherwise the largest cut below which the table does (a bisection over the samples: the
// step, and with it the table's error, grows with the range it spans).
Nanoseconds body_cut(std::span<const Nanoseconds> sorted, std::size_t entries) {
  auto fits = [&](std::size_t count) {
    const std::span<const Nanoseconds> body = sorted.first(count);
    const ExactTableResult t = build_exact_delay_table(body, entries);
    return t.table && rounding_ks(body, *t.table) <= kTableKsBudget;
  };
  if (fits(sorted.size())) return sorted.back();
  std::size_t good = 1, bad = sorted.size();  // fits(good), !fits(bad)
  while (bad - good > 1) {
    const std::size_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return sorted[good - 1];
}

// How a phase's losses are modelled: the fitted model that best keeps the capture's bursts, or
// plain Bernoulli at the phase's loss rate. The replay uses Bernoulli: its phases change every few
// windows, and netem restarts a Gilbert or 4-state chain in its good state at each change
// (docs/simulator.md, "Changes"), which would cut every burst at a window edge; the replay's bursts
// come from the order of its lossy windows instead. kElsewhere: the phase loses nothing; its
// probes' losses are replayed by another phase.
enum class LossModelling { kFitted, kBernoulli, kElsewhere };

LossFit bernoulli_fit(const std::vector<bool>& lost) {
  LossFit fit;
  const auto count = static_cast<double>(std::count(lost.begin(), lost.end(), true));
  if (count == 0 || lost.empty()) return fit;
  fit.capture_loss_rate = count / static_cast<double>(lost.size());
  fit.chosen.kind = LossModelKind::kBernoulli;
  fit.chosen.model = RandomLoss{*Probability::make(fit.capture_loss_rate), Probability::zero()};
  fit.chosen.loss_rate = fit.capture_loss_rate;
  fit.chosen.parameters = 1;
  return fit;
}

// build_phase's delay part: the table of `delays` (of `probes`), and the tail it cannot hold.
std::optional<BuiltPhase> build_delays(BuiltPhase out, std::vector<Nanoseconds>& delays,
                                       const std::vector<const Probe*>& probes,
                                       const CompileOptions& options, Diagnostics& diagnostics) {
  const std::string& name = out.phase.name;
  if (delays.empty()) return out;
  sort_samples(delays);
  out.report.min = delays.front();
  out.report.max = delays.back();
  if (delays.front() == delays.back()) {
    // A constant delay needs no table.
    out.phase.spec.delay.latency = delays.front();
    return out;
  }
  Nanoseconds cut = delays.back();
  if (options.tail_phases) cut = body_cut(delays, options.table_entries);
  const std::span<const Nanoseconds> body(delays.begin(),
                                          std::upper_bound(delays.begin(), delays.end(), cut));
  ExactTableResult table = build_exact_delay_table(body, options.table_entries);
  if (!table.table) {
    for (auto& d : table.diagnostics) diagnostics.push_back({"phase " + name, d.to_string()});
    return std::nullopt;
  }
  if (cut < delays.back()) {
    const ExactTableResult whole = build_exact_delay_table(delays, options.table_entries);
    out.report.whole_table_resolution = whole.table ? whole.table->resolution : 0ns;
    out.report.whole_table_ks = whole.table ? rounding_ks(delays, *whole.table) : 1.0;
  }
  out.phase.spec.delay.latency = table.table->latency;
  out.phase.spec.delay.jitter = table.table->jitter;
  out.phase.spec.delay.distribution = table.table->table;
  out.phase.delay_table = TableSource::kCustom;
  out.report.resolution = table.table->resolution;
  out.report.table_entries = table.table->table.size();
  out.report.table_ks = rounding_ks(body, *table.table);
  if (options.tail_phases && body.size() > options.table_entries) {
    // A quantile table's top entry is the quantile at 1 - 1/(2 entries): rarer delays are not in
    // it.
    const auto top = *std::max_element(table.table->table.begin(), table.table->table.end());
    const std::int64_t top_delay = netem_table_delay_ns(
        table.table->latency.count(), static_cast<std::int32_t>(table.table->jitter.count()), top);
    cut = std::min(cut, Nanoseconds(top_delay + table.table->resolution.count() / 2));
  }
  for (const Probe* p : probes) {
    if (p->delay && *p->delay > cut) out.tail.push_back(p);
  }
  out.report.tail_samples = out.tail.size();
  return out;
}

// An exact-table phase for `probes` (delays and losses in send order). With options.tail_phases,
// the delays its table cannot hold (above its top entry, or beyond the body cut) are returned as
// `tail`.
std::optional<BuiltPhase> build_phase(const std::string& name,
                                      const std::vector<const Probe*>& probes,
                                      const CompileOptions& options, Diagnostics& diagnostics,
                                      LossModelling loss = LossModelling::kFitted) {
  BuiltPhase out;
  out.phase.name = name;
  out.report.name = name;
  out.report.probes = probes.size();
  std::vector<bool> lost;
  lost.reserve(probes.size());
  for (const Probe* p : probes) lost.push_back(!p->delay.has_value());
  // The loss fit (Baum–Welch over up to 250 000 packets, twice) needs nothing of the delay table,
  // so it runs on a second thread while this one builds the table; `fitted` is joined on every
  // return.
  std::future<LossFit> fitted;
  switch (loss) {
    case LossModelling::kFitted:
      fitted = std::async(std::launch::async,
                          [&lost, seed = options.seed] { return fit_loss_model(lost, seed); });
      break;
    case LossModelling::kBernoulli:
      out.report.loss = bernoulli_fit(lost);
      break;
    case LossModelling::kElsewhere:
      break;
  }
  std::vector<Nanoseconds> delays;
  delays.reserve(probes.size());
  for (const Probe* p : probes) {
    if (p->delay) delays.push_back(*p->delay);
  }
  out.report.samples = delays.size();
  const auto with_loss = [&](std::optional<BuiltPhase> built) {
    if (fitted.valid()) {
      LossFit fit = fitted.get();
      if (built) built->report.loss = std::move(fit);
    }
    if (built) built->phase.spec.loss = built->report.loss.chosen.model;
    return built;
  };
  return with_loss(build_delays(std::move(out), delays, probes, options, diagnostics));
}

using Features = std::array<double, 3>;

double distance2(const Features& a, const Features& b) {
  double d = 0;
  for (int f = 0; f < 3; ++f) d += (a[f] - b[f]) * (a[f] - b[f]);
  return d;
}

struct Clustering {
  std::vector<std::size_t> label;
  double within = 0;  // sum of squared distances to the assigned centres: k-means' objective
};

// Lloyd iterations from the given centres.
Clustering lloyd(const std::vector<Features>& features, std::vector<Features> centres) {
  const std::size_t n = features.size(), k = centres.size();
  Clustering out;
  out.label.assign(n, 0);
  for (int iteration = 0; iteration < 100; ++iteration) {
    bool changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t best = 0;
      double best_d = INFINITY;
      for (std::size_t c = 0; c < k; ++c) {
        const double d = distance2(features[i], centres[c]);
        if (d < best_d) {
          best_d = d;
          best = c;
        }
      }
      changed |= out.label[i] != best;
      out.label[i] = best;
    }
    std::vector<Features> sum(k, {0, 0, 0});
    std::vector<std::size_t> count(k, 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (int f = 0; f < 3; ++f) sum[out.label[i]][f] += features[i][f];
      ++count[out.label[i]];
    }
    for (std::size_t c = 0; c < k; ++c) {
      if (count[c]) {
        for (int f = 0; f < 3; ++f) centres[c][f] = sum[c][f] / static_cast<double>(count[c]);
      }
    }
    if (!changed && iteration > 0) break;
  }
  for (std::size_t i = 0; i < n; ++i) out.within += distance2(features[i], centres[out.label[i]]);
  return out;
}

// k-means on window features, deterministic. Two starts, and the one that ends with the smaller
// within-cluster sum of squares wins (the quantile start on a tie):
//  - centres at evenly spaced quantiles of the first feature (the median delay);
//  - farthest-first: the calmest window, then each next centre the window farthest from those
//  chosen.
// The quantile start alone fails when one regime holds most of the windows: two of its centres land
// in that regime, which is then split in two while two rarer regimes are merged (found on an
// LTE-like capture with 18 good, 10 fair and 4 poor windows: profiles/lte.json).
std::vector<std::size_t> cluster(const std::vector<Features>& features, std::size_t k) {
  const std::size_t n = features.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](auto a, auto b) { return features[a][0] < features[b][0]; });
  std::vector<Features> quantiles(k);
  for (std::size_t c = 0; c < k; ++c) quantiles[c] = features[order[(2 * c + 1) * n / (2 * k)]];
  std::vector<Features> farthest = {features[order.front()]};
  while (farthest.size() < k) {
    std::size_t pick = 0;
    double pick_d = -1;
    for (std::size_t i = 0; i < n; ++i) {
      double d = INFINITY;
      for (const auto& c : farthest) d = std::min(d, distance2(features[i], c));
      if (d > pick_d) {
        pick_d = d;
        pick = i;
      }
    }
    farthest.push_back(features[pick]);
  }
  Clustering best = lloyd(features, quantiles);
  Clustering other = lloyd(features, farthest);
  if (other.within < best.within) best = std::move(other);
  return best.label;
}

// Window labels put every change of regime on a window's edge, but a capture's regimes change where
// they change: a window that straddles a change goes whole to one regime, so the other regime's
// probes land in the wrong table and the replayed change moves by up to a window. Each change
// between two adjacent windows is moved to the probe that best separates the two regimes' laws, as
// the window assignment estimated them: a histogram of log delay and a loss rate per regime (each
// count plus one half, so no probe is impossible under either), when that gains more than chance
// would (below). Changes stay as many as the windows gave and in their order; each moves within its
// two windows only, and the later window keeps at least its last probe. `label[j]` is the regime of
// the j-th probe of `order`; `begin[i]` is where window i starts in it and `contiguous[i]` whether
// window i+1 follows it without an empty window between.
struct Refinement {
  std::size_t moved = 0;  // changes not left on their window's edge
  Nanoseconds largest_move{0};
};
Refinement refine_changes(const std::vector<const Probe*>& order,
                          const std::vector<std::size_t>& begin,
                          const std::vector<bool>& contiguous, std::size_t regimes,
                          std::vector<std::size_t>& label) {
  constexpr std::size_t kBins =
      32;  // enough to tell a calm regime from a stormy one; few enough to fill
  auto x = [](Nanoseconds d) { return std::log1p(static_cast<double>(d.count()) / 1e6); };
  double lo = INFINITY, hi = -INFINITY;
  for (const Probe* p : order) {
    if (!p->delay) continue;
    lo = std::min(lo, x(*p->delay));
    hi = std::max(hi, x(*p->delay));
  }
  const double width = hi > lo ? (hi - lo) / kBins : 1.0;
  auto bin = [&](Nanoseconds d) {
    return std::min<std::size_t>(kBins - 1,
                                 static_cast<std::size_t>(std::max(0.0, (x(d) - lo) / width)));
  };
  std::vector<std::array<double, kBins>> counts(regimes);
  std::vector<double> delivered(regimes, 0.0), lost(regimes, 0.0);
  for (auto& c : counts) c.fill(0.5);
  for (std::size_t j = 0; j < order.size(); ++j) {
    if (order[j]->delay) {
      counts[label[j]][bin(*order[j]->delay)] += 1;
      delivered[label[j]] += 1;
    } else {
      lost[label[j]] += 1;
    }
  }
  auto log_likelihood = [&](std::size_t r, const Probe* p) {
    const double q = (lost[r] + 0.5) / (lost[r] + delivered[r] + 1.0);
    if (!p->delay) return std::log(q);
    return std::log1p(-q) + std::log(counts[r][bin(*p->delay)] / (delivered[r] + 0.5 * kBins));
  };

  Refinement out;
  const std::size_t windows = begin.size();
  std::size_t floor = 0;  // probes before this were placed by the previous change
  for (std::size_t i = 0; i + 1 < windows; ++i) {
    const std::size_t a = label[begin[i]], b = label[begin[i + 1]];
    const std::size_t end = i + 2 < windows ? begin[i + 2] : order.size();
    if (a == b || !contiguous[i]) {
      floor = begin[i + 1];
      continue;
    }
    const std::size_t from = std::max(floor, begin[i]);
    // score(s) = log-likelihood of [from, s) under a and [s, end) under b; start at the windows'
    // edge.
    double score = 0;
    for (std::size_t j = from; j < begin[i + 1]; ++j) score += log_likelihood(a, order[j]);
    for (std::size_t j = begin[i + 1]; j < end; ++j) score += log_likelihood(b, order[j]);
    // Moving the change must gain more than chance would among this many places to put it (a change
    // that is on the window's edge is otherwise nudged by a probe or two wherever the laws
    // overlap).
    double best_score = score + std::log(static_cast<double>(end - from));
    std::size_t best = begin[i + 1];
    double running = score;
    for (std::size_t s = begin[i + 1]; s > from; --s) {  // the change earlier, into window i
      running += log_likelihood(b, order[s - 1]) - log_likelihood(a, order[s - 1]);
      if (running > best_score) best_score = running, best = s - 1;
    }
    running = score;
    for (std::size_t s = begin[i + 1]; s + 1 < end; ++s) {  // later, into window i+1
      running += log_likelihood(a, order[s]) - log_likelihood(b, order[s]);
      if (running > best_score) best_score = running, best = s + 1;
    }
    for (std::size_t j = from; j < end; ++j) label[j] = j < best ? a : b;
    floor = best;
    if (best != begin[i + 1]) {
      ++out.moved;
      const Nanoseconds shift = order[best]->sent - order[begin[i + 1]]->sent;
      out.largest_move = std::max(out.largest_move, shift < 0ns ? -shift : shift);
    }
  }
  return out;
}

// ---- Replay (RegimeMode::kReplay) ----
// The capture's time line cut into windows; each window gets the phase of its delay level (its
// median delay on a grid that is linear below `scale` and logarithmic above) and of its loss band.
// Every phase's table holds the delays of the windows it stands for, so the replay keeps the
// capture's law exactly while following its time line window by window.

// Each level may need a tail phase beside it, and the loss bursts one more: 31 + 31 + 1 phases stay
// under the profile's 64.
constexpr std::size_t kMaxReplayPhases = 31;
// The replay is judged on its lag-1 autocorrelation within 0.1 of the capture's; the window is
// chosen to be within half of that, so that a simulation's own noise fits in the rest.
constexpr double kLag1Tolerance = 0.05;

struct ReplayPlan {
  Nanoseconds window{0};
  std::vector<std::size_t> phase_of_window;        // index into members
  std::vector<std::vector<const Probe*>> members;  // per phase, in send order
  std::vector<Nanoseconds> level;  // per phase: the grid value of its windows' medians
  std::vector<int> loss_band;      // per phase
  double predicted_lag1 = 0;
};

// 0: no loss in the window; 1: up to 10 %; 2: up to half; 3: more. Windows without loss get phases
// without loss, so the replay's losses fall in the windows where the capture lost probes.
int loss_band(std::size_t lost, std::size_t total) {
  if (lost == 0) return 0;
  const double rate = static_cast<double>(lost) / static_cast<double>(total);
  return rate <= 0.1 ? 1 : rate <= 0.5 ? 2 : 3;
}

ReplayPlan plan_replay(const std::vector<Probe>& probes, Nanoseconds window, Nanoseconds scale,
                       bool loss_bands) {
  ReplayPlan plan;
  plan.window = window;
  const Nanoseconds t0 = probes.front().sent;
  std::vector<std::vector<const Probe*>> windows;
  for (const auto& p : probes) {
    const auto index = static_cast<std::size_t>((p.sent - t0) / window);
    if (index >= windows.size()) windows.resize(index + 1);
    windows[index].push_back(&p);
  }
  const auto grid = [&](double median) {
    return std::log1p(median / static_cast<double>(scale.count()));
  };
  std::vector<double> y(windows.size(), -1.0);
  std::vector<int> band(windows.size(), 0);
  for (std::size_t w = 0; w < windows.size(); ++w) {
    std::vector<std::int64_t> d;
    for (const Probe* p : windows[w]) {
      if (p->delay) d.push_back(p->delay->count());
    }
    if (loss_bands) band[w] = loss_band(windows[w].size() - d.size(), windows[w].size());
    if (d.empty()) continue;
    std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
    y[w] = grid(static_cast<double>(d[d.size() / 2]));
  }
  // A window with no delivered probe takes the level of the window before it (the first such ones,
  // of the first window with a delay).
  const auto first = std::find_if(y.begin(), y.end(), [](double v) { return v >= 0; });
  double carried = first == y.end() ? 0.0 : *first;
  for (auto& v : y) v = v >= 0 ? (carried = v) : carried;
  // The finest grid that needs no more than kMaxReplayPhases phases.
  std::map<std::pair<long, int>, std::size_t> keys;
  double delta = 0.05;
  for (;; delta *= 1.25) {
    keys.clear();
    for (std::size_t w = 0; w < windows.size(); ++w)
      keys.emplace(std::pair{std::lround(y[w] / delta), band[w]}, 0);
    if (keys.size() <= kMaxReplayPhases) break;
  }
  std::size_t next = 0;
  for (auto& [key, index] : keys) {
    index = next++;
    const double median =
        std::expm1(static_cast<double>(key.first) * delta) * static_cast<double>(scale.count());
    plan.level.push_back(Nanoseconds(std::llround(median)));
    plan.loss_band.push_back(key.second);
  }
  plan.members.resize(keys.size());
  for (std::size_t w = 0; w < windows.size(); ++w) {
    const std::size_t k = keys.at({std::lround(y[w] / delta), band[w]});
    plan.phase_of_window.push_back(k);
    plan.members[k].insert(plan.members[k].end(), windows[w].begin(), windows[w].end());
  }
  // Predicted lag-1 autocorrelation: each probe's delay is drawn afresh from its phase's table, so
  // two consecutive delivered probes covary only through their phases' means (the same phase or
  // not): r1 = sum (m_t - mean)(m_t+1 - mean) / sum (d_t - mean)^2, the estimator of statistics.hpp
  // with the expected cross products put in.
  std::vector<double> sum(keys.size(), 0.0), count(keys.size(), 0.0);
  double total = 0, n = 0;
  std::vector<std::pair<double, std::size_t>> series;  // delay, phase
  for (std::size_t w = 0; w < windows.size(); ++w) {
    for (const Probe* p : windows[w]) {
      if (!p->delay) continue;
      const auto d = static_cast<double>(p->delay->count());
      sum[plan.phase_of_window[w]] += d;
      count[plan.phase_of_window[w]] += 1;
      total += d;
      n += 1;
      series.emplace_back(d, plan.phase_of_window[w]);
    }
  }
  const double mean = n > 0 ? total / n : 0.0;
  double numerator = 0, denominator = 0;
  for (std::size_t t = 0; t < series.size(); ++t) {
    denominator += (series[t].first - mean) * (series[t].first - mean);
    if (t + 1 < series.size()) {
      const double a = sum[series[t].second] / count[series[t].second] - mean;
      const double b = sum[series[t + 1].second] / count[series[t + 1].second] - mean;
      numerator += a * b;
    }
  }
  plan.predicted_lag1 = denominator > 0 ? numerator / denominator : 0.0;
  return plan;
}

// The window: options.replay_window, or else the longest of interval x 2^k whose predicted lag-1
// autocorrelation is within kLag1Tolerance of the capture's (the one closest to it when none is),
// among those that keep the schedule within its 10 000 steps and cut the capture into two windows
// at least. Longer windows mean fewer changes for the daemon to make and more probes behind each
// table.
ReplayPlan choose_replay(const std::vector<Probe>& probes, const CompileOptions& options,
                         Nanoseconds interval, double capture_lag1, Nanoseconds scale,
                         bool loss_bands) {
  if (options.replay_window) return plan_replay(probes, *options.replay_window, scale, loss_bands);
  const Nanoseconds span = probes.back().sent - probes.front().sent + interval;
  Nanoseconds window = interval;
  while (span / window > static_cast<std::int64_t>(kMaxScheduleSteps)) window *= 2;
  std::optional<ReplayPlan> longest_within, closest;
  for (bool first = true; first || window * 2 <= span; window *= 2, first = false) {
    ReplayPlan plan = plan_replay(probes, window, scale, loss_bands);
    const double miss = std::fabs(plan.predicted_lag1 - capture_lag1);
    if (miss <= kLag1Tolerance) longest_within = plan;
    if (!closest || miss < std::fabs(closest->predicted_lag1 - capture_lag1))
      closest = std::move(plan);
  }
  return longest_within ? std::move(*longest_within) : std::move(*closest);
}

// The capture's loss bursts as stretches of its time line: from the first lost probe's send time to
// the next probe's (at most one interval after the last lost one).
std::vector<Span> loss_spans(const std::vector<Probe>& probes, Nanoseconds interval) {
  std::vector<Span> out;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    if (probes[i].delay) continue;
    const Nanoseconds start = probes[i].sent;
    while (i + 1 < probes.size() && !probes[i + 1].delay) ++i;
    Nanoseconds end = probes[i].sent + interval;
    if (i + 1 < probes.size()) end = std::min(end, probes[i + 1].sent);
    if (end > start && (out.empty() || start >= out.back().end)) out.push_back({start, end});
  }
  return out;
}

// More loss bursts than this are not replayed one by one (each costs two schedule steps of the 10
// 000): the replay's windows then carry loss bands instead (ReplayPlan::loss_band).
constexpr std::size_t kMaxReplayedLossBursts = 2500;

std::vector<Probe> merge(const std::vector<CaptureInput>& captures, CompileReport& report) {
  std::vector<Probe> probes;
  // Sized once: growing by doubling would copy the probes (2.6 M of a 72 h capture) and fault in
  // pages up to three times their size.
  std::size_t total = 0;
  for (const auto& capture : captures) total += capture.trace.samples.size();
  probes.reserve(total);
  Nanoseconds offset{0};
  for (const auto& capture : captures) {
    const Trace& t = capture.trace;
    report.send_times_inferred |= t.send_times_inferred;
    if (report.interval.count() == 0) report.interval = t.interval;
    Nanoseconds last{0};
    const std::size_t first = probes.size();
    for (const auto& s : t.samples) {
      Nanoseconds sent =
          s.send_time.value_or(Nanoseconds(static_cast<std::int64_t>(s.seq) * t.interval.count()));
      // Relative times of a later capture continue after the previous one.
      if (sent < kEpochThreshold) sent += offset;
      probes.push_back({sent, s.rtt});
      last = std::max(last, sent);
    }
    // A probe whose send time was not printed (a lost one) has it from a neighbour and the median
    // interval. Where probes were sent unevenly that can put it after later deliveries, and sorting
    // by it would move it out of its loss burst, splitting the burst (ping's 3-15 ms spacing split
    // 3 of the 105 bursts of tests/fixtures/captures/bursty-loss.txt). Inferred times are held
    // between their neighbours in the capture's own (sequence) order, so the sort below keeps that
    // order.
    const auto inferred = [&](std::size_t i) {
      return t.samples[i - first].send_time_inferred || !t.samples[i - first].send_time;
    };
    for (std::size_t i = probes.size(); i-- > first + 1;) {
      if (inferred(i - 1)) probes[i - 1].sent = std::min(probes[i - 1].sent, probes[i].sent);
    }
    for (std::size_t i = first + 1; i < probes.size(); ++i) {
      if (inferred(i)) probes[i].sent = std::max(probes[i].sent, probes[i - 1].sent);
    }
    offset = last + t.interval;
  }
  // One capture is mostly in send order already (ping -D stamps each line): then the stable sort
  // would only copy the probes to its buffer and back.
  const auto by_send_time = [](const Probe& a, const Probe& b) { return a.sent < b.sent; };
  if (!std::is_sorted(probes.begin(), probes.end(), by_send_time)) {
    std::stable_sort(probes.begin(), probes.end(), by_send_time);
  }
  return probes;
}

// The options compile_profile refuses, each with its field.
void check_options(const CompileOptions& options, Diagnostics& diagnostics) {
  if (options.table_entries == 0 || options.table_entries > kMaxTableEntries) {
    diagnostics.push_back({"table_entries", "must be 1 to 16384"});
  }
  if (options.regimes == RegimeMode::kClusters && (options.clusters < 1 || options.clusters > 16)) {
    diagnostics.push_back({"clusters", "must be 1 to 16"});
  }
  if (options.replay_window && options.replay_window->count() <= 0) {
    diagnostics.push_back({"replay_window", "must be longer than 0"});
  }
  if (options.spikes && options.regimes != RegimeMode::kSingle) {
    diagnostics.push_back({"spikes", "periodic spikes combine with the single-phase mode only"});
  }
  if (options.baseline.kind == BaselineKind::kPercentile &&
      !(options.baseline.percentile >= 0 && options.baseline.percentile <= 100)) {
    diagnostics.push_back({"baseline", "the percentile must be 0 to 100"});
  }
}

// One compile's state, which its steps share: the probes (in send order; their delays become
// one-way below), the profile and report being built, and the capture's time line as phases. Each
// step returns false when it has added a diagnostic that ends the compile.
struct Compilation {
  const CompileOptions& options;
  CompileReport& report;
  Diagnostics& diagnostics;
  std::vector<Probe> probes;
  Profile profile{};
  std::vector<Segment> segments{};  // the capture's time line as phases
  std::map<std::string, std::vector<const Probe*>> tails{};

  bool add_phase(std::optional<BuiltPhase> built) {
    if (!built) return false;
    if (!built->tail.empty()) tails[built->phase.name] = built->tail;
    report.phases.push_back(built->report);
    profile.phases.push_back(std::move(built->phase));
    return true;
  }

  // The baseline, and every RTT made a one-way delay above it.
  bool to_one_way_delays(const std::vector<CaptureInput>& captures) {
    // The delivered probes' count and smallest RTT in one pass; only a percentile baseline needs
    // the RTTs gathered and sorted.
    std::optional<Nanoseconds> smallest;
    for (const auto& p : probes) {
      if (!p.delay) continue;
      ++report.delivered;
      if (!smallest || *p.delay < *smallest) smallest = p.delay;
    }
    if (!smallest) {
      diagnostics.push_back(
          {captures.front().name,
           "no delivered probe with an RTT: nothing to build a delay model from"});
      return false;
    }

    // Baseline and one-way delays.
    switch (options.baseline.kind) {
      case BaselineKind::kMinimum:
        report.baseline = *smallest;
        break;
      case BaselineKind::kPercentile: {
        std::vector<Nanoseconds> rtts;
        rtts.reserve(report.delivered);
        for (const auto& p : probes) {
          if (p.delay) rtts.push_back(*p.delay);
        }
        report.baseline = *quantile_inverse_ecdf(SortedSamples(std::move(rtts)),
                                                 options.baseline.percentile / 100.0);
        break;
      }
      case BaselineKind::kFixed:
        report.baseline = options.baseline.value;
        break;
      case BaselineKind::kNone:
        report.baseline = 0ns;
        break;
    }
    for (auto& p : probes) {
      if (!p.delay) continue;
      Nanoseconds d = *p.delay - report.baseline;
      if (d.count() < 0) {
        d = 0ns;
        ++report.clamped_to_zero;
      }
      if (options.split == DirectionSplit::kHalves) d /= 2;
      p.delay = d;
    }
    if (report.clamped_to_zero) {
      report.notes.push_back(std::to_string(report.clamped_to_zero) +
                             " RTTs were below the baseline and replay as zero added delay");
    }
    return true;
  }

  // Where the profile came from.
  void set_provenance(const std::vector<CaptureInput>& captures) {
    Provenance prov;
    for (const auto& c : captures) {
      const auto slash = c.name.find_last_of('/');
      prov.capture += (prov.capture.empty() ? "" : "+") +
                      (slash == std::string::npos ? c.name : c.name.substr(slash + 1));
      prov.samples += c.trace.samples.size();
    }
    prov.format = std::string(to_string(captures.front().trace.format));
    if (captures.size() == 1) {
      prov.sha256 = captures.front().sha256;
    } else {
      // Several captures: the digest of their digests, in the order given.
      Sha256 h;
      for (const auto& c : captures) h.update(c.sha256);
      prov.sha256 = h.finish_hex();
    }
    if (probes.front().sent >= kEpochThreshold) {
      prov.start = probes.front().sent;
      prov.end = probes.back().sent;
    }
    prov.baseline = report.baseline;
    prov.halved = options.split == DirectionSplit::kHalves;
    profile.provenance = prov;
  }

  // RegimeMode::kSingle: one phase for the whole capture.
  bool single_phase(const std::vector<const Probe*>& all) {
    if (!add_phase(build_phase("capture", all, options, diagnostics))) return false;
    segments.push_back({probes.front().sent, "capture"});
    return true;
  }

  // RegimeMode::kPercentiles: fixed delays at three levels of the capture, looped.
  bool percentile_phases(const std::vector<const Probe*>& all) {
    auto overall = build_phase("all", all, options, diagnostics);
    if (!overall) return false;
    std::vector<Nanoseconds> delays;
    for (const auto& p : probes) {
      if (p.delay) delays.push_back(*p.delay);
    }
    const SortedSamples sorted(std::move(delays));
    const std::pair<const char*, double> levels[] = {{"p50", 0.5}, {"p95", 0.95}, {"p99.9", 0.999}};
    Schedule schedule;
    schedule.loop = true;
    for (const auto& [label, level] : levels) {
      Phase phase;
      phase.name = label;
      phase.description = std::string("fixed delay at the capture's ") + label;
      phase.spec.delay.latency = *quantile_inverse_ecdf(sorted, level);
      // One loss model for all three, so its chain keeps running across the switches.
      phase.spec.loss = overall->phase.spec.loss;
      PhaseReport r = overall->report;
      r.name = label;
      r.table_entries = 0;
      r.resolution = 0ns;
      report.phases.push_back(r);
      profile.phases.push_back(std::move(phase));
      schedule.steps.push_back({label, options.percentile_step});
    }
    profile.schedule = schedule;
    return true;
  }

  // RegimeMode::kReplay: the capture's own time line, window by window (docs/compiler.md).
  bool replay_phases() {
    std::vector<Nanoseconds> in_order;
    for (const auto& p : probes) {
      if (p.delay) in_order.push_back(*p.delay);
    }
    const double capture_lag1 = autocorrelation(in_order, 1).value_or(0.0);
    const SortedSamples sorted(std::move(in_order));
    // Where the level grid turns from linear to logarithmic: the body's width (its interquartile
    // range), so that the body gets levels as fine as the stalls get relative to their size.
    const Nanoseconds scale = std::max<Nanoseconds>(
        *quantile_inverse_ecdf(sorted, 0.75) - *quantile_inverse_ecdf(sorted, 0.25), 1us);
    const Nanoseconds interval = std::max<Nanoseconds>(report.interval, 1ms);
    const std::vector<Span> bursts = loss_spans(probes, interval);
    // Each loss burst is replayed where it happened, as a phase that loses everything for as long
    // as the capture lost its probes; so a burst keeps its length and place, which a loss model
    // restarted at every window could not keep (LossModelling).
    const bool burst_by_burst = bursts.size() <= kMaxReplayedLossBursts;
    const ReplayPlan plan =
        choose_replay(probes, options, interval, capture_lag1, scale, !burst_by_burst);
    std::vector<std::string> names;
    for (std::size_t k = 0; k < plan.members.size(); ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "replay-%02zu", k + 1);
      names.emplace_back(name);
      // A window that holds the start or the end of a stall has the level of most of its probes;
      // the others' delays would widen that level's table for every window that uses it, so they go
      // to the level's tail phase, replayed at their own times, as in the single-phase mode.
      auto built =
          build_phase(names.back(), plan.members[k], options, diagnostics,
                      burst_by_burst ? LossModelling::kElsewhere : LossModelling::kBernoulli);
      if (!built) return false;
      static constexpr const char* kBands[] = {"no loss", "loss up to 10 %", "loss up to 50 %",
                                               "loss above 50 %"};
      built->phase.description = "windows whose median delay is near " +
                                 duration_to_string(plan.level[k]) + ", " +
                                 kBands[plan.loss_band[k]];
      add_phase(std::move(built));
    }
    const Nanoseconds t0 = probes.front().sent;
    for (std::size_t w = 0; w < plan.phase_of_window.size(); ++w) {
      const std::string& name = names[plan.phase_of_window[w]];
      if (segments.empty() || segments.back().phase != name) {
        segments.push_back({t0 + plan.window * static_cast<std::int64_t>(w), name});
      }
    }
    if (burst_by_burst && !bursts.empty()) {
      Phase lost;
      lost.name = "replay-lost";
      lost.description = "the capture's loss bursts, each replayed where it happened";
      lost.spec.loss = RandomLoss{Probability::one(), Probability::zero()};
      PhaseReport r;
      r.name = lost.name;
      r.probes = probes.size() - report.delivered;
      r.loss = bernoulli_fit(std::vector<bool>(r.probes, true));
      report.phases.push_back(r);
      profile.phases.push_back(std::move(lost));
      segments = overlay(segments, bursts, "replay-lost");
    }
    report.replay = ReplayReport{plan.window,         capture_lag1,
                                 plan.predicted_lag1, plan.phase_of_window.size(),
                                 plan.members.size(), burst_by_burst ? bursts.size() : 0};
    char lag[96];
    std::snprintf(lag, sizeof lag, "(capture lag-1 autocorrelation %.3f, replay's predicted %.3f)",
                  capture_lag1, plan.predicted_lag1);
    report.notes.push_back("replay: " + std::to_string(plan.phase_of_window.size()) +
                           " windows of " + duration_to_string(plan.window) + " on " +
                           std::to_string(plan.members.size()) + " delay levels and loss bands " +
                           lag);
    return true;
  }

  // RegimeMode::kClusters: windows of the time line clustered into regimes.
  bool regime_phases() {
    // Windows of the time line, clustered on (log median delay, log p95 delay, loss rate).
    const Nanoseconds t0 = probes.front().sent;
    std::vector<std::vector<const Probe*>> windows;
    for (const auto& p : probes) {
      const auto index = static_cast<std::size_t>((p.sent - t0) / options.window);
      if (index >= windows.size()) windows.resize(index + 1);
      windows[index].push_back(&p);
    }
    std::vector<std::size_t> used;  // windows with probes
    std::vector<Features> features;
    for (std::size_t w = 0; w < windows.size(); ++w) {
      if (windows[w].empty()) continue;
      std::vector<Nanoseconds> d;
      std::size_t lost = 0;
      for (const Probe* p : windows[w]) {
        if (p->delay) {
          d.push_back(*p->delay);
        } else {
          ++lost;
        }
      }
      Features f{0, 0, static_cast<double>(lost) / static_cast<double>(windows[w].size())};
      if (!d.empty()) {
        const SortedSamples s(std::move(d));
        f[0] = std::log1p(static_cast<double>(quantile_inverse_ecdf(s, 0.5)->count()) / 1e3);
        f[1] = std::log1p(static_cast<double>(quantile_inverse_ecdf(s, 0.95)->count()) / 1e3);
      }
      used.push_back(w);
      features.push_back(f);
    }
    const std::size_t k = std::min(options.clusters, used.size());
    std::vector<std::size_t> labels = cluster(features, k);
    // Name regimes by rising median delay: regime-1 is the calmest.
    std::vector<std::size_t> rank(k);
    {
      std::vector<std::pair<double, std::size_t>> centre(k, {0.0, 0});
      std::vector<std::size_t> count(k, 0);
      for (std::size_t i = 0; i < labels.size(); ++i) {
        centre[labels[i]].first += features[i][0];
        ++count[labels[i]];
      }
      for (std::size_t c = 0; c < k; ++c) {
        centre[c].first = count[c] ? centre[c].first / static_cast<double>(count[c]) : INFINITY;
        centre[c].second = c;
      }
      std::sort(centre.begin(), centre.end());
      for (std::size_t r = 0; r < k; ++r) rank[centre[r].second] = r;
    }
    // Every probe with its window's regime, then each change moved to where the capture changed.
    std::vector<const Probe*> order;
    std::vector<std::size_t> label, begin;
    std::vector<bool> contiguous;
    for (std::size_t i = 0; i < used.size(); ++i) {
      begin.push_back(order.size());
      contiguous.push_back(i + 1 < used.size() && used[i + 1] == used[i] + 1);
      order.insert(order.end(), windows[used[i]].begin(), windows[used[i]].end());
      label.resize(order.size(), labels[i]);
    }
    const Refinement refined = refine_changes(order, begin, contiguous, k, label);
    std::vector<std::vector<const Probe*>> members(k);
    std::size_t window = 0;
    for (std::size_t j = 0; j < order.size(); ++j) {
      members[label[j]].push_back(order[j]);
      const bool window_start = window < begin.size() && begin[window] == j;
      if (window_start) ++window;
      if (j > 0 && label[j] == label[j - 1]) continue;
      // A change at a window's first probe starts where the window does (as before refinement, and
      // across an empty window); one inside a window, at the probe.
      const Nanoseconds start =
          window_start ? t0 + options.window * static_cast<std::int64_t>(used[window - 1])
                       : order[j]->sent;
      segments.push_back({start, "regime-" + std::to_string(rank[label[j]] + 1)});
    }
    for (std::size_t c = 0; c < k; ++c) {
      if (members[c].empty()) continue;
      if (!add_phase(build_phase("regime-" + std::to_string(rank[c] + 1), members[c], options,
                                 diagnostics))) {
        return false;
      }
    }
    report.notes.push_back(std::to_string(used.size()) + " windows of " +
                           duration_to_string(options.window) + " clustered into " +
                           std::to_string(k) + " regimes");
    if (refined.moved) {
      report.notes.push_back(
          std::to_string(refined.moved) +
          " regime changes moved off window edges to where the capture changed (by up to " +
          duration_to_string(refined.largest_move) + ")");
    }
    return true;
  }

  bool tail_phases() {
    // Tail events: each becomes a short phase at the moment it happened in the capture.
    const Nanoseconds event_length = std::max<Nanoseconds>(report.interval, 1ms);
    for (const auto& [base, tail_probes] : tails) {
      const std::string name = base + "-tail";
      CompileOptions tail_options = options;
      tail_options.tail_phases = false;
      auto built = build_phase(name, tail_probes, tail_options, diagnostics);
      if (!built) return false;
      built->phase.spec.loss =
          std::monostate{};  // the tail phase replays delays; loss stays with the base
      built->phase.description =
          "delays rarer than the table of " + base + " can hold, replayed when they happened";
      built->report.loss = LossFit{};
      add_phase(std::move(built));
      // Split the time line: tail phase at each event, back to the phase in force after it. An
      // event lasts a probe interval, or until the next event or change of phase if that comes
      // sooner: a stall's probes are often sent less than the median interval apart, and an event
      // that ran into the next one would put the time line out of order (and every later event off
      // its probe).
      std::vector<Span> events;
      for (std::size_t k = 0; k < tail_probes.size(); ++k) {
        const Nanoseconds start = tail_probes[k]->sent;
        if (!events.empty() && events.back().start == start) continue;
        Nanoseconds end = start + event_length;
        const auto later =
            std::find_if(tail_probes.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                         tail_probes.end(), [start](const Probe* q) { return q->sent > start; });
        if (later != tail_probes.end()) end = std::min(end, (*later)->sent);
        const auto change =
            std::upper_bound(segments.begin(), segments.end(), start,
                             [](Nanoseconds v, const Segment& seg) { return v < seg.start; });
        if (change != segments.end()) end = std::min(end, change->start);
        events.push_back({start, end});
      }
      segments = overlay(segments, events, name);
      const auto base_report =
          std::find_if(report.phases.begin(), report.phases.end(),
                       [&base = base](const PhaseReport& r) { return r.name == base; });
      std::string why = "above the top entry of " + base + "'s table";
      if (base_report != report.phases.end() && base_report->whole_table_resolution > 0ns) {
        // The body cut (build_phase): say what one table would have done, and what each part got.
        char ks[32];
        std::snprintf(ks, sizeof ks, "%.3f", base_report->whole_table_ks);
        why = "beyond what " + base +
              "'s table can hold at its resolution (one table for all would have had a " +
              duration_to_string(base_report->whole_table_resolution) +
              " step and moved the law by KS " + ks + "; " + base + " keeps " +
              duration_to_string(base_report->resolution) + ", " + name + " has " +
              duration_to_string(report.phases.back().resolution) + ")";
      }
      report.notes.push_back(std::to_string(tail_probes.size()) + " delays " + why +
                             " kept as phase " + name + ", replayed when they happened");
    }
    return true;
  }

  // CompileOptions::spikes: a spike phase placed periodically.
  bool spike_phases() {
    Phase spike = profile.phases.front();
    spike.name = "spike";
    spike.description = "+" + duration_to_string(options.spikes->extra) + " for " +
                        std::to_string(options.spikes->packets) + " packets every " +
                        duration_to_string(options.spikes->every);
    spike.spec.delay.latency += options.spikes->extra;
    const Nanoseconds spike_length = std::max<Nanoseconds>(
        report.interval * static_cast<std::int64_t>(options.spikes->packets), 1ms);
    if (spike_length >= options.spikes->every) {
      diagnostics.push_back({"spikes", "a spike of " + duration_to_string(spike_length) +
                                           " does not fit in its period of " +
                                           duration_to_string(options.spikes->every)});
      return false;
    }
    profile.phases.push_back(spike);
    PhaseReport r = report.phases.front();
    r.name = "spike";
    report.phases.push_back(r);
    if (segments.size() <= 1) {
      profile.schedule =
          Schedule{{{"capture", options.spikes->every - spike_length}, {"spike", spike_length}},
                   true,
                   std::nullopt};
      segments.clear();
    } else {
      // Tail events made a time line: the spikes go on it, at the same places in each period as in
      // the plain schedule (the last spike_length of every period), over whatever phase is in force
      // then.
      const Nanoseconds origin = segments.front().start;
      const Nanoseconds end = probes.back().sent + std::max<Nanoseconds>(report.interval, 1ms);
      std::vector<Span> spikes;
      for (Nanoseconds t = origin + options.spikes->every - spike_length; t < end;
           t += options.spikes->every) {
        spikes.push_back({t, t + spike_length});
      }
      segments = overlay(segments, spikes, "spike");
      report.notes.push_back(std::to_string(spikes.size()) +
                             " spikes placed on the capture's time line");
    }
    return true;
  }

  bool schedule_from_segments() {
    // The time line becomes the schedule: adjacent segments of one phase merge; the last one lasts
    // to the capture's end.
    if (segments.size() > 1) {
      Schedule schedule;
      schedule.loop = true;
      const Nanoseconds end = probes.back().sent + std::max<Nanoseconds>(report.interval, 1ms);
      // A step lasts at least 1 ms (the profile format's floor). A shorter segment gives its time
      // to the next one, which then starts that much early, instead of being stretched to 1 ms:
      // stretching would move every later step by the difference, and the tail events after a few
      // such gaps (between stall probes sent just over an interval apart) would no longer meet
      // their probes.
      Nanoseconds pending{0};
      for (std::size_t i = 0; i < segments.size(); ++i) {
        const Nanoseconds next = i + 1 < segments.size() ? segments[i + 1].start : end;
        const Nanoseconds length = next - segments[i].start + pending;
        if (length.count() <= 0) continue;
        pending = 0ns;
        if (length < 1ms && i + 1 < segments.size()) {
          pending = length;
          continue;
        }
        if (!schedule.steps.empty() && schedule.steps.back().phase == segments[i].phase) {
          schedule.steps.back().duration += length;
        } else {
          schedule.steps.push_back({segments[i].phase, length});
        }
      }
      for (auto& step : schedule.steps) step.duration = std::max<Nanoseconds>(step.duration, 1ms);
      if (report.replay) {
        schedule.loop = options.replay_loop;
        schedule.replay_window = report.replay->window;
      }
      if (schedule.steps.size() > kMaxScheduleSteps) {
        diagnostics.push_back(
            {"schedule", std::to_string(schedule.steps.size()) +
                             " steps exceed the profile limit of 10000; use longer windows or "
                             "fewer regimes"});
        return false;
      }
      profile.schedule = std::move(schedule);
    }
    return true;
  }
};

}  // namespace

Nanoseconds max_phase_delay(const NetemSpec& spec) {
  if (spec.delay.distribution && !spec.delay.distribution->empty() && spec.delay.jitter.count()) {
    const auto top =
        *std::max_element(spec.delay.distribution->begin(), spec.delay.distribution->end());
    return Nanoseconds(netem_table_delay_ns(
        spec.delay.latency.count(), static_cast<std::int32_t>(spec.delay.jitter.count()), top));
  }
  return spec.delay.latency + spec.delay.jitter;
}

CompileResult compile_profile(const std::vector<CaptureInput>& captures,
                              const CompileOptions& options) {
  CompileResult result;
  if (captures.empty()) {
    result.diagnostics.push_back({"", "no capture given"});
    return result;
  }
  check_options(options, result.diagnostics);
  if (!result.diagnostics.empty()) return result;

  Compilation c{options, result.report, result.diagnostics, merge(captures, result.report)};
  c.report.probes = c.probes.size();
  if (!c.to_one_way_delays(captures)) return result;
  c.profile.name = options.name;
  c.profile.description = options.description;
  c.profile.reorder = options.reorder;
  c.set_provenance(captures);

  std::vector<const Probe*> all;
  all.reserve(c.probes.size());
  for (const auto& p : c.probes) all.push_back(&p);
  bool built = false;
  if (options.regimes == RegimeMode::kSingle) {
    built = c.single_phase(all);
  } else if (options.regimes == RegimeMode::kPercentiles) {
    built = c.percentile_phases(all);
  } else if (options.regimes == RegimeMode::kReplay) {
    built = c.replay_phases();
  } else {
    built = c.regime_phases();
  }
  if (!built || !c.tail_phases()) return result;
  if (options.spikes && options.regimes == RegimeMode::kSingle && !c.spike_phases()) return result;
  if (!c.schedule_from_segments()) return result;

  Profile& profile = c.profile;
  Diagnostics& diagnostics = result.diagnostics;
  for (auto& phase : profile.phases) {
    if (!options.reorder && phase.spec.rate.rate.value == 0)
      phase.spec.rate.rate = kOrderKeepingRate;
    phase.spec.limit = queue_limit(max_phase_delay(phase.spec), options.packet_rate);
    if (std::holds_alternative<std::monostate>(phase.spec.loss)) phase.spec.ecn = false;
  }
  std::sort(profile.phases.begin(), profile.phases.end(),
            [](const Phase& a, const Phase& b) { return a.name < b.name; });
  for (auto& d : validate(profile)) diagnostics.push_back(std::move(d));
  if (!diagnostics.empty()) return result;
  result.profile = std::move(profile);
  return result;
}

}  // namespace shaper
