#include "trace_series.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace shaper::trace_detail {

namespace {

// A reply (or loss line) for a probe at most this many probes behind the newest one is late or
// reordered and fills that probe's slot; further back, a sequence number seen before means the
// tool started over. 1024 probes is 10 s of extra delay at ping's fastest root interval (10 ms),
// far beyond any reply a tool still accepts, and far below the length of a real run.
constexpr std::uint64_t kLateWindow = 1024;

// A forward jump of more than this many probes (29 h at 10 Hz) is read as a new session instead of
// that many losses: one corrupt sequence number must not allocate millions of samples.
constexpr std::uint64_t kMaxSequenceGap = std::uint64_t{1} << 20;

// While a session has at most this many probes, a sequence number below its first one is an early
// probe whose reply was overtaken (reordering at the very start), not a restart.
constexpr std::uint64_t kReorderAtStart = 64;

// Enough spacings for a median that does not move; beyond it every k-th spacing is used, which
// keeps the memory of interval detection constant.
constexpr std::size_t kMaxSpacings = 1 << 16;

// Reserving more samples than this from a size hint would only reserve address space a garbage
// file never fills; past it the vector grows as usual.
constexpr std::size_t kMaxReservedSamples = std::size_t{1} << 25;

// Printed send times measure the interval only when their resolution is this many times finer.
constexpr std::int64_t kResolutionMargin = 10;

std::uint64_t distance(std::uint64_t a, std::uint64_t b) {
  return a > b ? a - b : b - a;
}

// Time arithmetic on values read from the capture saturates instead of overflowing: a hostile
// stamp ("[9999999999.9]") or a corrupt interval must give a wrong time, never undefined behaviour.
Nanoseconds saturate(bool negative) {
  return negative ? Nanoseconds::min() : Nanoseconds::max();
}

Nanoseconds plus(Nanoseconds a, Nanoseconds b) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a.count(), b.count(), &sum)) return saturate(b.count() < 0);
  return Nanoseconds{sum};
}

Nanoseconds minus(Nanoseconds a, Nanoseconds b) {
  std::int64_t difference = 0;
  if (__builtin_sub_overflow(a.count(), b.count(), &difference)) return saturate(b.count() > 0);
  return Nanoseconds{difference};
}

Nanoseconds times(Nanoseconds interval, std::uint64_t count) {
  std::int64_t product = 0;
  if (count > static_cast<std::uint64_t>(INT64_MAX) ||
      __builtin_mul_overflow(interval.count(), static_cast<std::int64_t>(count), &product)) {
    return saturate(interval.count() < 0);
  }
  return Nanoseconds{product};
}

}  // namespace

SeriesBuilder::SeriesBuilder(ParseContext& context, SeriesRules rules)
    : context_(context), rules_(rules), samples_(context.trace.samples) {}

void SeriesBuilder::begin_session(std::optional<std::uint64_t> first_seq) {
  if (session_.started) new_session();
  session_.closed = false;
  session_.declared_first = first_seq;
}

void SeriesBuilder::end_session(std::optional<std::uint64_t> transmitted, std::uint64_t line) {
  if (transmitted && session_.declared_first && !session_.closed) {
    const std::uint64_t sent = *transmitted;
    if (!session_.started) {
      // Nothing came back at all (busybox prints no line for a lost probe): every probe is lost.
      if (sent > 0 && sent <= kMaxSequenceGap) open_first_slot(*session_.declared_first + sent - 1);
    } else if (session_.origin_declared) {
      const std::uint64_t last = session_.origin + sent - 1;
      if (sent == 0 || last < session_.high) {
        context_.diagnostics.at(line, 1,
                                "the summary counts " + std::to_string(sent) +
                                    " probes sent, but sequence numbers reach " +
                                    std::to_string(session_.high - session_.origin + 1) +
                                    " probes; kept the sequence");
      } else if (last - session_.high <= kMaxSequenceGap) {
        append_lost(last - session_.high);
        session_.high = last;
      }
    }
  }
  unplaced_ = 0;
  if (session_.started) session_.closed = true;
  session_.declared_first.reset();
}

void SeriesBuilder::summary_duration(std::uint64_t transmitted, Nanoseconds elapsed) {
  if (transmitted < 2 || elapsed <= Nanoseconds{0}) return;
  summary_elapsed_ = plus(summary_elapsed_, elapsed);
  summary_gaps_ += transmitted - 1;
}

void SeriesBuilder::observe(const Observation& observation, std::uint64_t line) {
  if (!reserved_) {
    reserved_ = true;
    const std::size_t expected =
        context_.size_hint / std::max<std::size_t>(rules_.bytes_per_line, 1);
    samples_.reserve(std::min(expected, kMaxReservedSamples));
  }
  std::size_t index = 0;
  if (observation.seq) {
    const std::uint64_t raw =
        rules_.seq_modulus != 0 ? *observation.seq % rules_.seq_modulus : *observation.seq;
    index = slot_for(raw, observation.duplicate,
                     observation.rtt.has_value() || observation.unreadable, line);
    unplaced_ = 0;
    if (index == kIgnore) return;
  } else if (!session_.started || session_.closed) {
    const std::uint64_t first = session_.declared_first.value_or(0);
    if (session_.started) new_session();
    index = open_first_slot(first);
  } else {
    index = append_slot();
    ++session_.high;
  }
  unplaced_ = 0;
  apply(index, observation);
}

std::size_t SeriesBuilder::slot_for(std::uint64_t raw, bool duplicate, bool reply,
                                    std::uint64_t line) {
  if (!session_.started || session_.closed) {
    if (session_.started) new_session();
    return open_first_slot(raw);
  }
  const std::uint64_t ext = unwrap(raw);
  if (ext > session_.high) {
    const std::uint64_t gap = ext - session_.high - 1;
    if (gap > kMaxSequenceGap) {
      context_.diagnostics.at(line, 1,
                              "sequence number jumps from " + std::to_string(session_.high) +
                                  " to " + std::to_string(ext) + " (more than " +
                                  std::to_string(kMaxSequenceGap) +
                                  " probes); read as a new session");
      new_session();
      return open_first_slot(raw);
    }
    append_lost(gap);
    session_.high = ext;
    return append_slot();
  }
  if (ext >= session_.origin) {
    const std::size_t index = session_.base + static_cast<std::size_t>(ext - session_.origin);
    if (duplicate) return index;
    const bool within_window = session_.high - ext <= kLateWindow;
    if (!samples_[index].rtt && within_window) return index;
    // A loss line for a probe that has its reply (macOS names the timed-out probe by counting, so
    // it can name one whose reply overtook another) says nothing new: it cannot start a run.
    if (!reply && within_window) return kIgnore;
    // That probe has its reply already, or is too far behind to be late: the tool started over.
    new_session();
    return open_first_slot(raw);
  }
  const std::uint64_t before = session_.origin - ext;
  if (!session_.origin_declared && session_.high - session_.origin + 1 <= kReorderAtStart &&
      before <= kReorderAtStart) {
    // The first reply seen was overtaken by this earlier probe's: widen the session downwards.
    samples_.insert(samples_.begin() + static_cast<std::ptrdiff_t>(session_.base),
                    static_cast<std::size_t>(before), RttSample{});
    for (std::size_t i = session_.base; i < samples_.size(); ++i) samples_[i].seq = i;
    for (auto& hint : hints_) {
      if (hint.index >= session_.base) hint.index += static_cast<std::size_t>(before);
    }
    for (auto& repeated : context_.trace.duplicates) {
      if (repeated.seq >= session_.base) repeated.seq += before;
    }
    session_.origin = ext;
    return session_.base;
  }
  new_session();
  return open_first_slot(raw);
}

std::size_t SeriesBuilder::open_first_slot(std::uint64_t raw) {
  std::uint64_t origin = raw;
  if (session_.declared_first && *session_.declared_first <= raw &&
      raw - *session_.declared_first <= kMaxSequenceGap) {
    origin = *session_.declared_first;
  }
  session_.started = true;
  session_.closed = false;
  session_.origin_declared = session_.declared_first && origin == *session_.declared_first;
  session_.origin = origin;
  session_.high = raw;
  session_.base = samples_.size();
  session_starts_.push_back(session_.base);
  append_lost(raw - origin);
  return append_slot();
}

std::size_t SeriesBuilder::append_slot() {
  RttSample sample;
  sample.seq = samples_.size();
  samples_.push_back(sample);
  return samples_.size() - 1;
}

void SeriesBuilder::append_lost(std::uint64_t count) {
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::size_t index = append_slot();
    // The first missing probes after an unplaced reply are that reply's: not lost.
    if (unplaced_ > 0) {
      --unplaced_;
      unreadable_.push_back(index);
    }
  }
}

void SeriesBuilder::new_session() {
  session_ = Session{};
}

std::uint64_t SeriesBuilder::unwrap(std::uint64_t raw) const {
  const std::uint64_t modulus = rules_.seq_modulus;
  if (modulus == 0) return raw;
  // The unwrapped candidate nearest to the newest sequence number (as RTP does).
  const std::uint64_t high = session_.high;
  const std::uint64_t candidate = high - high % modulus + raw;
  std::uint64_t best = candidate;
  if (candidate >= modulus && distance(candidate - modulus, high) < distance(best, high)) {
    best = candidate - modulus;
  }
  if (distance(candidate + modulus, high) < distance(best, high)) best = candidate + modulus;
  return best;
}

void SeriesBuilder::apply(std::size_t index, const Observation& observation) {
  RttSample& sample = samples_[index];
  if (observation.unreadable) {
    // A slot with a readable reply keeps it; one without (even if this was marked DUP!) was
    // answered, so it is not lost.
    if (!sample.rtt) unreadable_.push_back(index);
    return;
  }
  if (observation.duplicate && sample.rtt) {
    RttSample duplicate;
    duplicate.seq = sample.seq;
    duplicate.rtt = observation.rtt;
    duplicate.send_time = observation.send_time;
    duplicate.duplicate = true;
    context_.trace.duplicates.push_back(duplicate);
    return;
  }
  if (observation.send_time) {
    coarsest_resolution_ = std::max(coarsest_resolution_, observation.time_resolution);
  }
  if (observation.rtt) {
    sample.rtt = observation.rtt;
    sample.icmp_error = false;
    if (observation.send_time) sample.send_time = observation.send_time;
    return;
  }
  if (observation.icmp_error) sample.icmp_error = true;
  if (observation.send_time && !sample.send_time) {
    sample.send_time = observation.send_time;
  } else if (observation.hint) {
    hints_.push_back(Hint{index, *observation.hint, observation.hint_intervals});
  }
}

void SeriesBuilder::finish() {
  Trace& trace = context_.trace;
  trace.interval = choose_interval();
  fill_send_times();
  for (auto& duplicate : trace.duplicates) {
    if (duplicate.send_time) continue;
    const RttSample& original = samples_[duplicate.seq];
    duplicate.send_time = original.send_time;
    duplicate.send_time_inferred = original.send_time_inferred;
  }
  drop_unreadable();
  trace.session_starts = session_starts_;
  trace.sessions = session_starts_.size();
}

void SeriesBuilder::drop_unreadable() {
  // After the send times are filled in: an unreadable reply's slot still held its place in the
  // sequence (it is not a gap) and in the interval's arithmetic. Session starts move with the
  // samples; a session left without samples is dropped.
  if (unreadable_.empty()) return;
  std::vector<bool> drop(samples_.size(), false);
  for (const std::size_t index : unreadable_) drop[index] = !samples_[index].rtt;
  std::vector<std::size_t> starts;
  std::size_t kept = 0;
  for (std::size_t s = 0; s < session_starts_.size(); ++s) {
    const std::size_t begin = s == 0 ? 0 : session_starts_[s];
    const std::size_t end =
        s + 1 < session_starts_.size() ? session_starts_[s + 1] : samples_.size();
    const std::size_t first_kept = kept;
    for (std::size_t i = begin; i < end; ++i) {
      if (!drop[i]) samples_[kept++] = samples_[i];
    }
    if (kept > first_kept) starts.push_back(first_kept);
  }
  samples_.resize(kept);
  session_starts_ = std::move(starts);
  unreadable_.clear();
}

std::optional<Nanoseconds> SeriesBuilder::interval_from_hints() const {
  // Only stamps of loss lines (every probe lost, e.g. TTL exceeded with -D): the spacing of
  // neighbouring ones of the same kind, within a session.
  std::vector<std::int64_t> spacings;
  for (std::size_t i = 1; i < hints_.size() && spacings.size() < kMaxSpacings; ++i) {
    const Hint& a = hints_[i - 1];
    const Hint& b = hints_[i];
    const auto session_of = [&](std::size_t index) {
      return std::upper_bound(session_starts_.begin(), session_starts_.end(), index) -
             session_starts_.begin();
    };
    if (b.index <= a.index || a.intervals != b.intervals ||
        session_of(a.index) != session_of(b.index)) {
      continue;
    }
    spacings.push_back(minus(b.at, a.at).count() / static_cast<std::int64_t>(b.index - a.index));
  }
  if (spacings.empty()) return std::nullopt;
  auto middle = spacings.begin() + static_cast<std::ptrdiff_t>(spacings.size() / 2);
  std::nth_element(spacings.begin(), middle, spacings.end());
  if (*middle <= 0) return std::nullopt;
  return Nanoseconds{*middle};
}

Nanoseconds SeriesBuilder::choose_interval() {
  Trace& trace = context_.trace;
  std::sort(hints_.begin(), hints_.end(),
            [](const Hint& a, const Hint& b) { return a.index < b.index; });
  if (context_.options.interval && *context_.options.interval > Nanoseconds{0}) {
    trace.interval_source = IntervalSource::kOption;
    return *context_.options.interval;
  }
  // Median of (send time difference / sequence difference) between neighbouring probes whose send
  // time the capture shows; with stamps too coarse for that (ts prints whole seconds), the span of
  // each session divided by its probes.
  const std::size_t stride = std::max<std::size_t>(1, samples_.size() / kMaxSpacings);
  std::vector<std::int64_t> spacings;
  Nanoseconds span{0};
  std::uint64_t span_probes = 0;
  std::size_t counted = 0;
  for (std::size_t s = 0; s < session_starts_.size(); ++s) {
    const std::size_t begin = session_starts_[s];
    const std::size_t end =
        s + 1 < session_starts_.size() ? session_starts_[s + 1] : samples_.size();
    std::optional<std::size_t> first;
    std::optional<std::size_t> previous;
    for (std::size_t i = begin; i < end; ++i) {
      if (!samples_[i].send_time) continue;
      if (previous && counted++ % stride == 0) {
        const auto probes = static_cast<std::int64_t>(samples_[i].seq - samples_[*previous].seq);
        spacings.push_back(minus(*samples_[i].send_time, *samples_[*previous].send_time).count() /
                           probes);
      }
      if (!first) first = i;
      previous = i;
    }
    if (first && previous && *previous != *first) {
      span = plus(span, minus(*samples_[*previous].send_time, *samples_[*first].send_time));
      span_probes += samples_[*previous].seq - samples_[*first].seq;
    }
  }
  if (!spacings.empty()) {
    auto middle = spacings.begin() + static_cast<std::ptrdiff_t>(spacings.size() / 2);
    std::nth_element(spacings.begin(), middle, spacings.end());
    // Each spacing is off by up to two stamp resolutions; unless the resolution is well below the
    // interval the median is just the quantisation step (whole-second stamps, 0.2 s interval).
    if (*middle > 0 && Nanoseconds{*middle} >= kResolutionMargin * coarsest_resolution_) {
      trace.interval_source = IntervalSource::kTimestamps;
      return Nanoseconds{*middle};
    }
  }
  if (span_probes > 0 && span > Nanoseconds{0}) {
    trace.interval_source = IntervalSource::kTimestamps;
    return span / static_cast<std::int64_t>(span_probes);
  }
  if (const auto from_hints = interval_from_hints()) {
    trace.interval_source = IntervalSource::kTimestamps;
    return *from_hints;
  }
  if (summary_gaps_ > 0) {
    trace.interval_source = IntervalSource::kSummary;
    return summary_elapsed_ / static_cast<std::int64_t>(summary_gaps_);
  }
  trace.interval_source = IntervalSource::kDefault;
  return rules_.default_interval;
}

void SeriesBuilder::fill_send_times() {
  Trace& trace = context_.trace;
  const Nanoseconds interval = trace.interval;
  std::optional<std::size_t> first_printed;
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    if (samples_[i].send_time) {
      first_printed = i;
      break;
    }
  }
  auto next_hint = hints_.begin();  // sorted by choose_interval
  bool hints_used = false;

  for (std::size_t s = 0; s < session_starts_.size(); ++s) {
    const std::size_t begin = session_starts_[s];
    const std::size_t end =
        s + 1 < session_starts_.size() ? session_starts_[s + 1] : samples_.size();
    std::optional<std::size_t> first_anchor;
    for (std::size_t i = begin; i < end && !first_anchor; ++i) {
      if (samples_[i].send_time) first_anchor = i;
    }
    // A session without any printed send time falls back on the stamps of its loss lines.
    while (next_hint != hints_.end() && next_hint->index < begin) ++next_hint;
    for (; next_hint != hints_.end() && next_hint->index < end; ++next_hint) {
      RttSample& sample = samples_[next_hint->index];
      if (first_anchor || sample.send_time) continue;
      sample.send_time = minus(next_hint->at, times(interval, next_hint->intervals));
      sample.send_time_inferred = true;
      hints_used = true;
    }
    if (!first_anchor) {
      for (std::size_t i = begin; i < end && !first_anchor; ++i) {
        if (samples_[i].send_time) first_anchor = i;
      }
    }

    std::optional<std::size_t> last_anchor;
    for (std::size_t i = begin; i < end; ++i) {
      RttSample& sample = samples_[i];
      if (sample.send_time) {
        last_anchor = i;
        continue;
      }
      const std::uint64_t seq = sample.seq;
      if (last_anchor) {
        sample.send_time = plus(*samples_[*last_anchor].send_time,
                                times(interval, seq - samples_[*last_anchor].seq));
      } else if (first_anchor) {
        sample.send_time = minus(*samples_[*first_anchor].send_time,
                                 times(interval, samples_[*first_anchor].seq - seq));
      } else if (i > 0) {
        // Chained on the previous session: the pause between the runs is unknown.
        sample.send_time = plus(*samples_[i - 1].send_time, interval);
      } else if (first_printed) {
        sample.send_time = minus(*samples_[*first_printed].send_time,
                                 times(interval, samples_[*first_printed].seq - seq));
      } else {
        sample.send_time = times(interval, seq);
      }
      sample.send_time_inferred = true;
    }
  }
  trace.send_times_inferred = !samples_.empty() && !first_printed && !hints_used;
}

}  // namespace shaper::trace_detail
