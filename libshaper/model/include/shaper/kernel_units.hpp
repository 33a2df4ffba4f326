#pragma once
// The one audited place where typed quantities become kernel units and back. Each conversion says
// why it is what it is; nothing else in the project scales a probability or shifts a tick.

#include <cstdint>

#include "shaper/quantities.hpp"

namespace shaper::kernel_units {

// netem probabilities are u32 fractions of 2^32-1: tc's set_percent sends rint(p * UINT32_MAX), and
// the kernel tests `prob >= random_u32`, so 0 is off and UINT32_MAX is always.
std::uint32_t probability(Probability p);
Probability probability_from(std::uint32_t value);

// tc_netem_qopt carries latency and jitter in psched ticks of 64 ns (PSCHED_SHIFT = 6; the header's
// "(us)" comment is wrong). They only matter on kernels before 4.15, which lack LATENCY64/JITTER64;
// the kernel itself clamps its dump to UINT32_MAX ticks, and so do we.
std::uint32_t psched_ticks(Nanoseconds d);

// LATENCY64 / JITTER64 / slot delays are signed 64-bit nanoseconds.
std::int64_t nanoseconds(Nanoseconds d);

// netem's RATE is u32 bytes/s; rates of 2^32 B/s and above go in RATE64, with RATE set to ~0U so
// that the kernel's max(rate, rate64) picks the 64-bit value (this is what the kernel's own dump
// does).
std::uint32_t rate32(BytesPerSecond rate);
bool needs_rate64(BytesPerSecond rate);

// Gilbert–Elliott: the kernel stores h (delivery probability in Bad) and k1 (loss probability in
// Good): it loses in Bad when random_u32 > h, and in Good when random_u32 < k1 (sch_netem.c
// loss_gilb_ell).
std::uint32_t ge_h_from_loss_bad(Probability loss_bad);
std::uint32_t ge_k1_from_loss_good(Probability loss_good);
Probability loss_bad_from_ge_h(std::uint32_t h);

}  // namespace shaper::kernel_units
