#include "shaper/netem_spec.hpp"

#include <string>

namespace shaper {

namespace {

// Netlink attribute lengths are u16: TCA_OPTIONS (qopt + every netem attribute) must stay under
// 65535 bytes. The fixed part (qopt and the small attributes) takes under 256 bytes.
constexpr std::size_t kMaxOptionsBytes = 65535;
constexpr std::size_t kFixedOptionsBytes = 256;

// Slot gaps are drawn with 32-bit arithmetic in older kernels; ranges beyond INT_MAX ns overflow
// (fixed upstream in 2026, still present on 6.1).
constexpr std::int64_t kMaxSlotRangeNs = 2147483647;

void check_table(const DistributionTable& table, const std::string& where, Diagnostics& out) {
  if (table.empty()) {
    out.push_back({where, "the table is empty; give 1 to 16384 entries, or leave the table out"});
  } else if (table.size() > kMaxTableEntries) {
    out.push_back({where, "the table has " + std::to_string(table.size()) +
                              " entries; the kernel accepts at most 16384 (NETEM_DIST_MAX)"});
  }
}

void check_non_negative(Nanoseconds d, const std::string& where, Diagnostics& out) {
  if (d.count() < 0) {
    out.push_back({where, format_duration(d) + " is negative; delays must be 0 or more"});
  }
}

void check_jitter(Nanoseconds d, const std::string& where, Diagnostics& out) {
  check_non_negative(d, where, out);
  if (d.count() > kMaxJitterNs) {
    out.push_back({where, format_duration(d) +
                              " is above the kernel's jitter limit of 2.147483647s (INT_MAX ns)"});
  }
}

bool has_loss(const LossModel& loss) {
  if (std::holds_alternative<std::monostate>(loss)) return false;
  if (const auto* random = std::get_if<RandomLoss>(&loss)) return !random->probability.is_zero();
  return true;
}

}  // namespace

Diagnostics validate(const NetemSpec& spec) {
  Diagnostics out;

  check_non_negative(spec.delay.latency, "delay.latency", out);
  check_jitter(spec.delay.jitter, "delay.jitter", out);
  if (spec.delay.distribution) {
    check_table(*spec.delay.distribution, "delay.distribution", out);
    if (spec.delay.jitter.count() == 0) {
      out.push_back({"delay.distribution",
                     "the kernel ignores the table when jitter is 0; set delay.jitter (the scale "
                     "per 8192 table units) or leave the table out"});
    }
  }

  if (spec.reorder.gap == 0 && !spec.reorder.probability.is_zero()) {
    out.push_back(
        {"reorder.gap",
         "reordering needs gap >= 1 (gap 0 turns it off); use gap 1 to reorder any packet"});
  }
  if (spec.reorder.gap > 0 && spec.reorder.probability.is_zero()) {
    out.push_back(
        {"reorder.probability",
         "gap is set but the probability is 0, so nothing is reordered; set a probability "
         "or gap 0"});
  }
  if (spec.reorder.gap > 0 && spec.delay.latency.count() == 0 && spec.delay.jitter.count() == 0) {
    out.push_back(
        {"reorder",
         "reordering sends a packet ahead of delayed ones; without delay it does nothing. "
         "Set delay.latency"});
  }

  if (spec.ecn && !has_loss(spec.loss)) {
    out.push_back({"ecn",
                   "ecn marks packets that the loss model would drop; without a loss model it does "
                   "nothing. Add a loss model or turn ecn off"});
  }

  std::size_t table_bytes = 0;
  if (spec.delay.distribution) table_bytes += spec.delay.distribution->size() * 2;

  if (spec.slot) {
    const SlotSpec& slot = *spec.slot;
    check_non_negative(slot.min_delay, "slot.min_delay", out);
    check_non_negative(slot.max_delay, "slot.max_delay", out);
    if (slot.max_delay < slot.min_delay) {
      out.push_back({"slot.max_delay", format_duration(slot.max_delay) +
                                           " is below slot.min_delay " +
                                           format_duration(slot.min_delay)});
    } else if ((slot.max_delay - slot.min_delay).count() > kMaxSlotRangeNs) {
      out.push_back({"slot.max_delay",
                     "max_delay - min_delay is above 2.147483647s, which overflows "
                     "the kernel's slot arithmetic"});
    }
    if (slot.max_packets < 0) {
      out.push_back({"slot.max_packets", "must be 0 (unlimited) or more"});
    }
    if (slot.max_bytes < 0) {
      out.push_back({"slot.max_bytes", "must be 0 (unlimited) or more"});
    }
    if (slot.distribution) {
      check_non_negative(slot.distribution->delay, "slot.distribution.delay", out);
      check_jitter(slot.distribution->jitter, "slot.distribution.jitter", out);
      check_table(slot.distribution->table, "slot.distribution.table", out);
      if (slot.distribution->jitter.count() == 0) {
        out.push_back({"slot.distribution.jitter",
                       "the kernel ignores the slot table when its jitter is 0; set it or leave "
                       "the distribution out"});
      }
      table_bytes += slot.distribution->table.size() * 2;
    } else if (slot.min_delay.count() == 0 && slot.max_delay.count() == 0) {
      out.push_back({"slot",
                     "a slot with zero delays is off; set min_delay/max_delay or leave "
                     "the slot out"});
    }
  }

  if (spec.limit == 0) {
    out.push_back({"limit",
                   "0 makes netem drop every packet; give the number of packets netem may "
                   "hold (at least peak packets/s x the largest delay)"});
  }

  if (table_bytes + kFixedOptionsBytes > kMaxOptionsBytes) {
    out.push_back({"delay.distribution",
                   "the delay and slot tables take " + std::to_string(table_bytes) +
                       " bytes together; one netlink attribute holds at most 65535, so their "
                       "entries must add up to 32639 or fewer"});
  }
  return out;
}

}  // namespace shaper
