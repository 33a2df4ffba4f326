// ParsedArgs and parse_options: what getopt_long reads from an option table, the typed values, and
// the usage errors that name the option and say what it takes.
#include "options.hpp"

#include <gtest/gtest.h>

#include <array>
#include <sstream>

namespace jitterctl {
namespace {

using namespace std::chrono_literals;
using enum ValueType;

constexpr auto kOptions = std::to_array<Option>({
    {.name = "--lease", .value = "DURATION", .type = kDuration, .help = "a lease"},
    {.name = "--interval", .value = "DURATION", .type = kPositiveDuration, .help = "an interval"},
    {.name = "--start", .value = "TIME", .type = kStartTime, .help = "a start"},
    {.name = "--entries",
     .value = "N",
     .type = kWholeNumber,
     .help = "entries",
     .min = 1,
     .max = 16384},
    {.name = "--step",
     .value = "N",
     .type = kWholeNumber,
     .help = "a step",
     .expected = "a step number"},
    {.name = "--alpha",
     .value = "P",
     .type = kNumber,
     .help = "a level",
     .above = 0,
     .at_most = 0.5},
    {.name = "--direction", .value = "egress|ingress", .type = kChoice, .help = "a direction"},
    {.name = "--match", .value = "RULE", .type = kText, .help = "a rule", .repeatable = true},
    {.name = "--output", .value = "FILE", .type = kText, .help = "where", .short_name = 'o'},
    {.name = "--replay", .help = "replay"},
    {.name = "--replay-window", .value = "DURATION", .type = kDuration, .help = "a window"},
    {.name = "--force", .help = "force"},
});

ParsedArgs parse(const std::vector<std::string>& args) {
  return parse_options(args, {kOptions});
}

// The message of the UsageError that parsing `args` throws ("" if it throws none).
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ParseOptions, TypedValuesOperandsInOrderAndBothSpellingsOfAValue) {
  const ParsedArgs a = parse({"veth0", "--lease=30s", "--entries", "512", "wifi", "--alpha", "0.2",
                              "-o", "p.json", "--force", "--start", "+2s", "--interval", "250ms"});
  EXPECT_EQ(a.operands(), (std::vector<std::string>{"veth0", "wifi"}));
  EXPECT_EQ(a.duration("--lease"), std::optional(shaper::Nanoseconds(30s)));
  EXPECT_EQ(a.text("--lease"), std::optional<std::string>("30s"));  // as given, for the protocol
  EXPECT_EQ(a.whole_number("--entries"), std::optional<std::uint64_t>(512));
  EXPECT_EQ(a.number("--alpha"), std::optional(0.2));
  EXPECT_EQ(a.text("--output"), std::optional<std::string>("p.json"));
  EXPECT_EQ(a.text("--start"), std::optional<std::string>("+2s"));
  EXPECT_EQ(a.duration("--interval"), std::optional(shaper::Nanoseconds(250ms)));
  EXPECT_TRUE(a.has("--force"));
  EXPECT_FALSE(a.has("--replay"));
  EXPECT_EQ(a.whole_number("--step"), std::nullopt);
}

TEST(ParseOptions, WholeNumbersAreTakenWholeUpTo2To64Minus1) {
  constexpr auto kSeed =
      std::to_array<Option>({{.name = "--seed", .value = "N", .type = kWholeNumber}});
  EXPECT_EQ(parse_options({"--seed", "9007199254740993"}, {kSeed}).whole_number("--seed"),
            std::optional<std::uint64_t>(9007199254740993u));
  EXPECT_EQ(parse_options({"--seed", "18446744073709551615"}, {kSeed}).whole_number("--seed"),
            std::optional<std::uint64_t>(18446744073709551615u));
}

TEST(ParseOptions, RepeatableOptionsKeepEveryValueAndLastOfTellsWhichCameLast) {
  const ParsedArgs a = parse(
      {"--match", "dst=10.0.0.0/8", "--replay-window", "2s", "--match", "proto=udp", "--replay"});
  EXPECT_EQ(a.texts("--match"), (std::vector<std::string>{"dst=10.0.0.0/8", "proto=udp"}));
  EXPECT_EQ(a.text("--match"), std::optional<std::string>("proto=udp"));
  EXPECT_EQ(a.last_of({"--replay", "--replay-window"}), "--replay");
  EXPECT_EQ(a.last_of({"--force", "--step"}), "");
}

TEST(ParseOptions, EverythingAfterTwoDashesIsAnOperand) {
  const ParsedArgs a = parse({"a", "--", "--force", "-o"});
  EXPECT_EQ(a.operands(), (std::vector<std::string>{"a", "--force", "-o"}));
  EXPECT_FALSE(a.has("--force"));
}

TEST(ParseOptions, TooManyOperandsNameTheFirstOneTooMany) {
  const ParsedArgs a = parse({"veth0", "veth1", "veth2"});
  EXPECT_EQ(a.operands(3).size(), 3u);
  try {
    a.operands(1);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "unexpected argument \"veth1\"");
  }
}

TEST(ParseOptions, BadCommandLinesAreUsageErrorsNamingTheOptionAndWhatItTakes) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--bogus"}, "unknown option --bogus"},
      {{"--bogus=1"}, "unknown option --bogus"},
      {{"-x"}, "unknown option -x"},
      // getopt_long would take an unambiguous abbreviation; jitterctl does not.
      {{"--lea", "30s"}, "unknown option --lea"},
      {{"--replay-w", "2s"}, "unknown option --replay-w"},
      {{"--lease"}, "--lease needs a value"},
      {{"veth0", "-o"}, "--output needs a value"},
      {{"--force=yes"}, "unknown option --force"},
      {{"--lease", "30"}, "--lease: \"30\" is not a duration such as 30s, 500ms, 1.5m, 1h"},
      {{"--interval", "0s"}, "--interval: \"0s\" is not a positive duration such as 10s"},
      {{"--start", "tomorrow"},
       "--start: \"tomorrow\" is not a start time: now, +DURATION (+2s) or a UTC time "
       "(2026-11-30T20:00:00Z)"},
      {{"--entries", "0"}, "--entries: \"0\" is not a whole number from 1 to 16384"},
      {{"--entries", "16385"}, "--entries: \"16385\" is not a whole number from 1 to 16384"},
      {{"--entries", "2.5"}, "--entries: \"2.5\" is not a whole number from 1 to 16384"},
      {{"--entries", "-1"}, "--entries: \"-1\" is not a whole number from 1 to 16384"},
      {{"--entries", "18446744073709551616"},
       "--entries: \"18446744073709551616\" is not a whole number from 1 to 16384"},
      {{"--step", "x"}, "--step: \"x\" is not a step number"},
      {{"--alpha", "0"}, "--alpha: \"0\" is not a number above 0 and at most 0.5"},
      {{"--alpha", "0.6"}, "--alpha: \"0.6\" is not a number above 0 and at most 0.5"},
      {{"--alpha", "nan"}, "--alpha: \"nan\" is not a number above 0 and at most 0.5"},
      {{"--alpha", "five"}, "--alpha: \"five\" is not a number above 0 and at most 0.5"},
      {{"--direction", "both"}, "--direction: \"both\" is not one of egress, ingress"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(usage_error(c.args), c.message) << ::testing::PrintToString(c.args);
  }
}

TEST(ParseOptions, EachParseStartsAfresh) {
  // getopt_long keeps its place in globals; a parse after a failed one must not continue it.
  EXPECT_NE(usage_error({"a", "--bogus", "b"}), "");
  EXPECT_EQ(parse({"c", "--force"}).operands(), std::vector<std::string>{"c"});
}

TEST(ParseOptionsDeathTest, ReadingAnUndeclaredOptionIsABugAndAborts) {
  const ParsedArgs a = parse({});
  EXPECT_DEATH(a.has("--lase"), "option --lase is read but not declared");
}

TEST(OptionsSynopsis, ListsTheOptionsTheFormDoesNotName) {
  EXPECT_EQ(
      options_synopsis("FILE --lease DURATION|--entries N", std::span(kOptions).subspan(0, 5)),
      " [--interval DURATION] [--start TIME] [--step N]");
  EXPECT_EQ(options_synopsis("TRACE... -o FILE", std::span(kOptions).subspan(7, 3)),
            " [--match RULE]... [--replay]");
}

TEST(OptionList, OneLinePerOptionWithItsHelpAndTheRangeOfAWholeNumber) {
  std::ostringstream out;
  print_option_list(std::span(kOptions).subspan(3, 1), out);
  print_option_list(std::span(kOptions).subspan(8, 1), out);
  EXPECT_EQ(out.str(),
            "  --entries N               entries, from 1 to 16384\n"
            "  -o, --output FILE         where\n");
}

}  // namespace
}  // namespace jitterctl
