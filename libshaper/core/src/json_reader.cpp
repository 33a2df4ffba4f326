#include "shaper/json_reader.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "shaper/quantities.hpp"

namespace shaper {

namespace {

using json = nlohmann::json;

// `out` cut to `max_chars` bytes, not inside a UTF-8 sequence, with "..." after it.
void cut(std::string& out, std::size_t max_chars) {
  if (out.size() <= max_chars) return;
  std::size_t end = max_chars;
  while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80)
    --end;  // a continuation byte
  out.resize(end);
  out += "...";
}

// The first pass of parse_json_bounded: builds nothing, stops at the first problem. Memory: a frame
// per open level (at most max_depth) and the keys of the objects still open (at most the text).
class BoundedScan final : public nlohmann::json_sax<json> {
 public:
  explicit BoundedScan(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      return fail(JsonProblem::kDuplicateKey, pointer(),
                  "the key \"" + text_excerpt(k) +
                      "\" appears twice in one object; a JSON reader keeps one of them silently, "
                      "so neither is "
                      "read: remove one");
    }
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t byte, const std::string&,
                   const nlohmann::detail::exception& e) override {
    byte_ = byte;
    return fail(JsonProblem::kSyntax, "", json_parser_words(e.what()));
  }

  JsonProblem problem() const { return problem_; }
  std::size_t byte() const { return byte_; }
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    bool object;
    std::size_t index = 0;  // arrays: the element being read
    std::string key;        // objects: the member being read
    std::set<std::string, std::less<>> keys;
  };

  // The pointer of the value being read, keys cut to excerpts.
  std::string pointer() const {
    std::string out;
    for (const auto& f : frames_) {
      out += "/" + (f.object ? pointer_escape(text_excerpt(f.key)) : std::to_string(f.index));
    }
    return out;
  }
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool open(bool object) {
    if (frames_.size() >= max_depth_) {
      return fail(JsonProblem::kTooDeep, pointer(),
                  "nests deeper than " + std::to_string(max_depth_) + " levels; it was not read");
    }
    frames_.push_back(Frame{object, 0, {}, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  bool fail(JsonProblem problem, std::string where, std::string message) {
    problem_ = problem;
    where_ = std::move(where);
    message_ = std::move(message);
    return false;
  }

  std::size_t max_depth_;
  std::vector<Frame> frames_;
  JsonProblem problem_ = JsonProblem::kNone;
  std::size_t byte_ = 0;
  std::string where_;
  std::string message_;
};

}  // namespace

std::string json_parser_words(std::string what) {
  if (what.starts_with("[json.exception.")) {
    if (const auto p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
  }
  if (what.starts_with("parse error")) {
    if (const auto p = what.find(": "); p != std::string::npos) what.erase(0, p + 2);
  }
  // The quoted token and what follows it: "...; last read: 'TOKEN'", "...; last read: 'TOKEN';
  // expected
  // ..." or "number overflow parsing 'TOKEN'". The token may hold anything, "'; expected " included
  // (found by fuzz_config), so the whole rest is cut, not the token by its quotes.
  for (const std::string_view marker : {"last read: '", "parsing '"}) {
    const auto p = what.find(marker);
    if (p == std::string::npos) continue;
    const auto start = p + marker.size();
    what = what.substr(0, start) +
           text_excerpt(std::string_view(what).substr(start), 2 * kExcerptChars);
    break;
  }
  return what;
}

std::string text_excerpt(std::string_view text, std::size_t max_chars) {
  std::string out;
  std::size_t i = 0;
  for (; i < text.size() && out.size() < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    // A UTF-8 sequence is copied whole when it is one; a lone or broken byte is shown as \xNN.
    const std::size_t length = c < 0x80           ? 1
                               : (c >> 5) == 0x6  ? 2
                               : (c >> 4) == 0xE  ? 3
                               : (c >> 3) == 0x1E ? 4
                                                  : 0;
    bool sequence = length > 1 && i + length <= text.size();
    for (std::size_t k = 1; sequence && k < length; ++k) {
      sequence = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (sequence) {
      out.append(text.substr(i, length));
      i += length - 1;
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (i < text.size()) {  // more to come: an escape may have gone past the limit
    cut(out, max_chars);
    if (!out.ends_with("...")) out += "...";
  }
  return out;
}

std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars) {
  // A walk with its own stack: each level it enters writes a character first, so the stack never
  // holds more frames than the excerpt has characters.
  struct Frame {
    const json* container;
    json::const_iterator next;
    bool first = true;
  };
  std::vector<Frame> stack;
  std::string out;
  const json* pending = &value;
  while (out.size() <= max_chars) {
    if (pending) {
      const json& v = *pending;
      pending = nullptr;
      if (v.is_object() || v.is_array()) {
        out += v.is_object() ? '{' : '[';
        stack.push_back({&v, v.cbegin()});
      } else if (v.is_string()) {
        // Only the start of a long string is serialised.
        const auto& s = v.get_ref<const std::string&>();
        out +=
            json(s.substr(0, max_chars + 1)).dump(-1, ' ', false, json::error_handler_t::replace);
        if (s.size() > max_chars + 1) out.pop_back();  // the string goes on: no closing quote
      } else {
        out += v.dump();  // a number, true, false or null
      }
    }
    if (stack.empty()) break;
    Frame& f = stack.back();
    if (f.next == f.container->cend()) {
      out += f.container->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (!f.first) out += ',';
    f.first = false;
    if (f.container->is_object()) {
      out += json(f.next.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
    }
    pending = &*f.next;
    ++f.next;
  }
  cut(out, max_chars);
  return out;
}

std::optional<json> parse_json_object(std::string_view text, std::string_view what,
                                      Diagnostics& out) {
  JsonDocument document = parse_json_bounded(text);
  if (document.problem != JsonProblem::kNone) {
    out.push_back({document.where, std::string(what) + " is not JSON: " + document.message});
    return std::nullopt;
  }
  if (!document.value.is_object()) {
    JsonReader(out).error("", "expected an object, found " + json_excerpt(document.value));
    return std::nullopt;
  }
  return std::move(document.value);
}

JsonDocument parse_json_bounded(std::string_view text, std::size_t max_depth) {
  JsonDocument doc;
  // nlohmann reads a NUL outside a string as the end of the input and would ignore what follows.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    doc.problem = JsonProblem::kSyntax;
    doc.where = json_error_where(text, nul + 1);
    doc.message = "a NUL byte (\\x00); JSON text has none";
    return doc;
  }
  BoundedScan scan(max_depth);
  if (!json::sax_parse(text.begin(), text.end(), &scan) || scan.problem() != JsonProblem::kNone) {
    doc.problem = scan.problem() == JsonProblem::kNone ? JsonProblem::kSyntax : scan.problem();
    doc.where =
        scan.problem() == JsonProblem::kSyntax ? json_error_where(text, scan.byte()) : scan.where();
    doc.message = scan.message();
    return doc;
  }
  doc.value = json::parse(text.begin(), text.end(), nullptr, false);
  // The first pass read the same text with the same parser and found nothing wrong.
  if (doc.value.is_discarded()) std::abort();
  return doc;
}

std::string pointer_escape(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool JsonReader::object(const json& j, const std::string& pointer,
                        std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) {
    error(pointer, "expected an object, found " + std::string(j.type_name()));
    return false;
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      error(pointer + "/" + pointer_escape(text_excerpt(key)),
            "unknown key; expected one of: " + list);
    }
  }
  return true;
}

const JsonReader::json* JsonReader::member(const json& obj, const std::string& pointer,
                                           const char* key, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) error(pointer + "/" + key, "missing; this member is required");
    return nullptr;
  }
  return &*it;
}

std::optional<Probability> JsonReader::probability(const json& obj, const std::string& pointer,
                                                   const char* key) {
  const json* v = member(obj, pointer, key, false);
  if (!v) return Probability::zero();
  if (!v->is_number()) {
    error(pointer + "/" + key,
          "expected a probability between 0 and 1, found " + std::string(v->type_name()));
    return std::nullopt;
  }
  const double d = v->get<double>();
  auto p = Probability::make(d);
  if (!p)
    error(pointer + "/" + key,
          json(d).dump() + " is not a probability; expected 0 to 1 (0.01 is 1%)");
  return p;
}

std::optional<Nanoseconds> JsonReader::duration(const json& obj, const std::string& pointer,
                                                const char* key, bool required) {
  const json* v = member(obj, pointer, key, required);
  if (!v) return required ? std::nullopt : std::optional<Nanoseconds>(Nanoseconds(0));
  if (v->is_string()) {
    if (auto d = parse_duration(v->get<std::string>())) return d;
  }
  error(pointer + "/" + key,
        "expected a duration such as \"20ms\", \"1.5s\", \"250us\" or \"100ns\", found " +
            json_excerpt(*v));
  return std::nullopt;
}

std::optional<bool> JsonReader::boolean(const json& obj, const std::string& pointer,
                                        const char* key, bool fallback) {
  const json* v = member(obj, pointer, key, false);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    error(pointer + "/" + key, "expected true or false, found " + json_excerpt(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> JsonReader::string(const json& obj, const std::string& pointer,
                                              const char* key, bool required,
                                              std::size_t max_length) {
  const json* v = member(obj, pointer, key, required);
  if (!v) return required ? std::nullopt : std::optional<std::string>("");
  if (!v->is_string()) {
    error(pointer + "/" + key, "expected a string, found " + std::string(v->type_name()));
    return std::nullopt;
  }
  std::string s = v->get<std::string>();
  if (s.size() > max_length) {
    error(pointer + "/" + key, "is " + std::to_string(s.size()) + " characters long; at most " +
                                   std::to_string(max_length) + " are allowed");
    return std::nullopt;
  }
  return s;
}

}  // namespace shaper
