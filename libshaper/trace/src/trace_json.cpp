#include "trace_json.hpp"

#include <cstddef>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "shaper/json_reader.hpp"
#include "trace_scan.hpp"

namespace shaper::trace_detail {

namespace {

// Deeper nesting than this is not an mtr or iperf3 document; refusing it bounds the path stack.
constexpr std::size_t kMaxJsonDepth = 64;

// The longest string or number read. nlohmann's lexer holds the token being read whole (twice: its
// value and its text for error messages), so one endless string would cost twice the file in
// memory; the longest strings in mtr and iperf3 documents are host names, cookies and error texts,
// far below this (it matches kMaxLineBytes of the text formats).
constexpr std::size_t kMaxJsonTokenBytes = 64 * 1024;

// The bytes of the capture, pulled one at a time by nlohmann's lexer, counting lines on the way.
// It follows strings and bare tokens (numbers, literals) as they pass, and ends the input when one
// grows beyond kMaxJsonTokenBytes, so the lexer's token buffer stays bounded whatever the file.
class JsonInput {
 public:
  JsonInput(ChunkSource& source, std::string_view first) : source_(source), chunk_(first) {}

  bool at_end() {
    if (overlong_) return true;
    while (position_ == chunk_.size()) {
      if (exhausted_) return true;
      chunk_ = source_.next();
      position_ = 0;
      if (chunk_.empty()) exhausted_ = true;
    }
    return false;
  }
  char peek() { return at_end() ? '\0' : chunk_[position_]; }
  void advance() {
    if (at_end()) return;
    const char c = chunk_[position_++];
    if (c == '\n') {
      ++newlines_;
      column_ = 0;
      open_line_ = false;
    } else {
      ++column_;
      open_line_ = true;
    }
    follow_token(c);
  }
  // Lines read so far, counting an unterminated last one.
  std::size_t lines() const { return newlines_ + (open_line_ ? 1 : 0); }
  // The input was cut because a string or number passed kMaxJsonTokenBytes; where it started.
  bool overlong() const { return overlong_; }
  std::uint64_t overlong_line() const { return token_line_; }
  std::size_t overlong_column() const { return token_column_; }
  // Reads the rest without keeping it, counting lines (not after an overlong token: a hostile
  // document is not read further than that).
  void drain() {
    while (!at_end()) {
      const char c = chunk_[position_++];
      newlines_ += c == '\n';
      open_line_ = c != '\n';
    }
  }

 private:
  void follow_token(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
        token_bytes_ = 0;
        return;
      }
    } else if (c == '"') {
      in_string_ = true;
      token_bytes_ = 0;
      mark_token_start();
      return;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':' ||
               c == '[' || c == ']' || c == '{' || c == '}') {
      token_bytes_ = 0;
      return;
    } else if (token_bytes_ == 0) {
      mark_token_start();
    }
    if (++token_bytes_ > kMaxJsonTokenBytes) overlong_ = true;
  }
  void mark_token_start() {
    token_line_ = newlines_ + 1;
    token_column_ = column_;
  }

 private:
  ChunkSource& source_;
  std::string_view chunk_;
  std::size_t position_ = 0;
  bool exhausted_ = false;
  std::size_t newlines_ = 0;
  std::size_t column_ = 0;  // bytes of the current line read so far
  bool open_line_ = false;
  bool in_string_ = false;
  bool escaped_ = false;
  std::size_t token_bytes_ = 0;
  std::uint64_t token_line_ = 0;
  std::size_t token_column_ = 0;
  bool overlong_ = false;
};

class JsonByteIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;

  JsonByteIterator() = default;  // the end
  explicit JsonByteIterator(JsonInput& input) : input_(&input) {}

  char operator*() const { return input_->peek(); }
  JsonByteIterator& operator++() {
    input_->advance();
    return *this;
  }
  JsonByteIterator operator++(int) {
    JsonByteIterator copy = *this;
    input_->advance();
    return copy;
  }
  bool operator==(const JsonByteIterator& other) const { return at_end() == other.at_end(); }

 private:
  bool at_end() const { return input_ == nullptr || input_->at_end(); }
  JsonInput* input_ = nullptr;
};

// "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..." ->
// line 3, column 5, "syntax error ...".
struct JsonErrorPlace {
  std::uint64_t line = 0;
  std::size_t column = 0;
  std::string message;
};
JsonErrorPlace place_of(std::string_view what) {
  JsonErrorPlace place;
  place.message = std::string(what);
  const std::size_t line_key = what.find("at line ");
  if (line_key == std::string_view::npos) return place;
  const auto line = scan_unsigned(what.substr(line_key + 8));
  if (!line) return place;
  const std::string_view after_line = what.substr(line_key + 8 + line->length);
  if (!starts_with(after_line, ", column ")) return place;
  const auto column = scan_unsigned(after_line.substr(9));
  if (!column) return place;
  const std::string_view rest = after_line.substr(9 + column->length);
  place.line = static_cast<std::uint64_t>(line->value);
  place.column = static_cast<std::size_t>(column->value);
  place.message = std::string(starts_with(rest, ": ") ? rest.substr(2) : rest);
  return place;
}

class PathSax {
 public:
  using json = nlohmann::json;

  PathSax(JsonVisitor& visitor, ParseContext& context, JsonInput& input)
      : visitor_(visitor), context_(context), input_(input) {}

  bool null() { return scalar(JsonScalar{}); }
  bool boolean(bool value) {
    JsonScalar scalar_value;
    scalar_value.kind = JsonScalar::Kind::kBool;
    scalar_value.boolean = value;
    return scalar(scalar_value);
  }
  bool number_integer(json::number_integer_t value) {
    JsonScalar scalar_value;
    scalar_value.kind = JsonScalar::Kind::kInteger;
    scalar_value.integer = value;
    scalar_value.number = static_cast<double>(value);
    return scalar(scalar_value);
  }
  bool number_unsigned(json::number_unsigned_t value) {
    JsonScalar scalar_value;
    scalar_value.kind = JsonScalar::Kind::kInteger;
    scalar_value.integer = value > static_cast<json::number_unsigned_t>(INT64_MAX)
                               ? INT64_MAX
                               : static_cast<std::int64_t>(value);
    scalar_value.number = static_cast<double>(value);
    return scalar(scalar_value);
  }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) {
    JsonScalar scalar_value;
    scalar_value.kind = JsonScalar::Kind::kFloat;
    scalar_value.number = value;
    return scalar(scalar_value);
  }
  bool string(json::string_t& value) {
    JsonScalar scalar_value;
    scalar_value.kind = JsonScalar::Kind::kString;
    scalar_value.string = value;
    return scalar(scalar_value);
  }
  bool binary(json::binary_t& /*value*/) { return scalar(JsonScalar{}); }

  bool start_object(std::size_t /*elements*/) { return open(false); }
  bool key(json::string_t& name) {
    frames_.back().key = name;
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) { return open(true); }
  bool end_array() {
    frames_.pop_back();
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    if (input_.overlong()) {
      // The lexer saw the input end inside the token JsonInput cut: say why instead.
      context_.diagnostics.at(input_.overlong_line(), input_.overlong_column(),
                              "a JSON string or number longer than " +
                                  std::to_string(kMaxJsonTokenBytes) +
                                  " bytes; not an mtr or iperf3 document (read up to here)");
      return false;
    }
    const JsonErrorPlace place = place_of(error.what());
    if (place.line > 0) {
      context_.diagnostics.at(place.line, place.column, "invalid JSON: " + place.message);
    } else {
      context_.diagnostics.general("invalid JSON: " + place.message);
    }
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool stopped() const { return stopped_; }

 private:
  struct Frame {
    bool array = false;
    std::string key;
    std::size_t next_index = 0;
  };

  // A value starts: inside an array it takes the next index.
  void enter_value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().next_index;
  }
  bool open(bool array) {
    enter_value();
    if (frames_.size() >= kMaxJsonDepth) {
      too_deep_ = true;
      context_.diagnostics.at(input_.lines() == 0 ? 1 : input_.lines(), 1,
                              "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                  " levels; not an mtr or iperf3 document");
      return false;
    }
    frames_.push_back(Frame{array, {}, 0});
    return true;
  }
  bool scalar(const JsonScalar& value) {
    enter_value();
    steps_.clear();
    for (const Frame& frame : frames_) {
      JsonStep step;
      if (frame.array) {
        step.is_index = true;
        step.index = frame.next_index - 1;
      } else {
        step.key = frame.key;
      }
      steps_.push_back(step);
    }
    if (!visitor_.scalar(JsonPath(steps_), value)) stopped_ = true;
    return !stopped_;
  }

  JsonVisitor& visitor_;
  ParseContext& context_;
  JsonInput& input_;
  std::vector<Frame> frames_;
  std::vector<JsonStep> steps_;
  bool too_deep_ = false;
  bool stopped_ = false;  // the visitor had read enough
};

}  // namespace

std::optional<double> JsonScalar::as_number() const {
  if (kind == Kind::kInteger || kind == Kind::kFloat) return number;
  if (kind == Kind::kString) return parse_double(string);
  return std::nullopt;
}

std::optional<std::uint64_t> JsonScalar::as_count() const {
  if (kind == Kind::kInteger) {
    return integer >= 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(integer))
                        : std::nullopt;
  }
  if (kind == Kind::kString) return parse_unsigned(string);
  return std::nullopt;
}

std::string json_pointer(JsonPath path) {
  std::string pointer;
  for (const JsonStep& step : path) {
    pointer += '/';
    if (step.is_index) {
      pointer += std::to_string(step.index);
      continue;
    }
    pointer += pointer_escape(step.key);
  }
  return pointer;
}

bool parse_json(ChunkSource& source, std::string_view first, ParseContext& context,
                JsonVisitor& visitor) {
  JsonInput input(source, first);
  PathSax sax(visitor, context, input);
  const bool ok = nlohmann::json::sax_parse(JsonByteIterator(input), JsonByteIterator(), &sax);
  // Count the lines of whatever the parser left unread too, so that `lines` means the document
  // (up to an overlong token, where reading stopped).
  input.drain();
  context.trace.lines = input.lines();
  return sax.stopped() || (ok && !sax.too_deep());
}

}  // namespace shaper::trace_detail
