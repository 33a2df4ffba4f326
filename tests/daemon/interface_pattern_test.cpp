// The allow-list's refusal of patterns that match everything (issue 21 §6): decided by what a
// pattern matches. "*" was refused by its spelling while "?*", "**" and "[!.]*" passed and listed
// every interface as allowed.
#include "interface_pattern.hpp"

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "config.hpp"

namespace jitterd {
namespace {

using Kind = PatternVerdict::Kind;

TEST(InterfacePattern, PatternsThatMatchEveryNameAreCaughtHoweverSpelt) {
  for (const char* p : {"*", "?*", "**", "*?", "[!.]*", "[a-z]*", "[[:alnum:]]*", "[[:lower:]]*",
                        "*[a-z0-9]", "[!/]*", "?***", "*[!:]", "[]a-z[]*", "[^.]*"}) {
    SCOPED_TRACE(p);
    const PatternVerdict v = judge_interface_pattern(p);
    EXPECT_EQ(v.kind, Kind::kEveryName);
    EXPECT_EQ(v.length, 2u);
    EXPECT_TRUE(v.every_length);
  }
}

TEST(InterfacePattern, PatternsThatTakeEveryNameOfOneLengthAreCaught) {
  // "??*" misses only one-letter names; "????" is every 4-byte name, eth0 and eno1 among them.
  const PatternVerdict two = judge_interface_pattern("??*");
  EXPECT_EQ(two.kind, Kind::kEveryName);
  EXPECT_EQ(two.length, 2u);
  EXPECT_TRUE(two.every_length);
  const PatternVerdict four = judge_interface_pattern("????");
  EXPECT_EQ(four.kind, Kind::kEveryName);
  EXPECT_EQ(four.length, 4u);
  EXPECT_FALSE(four.every_length);
  EXPECT_EQ(judge_interface_pattern("[a-z][a-z0-9][a-z0-9]").length, 3u);
}

TEST(InterfacePattern, SelectivePatternsPass) {
  for (const char* p :
       {"veth*", "eth1", "tap[0-3]", "lab?", "?", "[a-z]", "*0", "e*", "[!e]*", "*[0-9]",
        "[a-z]*[0-9]", "veth[", "[", "\\*", "\\**", "???????????????a*", "*a*b", "lo?*"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(judge_interface_pattern(p).kind, Kind::kSelective);
  }
}

TEST(InterfacePattern, PatternsTooLongToWalkAreRefused) {
  EXPECT_EQ(judge_interface_pattern(std::string(64, '?')).kind, Kind::kTooIntricate);
  // One byte told apart 14 bytes before the end: 2^13 state sets at once, more than the walk takes.
  EXPECT_EQ(judge_interface_pattern("*a?????????????").kind, Kind::kTooIntricate);
  EXPECT_EQ(judge_interface_pattern("*a?????????").kind, Kind::kSelective);
}

// The automaton is the pattern: checked against fnmatch itself on random patterns and names, by
// whether "matches every name of length n" agrees with fnmatch over every name of that length (n =
// 1 and 2 are small enough to list: 26 and 936 names).
TEST(InterfacePattern, AgreesWithFnmatchOnEveryShortName) {
  std::mt19937 random(21);  // fixed: a failure repeats
  const std::string pieces[] = {"*",    "?",           "a",    "e",    "0",   "[a-m]",
                                "[!a]", "[[:digit:]]", "[]a]", "[!.]", "\\a", "["};
  const std::string first = "abcdefghijklmnopqrstuvwxyz";
  const std::string later = first + "0123456789";
  for (int round = 0; round < 3000; ++round) {
    std::string pattern;
    const int n = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < n; ++i) pattern += pieces[random() % std::size(pieces)];
    bool all_two = true;
    for (char a : first) {
      for (char b : later) {
        const std::string name{a, b};
        all_two = all_two && ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
      }
    }
    const PatternVerdict v = judge_interface_pattern(pattern);
    SCOPED_TRACE(pattern);
    if (all_two) {
      EXPECT_EQ(v.kind, Kind::kEveryName);
      EXPECT_EQ(v.length, 2u);
    } else {
      EXPECT_TRUE(v.kind == Kind::kSelective || v.length > 2u);
    }
  }
}

TEST(Config, AllowPatternsThatMatchEverythingAreRefusedByTheirMeaning) {
  for (const char* p : {"?*", "**", "[!.]*", "??*"}) {
    SCOPED_TRACE(p);
    const auto load =
        parse_config(std::string(R"({"interfaces": {"allow": ["veth*", ")") + p + "\"]}}");
    ASSERT_EQ(load.diagnostics.size(), 1u);
    EXPECT_EQ(load.diagnostics[0].where, "/interfaces/allow/1");
    EXPECT_NE(load.diagnostics[0].message.find("manage this host through"), std::string::npos);
    EXPECT_FALSE(load.config);
  }
}

}  // namespace
}  // namespace jitterd
