#pragma once
// The judge of `jitterctl fleet validate` (docs/validation.md, "Fleets"): probes between a fleet's
// hosts, judged pair by pair against what the hosts' shaping should give them.
//
// A probe from host A to host B leaves through A's shaped egress and its reply through B's, so its
// round trip is A's delay plus B's delay (independent draws: two netems, two generators) plus the
// pair's own path, and it is lost when either lane loses it. The expected series of a pair is
// therefore A's phase and B's phase simulated (libshaper's simulator, as `validate --phase` does
// it) and added probe by probe: a draw from the convolution of the two delay laws, with the loss
// of either, each lane keeping its own loss bursts. The pair's own path comes from a calibration
// run of the same pairs taken through constant delays (validate's --link-calibration with
// --calibration-delay: the base is its fastest reply less the two constants, the noise what lies
// above it), so that host stalls, which hit long flights and short ones alike only when the
// flights are alike, are in the calibration as in the measurement. The pairs' verdicts share the
// level: each is judged at alpha / pairs (Bonferroni).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fleet.hpp"
#include "shaper/profile.hpp"
#include "shaper/quantities.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

// Each pair's level when `pairs` verdicts share `alpha` (Bonferroni: the chance that any faithful
// pair fails is at most the sum of theirs).
double pair_level(double alpha, std::size_t pairs);

// The probes as a trace (what validate reads from a ping capture).
shaper::Trace probe_trace(const PairProbes& probes);

// One host's egress lane as the simulator replays it: the phase held (`phase` is a profile cut to
// one phase with Profile::held), `probes` probes one `interval` apart, seeded. Null `phase`: an
// unshaped lane (every probe delivered, no added delay).
shaper::DelaySeries lane_series(const shaper::Profile* phase, std::size_t probes,
                                Nanoseconds interval, std::uint64_t seed);

// Two lanes crossed one after the other, probe by probe: the delays added, lost when either lost.
// The shorter length of the two.
shaper::DelaySeries cross_lanes(const shaper::DelaySeries& out, const shaper::DelaySeries& back);

// The delay a calibration lane adds, when its phase is a constant delay (no jitter, no loss, no
// slots, no rate): its latency; nullopt otherwise. Null `phase` (unshaped): 0.
std::optional<Nanoseconds> constant_delay(const shaper::Profile* phase);

struct PairVerdict {
  shaper::ValidationReport report;  // one comparison, expected vs seen
  // What the comparison judged the seen probes against: the expected series, with the calibrated
  // link's noise added when there was a calibration (report.profile is without it).
  shaper::SeriesStats judged_expected;
  std::vector<std::string> notes;
};

// One pair judged: `seen` against `expected` (cross_lanes of the two lanes), with the pair's path
// measured by `calibration` taken through a constant round-trip delay `calibration_delay` (the two
// constants added), or, without one, the base estimated from `seen` as validate does without
// --link-calibration. `options.alpha` is the pair's level (pair_level). Problems with the
// calibration (fewer than 100 replies, a reply faster than the constant) are returned as notes and
// the pair is then judged without it.
PairVerdict judge_pair(const shaper::DelaySeries& expected, const PairProbes& seen,
                       const PairProbes* calibration, Nanoseconds calibration_delay,
                       const shaper::ValidationOptions& options);

}  // namespace jitterctl
