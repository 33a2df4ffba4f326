// libFuzzer target for the trace parsers: one binary per format (JITTERD_FUZZ_FORMAT names it;
// kAuto runs detection and then whichever parser it picks). Hostile input must never crash, abort,
// hang or trip a sanitizer, and every line must be accounted for (recognised or counted as
// unrecognised).
//
// Every binary also checks an oracle (issue 21 §7): a record shaped like a reply is never counted
// as a lost probe, whatever its value. The first line of the input becomes the RTT of the middle
// reply of three, in ping, fping and CSV form; that probe must come out delivered (readable value)
// or unreadable (left out, counted, reported), never lost.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shaper/trace.hpp"

namespace {

// The middle probe (seq 1) of `text`, parsed as `format`: delivered, or left out as unreadable with
// a diagnostic; never lost, and the probes around it untouched.
void check_reply_is_never_lost(const std::string& text, shaper::TraceFormat format) {
  shaper::ParseOptions options;
  options.format = format;
  const shaper::Trace trace = shaper::parse_trace_text(text, "oracle", options);
  if (trace.lost() != 0) std::abort();
  bool delivered = false;
  for (const auto& sample : trace.samples) delivered = delivered || sample.seq == 1;
  if (delivered) {
    if (trace.samples.size() != 3 || trace.unreadable_records != 0) std::abort();
  } else {
    if (trace.samples.size() != 2 || trace.unreadable_records != 1) std::abort();
    if (trace.diagnostics.empty()) std::abort();
  }
}

// Words that mean "no reply" in a CSV RTT field (trace_columns.cpp): a loss by the file's own say.
bool is_csv_lost_word(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  for (const std::string_view word :
       {"", "-1", "-", "nan", "NaN", "NAN", "lost", "timeout", "null"}) {
    if (text == word) return true;
  }
  return false;
}

void reply_oracle(std::string_view input) {
  // One line's worth: the parsers split at '\n' and drop a '\r' before it. At most 4 KiB, so that
  // the line stays far below kMaxLineBytes (a longer line is skipped unread, whatever it holds).
  std::string value(input.substr(0, std::min(input.find('\n'), std::size_t{4096})));
  for (char& c : value) {
    if (c == '\r') c = ' ';
  }
  const std::string ping_prefix = "64 bytes from 192.0.2.7: icmp_seq=";
  check_reply_is_never_lost(ping_prefix + "0 ttl=57 time=12.3 ms\n" + ping_prefix +
                                "1 ttl=57 time=" + value + " ms\n" + ping_prefix +
                                "2 ttl=57 time=12.5 ms\n",
                            shaper::TraceFormat::kPing);
  const std::string fping_prefix = "192.0.2.7 : [";
  check_reply_is_never_lost(fping_prefix + "0], 64 bytes, 12.3 ms (12.3 avg, 0% loss)\n" +
                                fping_prefix + "1], 64 bytes, " + value +
                                " ms (12.3 avg, 0% loss)\n" + fping_prefix +
                                "2], 64 bytes, 12.5 ms (12.4 avg, 0% loss)\n",
                            shaper::TraceFormat::kFping);
  // A CSV field ends at the separator and a quote opens a quoted field: keep the value one field.
  std::string field;
  for (const char c : value) {
    if (c != ',' && c != '"') field += c;
  }
  if (!is_csv_lost_word(field)) {
    check_reply_is_never_lost("seq,rtt_ms\n0,12.3\n1," + field + "\n2,12.5\n",
                              shaper::TraceFormat::kCsv);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  shaper::ParseOptions options;
  options.format = shaper::TraceFormat::JITTERD_FUZZ_FORMAT;
  const shaper::Trace trace = shaper::parse_trace_text(text, "fuzz", options);
  // Invariants that hold for any input.
  if (trace.unrecognised_lines > trace.lines) std::abort();
  // The first max_diagnostics, the count of unreadable records, "and K more".
  if (trace.diagnostics.size() > options.max_diagnostics + 2) std::abort();
  for (std::size_t i = 1; i < trace.samples.size(); ++i) {
    if (trace.samples[i].seq <= trace.samples[i - 1].seq) std::abort();  // probe order
  }
  reply_oracle(text);
  return 0;
}
