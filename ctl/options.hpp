#pragma once
// jitterctl's command-line options: each command declares its options once, as a table of `Option`
// (name, value, help, type), and that table is both what getopt_long reads the command line with
// and what the usage prints. Values come out typed (durations through libshaper's parser, whole
// numbers never through a double); a bad command line is one exception, UsageError.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shaper/profile.hpp"

namespace jitterctl {

struct RemoteCommands;  // remote_host.hpp

// A bad command line: jitterctl prints it with the command's usage and exits with kExitUsage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ValueType {
  kFlag,              // takes no value
  kText,              // any word
  kChoice,            // one of the words of Option::value, which are separated by '|'
  kDuration,          // libshaper's durations: 30s, 500ms, 1.5m, 1h
  kPositiveDuration,  // a duration above zero
  kStartTime,         // now, +DURATION or an RFC 3339 UTC time (docs/protocol.md, "Times")
  kWholeNumber,       // an unsigned integer from Option::min to Option::max
  kNumber,            // a finite number above Option::above and at most Option::at_most
};

// One option of a command, as it is read and as the usage shows it.
struct Option {
  std::string_view name = {};   // "--lease"
  std::string_view value = {};  // what the usage calls the value ("DURATION"); empty for a flag
  ValueType type = ValueType::kFlag;
  std::string_view help = {};
  char short_name = 0;      // 'o' for compile's -o
  bool repeatable = false;  // every occurrence is kept (--match RULE...); else the last one counts
  std::uint64_t min = 0;    // kWholeNumber
  std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  double above = -std::numeric_limits<double>::infinity();  // kNumber
  double at_most = std::numeric_limits<double>::infinity();
  // What the error says a value must be ("is not <expected>"), where the type's own words say too
  // little (--alpha: "a level; give how often ..."). Empty: the type's words.
  std::string_view expected = {};
};

// A command line read against one or more option tables: the operands in order and each option
// given, with its value typed. Asking for an option that none of the tables has is a bug in
// jitterctl and aborts.
class ParsedArgs {
 public:
  const std::vector<std::string>& operands() const { return operands_; }
  // The operands, or a UsageError naming the first one past `at_most`.
  const std::vector<std::string>& operands(std::size_t at_most) const;

  bool has(std::string_view name) const;
  // The value as given (the last one for an option given twice); nullopt when not given.
  std::optional<std::string> text(std::string_view name) const;
  // Every value of a repeatable option, in order.
  std::vector<std::string> texts(std::string_view name) const;
  std::optional<shaper::Nanoseconds> duration(std::string_view name) const;
  std::optional<std::uint64_t> whole_number(std::string_view name) const;
  std::optional<double> number(std::string_view name) const;
  // Of `names`, the one given last on the command line ("" for none): for options that undo one
  // another (--schedule, --no-schedule), where the last word counts as it always has.
  std::string_view last_of(std::initializer_list<std::string_view> names) const;

 private:
  friend ParsedArgs parse_options(const std::vector<std::string>& args,
                                  std::initializer_list<std::span<const Option>> tables);
  using Typed = std::variant<std::monostate, shaper::Nanoseconds, std::uint64_t, double>;
  struct Given {
    const Option* option;
    std::string text;
    Typed typed;
  };
  const Given* last(std::string_view name) const;

  std::vector<std::span<const Option>> tables_;
  std::vector<std::string> operands_;
  std::vector<Given> given_;
};

// Reads `args` (the words after the command) with getopt_long against the options of `tables`:
// `--name VALUE`, `--name=VALUE`, `-o VALUE`; operands anywhere; everything after "--" is an
// operand. Only whole option names are taken (getopt_long's abbreviations are refused, so that an
// option added later never changes what an old command line meant). Throws UsageError for an
// unknown option, a missing value or a value of the wrong type or range, naming the option.
ParsedArgs parse_options(const std::vector<std::string>& args,
                         std::initializer_list<std::span<const Option>> tables);

// Typed readers for values inside a value (compile --spike EXTRA:PACKETS:EVERY, --regimes K,
// --baseline pNN), with the same error texts as the options' own. `option` names the option.
shaper::Nanoseconds read_duration(std::string_view option, const std::string& text);
std::uint64_t read_whole_number(std::string_view option, const std::string& text, std::uint64_t min,
                                std::uint64_t max);
double read_number(std::string_view option, const std::string& text);

// The usage: " [--lease DURATION]" for each option that `operands` does not already name (those
// are part of the command's form: "INTERFACE --phase P|--step N").
std::string options_synopsis(std::string_view operands, std::span<const Option> options);
// One line per option, its help in a column: "  --lease DURATION   how long ... (1 to 16)".
void print_option_list(std::span<const Option> options, std::ostream& out);

// One run of a command: its parsed command line, the socket to use without --socket, where to
// print. Every command's handler takes this.
struct Invocation {
  std::string_view command;
  const ParsedArgs& args;
  const std::string& default_socket;
  std::ostream& out;
  std::ostream& err;
  // $JITTERD_HOST ("": the local socket) and the ssh and kubectl commands ($JITTERD_SSH,
  // $JITTERD_KUBECTL, $JITTERD_K8S_NAMESPACE), read once by main; nullptr: the defaults.
  std::string_view default_host = {};
  const RemoteCommands* remote_commands = nullptr;
};

}  // namespace jitterctl
