#pragma once
// `jitterctl fleet`: one change on every jitterd of an inventory (docs/operations.md, "Fleets").
// Two-phase over the protocol's stage/commit/abort (docs/protocol.md): every host checks the change
// and answers with a token or a refusal; only when all are ready is it committed everywhere, at one
// CLOCK_REALTIME deadline; a refusal aborts every token, so no host changes. Each host's clock
// offset is estimated NTP-style with `clock`, and after the deadline each host's kernel
// acknowledgement (its transition record) gives the skew of the change across the fleet.

#include <chrono>
#include <optional>
#include <vector>

#include "options.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

// One `clock` exchange, NTP-style (RFC 5905, section 8), all four CLOCK_REALTIME: t0 the client
// sent the request, t1 the host read it, t2 the host made the reply, t3 the client read the reply.
struct ClockSample {
  Nanoseconds offset{0};      // the host's clock minus the client's
  Nanoseconds round_trip{0};  // both ways through the network (the host's time taken out)
};
ClockSample clock_sample(Nanoseconds t0, Nanoseconds t1, Nanoseconds t2, Nanoseconds t3);
// Of several exchanges, the one with the shortest round trip: its offset is off by at most half
// of it (NTP's clock filter takes the same one). nullopt for none.
std::optional<ClockSample> best_clock_sample(const std::vector<ClockSample>& samples);

// The spread of the kernels' acknowledgements: max - min (zero for one host, nullopt for none).
std::optional<Nanoseconds> skew_of(const std::vector<Nanoseconds>& times);

int fleet_command(const Invocation& inv);

}  // namespace jitterctl
