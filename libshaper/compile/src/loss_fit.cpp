#include "shaper/loss_fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
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

// A hidden Markov model with binary emissions (lost / delivered) and free emissions, fitted by
// Baum–Welch with scaling, packet by packet: Gilbert–Elliott's two states. (netem's 4-state chain
// has a structure that lets its fit run over runs of deliveries instead: four_state_runs below.)
template <std::size_t N>
struct Hmm {
  std::array<std::array<double, N>, N> a{};  // a[i][j] = P(next = j | now = i)
  std::array<double, N> loss{};              // P(lost | state)
  std::array<double, N> initial{};
};

// The work of one pass: the observations as bytes rather than std::vector<bool>'s bits, and the
// forward variables' memory reused between passes.
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
// compile time (GCC does not unroll the plain loops).
template <std::size_t N, class F>
void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(std::integral_constant<std::size_t, I>{}), ...);
  }
  (std::make_index_sequence<N>{});
}

// The forward variables at t > 0 for an observation emitted with `emission`; returns their sum
// before scaling.
template <std::size_t N>
double forward(const Hmm<N>& m, const std::array<double, N>& emission,
               const std::array<double, N>& previous, std::array<double, N>& alpha) {
  double sum = 0;
  for_each_index<N>([&](auto j) {
    double v = 0;
    for_each_index<N>([&](auto i) { v += previous[i] * m.a[i][j]; });
    v *= emission[j];
    alpha[j] = v;
    sum += v;
  });
  return sum;
}

// One step back from t to t - 1: accumulates xi(t-1, i, j) ∝ alpha[t-1][i] a[i][j] e_j(obs[t])
// beta[j] into xi_sum and moves beta to t - 1. `weight` holds a[i][j] × e_j(obs[t]).
template <std::size_t N>
void backward(const std::array<std::array<double, N>, N>& weight,
              const std::array<double, N>& alpha_before, double scale, std::array<double, N>& beta,
              std::array<std::array<double, N>, N>& xi_sum) {
  std::array<double, N> next_beta{};
  double xi_norm = 0;
  std::array<std::array<double, N>, N> xi{};
  for_each_index<N>([&](auto i) {
    for_each_index<N>([&](auto j) {
      const double e = weight[i][j] * beta[j];
      next_beta[i] += e;
      xi[i][j] = alpha_before[i] * e;
      xi_norm += xi[i][j];
    });
  });
  if (xi_norm > 0) {
    for_each_index<N>(
        [&](auto i) { for_each_index<N>([&](auto j) { xi_sum[i][j] += xi[i][j] / xi_norm; }); });
  }
  for (std::size_t i = 0; i < N; ++i) beta[i] = next_beta[i] / scale;
}

// One Baum–Welch iteration; returns the log-likelihood of the sequence under the model before the
// update. Memory: the scaled forward variables, N doubles per packet, in `work`.
template <std::size_t N>
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
    } else {
      sum = forward<N>(m, emission[obs[t]], alpha[t - 1], alpha[t]);
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
    backward<N>(weight[obs[t]], alpha[t - 1], scale[t], beta, xi_sum);
  }
  for (std::size_t i = 0; i < N; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < N; ++j) row += xi_sum[i][j];
    if (row > 0) {
      for (std::size_t j = 0; j < N; ++j) m.a[i][j] = xi_sum[i][j] / row;
    }
    if (gamma_sum[i] > 0) m.loss[i] = std::clamp(gamma_lost[i] / gamma_sum[i], 0.0, 1.0);
  }
  return log_likelihood;
}

// Baum–Welch's stopping rule, for both fits: an iteration gained less than a millionth of the
// likelihood's size.
bool converged(double previous, double log_likelihood) {
  return std::isfinite(previous) && log_likelihood - previous < 1e-6 * std::fabs(log_likelihood);
}

template <std::size_t N>
void baum_welch(Hmm<N>& m, const std::vector<bool>& obs, int iterations) {
  BaumWelchWork<N> work;
  work.lost.assign(obs.begin(), obs.end());
  double previous = -INFINITY;
  for (int k = 0; k < iterations; ++k) {
    const double ll = baum_welch_step<N>(m, work);
    if (converged(previous, ll)) break;
    previous = ll;
  }
}

// netem's 4-state chain, fitted by Baum–Welch over runs rather than packets. States (netem's
// numbering less one): 0 = delivered in gap, 1 = delivered in burst, 2 = lost in burst, 3 =
// isolated loss; 0 and 1 always deliver, 2 and 3 always lose, and 0 → 1, 1 → 0 never happen. So
// through a run of deliveries the chain stays in the state it entered the run in, and everything a
// run of L + 1 deliveries contributes has a closed form in a00^L and a11^L:
//  - forward: alpha at the run's last packet is alpha at its first times a_ii^L (normalised), and
//    the product of the L scale factors is their sum, sum_i alpha_i a_ii^L;
//  - backward: beta at the first packet is beta at the last times a_ii^L;
//  - each of the L transitions inside the run is i → i with the same posterior weight
//    alpha_first[i] beta_last[i] a_ii^L (normalised over i), so it adds L times that to xi[i][i].
// A pass costs one step per loss and per run instead of one per packet (a 250 000-packet window
// with 1 % loss: about 5 000 steps, not 250 000), and computes the per-packet pass's sums in
// another order: the fitted probabilities agree with it to about 1e-12 (loss_fit_test compares them
// with a per-packet forward–backward). Powers are taken in logarithms, so a run of 10^5 packets
// neither underflows nor loses its weight.
namespace four_state_runs {

using Vector = std::array<double, 4>;
using Matrix = std::array<std::array<double, 4>, 4>;

constexpr Vector kLoses{0, 0, 1, 1};  // P(lost | state)

// The observations as items: one per lost packet, one per run of deliveries (`length` packets).
struct Item {
  bool lost = false;
  std::size_t length = 1;
};

std::vector<Item> items_of(const std::vector<bool>& obs) {
  std::vector<Item> items;
  for (std::size_t t = 0; t < obs.size(); ++t) {
    if (obs[t]) {
      items.push_back(Item{true, 1});
    } else if (!items.empty() && !items.back().lost) {  // the run of deliveries goes on
      ++items.back().length;
    } else {
      items.push_back(Item{false, 1});
    }
  }
  return items;
}

double emission(std::size_t j, bool lost) {
  return lost ? kLoses[j] : 1.0 - kLoses[j];
}

// Normalises v to sum 1; returns the sum before (1e-300 when it was not positive, as the
// per-packet pass penalises an observation the model calls impossible).
double normalise(Vector& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  if (sum <= 0) sum = 1e-300;
  for (double& x : v) x /= sum;
  return sum;
}

// v[i] × a[i][i]^length for the delivering states 0 and 1 (the others are zero through a run),
// normalised; returns the logarithm of the sum before normalising (-inf when it is zero).
double through_run(Vector& v, const Matrix& a, std::size_t length) {
  std::array<double, 2> log_w{};
  double top = -INFINITY;
  for (std::size_t i = 0; i < 2; ++i) {
    log_w[i] = v[i] > 0 && a[i][i] > 0
                   ? std::log(v[i]) + static_cast<double>(length) * std::log(a[i][i])
                   : -INFINITY;
    top = std::max(top, log_w[i]);
  }
  v = Vector{};
  if (top == -INFINITY) return -INFINITY;
  double sum = 0;
  for (std::size_t i = 0; i < 2; ++i) sum += v[i] = std::exp(log_w[i] - top);
  for (std::size_t i = 0; i < 2; ++i) v[i] /= sum;
  return top + std::log(sum);
}

// One pass; returns the log-likelihood before the update of `a`.
double pass(Matrix& a, const Vector& initial, const std::vector<Item>& items,
            std::vector<std::array<Vector, 2>>& alpha) {
  // Forward: alpha at each item's first and last packet.
  alpha.resize(items.size());
  double log_likelihood = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Item& item = items[k];
    Vector v{};
    for (std::size_t j = 0; j < 4; ++j) {
      double x = 0;
      if (k == 0) {
        x = initial[j];
      } else {
        for (std::size_t i = 0; i < 4; ++i) x += alpha[k - 1][1][i] * a[i][j];
      }
      v[j] = x * emission(j, item.lost);
    }
    log_likelihood += std::log(normalise(v));
    alpha[k][0] = v;
    if (item.length > 1) {
      const double log_sum = through_run(v, a, item.length - 1);
      log_likelihood +=
          log_sum == -INFINITY ? static_cast<double>(item.length - 1) * std::log(1e-300) : log_sum;
    }
    alpha[k][1] = v;
  }
  // Backward from the last packet, accumulating the expected transitions.
  Matrix xi_sum{};
  Vector beta;
  beta.fill(1.0);
  for (std::size_t k = items.size(); k-- > 0;) {
    const Item& item = items[k];
    if (item.length > 1) {
      const std::size_t inside = item.length - 1;
      Vector w{};
      for (std::size_t i = 0; i < 2; ++i) w[i] = alpha[k][0][i] * beta[i];
      if (through_run(w, a, inside) != -INFINITY) {
        for (std::size_t i = 0; i < 2; ++i) xi_sum[i][i] += static_cast<double>(inside) * w[i];
      }
      if (through_run(beta, a, inside) == -INFINITY) beta = Vector{};
    }
    if (k == 0) break;
    // The transition from the previous item's last packet into this item's first.
    Matrix xi{};
    Vector next{};
    double xi_norm = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      for (std::size_t j = 0; j < 4; ++j) {
        const double e = a[i][j] * emission(j, item.lost) * beta[j];
        next[i] += e;
        xi[i][j] = alpha[k - 1][1][i] * e;
        xi_norm += xi[i][j];
      }
    }
    if (xi_norm > 0) {
      for (std::size_t i = 0; i < 4; ++i) {
        for (std::size_t j = 0; j < 4; ++j) xi_sum[i][j] += xi[i][j] / xi_norm;
      }
    }
    double next_sum = 0;
    for (const double x : next) next_sum += x;
    if (next_sum > 0) {
      for (double& x : next) x /= next_sum;
    }
    beta = next;
  }
  for (std::size_t i = 0; i < 4; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < 4; ++j) row += xi_sum[i][j];
    if (row > 0) {
      for (std::size_t j = 0; j < 4; ++j) a[i][j] = xi_sum[i][j] / row;
    }
  }
  return log_likelihood;
}

}  // namespace four_state_runs

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
  baum_welch<2>(m, obs, iterations);
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
  FourStateLoss start;
  start.p13 = clamp_probability(p13);
  start.p14 = clamp_probability(p14);
  start.p23 = clamp_probability(p23);
  start.p31 = clamp_probability(p31);
  start.p32 = clamp_probability(p32);
  return refine_four_state(start, obs, iterations);
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

FourStateLoss refine_four_state(const FourStateLoss& start, const std::vector<bool>& lost,
                                int iterations) {
  using namespace four_state_runs;
  const double p13 = start.p13.value(), p14 = start.p14.value(), p23 = start.p23.value(),
               p31 = start.p31.value(), p32 = start.p32.value();
  Matrix a{{{1 - p13 - p14, 0, p13, p14},
            {0, 1 - p23, p23, 0},
            {p31, p32, 1 - p31 - p32, 0},
            {1, 0, 0, 0}}};
  // Before its first packet netem is in state 1 and the first packet already moves the chain.
  const Vector initial = a[0];
  const std::vector<Item> items = items_of(lost);
  std::vector<std::array<Vector, 2>> alpha;
  double previous = -INFINITY;
  for (int k = 0; k < iterations && !items.empty(); ++k) {
    const double ll = pass(a, initial, items, alpha);
    if (converged(previous, ll)) break;
    previous = ll;
  }
  FourStateLoss out;
  out.p13 = clamp_probability(a[0][2]);
  out.p14 = clamp_probability(a[0][3]);
  out.p23 = clamp_probability(a[1][2]);
  out.p31 = clamp_probability(a[2][0]);
  out.p32 = clamp_probability(a[2][1]);
  return out;
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
