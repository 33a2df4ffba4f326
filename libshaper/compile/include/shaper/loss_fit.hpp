#pragma once
// Fitting netem loss models to a captured loss sequence, and choosing among them by how well each
// reproduces the capture's loss bursts. Never netem's `loss P CORR`: its correlation breaks the
// loss rate (reference: netem-kernel.md §4).

#include <cstdint>
#include <string>
#include <vector>

#include "shaper/netem_spec.hpp"

namespace shaper {

enum class LossModelKind { kNone, kBernoulli, kGilbert, kGilbertElliott, kFourState };
std::string to_string(LossModelKind kind);

struct LossCandidate {
  LossModelKind kind = LossModelKind::kNone;
  LossModel model;
  // How far the model's loss bursts and gaps are from the capture's (lower is better), measured on
  // a seeded simulation of as many packets as the capture: relative error of the loss rate, plus
  // the Wasserstein-1 distances of the burst-length and gap-length distributions, each divided by
  // the capture's mean (so a model that gets lengths right to within 10 % scores about 0.1 per
  // term).
  double score = 0.0;
  double loss_rate = 0.0;   // of the simulated sequence
  double mean_burst = 0.0;  // of the simulated sequence
  std::size_t parameters = 0;
};

struct LossFit {
  LossCandidate chosen;
  std::vector<LossCandidate> candidates;  // every model tried, best first
  double capture_loss_rate = 0.0;
  double capture_mean_burst = 0.0;
};

// Fits Bernoulli, simple Gilbert (transition counts), Gilbert–Elliott and 4-state (Baum–Welch on a
// hidden Markov model with netem's state structure) and picks the simplest model whose score is
// within 10 % (or 0.02) of the best. A sequence without losses gives kNone. `seed` makes the
// scoring simulation reproducible.
LossFit fit_loss_model(const std::vector<bool>& lost, std::uint64_t seed = 1);

// The fitters on their own (exposed for tests). Baum–Welch runs at most this many passes.
inline constexpr int kBaumWelchIterations = 60;
GilbertElliottLoss fit_simple_gilbert(const std::vector<bool>& lost);
GilbertElliottLoss fit_gilbert_elliott(const std::vector<bool>& lost,
                                       int iterations = kBaumWelchIterations);
FourStateLoss fit_four_state(const std::vector<bool>& lost, int iterations = kBaumWelchIterations);
// Baum–Welch from `start` on `lost` as it is (no fitting window), keeping netem's structure: what
// fit_four_state runs after choosing its start and window.
FourStateLoss refine_four_state(const FourStateLoss& start, const std::vector<bool>& lost,
                                int iterations = kBaumWelchIterations);

// The loss sequence a model produces for `packets` packets (netem's arithmetic, seeded).
std::vector<bool> simulate_loss(const LossModel& model, std::size_t packets, std::uint64_t seed);

}  // namespace shaper
