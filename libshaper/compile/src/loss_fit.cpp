#include "shaper/loss_fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <type_traits>
#include <utility>
#include <vector>

#include "shaper/kernel_units.hpp"
#include "shaper/netem_simulator.hpp"
#include "shaper/statistics.hpp"

namespace shaper {

namespace {

Probability clamp_probability(double p) {
  return Probability::checked(std::clamp(p, 0.0, 1.0));
}

// A hidden Markov model with binary emissions (lost / delivered), fitted by Baum–Welch with
// scaling. Transitions fixed at zero stay zero, which is how netem's 4-state structure is imposed;
// emissions can be fixed (4-state: states 3 and 4 always lose, 1 and 2 never) or free
// (Gilbert–Elliott).
template <std::size_t N>
struct Hmm {
  std::array<std::array<double, N>, N> a{};  // a[i][j] = P(next = j | now = i)
  std::array<double, N> loss{};              // P(lost | state)
  std::array<double, N> initial{};
  bool fit_emissions = true;
};

// Which products of a Baum–Welch pass can be non-zero, known when the model is built: the
// transitions not fixed at zero, and for each observation (0 = delivered, 1 = lost) the states
// whose emission is not exactly zero. A transition fixed at zero stays exactly zero through every
// pass (its expected count is a sum of zeros), and fixed emissions do not change.
template <std::size_t N>
struct Structure {
  std::array<std::array<bool, N>, N> transition;
  std::array<std::array<bool, N>, 2> emits;
};

template <std::size_t N>
constexpr Structure<N> dense() {
  Structure<N> s{};
  for (auto& row : s.transition) row.fill(true);
  for (auto& row : s.emits) row.fill(true);
  return s;
}

// netem's 4-state chain as fit_four_state builds it (states 0 and 1 deliver, 2 and 3 lose; 0 → 1
// and 3 → anything but 0 never happen, among others): 5 of the 16 products remain for a delivered
// packet, 4 for a lost one.
constexpr Structure<4> kFourStateStructure{
    {{{true, false, true, true},
      {false, true, true, false},
      {true, true, true, false},
      {true, false, false, false}}},
    {{{true, true, false, false}, {false, false, true, true}}}};

// The work of one pass, which dominates compiling a long capture (up to 60 passes over 250 000
// packets for each of two models), cut without changing a single bit of the result: the
// observations as bytes rather than std::vector<bool>'s bits, the forward variables' memory reused
// between passes, and the products that `S` says are zero skipped at compile time. Skipping is
// exact because every quantity is finite and non-negative (a finite value times +0.0 is +0.0, and
// adding +0.0 to a non-negative sum leaves it unchanged), and the products that remain are computed
// in the same order and association as the dense loops did. The profiles compiled from the fixture
// captures and from the benchmark's capture kept their digests (docs/benchmarks.md).
template <std::size_t N>
struct BaumWelchWork {
  std::vector<std::uint8_t> lost;            // the observations, 1 = lost
  std::vector<std::array<double, N>> alpha;  // scaled forward variables, N per packet
  std::vector<double> scale;                 // their scale factor per packet
};

template <std::size_t N>
std::array<double, N> emissions(const Hmm<N>& m, bool lost) {
  std::array<double, N> e;
  for (std::size_t j = 0; j < N; ++j) e[j] = lost ? m.loss[j] : 1.0 - m.loss[j];
  return e;
}

// Calls f(std::integral_constant<std::size_t, i>{}) for i = 0 .. N - 1 in that order, unrolled at
// compile time so that the tests of the structure vanish from the loops (GCC does not unroll the
// plain loops, and then tests the structure at every step).
template <std::size_t N, class F>
void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(std::integral_constant<std::size_t, I>{}), ...);
  }
  (std::make_index_sequence<N>{});
}

// The forward variables at t > 0 for observation `kLost`; returns their sum before scaling.
template <std::size_t N, Structure<N> S, bool kLost>
double forward(const Hmm<N>& m, const std::array<double, N>& emission,
               const std::array<double, N>& previous, std::array<double, N>& alpha) {
  double sum = 0;
  for_each_index<N>([&](auto j) {
    if constexpr (!S.emits[kLost][j]) {
      alpha[j] = 0;
    } else {
      double v = 0;
      for_each_index<N>([&](auto i) {
        if constexpr (S.transition[i][j]) v += previous[i] * m.a[i][j];
      });
      v *= emission[j];
      alpha[j] = v;
      sum += v;
    }
  });
  return sum;
}

// One step back from t to t - 1 for observation `kLost` at t: accumulates xi(t-1, i, j) ∝
// alpha[t-1][i] a[i][j] e_j(obs[t]) beta[j] into xi_sum and moves beta to t - 1. `weight` holds
// a[i][j] × e_j(kLost), as the dense code computed it.
template <std::size_t N, Structure<N> S, bool kLost>
void backward(const std::array<std::array<double, N>, N>& weight,
              const std::array<double, N>& alpha_before, double scale, std::array<double, N>& beta,
              std::array<std::array<double, N>, N>& xi_sum) {
  std::array<double, N> next_beta{};
  double xi_norm = 0;
  std::array<std::array<double, N>, N> xi{};
  for_each_index<N>([&](auto i) {
    for_each_index<N>([&](auto j) {
      if constexpr (S.transition[i][j] && S.emits[kLost][j]) {
        const double e = weight[i][j] * beta[j];
        next_beta[i] += e;
        xi[i][j] = alpha_before[i] * e;
        xi_norm += xi[i][j];
      }
    });
  });
  if (xi_norm > 0) {
    for_each_index<N>([&](auto i) {
      for_each_index<N>([&](auto j) {
        if constexpr (S.transition[i][j] && S.emits[kLost][j]) xi_sum[i][j] += xi[i][j] / xi_norm;
      });
    });
  }
  for (std::size_t i = 0; i < N; ++i) beta[i] = next_beta[i] / scale;
}

// One Baum–Welch iteration; returns the log-likelihood of the sequence under the model before the
// update. Memory: the scaled forward variables, N doubles per packet, in `work`.
template <std::size_t N, Structure<N> S>
double baum_welch_step(Hmm<N>& m, BaumWelchWork<N>& work) {
  const std::vector<std::uint8_t>& obs = work.lost;
  const std::size_t n = obs.size();
  auto& alpha = work.alpha;
  auto& scale = work.scale;
  alpha.resize(n);
  scale.resize(n);
  const std::array<std::array<double, N>, 2> emission{emissions(m, false), emissions(m, true)};
  double log_likelihood = 0;
  // The scale factors repeat exactly through a long run of deliveries (the forward variables settle
  // on a fixed point), so the last logarithm is kept: the same argument gives the same log.
  double last_sum = -1, last_log = 0;
  for (std::size_t t = 0; t < n; ++t) {
    double sum = 0;
    if (t == 0) {
      for (std::size_t j = 0; j < N; ++j) {
        alpha[0][j] = m.initial[j] * emission[obs[0]][j];
        sum += alpha[0][j];
      }
    } else if (obs[t]) {
      sum = forward<N, S, true>(m, emission[1], alpha[t - 1], alpha[t]);
    } else {
      sum = forward<N, S, false>(m, emission[0], alpha[t - 1], alpha[t]);
    }
    if (sum <= 0) sum = 1e-300;  // an impossible observation under the model: keep going, penalised
    for (auto& v : alpha[t]) v /= sum;
    scale[t] = sum;
    if (sum != last_sum) {
      last_sum = sum;
      last_log = std::log(sum);
    }
    log_likelihood += last_log;
  }
  // Backward pass, accumulating expected transitions and emissions on the fly.
  std::array<std::array<std::array<double, N>, N>, 2> weight;
  for (std::size_t o = 0; o < 2; ++o) {
    for (std::size_t i = 0; i < N; ++i) {
      for (std::size_t j = 0; j < N; ++j) weight[o][i][j] = m.a[i][j] * emission[o][j];
    }
  }
  std::array<std::array<double, N>, N> xi_sum{};
  std::array<double, N> gamma_sum{}, gamma_lost{};
  std::array<double, N> beta;
  beta.fill(1.0);
  for (std::size_t t = n; t-- > 0;) {
    double norm = 0;
    std::array<double, N> gamma;
    for (std::size_t i = 0; i < N; ++i) {
      gamma[i] = alpha[t][i] * beta[i];
      norm += gamma[i];
    }
    if (norm > 0) {
      for (std::size_t i = 0; i < N; ++i) {
        const double g = gamma[i] / norm;
        gamma_sum[i] += g;
        if (obs[t]) gamma_lost[i] += g;
      }
    }
    if (t == 0) break;
    if (obs[t]) {
      backward<N, S, true>(weight[1], alpha[t - 1], scale[t], beta, xi_sum);
    } else {
      backward<N, S, false>(weight[0], alpha[t - 1], scale[t], beta, xi_sum);
    }
  }
  for (std::size_t i = 0; i < N; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < N; ++j) row += xi_sum[i][j];
    if (row > 0) {
      for (std::size_t j = 0; j < N; ++j) m.a[i][j] = xi_sum[i][j] / row;
    }
    if (m.fit_emissions && gamma_sum[i] > 0)
      m.loss[i] = std::clamp(gamma_lost[i] / gamma_sum[i], 0.0, 1.0);
  }
  return log_likelihood;
}

// `S` must hold for `m`: a product it calls zero must be exactly zero, or skipping it would change
// the fit; a broken promise here is a bug in the caller, so it aborts.
template <std::size_t N, Structure<N> S>
void baum_welch(Hmm<N>& m, const std::vector<bool>& obs, int iterations) {
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = 0; j < N; ++j) {
      if (!S.transition[i][j] && m.a[i][j] != 0) std::abort();
    }
    if (m.fit_emissions
            ? !(S.emits[0][i] && S.emits[1][i])
            : (!S.emits[0][i] && m.loss[i] != 1) || (!S.emits[1][i] && m.loss[i] != 0)) {
      std::abort();
    }
  }
  BaumWelchWork<N> work;
  work.lost.assign(obs.begin(), obs.end());
  double previous = -INFINITY;
  for (int k = 0; k < iterations; ++k) {
    const double ll = baum_welch_step<N, S>(m, work);
    // Stop once an iteration gains less than a millionth of the likelihood's size.
    if (std::isfinite(previous) && ll - previous < 1e-6 * std::fabs(ll)) break;
    previous = ll;
  }
}

// Baum–Welch needs one forward variable per state and packet, and dozens of passes; beyond this
// many packets (about 7 hours at 10 Hz) the fit runs on the longest stretch that holds the most
// losses, which keeps memory and time bounded (the transition counts of the simple Gilbert fit
// always use the whole sequence).
constexpr std::size_t kMaxBaumWelchPackets = 250'000;

std::vector<bool> fitting_window(const std::vector<bool>& lost) {
  if (lost.size() <= kMaxBaumWelchPackets) return lost;
  std::size_t best = 0, count = 0, best_count = 0;
  for (std::size_t i = 0; i < lost.size(); ++i) {
    count += lost[i];
    if (i >= kMaxBaumWelchPackets) count -= lost[i - kMaxBaumWelchPackets];
    if (i + 1 >= kMaxBaumWelchPackets && count > best_count) {
      best_count = count;
      best = i + 1 - kMaxBaumWelchPackets;
    }
  }
  return std::vector<bool>(lost.begin() + static_cast<std::ptrdiff_t>(best),
                           lost.begin() + static_cast<std::ptrdiff_t>(best + kMaxBaumWelchPackets));
}

double relative(double a, double b) {
  return b > 0 ? std::fabs(a - b) / b : std::fabs(a - b);
}

// W1 between two run-length histograms (index = length), divided by the reference's mean.
double histogram_w1(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b,
                    double mean_b) {
  double total_a = 0, total_b = 0;
  for (auto v : a) total_a += static_cast<double>(v);
  for (auto v : b) total_b += static_cast<double>(v);
  if (total_a == 0 || total_b == 0) return (total_a == total_b) ? 0.0 : 1.0;
  double fa = 0, fb = 0, w1 = 0;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t k = 0; k + 1 < n; ++k) {
    fa += k < a.size() ? static_cast<double>(a[k]) / total_a : 0;
    fb += k < b.size() ? static_cast<double>(b[k]) / total_b : 0;
    w1 += std::fabs(fa - fb);
  }
  return mean_b > 0 ? w1 / mean_b : w1;
}

}  // namespace

std::string to_string(LossModelKind kind) {
  switch (kind) {
    case LossModelKind::kNone:
      return "none";
    case LossModelKind::kBernoulli:
      return "bernoulli";
    case LossModelKind::kGilbert:
      return "gilbert";
    case LossModelKind::kGilbertElliott:
      return "gilbert-elliott";
    case LossModelKind::kFourState:
      return "4-state";
  }
  return "?";
}

namespace {

// The fitters from what fit_loss_model computes once for all of them: the capture's loss statistics
// and the stretch Baum–Welch runs on (fitting_window).

GilbertElliottLoss simple_gilbert(const LossStatistics& s) {
  // netem decides a packet's loss by the state it arrives in and then moves the chain, so with
  // loss_bad = 1 and loss_good = 0 the loss sequence itself is the Markov chain: p and r are its
  // transition frequencies (reference §2).
  GilbertElliottLoss out;
  out.p = clamp_probability(s.delivered_followed ? static_cast<double>(s.delivered_to_lost) /
                                                       static_cast<double>(s.delivered_followed)
                                                 : 0.0);
  out.r = clamp_probability(s.lost_followed ? static_cast<double>(s.lost_to_delivered) /
                                                  static_cast<double>(s.lost_followed)
                                            : 1.0);
  out.loss_bad = Probability::one();
  out.loss_good = Probability::zero();
  return out;
}

GilbertElliottLoss gilbert_elliott(const GilbertElliottLoss& start, const std::vector<bool>& obs,
                                   int iterations) {
  Hmm<2> m;
  // State 0 = Good, 1 = Bad; started from the simple Gilbert fit, with a little loss in Good and a
  // little delivery in Bad so that EM can move them.
  const double p = std::clamp(start.p.value(), 1e-4, 0.5);
  const double r = std::clamp(start.r.value(), 1e-3, 0.999);
  m.a = {{{1 - p, p}, {r, 1 - r}}};
  m.loss = {0.001, 0.95};
  m.initial = {1.0, 0.0};  // netem starts in Good
  baum_welch<2, dense<2>()>(m, obs, iterations);
  if (m.loss[0] > m.loss[1]) {  // labels swapped: Good is the state that loses less
    std::swap(m.a[0][0], m.a[1][1]);
    std::swap(m.a[0][1], m.a[1][0]);
    std::swap(m.loss[0], m.loss[1]);
  }
  GilbertElliottLoss out;
  out.p = clamp_probability(m.a[0][1]);
  out.r = clamp_probability(m.a[1][0]);
  out.loss_good = clamp_probability(m.loss[0]);
  out.loss_bad = clamp_probability(m.loss[1]);
  return out;
}

FourStateLoss four_state(const LossStatistics& s, const std::vector<bool>& obs, int iterations) {
  // States (netem's numbering less one): 0 = delivered in gap (1), 1 = delivered in burst (2),
  // 2 = lost in burst (3), 3 = isolated loss in gap (4). A packet's fate is that of the state it
  // moves into; 4 always returns to 1.
  const double rate = s.loss_rate.value_or(0);
  const double isolated =
      s.burst_lengths.size() > 1 && s.packets
          ? static_cast<double>(s.burst_lengths[1]) / static_cast<double>(s.packets)
          : 0.0;
  const double p13 = std::clamp(rate * 0.5, 1e-4, 0.3);
  const double p14 = std::clamp(isolated * 0.5, 1e-4, 0.3);
  const double p31 = std::clamp(s.mean_burst ? 1.0 / *s.mean_burst : 0.5, 0.01, 0.9);
  const double p32 = std::min(0.1, (1 - p31) / 2);
  const double p23 = 0.3;
  Hmm<4> m;
  m.a = {{{1 - p13 - p14, 0, p13, p14},
          {0, 1 - p23, p23, 0},
          {p31, p32, 1 - p31 - p32, 0},
          {1, 0, 0, 0}}};
  m.loss = {0, 0, 1, 1};
  m.fit_emissions = false;
  // Before its first packet netem is in state 1 and the first packet already moves the chain.
  m.initial = m.a[0];
  baum_welch<4, kFourStateStructure>(m, obs, iterations);
  FourStateLoss out;
  out.p13 = clamp_probability(m.a[0][2]);
  out.p14 = clamp_probability(m.a[0][3]);
  out.p23 = clamp_probability(m.a[1][2]);
  out.p31 = clamp_probability(m.a[2][0]);
  out.p32 = clamp_probability(m.a[2][1]);
  return out;
}

}  // namespace

GilbertElliottLoss fit_simple_gilbert(const std::vector<bool>& lost) {
  return simple_gilbert(loss_statistics(lost));
}

GilbertElliottLoss fit_gilbert_elliott(const std::vector<bool>& lost, int iterations) {
  return gilbert_elliott(fit_simple_gilbert(lost), fitting_window(lost), iterations);
}

FourStateLoss fit_four_state(const std::vector<bool>& lost, int iterations) {
  return four_state(loss_statistics(lost), fitting_window(lost), iterations);
}

std::vector<bool> simulate_loss(const LossModel& model, std::size_t packets, std::uint64_t seed) {
  using namespace netem_arith;
  Pcg32 rng(seed);
  std::vector<bool> out(packets, false);
  if (const auto* random = std::get_if<RandomLoss>(&model)) {
    CorrelatedRandom state{kernel_units::probability(random->correlation), rng()};
    const std::uint32_t p = kernel_units::probability(random->probability);
    for (std::size_t i = 0; i < packets; ++i) out[i] = p != 0 && p >= get_crandom(state, rng());
  } else if (const auto* ge = std::get_if<GilbertElliottLoss>(&model)) {
    GilbertElliottChain chain;
    chain.p = kernel_units::probability(ge->p);
    chain.r = kernel_units::probability(ge->r);
    chain.h = kernel_units::ge_h_from_loss_bad(ge->loss_bad);
    chain.k1 = kernel_units::ge_k1_from_loss_good(ge->loss_good);
    for (std::size_t i = 0; i < packets; ++i) {
      const std::uint32_t transition = rng();
      out[i] = loss_gilb_ell(chain, transition, rng());
    }
  } else if (const auto* gi = std::get_if<FourStateLoss>(&model)) {
    FourStateChain chain;
    chain.p13 = kernel_units::probability(gi->p13);
    chain.p31 = kernel_units::probability(gi->p31);
    chain.p32 = kernel_units::probability(gi->p32);
    chain.p14 = kernel_units::probability(gi->p14);
    chain.p23 = kernel_units::probability(gi->p23);
    for (std::size_t i = 0; i < packets; ++i)
      out[i] = loss_4state(chain, rng(), FourStateComparisons::kStrictGaps);
  }
  return out;
}

LossFit fit_loss_model(const std::vector<bool>& lost, std::uint64_t seed) {
  LossFit fit;
  const LossStatistics capture = loss_statistics(lost);
  fit.capture_loss_rate = capture.loss_rate.value_or(0);
  fit.capture_mean_burst = capture.mean_burst.value_or(0);
  if (capture.lost == 0) {
    fit.chosen = LossCandidate{LossModelKind::kNone, std::monostate{}, 0.0, 0.0, 0.0, 0};
    fit.candidates = {fit.chosen};
    return fit;
  }
  // Score on at least 200 000 simulated packets, so that the model's own sampling noise is small
  // next to the differences being judged. Every model is simulated from the same seed.
  const std::size_t packets = std::max<std::size_t>(lost.size(), 200'000);
  const auto scored = [&](LossModelKind kind, LossModel model, std::size_t parameters) {
    const LossStatistics sim = loss_statistics(simulate_loss(model, packets, seed));
    LossCandidate c;
    c.kind = kind;
    c.model = std::move(model);
    c.parameters = parameters;
    c.loss_rate = sim.loss_rate.value_or(0);
    c.mean_burst = sim.mean_burst.value_or(0);
    c.score = relative(c.loss_rate, fit.capture_loss_rate) +
              histogram_w1(sim.burst_lengths, capture.burst_lengths, fit.capture_mean_burst) +
              histogram_w1(sim.gap_lengths, capture.gap_lengths, capture.mean_gap.value_or(0));
    return c;
  };
  // The 4-state fit (Baum–Welch) is the compile's largest piece of arithmetic and needs nothing of
  // the other models: it starts at once on a thread of its own (docs/benchmarks.md). The statistics
  // and the fitting window are computed once for every model.
  std::vector<bool> window;
  std::future<LossCandidate> fitted_four_state;
  if (capture.lost >= 10) {
    window = fitting_window(lost);
    fitted_four_state = std::async(std::launch::async, [&] {
      return scored(LossModelKind::kFourState, four_state(capture, window, kBaumWelchIterations),
                    5);
    });
  }
  const GilbertElliottLoss gilbert = simple_gilbert(capture);
  fit.candidates.push_back(
      scored(LossModelKind::kBernoulli,
             RandomLoss{clamp_probability(fit.capture_loss_rate), Probability::zero()}, 1));
  fit.candidates.push_back(scored(LossModelKind::kGilbert, gilbert, 2));
  if (fitted_four_state.valid()) {
    fit.candidates.push_back(scored(LossModelKind::kGilbertElliott,
                                    gilbert_elliott(gilbert, window, kBaumWelchIterations), 4));
    fit.candidates.push_back(fitted_four_state.get());
  }
  std::sort(fit.candidates.begin(), fit.candidates.end(),
            [](const LossCandidate& a, const LossCandidate& b) { return a.score < b.score; });
  const double best = fit.candidates.front().score;
  // The simplest model that is nearly as good as the best: fewer parameters generalise better.
  fit.chosen = fit.candidates.front();
  for (const auto& c : fit.candidates) {
    if (c.score <= best * 1.10 + 0.02 && c.parameters < fit.chosen.parameters) fit.chosen = c;
  }
  return fit;
}

}  // namespace shaper
