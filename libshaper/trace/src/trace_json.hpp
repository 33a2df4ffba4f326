#pragma once
// JSON captures (mtr --json, iperf3 --json) read as a stream of (path, scalar) pairs through
// nlohmann's SAX parser: no document tree is built, the bytes are pulled from the ChunkSource as
// the parser needs them, and a syntax error becomes one diagnostic with line and column instead of
// an exception. The format parsers then turn the scalars they know into typed structs.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "trace_parser.hpp"

namespace shaper::trace_detail {

// One step of the path to a value: an object key or an array index.
struct JsonStep {
  std::string_view key;  // empty for an array element
  std::size_t index = 0;
  bool is_index = false;

  bool is(std::string_view name) const { return !is_index && key == name; }
};
using JsonPath = std::span<const JsonStep>;

struct JsonScalar {
  enum class Kind { kNull, kBool, kInteger, kFloat, kString };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;         // kInteger and kFloat
  std::int64_t integer = 0;  // kInteger
  std::string_view string;   // kString, valid during the callback only

  // A number, or a string holding one (older mtr prints "count": "1").
  std::optional<double> as_number() const;
  std::optional<std::uint64_t> as_count() const;
};

class JsonVisitor {
 public:
  virtual ~JsonVisitor() = default;
  // False stops the parse: the visitor has read all it will keep (a bound on records was met).
  virtual bool scalar(JsonPath path, const JsonScalar& value) = 0;
};

// Counts a JSON record (an mtr hop, an iperf3 interval) once in Trace::unreadable_records however
// many of its values cannot be read; records arrive in index order.
class UnreadableRecords {
 public:
  explicit UnreadableRecords(Trace& trace) : trace_(trace) {}
  void mark(std::size_t index) {
    if (last_ == index) return;
    last_ = index;
    ++trace_.unreadable_records;
  }

 private:
  Trace& trace_;
  std::optional<std::size_t> last_;
};

// "/report/hubs/0/Avg".
std::string json_pointer(JsonPath path);

// Parses the whole source (starting with `first`), handing every scalar to `visitor`; counts the
// lines into context.trace.lines. Strings and numbers longer than 64 KiB and nesting deeper than
// 64 levels end the parse with a diagnostic, so memory stays bounded whatever the document. Returns
// false after such an error or a syntax error (already reported); true when the document was read
// or the visitor stopped it.
bool parse_json(ChunkSource& source, std::string_view first, ParseContext& context,
                JsonVisitor& visitor);

}  // namespace shaper::trace_detail
