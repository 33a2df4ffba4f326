#pragma once
// SeriesBuilder turns what an RTT tool printed (replies, losses, ICMP errors, duplicates, in
// arrival order) into Trace::samples in probe order: one slot per probe, found from the tool's
// sequence number, so that
//   - a gap in the sequence is a loss, and a reply that arrives after the gap was declared (late or
//     reordered) fills its own slot instead of being counted twice;
//   - 16-bit ICMP sequence numbers are unwrapped (65535 -> 0 continues, it does not restart);
//   - a restarted sequence (two captures appended, with or without their headers) starts a session;
//   - send times missing from the capture are inferred from the probe interval at the end.
// The rules and their limits are in docs/capture-formats.md ("Sequences and sessions").

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "trace_parser.hpp"

namespace shaper::trace_detail {

// Ends the diagnostic of a reply whose value cannot be read (Observation::unreadable).
inline constexpr std::string_view kReplyLeftOut =
    "; this probe is left out: neither delivered nor lost";

// What one line said about one probe.
struct Observation {
  std::optional<std::uint64_t> seq;      // the tool's sequence number; nullopt: the next probe
  std::optional<Nanoseconds> rtt;        // nullopt: no reply (yet)
  std::optional<Nanoseconds> send_time;  // when the capture shows it (a stamp minus the RTT...)
  Nanoseconds time_resolution{0};        // of the stamp behind send_time or hint (0: fine)
  // A stamp on a line without a reply ("no answer yet", a timeout, an ICMP error): it brackets
  // the send time, `hint_intervals` probe intervals after it. Used only where a session has no
  // better time.
  std::optional<Nanoseconds> hint;
  std::uint8_t hint_intervals = 0;
  bool duplicate = false;   // the tool marked it DUP!
  bool icmp_error = false;  // an ICMP error came back instead of a reply
  // A reply whose RTT (or another of its values) could not be read: the probe was answered, so it
  // is not lost, but it has no RTT to use. Its slot is left out of the samples at the end (unless
  // a readable reply fills it), so it is neither delivered nor lost.
  bool unreadable = false;
};

struct SeriesRules {
  std::uint64_t seq_modulus = 0;  // 65536 for ICMP sequence numbers; 0: they do not wrap
  Nanoseconds default_interval{std::chrono::seconds{1}};  // the tool's default probe interval
  std::size_t bytes_per_line = 50;  // typical line length, to size the sample vector from the input
};

class SeriesBuilder {
 public:
  SeriesBuilder(ParseContext& context, SeriesRules rules);

  // A header ("PING host ...") starts a session whose first probe has sequence number `first_seq`
  // when the tool is known to start there (iputils: 1; BSD, busybox, fping: 0).
  void begin_session(std::optional<std::uint64_t> first_seq);
  // A summary ends the session; `transmitted` (when the start is known) places the probes lost at
  // the end of the run, which no line mentions.
  void end_session(std::optional<std::uint64_t> transmitted, std::uint64_t line);
  // "N packets transmitted, ..., time T": the interval is about T / (N - 1) when nothing better
  // is known.
  void summary_duration(std::uint64_t transmitted, Nanoseconds elapsed);

  void observe(const Observation& observation, std::uint64_t line);

  // A reply whose probe number could not be read ("icmp_seq=7x"). Replies arrive in probe order
  // but for reordering, so it is taken to be the probe after the newest one: when the next
  // observation leaves a gap, the gap's first slot is that unreadable reply, not a loss. When the
  // next observation leaves no gap the reply named no missing probe and nothing changes.
  void unplaced_reply() { ++unplaced_; }

  // Chooses the interval, fills in send times, records the sessions.
  void finish();

  bool empty() const { return samples_.empty(); }

 private:
  struct Session {
    std::size_t base = 0;      // index in samples_ of the slot for `origin`
    std::uint64_t origin = 0;  // (unwrapped) sequence number of the session's first slot
    std::uint64_t high = 0;    // highest (unwrapped) sequence number with a slot
    bool started = false;      // has slots
    bool closed = false;       // a summary ended it; the next observation opens a new session
    std::optional<std::uint64_t> declared_first;
    bool origin_declared = false;  // origin came from the header: tail losses can be placed
  };
  struct Hint {
    std::size_t index;
    Nanoseconds at;
    std::uint8_t intervals;
  };

  // The slot for sequence number `raw`, opening slots or a new session as needed; kIgnore when
  // the observation concerns no slot.
  static constexpr std::size_t kIgnore = static_cast<std::size_t>(-1);
  std::size_t slot_for(std::uint64_t raw, bool duplicate, bool reply, std::uint64_t line);
  std::size_t open_first_slot(std::uint64_t raw);
  std::size_t append_slot();
  void append_lost(std::uint64_t count);
  void new_session();
  std::uint64_t unwrap(std::uint64_t raw) const;
  void apply(std::size_t index, const Observation& observation);
  Nanoseconds choose_interval();
  std::optional<Nanoseconds> interval_from_hints() const;
  void fill_send_times();
  void drop_unreadable();

  ParseContext& context_;
  SeriesRules rules_;
  std::vector<RttSample>& samples_;
  Session session_;
  std::vector<std::size_t> session_starts_;
  std::vector<Hint> hints_;
  Nanoseconds coarsest_resolution_{0};  // of the printed send times
  Nanoseconds summary_elapsed_{0};
  std::uint64_t summary_gaps_ = 0;
  bool reserved_ = false;
  std::vector<std::size_t> unreadable_;  // slots whose reply could not be read
  std::uint64_t unplaced_ = 0;           // unplaced_reply() calls since the last observation
};

}  // namespace shaper::trace_detail
