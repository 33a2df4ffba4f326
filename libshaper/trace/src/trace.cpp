// The trace driver: reads the capture in fixed-size chunks, detects the format from the first
// kDetectionBytes, splits lines (capped at kMaxLineBytes) for the line formats and hands the
// bytes to the JSON formats.
#include "shaper/trace.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "trace_parser.hpp"
#include "trace_scan.hpp"

namespace shaper {

namespace trace_detail {

void DiagnosticSink::at(std::uint64_t line, std::size_t column, std::string_view message) {
  if (!room()) return;
  out_.push_back(Diagnostic{source_ + ':' + std::to_string(line) + ':' + std::to_string(column),
                            std::string(message)});
}

void DiagnosticSink::at_pointer(std::string_view pointer, std::string_view message) {
  if (!room()) return;
  out_.push_back(Diagnostic{source_ + '#' + std::string(pointer), std::string(message)});
}

void DiagnosticSink::general(std::string_view message) {
  if (!room()) return;
  out_.push_back(Diagnostic{source_, std::string(message)});
}

void DiagnosticSink::summary(std::string_view message) {
  out_.push_back(Diagnostic{source_, std::string(message)});
}

void DiagnosticSink::finish() {
  if (held_back_ == 0) return;
  out_.push_back(Diagnostic{source_, "and " + std::to_string(held_back_) + " more"});
  held_back_ = 0;
}

void ParseContext::unrecognised(std::uint64_t line, std::string_view text, std::string_view what) {
  ++trace.unrecognised_lines;
  diagnostics.at(line, 1, "unrecognised " + std::string(what) + ": " + quote_preview(text));
}

void ParseContext::malformed(std::uint64_t line, std::size_t column, std::string_view message) {
  ++trace.unrecognised_lines;
  diagnostics.at(line, column, message);
}

void ParseContext::unreadable(std::uint64_t line, std::size_t column, std::string_view message) {
  ++trace.unreadable_records;
  malformed(line, column, message);
}

}  // namespace trace_detail

namespace {

using namespace trace_detail;

// Big enough that read(2) costs nothing per byte, small enough to stay in the L2 cache while the
// parser walks it.
constexpr std::size_t kReadChunkBytes = 256 * 1024;

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

class FileSource final : public ChunkSource {
 public:
  explicit FileSource(const std::string& path)
      : path_(path),
        fd_(static_cast<int>(
            check_syscall(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "open", path))),
        buffer_(kReadChunkBytes) {}

  // Fills the whole buffer when the file has that much, so that detection sees kDetectionBytes
  // even from a pipe that delivers a few bytes at a time.
  std::string_view next() override {
    std::size_t filled = 0;
    while (filled < buffer_.size()) {
      const ssize_t n = ::read(fd_.get(), buffer_.data() + filled, buffer_.size() - filled);
      if (n < 0 && errno == EINTR) continue;
      check_syscall(n, "read", path_);
      if (n == 0) break;
      filled += static_cast<std::size_t>(n);
    }
    return {buffer_.data(), filled};
  }

  // The file's size when it is a regular file, else 0.
  std::size_t size() const {
    struct stat status {};
    if (::fstat(fd_.get(), &status) != 0 || !S_ISREG(status.st_mode)) return 0;
    return static_cast<std::size_t>(status.st_size);
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<char> buffer_;
};

class TextSource final : public ChunkSource {
 public:
  explicit TextSource(std::string_view text) : text_(text) {}
  std::string_view next() override { return std::exchange(text_, std::string_view{}); }

 private:
  std::string_view text_;
};

// Cuts chunks into lines for a LineParser. Lines inside a chunk are passed as views into it; only
// a line that straddles two chunks is copied. Lines longer than kMaxLineBytes are skipped as they
// stream by, so hostile input (one endless line) costs at most kMaxLineBytes of memory.
class LineSplitter {
 public:
  LineSplitter(LineParser& parser, ParseContext& context) : parser_(parser), context_(context) {}

  void feed(std::string_view chunk) {
    while (!chunk.empty()) {
      const void* newline = std::memchr(chunk.data(), '\n', chunk.size());
      if (newline == nullptr) {
        take_partial(chunk);
        return;
      }
      const auto length =
          static_cast<std::size_t>(static_cast<const char*>(newline) - chunk.data());
      const std::string_view piece = chunk.substr(0, length);
      chunk.remove_prefix(length + 1);
      if (overlong_ || !carry_.empty()) {
        take_partial(piece);
        end_carried_line();
      } else {
        deliver(piece);
      }
    }
  }

  void finish() {
    if (overlong_ || !carry_.empty()) end_carried_line();
  }

 private:
  void take_partial(std::string_view piece) {
    if (overlong_) return;
    if (carry_.size() + piece.size() > kMaxLineBytes + 1) {  // +1: a CR may still be cut off
      overlong_ = true;
      carry_.clear();
      carry_.shrink_to_fit();
      return;
    }
    carry_.append(piece);
  }

  void end_carried_line() {
    if (overlong_) {
      overlong_ = false;
      skip_overlong();
      return;
    }
    deliver(carry_);
    carry_.clear();
  }

  void deliver(std::string_view text) {
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.size() > kMaxLineBytes) {
      skip_overlong();
      return;
    }
    ++line_;
    ++context_.trace.lines;
    if (line_ == 1 && starts_with(text, kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
    parser_.line(text, line_);
  }

  void skip_overlong() {
    ++line_;
    ++context_.trace.lines;
    ++context_.trace.unrecognised_lines;
    context_.diagnostics.at(line_, kMaxLineBytes + 1,
                            "line longer than " + std::to_string(kMaxLineBytes) +
                                " bytes; skipped (no capture format has lines this long)");
  }

  LineParser& parser_;
  ParseContext& context_;
  std::string carry_;
  bool overlong_ = false;
  std::uint64_t line_ = 0;
};

// Lines of the rest of the input, for a capture whose format is unknown.
void count_lines(ChunkSource& source, std::string_view first, Trace& trace) {
  std::size_t newlines = 0;
  bool open_line = false;
  for (std::string_view chunk = first; !chunk.empty(); chunk = source.next()) {
    for (const char c : chunk) newlines += c == '\n';
    open_line = chunk.back() != '\n';
  }
  trace.lines = newlines + (open_line ? 1 : 0);
  trace.unrecognised_lines = trace.lines;
}

// The count of unreadable records, past the diagnostics limit: a reader who sees only the first 20
// lines must still learn how many replies were left out.
void summarise_unreadable(const Trace& trace, DiagnosticSink& diagnostics) {
  const std::size_t count = trace.unreadable_records;
  if (count == 0) return;
  const std::string n = std::to_string(count);
  switch (trace.format) {
    case TraceFormat::kMtrReport:
    case TraceFormat::kMtrJson:
      diagnostics.summary(n + (count == 1 ? " hop has" : " hops have") +
                          " values that could not be read; they are left out of the hop");
      break;
    case TraceFormat::kIperf3Json:
      diagnostics.summary(n + (count == 1 ? " interval has" : " intervals have") +
                          " values that could not be read; they are left out of the interval");
      break;
    case TraceFormat::kEpochRtt:
    case TraceFormat::kCsv:
      diagnostics.summary(n + (count == 1 ? " row" : " rows") +
                          " could not be read; left out of the samples: neither delivered nor "
                          "lost");
      break;
    default:
      diagnostics.summary(n + (count == 1 ? " reply" : " replies") +
                          " could not be read; left out of the samples: neither delivered nor "
                          "lost");
      break;
  }
}

std::unique_ptr<LineParser> make_line_parser(TraceFormat format, ParseContext& context) {
  switch (format) {
    case TraceFormat::kPing:
      return make_ping_parser(context);
    case TraceFormat::kFping:
      return make_fping_parser(context);
    case TraceFormat::kMtrReport:
      return make_mtr_report_parser(context);
    case TraceFormat::kEpochRtt:
      return make_epoch_rtt_parser(context);
    case TraceFormat::kCsv:
      return make_csv_parser(context);
    case TraceFormat::kAuto:
    case TraceFormat::kMtrJson:
    case TraceFormat::kIperf3Json:
      break;
  }
  return nullptr;
}

Trace parse_source(ChunkSource& source, std::string_view source_name, const ParseOptions& options,
                   std::size_t size_hint) {
  Trace trace;
  trace.source_name = std::string(source_name);
  DiagnosticSink diagnostics(trace.source_name, options.max_diagnostics, trace.diagnostics);
  ParseContext context{trace, options, diagnostics, size_hint};

  const std::string_view first = source.next();
  if (first.empty()) {
    trace.format = options.format;
    diagnostics.general("the capture is empty");
    diagnostics.finish();
    return trace;
  }
  TraceFormat format = options.format;
  if (format == TraceFormat::kAuto) {
    const auto detected = detect_trace_format(first.substr(0, kDetectionBytes));
    if (!detected) {
      diagnostics.at(1, 1,
                     "cannot tell the capture format from its first " +
                         std::to_string(kDetectionBytes) +
                         " bytes; name it: ping, fping, mtr-report, mtr-json, iperf3-json, "
                         "epoch-rtt or csv");
      count_lines(source, first, trace);
      diagnostics.finish();
      return trace;
    }
    format = *detected;
  }
  trace.format = format;

  if (format == TraceFormat::kMtrJson) {
    parse_mtr_json(source, first, context);
  } else if (format == TraceFormat::kIperf3Json) {
    parse_iperf3_json(source, first, context);
  } else {
    const std::unique_ptr<LineParser> parser = make_line_parser(format, context);
    LineSplitter splitter(*parser, context);
    for (std::string_view chunk = first; !chunk.empty(); chunk = source.next())
      splitter.feed(chunk);
    splitter.finish();
    parser->finish();
  }
  summarise_unreadable(trace, diagnostics);
  diagnostics.finish();
  return trace;
}

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

// "host : 0.05 0.06 - 0.05": fping's -C list.
bool is_fping_list(std::string_view body) {
  const std::size_t separator = body.find(" : ");
  if (separator == std::string_view::npos || separator == 0) return false;
  std::size_t tokens = 0;
  std::size_t position = separator + 3;
  while (position < body.size()) {
    while (position < body.size() && is_blank(body[position])) ++position;
    if (position >= body.size()) break;
    std::size_t end = position;
    while (end < body.size() && !is_blank(body[end])) ++end;
    const std::string_view token = body.substr(position, end - position);
    if (token != "-" && !parse_fixed(token, 6)) return false;
    ++tokens;
    position = end;
  }
  return tokens > 0;
}

// "1732971234.123 12.3", "1732971234 -1", "1732971234": an epoch (9+ integer digits) and an RTT.
bool is_epoch_rtt_row(std::string_view line) {
  std::vector<std::string_view> tokens;
  std::size_t position = 0;
  while (position < line.size() && tokens.size() < 3) {
    while (position < line.size() && is_blank(line[position])) ++position;
    if (position >= line.size()) break;
    std::size_t end = position;
    while (end < line.size() && !is_blank(line[end])) ++end;
    tokens.push_back(line.substr(position, end - position));
    position = end;
  }
  if (tokens.empty() || tokens.size() > 2) return false;
  const std::size_t integer_digits = tokens[0].find('.');
  const std::size_t digits =
      integer_digits == std::string_view::npos ? tokens[0].size() : integer_digits;
  if (digits < 9 || !parse_fixed(tokens[0], 9)) return false;
  return tokens.size() == 1 || parse_fixed(tokens[1], 6) || tokens[1] == "-" || tokens[1] == "nan";
}

}  // namespace

std::size_t Trace::lost() const {
  std::size_t count = 0;
  for (const auto& sample : samples) count += sample.lost() ? 1 : 0;
  return count;
}

std::string_view to_string(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kPing:
      return "ping";
    case TraceFormat::kFping:
      return "fping";
    case TraceFormat::kMtrReport:
      return "mtr-report";
    case TraceFormat::kMtrJson:
      return "mtr-json";
    case TraceFormat::kIperf3Json:
      return "iperf3-json";
    case TraceFormat::kEpochRtt:
      return "epoch-rtt";
    case TraceFormat::kCsv:
      return "csv";
  }
  return "unknown";
}

std::optional<TraceFormat> trace_format_from_name(std::string_view name) {
  for (const TraceFormat format :
       {TraceFormat::kAuto, TraceFormat::kPing, TraceFormat::kFping, TraceFormat::kMtrReport,
        TraceFormat::kMtrJson, TraceFormat::kIperf3Json, TraceFormat::kEpochRtt,
        TraceFormat::kCsv}) {
    if (to_string(format) == name) return format;
  }
  if (name == "tsv") return TraceFormat::kCsv;
  return std::nullopt;
}

std::optional<TraceFormat> detect_trace_format(std::string_view head) {
  if (head.size() > kDetectionBytes) head = head.substr(0, kDetectionBytes);
  if (starts_with(head, kUtf8Bom)) head.remove_prefix(kUtf8Bom.size());
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::nullopt;
  if (head[first] == '{') {
    if (contains(head, "\"hubs\"") || contains(head, "\"mtr\"")) return TraceFormat::kMtrJson;
    if (contains(head, "\"intervals\"") || contains(head, "\"test_start\"") ||
        contains(head, "\"connecting_to\"") || contains(head, "\"iperf")) {
      return TraceFormat::kIperf3Json;
    }
    return std::nullopt;
  }
  // A head cut at kDetectionBytes ends inside a line: leave that line out.
  if (head.size() == kDetectionBytes) {
    if (const std::size_t last = head.rfind('\n'); last != std::string_view::npos) {
      head = head.substr(0, last);
    }
  }
  // Votes: strong marks of a tool count more than shapes any format could share.
  int ping = 0, fping = 0, mtr = 0, csv = 0, epoch_rtt = 0;
  bool first_content_line = true;
  std::size_t position = 0;
  while (position < head.size()) {
    std::size_t end = head.find('\n', position);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(position, end - position);
    position = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view trimmed = trim(line);
    if (trimmed.empty()) continue;
    if (std::exchange(first_content_line, false) && looks_like_csv_header(line)) {
      csv += 10;
      continue;
    }
    if (trimmed.front() == '#') continue;
    const StampedLine stamped = strip_timestamp_prefixes(line, std::chrono::minutes{0});
    const std::string_view body = line.substr(stamped.body_offset);

    if (starts_with(body, "PING ") || starts_with(body, "PING6(")) ping += 4;
    if (contains(body, " bytes from ") && contains(body, "seq=")) ping += 3;
    if ((starts_with(body, "From ") && contains(body, "icmp_seq=")) ||
        starts_with(body, "no answer yet for icmp_seq=") ||
        starts_with(body, "Request timeout for icmp_seq ")) {
      ping += 3;
    }
    if (contains(body, " packets transmitted, ") ||
        (starts_with(body, "--- ") && contains(body, " ping statistics ---"))) {
      ping += 2;
    }

    if (contains(body, " : [") && (contains(body, " bytes, ") || contains(body, "timed out")))
      fping += 4;
    if (contains(body, " : xmt/rcv/%loss = ")) fping += 4;
    if (is_fping_list(body)) fping += 3;
    if (contains(body, " is alive") || contains(body, " is unreachable")) fping += 2;

    if (starts_with(trimmed, "HOST:") && contains(trimmed, "Loss%")) mtr += 6;
    if (starts_with(trimmed, "Start: ")) mtr += 1;
    if (const auto hop = scan_unsigned(trimmed);
        hop && starts_with(trimmed.substr(hop->length), ".|--")) {
      mtr += 3;
    }

    if (is_epoch_rtt_row(line)) epoch_rtt += 1;
    if (contains(line, ",") && !contains(line, " ")) csv += 1;
  }
  const int best = std::max({ping, fping, mtr, csv, epoch_rtt});
  if (best == 0) return std::nullopt;
  if (ping == best) return TraceFormat::kPing;
  if (fping == best) return TraceFormat::kFping;
  if (mtr == best) return TraceFormat::kMtrReport;
  if (csv == best) return TraceFormat::kCsv;
  return TraceFormat::kEpochRtt;
}

Trace parse_trace_file(const std::string& path, const ParseOptions& options) {
  FileSource source(path);
  return parse_source(source, path, options, source.size());
}

Trace parse_trace_text(std::string_view text, std::string_view source_name,
                       const ParseOptions& options) {
  TextSource source(text);
  return parse_source(source, source_name, options, text.size());
}

}  // namespace shaper
