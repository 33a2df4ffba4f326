#include "options.hpp"

#include <getopt.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace jitterctl {

namespace {

// getopt_long returns a long option's `val`; theirs start above every char a short option can be.
constexpr int kFirstLongOption = 256;

std::string quoted(const std::string& text) {
  return "\"" + text + "\"";
}

[[noreturn]] void not_a(std::string_view option, const std::string& text, std::string_view what) {
  throw UsageError(std::string(option) + ": " + quoted(text) + " is not " + std::string(what));
}

// The words of a choice's value: "egress|ingress|both".
std::vector<std::string_view> choices(std::string_view value) {
  std::vector<std::string_view> words;
  for (std::size_t start = 0;;) {
    const auto bar = value.find('|', start);
    words.push_back(value.substr(start, bar - start));
    if (bar == std::string_view::npos) return words;
    start = bar + 1;
  }
}

std::string join(const std::vector<std::string_view>& words, std::string_view separator) {
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : std::string(separator)) + std::string(w);
  return text;
}

bool is_start_time(const std::string& text) {
  if (text == "now") return true;
  if (text.size() > 1 && text[0] == '+')
    return shaper::parse_duration(std::string_view(text).substr(1)).has_value();
  return shaper::parse_utc_timestamp(text).has_value();
}

constexpr std::string_view kDurationWords = "a duration such as 30s, 500ms, 1.5m, 1h";

std::string whole_number_words(std::uint64_t min, std::uint64_t max) {
  return "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
}

std::optional<std::uint64_t> whole_number_in(const std::string& text, std::uint64_t min,
                                             std::uint64_t max) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < min || n > max)
    return std::nullopt;
  return n;
}

std::optional<double> number_in(const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// `value` read as `option`'s type, or a UsageError that names the option and says what it takes.
std::variant<std::monostate, shaper::Nanoseconds, std::uint64_t, double> typed_value(
    const Option& option, const std::string& value) {
  auto refuse = [&](std::string_view what) {
    not_a(option.name, value, option.expected.empty() ? what : option.expected);
  };
  switch (option.type) {
    case ValueType::kFlag:
    case ValueType::kText:
      return {};
    case ValueType::kChoice: {
      const auto words = choices(option.value);
      if (std::find(words.begin(), words.end(), value) == words.end())
        refuse("one of " + join(words, ", "));
      return {};
    }
    case ValueType::kDuration: {
      const auto d = shaper::parse_duration(value);
      if (!d) refuse(kDurationWords);
      return *d;
    }
    case ValueType::kPositiveDuration: {
      const auto d = shaper::parse_duration(value);
      if (!d || d->count() <= 0) refuse("a positive duration such as 10s");
      return *d;
    }
    case ValueType::kStartTime:
      if (!is_start_time(value))
        refuse("a start time: now, +DURATION (+2s) or a UTC time (2026-11-30T20:00:00Z)");
      return {};
    case ValueType::kWholeNumber: {
      const auto n = whole_number_in(value, option.min, option.max);
      if (!n) refuse(whole_number_words(option.min, option.max));
      return *n;
    }
    case ValueType::kNumber: {
      const auto v = number_in(value);
      if (!v || !std::isfinite(*v) || !(*v > option.above) || !(*v <= option.at_most)) {
        refuse("a number above " + shortest(option.above) + " and at most " +
               shortest(option.at_most));
      }
      return *v;
    }
  }
  std::abort();  // every ValueType is handled above
}

// "--lease DURATION", "-o, --output PROFILE.json", "--force".
std::string option_form(const Option& o) {
  std::string form = o.short_name ? std::string{'-', o.short_name} + ", " : "";
  form += std::string(o.name);
  if (!o.value.empty()) form += " " + std::string(o.value);
  return form;
}

// Whether `text` names `name` as a whole word ("--phase" in "--phase P|--step N", not in
// "--phases").
bool names(std::string_view text, std::string_view name) {
  for (auto at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const auto end = at + name.size();
    const bool starts =
        at == 0 || text[at - 1] == ' ' || text[at - 1] == '|' || text[at - 1] == '[';
    const bool ends =
        end == text.size() || text[end] == ' ' || text[end] == '|' || text[end] == ']';
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

shaper::Nanoseconds read_duration(std::string_view option, const std::string& text) {
  const auto d = shaper::parse_duration(text);
  if (!d) not_a(option, text, kDurationWords);
  return *d;
}

// Parsed as a whole number: never through a double, which rounds above 2^53 and whose cast of a
// negative or too large value to an unsigned type is undefined behaviour.
std::uint64_t read_whole_number(std::string_view option, const std::string& text, std::uint64_t min,
                                std::uint64_t max) {
  const auto n = whole_number_in(text, min, max);
  if (!n) not_a(option, text, whole_number_words(min, max));
  return *n;
}

double read_number(std::string_view option, const std::string& text) {
  const auto v = number_in(text);
  if (!v) not_a(option, text, "a number");
  return *v;
}

const std::vector<std::string>& ParsedArgs::operands(std::size_t at_most) const {
  if (operands_.size() > at_most)
    throw UsageError("unexpected argument " + quoted(operands_[at_most]));
  return operands_;
}

const ParsedArgs::Given* ParsedArgs::last(std::string_view name) const {
  const bool known =
      std::any_of(tables_.begin(), tables_.end(), [&](std::span<const Option> table) {
        return std::any_of(table.begin(), table.end(),
                           [&](const Option& o) { return o.name == name; });
      });
  if (!known) {
    std::fprintf(stderr, "jitterctl: bug: option %.*s is read but not declared\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  for (auto it = given_.rbegin(); it != given_.rend(); ++it) {
    if (it->option->name == name) return &*it;
  }
  return nullptr;
}

bool ParsedArgs::has(std::string_view name) const {
  return last(name) != nullptr;
}

std::optional<std::string> ParsedArgs::text(std::string_view name) const {
  const Given* g = last(name);
  return g ? std::optional(g->text) : std::nullopt;
}

std::vector<std::string> ParsedArgs::texts(std::string_view name) const {
  last(name);  // declared
  std::vector<std::string> all;
  for (const auto& g : given_) {
    if (g.option->name == name) all.push_back(g.text);
  }
  return all;
}

std::optional<shaper::Nanoseconds> ParsedArgs::duration(std::string_view name) const {
  const Given* g = last(name);
  return g ? std::optional(std::get<shaper::Nanoseconds>(g->typed)) : std::nullopt;
}

std::optional<std::uint64_t> ParsedArgs::whole_number(std::string_view name) const {
  const Given* g = last(name);
  return g ? std::optional(std::get<std::uint64_t>(g->typed)) : std::nullopt;
}

std::optional<double> ParsedArgs::number(std::string_view name) const {
  const Given* g = last(name);
  return g ? std::optional(std::get<double>(g->typed)) : std::nullopt;
}

std::string_view ParsedArgs::last_of(std::initializer_list<std::string_view> names) const {
  for (const auto name : names) last(name);  // declared
  for (auto it = given_.rbegin(); it != given_.rend(); ++it) {
    if (std::find(names.begin(), names.end(), it->option->name) != names.end())
      return it->option->name;
  }
  return {};
}

ParsedArgs parse_options(const std::vector<std::string>& args,
                         std::initializer_list<std::span<const Option>> tables) {
  ParsedArgs parsed;
  parsed.tables_.assign(tables.begin(), tables.end());
  std::vector<const Option*> all;
  for (const auto table : tables) {
    for (const auto& o : table) all.push_back(&o);
  }
  // getopt_long's tables: "-" returns operands in order (as option 1), ":" reports a missing value
  // as ':' rather than printing.
  std::string shorts = "-:";
  std::vector<std::string> long_names;
  long_names.reserve(all.size());
  std::vector<::option> longs;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Option& o = *all[i];
    long_names.emplace_back(o.name.substr(2));
    const int has_arg = o.type == ValueType::kFlag ? no_argument : required_argument;
    longs.push_back(
        {long_names.back().c_str(), has_arg, nullptr, kFirstLongOption + static_cast<int>(i)});
    if (o.short_name) shorts += std::string{o.short_name} + (has_arg == no_argument ? "" : ":");
  }
  longs.push_back({nullptr, 0, nullptr, 0});

  std::vector<std::string> words(args);
  std::vector<char*> argv{const_cast<char*>("jitterctl")};
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(argv.size()) - 1;

  auto by_value = [&](int value) -> const Option* {
    if (value >= kFirstLongOption) return all[static_cast<std::size_t>(value - kFirstLongOption)];
    for (const Option* o : all) {
      if (o->short_name == value) return o;
    }
    return nullptr;
  };
  // getopt_long keeps its state in globals; optind = 0 makes glibc start afresh on this argv.
  ::optind = 0;
  ::opterr = 0;
  for (;;) {
    const int at = std::max(::optind, 1);  // the word getopt_long is about to read
    const std::string word = at < argc ? argv[at] : "";
    const int c = ::getopt_long(argc, argv.data(), shorts.c_str(), longs.data(), nullptr);
    if (c == -1) break;
    if (c == 1) {
      parsed.operands_.emplace_back(::optarg);
      continue;
    }
    const std::string spelled = word.substr(0, word.find('='));
    if (c == '?') {
      throw UsageError("unknown option " + (::optopt > 0 && ::optopt < kFirstLongOption
                                                ? std::string{'-', static_cast<char>(::optopt)}
                                                : spelled));
    }
    if (c == ':') {
      const Option* o = by_value(::optopt);
      throw UsageError((o ? std::string(o->name) : spelled) + " needs a value");
    }
    const Option* o = by_value(c);
    // getopt_long takes "--int" for "--interval"; jitterctl takes whole names only.
    if (c >= kFirstLongOption && spelled != o->name) throw UsageError("unknown option " + spelled);
    const std::string value = ::optarg ? ::optarg : "";
    parsed.given_.push_back({o, value, typed_value(*o, value)});
  }
  for (int i = ::optind; i < argc; ++i)
    parsed.operands_.emplace_back(argv[static_cast<std::size_t>(i)]);
  return parsed;
}

std::string options_synopsis(std::string_view operands, std::span<const Option> options) {
  std::string text;
  for (const auto& o : options) {
    if (names(operands, o.name) ||
        (o.short_name && names(operands, std::string{'-', o.short_name})))
      continue;
    text += " [" + std::string(o.name) + (o.value.empty() ? "" : " " + std::string(o.value)) + "]" +
            (o.repeatable ? "..." : "");
  }
  return text;
}

void print_option_list(std::span<const Option> options, std::ostream& out) {
  // The help starts in one column; a longer option form puts it on a line of its own.
  constexpr std::size_t kHelpColumn = 28;
  for (const auto& o : options) {
    std::string help(o.help);
    if (o.type == ValueType::kWholeNumber && o.expected.empty()) {
      help += (help.empty() ? "from " : ", from ") + std::to_string(o.min) + " to " +
              std::to_string(o.max);
    }
    const std::string left = "  " + option_form(o);
    if (left.size() + 2 <= kHelpColumn) {
      out << left << std::string(kHelpColumn - left.size(), ' ') << help << '\n';
    } else {
      out << left << '\n' << std::string(kHelpColumn, ' ') << help << '\n';
    }
  }
}

}  // namespace jitterctl
