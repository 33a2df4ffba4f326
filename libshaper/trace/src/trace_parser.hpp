#pragma once
// What the format parsers share: where diagnostics go, how lines and bytes reach them, and the
// factory for each format. The driver (trace.cpp) detects the format, reads the input in chunks
// and feeds one of these parsers; none of them sees more than one line (or one JSON token) at a
// time.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "shaper/trace.hpp"

namespace shaper::trace_detail {

// Keeps the first `limit` diagnostics and counts the rest, so that a million bad lines cost a
// counter, not a million strings.
class DiagnosticSink {
 public:
  DiagnosticSink(std::string source, std::size_t limit, Diagnostics& out)
      : source_(std::move(source)), limit_(limit), out_(out) {}

  // "source:line:column: message"; line and column are 1-based, the column counts bytes.
  void at(std::uint64_t line, std::size_t column, std::string_view message);
  // "source#/json/pointer: message".
  void at_pointer(std::string_view pointer, std::string_view message);
  // "source: message", for what concerns the whole capture.
  void general(std::string_view message);
  // Like general(), but never held back: totals the reader must see even after many diagnostics.
  void summary(std::string_view message);
  // Appends "and K more" when some were held back.
  void finish();

  const std::string& source() const { return source_; }

 private:
  bool room() {
    if (shown_ < limit_) {
      ++shown_;
      return true;
    }
    ++held_back_;
    return false;
  }
  std::string source_;
  std::size_t limit_;
  Diagnostics& out_;
  std::size_t shown_ = 0;
  std::size_t held_back_ = 0;
};

struct ParseContext {
  Trace& trace;
  const ParseOptions& options;
  DiagnosticSink& diagnostics;
  // Bytes of input, when known: lets the sample vector be sized once instead of doubling (which
  // would briefly need three times the final memory on a 2.6 M-sample capture).
  std::size_t size_hint = 0;

  // A line no rule of the format matched: counted, and reported with a quotation of it.
  void unrecognised(std::uint64_t line, std::string_view text, std::string_view format_name);
  // A line that starts like a known form but breaks it at `column` (1-based): counted as
  // unrecognised and reported as "expected ...".
  void malformed(std::uint64_t line, std::size_t column, std::string_view message);
  // A record shaped like a reply (hop, interval) whose value cannot be read or is out of range:
  // reported like malformed() and counted in Trace::unreadable_records. What it says about its
  // probe is decided by the caller (never a loss).
  void unreadable(std::uint64_t line, std::size_t column, std::string_view message);
};

// Line formats get one line at a time, without its terminator (LF, CRLF), at most kMaxLineBytes.
class LineParser {
 public:
  virtual ~LineParser() = default;
  virtual void line(std::string_view text, std::uint64_t number) = 0;
  virtual void finish() = 0;
};

std::unique_ptr<LineParser> make_ping_parser(ParseContext& context);
std::unique_ptr<LineParser> make_fping_parser(ParseContext& context);
std::unique_ptr<LineParser> make_mtr_report_parser(ParseContext& context);
std::unique_ptr<LineParser> make_epoch_rtt_parser(ParseContext& context);
std::unique_ptr<LineParser> make_csv_parser(ParseContext& context);

// Detection: whether a line is a CSV/TSV header naming an RTT column.
bool looks_like_csv_header(std::string_view line);

// The bytes of a capture, a chunk at a time; an empty view means the end. A view stays valid until
// the next call.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  virtual std::string_view next() = 0;
};

// JSON formats pull bytes themselves (nlohmann's SAX parser), starting with `first`, the chunk the
// driver already read for detection.
void parse_mtr_json(ChunkSource& source, std::string_view first, ParseContext& context);
void parse_iperf3_json(ChunkSource& source, std::string_view first, ParseContext& context);

}  // namespace shaper::trace_detail
