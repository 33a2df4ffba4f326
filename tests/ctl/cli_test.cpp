// The command registry: every command's usage comes from the options it is parsed with, and every
// command refuses a bad command line the same way, before it does anything.
#include "cli.hpp"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "exit_codes.hpp"

namespace jitterctl {
namespace {

struct Ran {
  int code;
  std::string out, err;
};

Ran run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  // A socket that is not there: a command that got past its command line would fail with exit 4.
  const int code = run_jitterctl(args, "/nonexistent/jitterd.sock", out, err);
  return {code, out.str(), err.str()};
}

// As the option list shows an option: "--lease DURATION", "-o, --output PROFILE.json".
std::string form(const Option& o) {
  return (o.short_name ? std::string{'-', o.short_name} + ", " : "") + std::string(o.name) +
         (o.value.empty() ? "" : " " + std::string(o.value));
}

TEST(Registry, NamesAndOptionsAreUnique) {
  std::set<std::string_view> names;
  for (const auto& c : commands()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    if (!c.alias.empty()) {
      EXPECT_TRUE(names.insert(c.alias).second) << c.alias;
    }
    // getopt_long would take the first of two options of one name and never the second.
    std::set<std::string_view> options;
    for (const auto& o : c.options)
      EXPECT_TRUE(options.insert(o.name).second) << c.name << " " << o.name;
    if (c.online) {
      for (const auto& o : global_options())
        EXPECT_TRUE(options.insert(o.name).second) << c.name << " " << o.name;
    }
  }
  EXPECT_GE(names.size(), 20u);
}

TEST(Registry, EveryCommandsHelpListsEveryOptionItIsParsedWith) {
  const Ran all = run({"--help"});
  ASSERT_EQ(all.code, kExitOk);
  for (const auto& c : commands()) {
    SCOPED_TRACE(std::string(c.name));
    EXPECT_NE(all.out.find("\n  " + std::string(c.name) + " "), std::string::npos);
    const Ran r = run({std::string(c.name), "--help"});
    EXPECT_EQ(r.code, kExitOk);
    EXPECT_EQ(r.out.rfind("usage: " + usage_line(c) + "\n  " + std::string(c.summary) + "\n", 0),
              0u)
        << r.out;
    for (const auto& o : c.options) {
      EXPECT_NE(r.out.find("\n  " + form(o)), std::string::npos) << o.name << "\n" << r.out;
      const std::string spelled =
          o.short_name ? std::string{'-', o.short_name} : std::string(o.name);
      EXPECT_NE(usage_line(c).find(spelled), std::string::npos) << o.name;
      EXPECT_NE(all.out.find(spelled), std::string::npos) << o.name;
    }
    EXPECT_EQ(r.out.find("\nglobal options:\n") != std::string::npos, c.online) << r.out;
    if (c.online) {
      for (const auto& o : global_options())
        EXPECT_NE(r.out.find("\n  " + form(o)), std::string::npos) << o.name;
    }
  }
}

TEST(Registry, AnOptionWithoutItsValueIsAUsageErrorForEveryCommand) {
  for (const auto& c : commands()) {
    for (const auto& o : c.options) {
      if (o.type == ValueType::kFlag) continue;
      const std::string name(c.name), option(o.name);
      const Ran r = run({name, option});
      EXPECT_EQ(r.code, kExitUsage) << name << " " << option;
      EXPECT_EQ(r.err, "jitterctl " + name + ": " + option +
                           " needs a value\nusage: " + usage_line(c) + "\n");
      EXPECT_EQ(r.out, "");
    }
  }
}

TEST(Registry, AnUnknownOptionIsAUsageErrorForEveryCommand) {
  for (const auto& c : commands()) {
    const std::string name(c.name);
    const Ran r = run({name, "--no-such-option"});
    EXPECT_EQ(r.code, kExitUsage) << name;
    EXPECT_EQ(r.err, "jitterctl " + name +
                         ": unknown option --no-such-option\nusage: " + usage_line(c) + "\n");
  }
}

TEST(Registry, GlobalOptionsGoWithOnlineCommandsOnly) {
  EXPECT_EQ(run({"--timeout", "1s", "inspect", "p.json"})
                .err.rfind("jitterctl inspect: unknown option --timeout", 0),
            0u);
  EXPECT_EQ(run({"compile", "t.txt", "-o", "p.json", "--socket", "/x"})
                .err.rfind("jitterctl compile: unknown option --socket", 0),
            0u);
  const Ran r = run({"--timeout", "1s", "status"});
  EXPECT_EQ(r.code, kExitEnvironment);  // read, then the socket is not there
  EXPECT_EQ(r.err.rfind("jitterctl: ", 0), 0u) << r.err;
}

// compile and validate have a --host of their own (an fping capture's target); before them, --host
// would have been read as that target without a word.
TEST(Registry, AHostBeforeAnOfflineCommandIsRefusedNotTakenForItsOwnHost) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--host", "ssh://lab", "compile", "t.txt", "-o", "p.json"},
        std::vector<std::string>{"--host=ssh://lab", "validate", "p.json", "t.txt"}}) {
    const Ran r = run(args);
    EXPECT_EQ(r.code, kExitUsage);
    EXPECT_NE(r.err.find("offline, so --host before it"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" --host TARGET ..."), std::string::npos) << r.err;
  }
  // After the command it is the capture's target, as before (here: the capture is not there).
  const Ran after =
      run({"compile", "/nonexistent/t.txt", "--host", "10.0.0.1", "-o", "/tmp/x.json"});
  EXPECT_EQ(after.err.find("--host before it"), std::string::npos) << after.err;
  EXPECT_NE(after.code, kExitUsage) << after.err;
}

TEST(Registry, NoCommandOrAnUnknownOne) {
  const Ran none = run({});
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_EQ(none.out.rfind("usage: jitterctl ", 0), 0u);
  EXPECT_EQ(run({"--socket", "/x"}).err,
            "jitterctl: which command? (jitterctl --help lists them)\n");
  EXPECT_EQ(run({"--socket"}).err, "jitterctl: --socket needs a value\n");
  const Ran unknown = run({"frobnicate"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_EQ(unknown.err,
            "jitterctl: unknown command \"frobnicate\" (jitterctl --help lists them)\n");
}

}  // namespace
}  // namespace jitterctl
