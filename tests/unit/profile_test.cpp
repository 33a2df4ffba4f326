// The profile format: strict parsing with JSON pointers, canonical form and digest, round trips.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"
#include "shaper/profile.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

constexpr const char* kMinimal = R"({
  "version": 1,
  "name": "wan",
  "phases": {
    "calm": {"delay": {"latency": "20ms", "jitter": "2ms", "distribution": "normal"}},
    "storm": {"delay": {"latency": "80ms"},
              "loss": {"model": "gilbert-elliott", "p": 0.01, "r": 0.3}}
  },
  "schedule": {"steps": [{"phase": "calm", "duration": "30s"}, {"phase": "storm", "duration": "2.5s"}],
               "loop": true}
})";

std::vector<std::string> wheres(const Diagnostics& d) {
  std::vector<std::string> out;
  for (const auto& x : d) out.push_back(x.where);
  return out;
}

std::string only_message(const ProfileLoad& load, const std::string& where) {
  EXPECT_FALSE(load);
  EXPECT_EQ(load.diagnostics().size(), 1u) << to_string(load.diagnostics());
  for (const auto& d : load.diagnostics()) {
    if (d.where == where) return d.message;
  }
  ADD_FAILURE() << "no diagnostic at " << where << ": " << to_string(load.diagnostics());
  return {};
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

}  // namespace

TEST(Duration, ParsesExactlyAndPrintsTheLargestExactUnit) {
  EXPECT_EQ(parse_duration("20ms"), 20ms);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("250us"), 250us);
  EXPECT_EQ(parse_duration("100ns"), 100ns);
  EXPECT_EQ(parse_duration("0.000000001s"), 1ns);
  EXPECT_EQ(parse_duration(".5ms"), 500us);
  EXPECT_FALSE(parse_duration("0.1ns"));  // not a whole nanosecond
  EXPECT_FALSE(parse_duration("20"));
  EXPECT_FALSE(parse_duration("-1ms"));
  EXPECT_FALSE(parse_duration("1.ms"));
  EXPECT_FALSE(parse_duration("ms"));
  EXPECT_FALSE(parse_duration("1e3ms"));
  EXPECT_FALSE(parse_duration("99999999999999999999s"));
  EXPECT_EQ(duration_to_string(20ms), "20ms");
  EXPECT_EQ(duration_to_string(1500ms), "1500ms");
  EXPECT_EQ(duration_to_string(25001984ns), "25001984ns");
  EXPECT_EQ(duration_to_string(2s), "2s");
  EXPECT_EQ(duration_to_string(0ns), "0ms");
}

TEST(Profile, ParsesAMinimalProfile) {
  const auto load = parse_profile(kMinimal);
  ASSERT_TRUE(load) << to_string(load.diagnostics());
  const Profile& p = load->profile;
  EXPECT_EQ(p.name, "wan");
  ASSERT_EQ(p.phases.size(), 2u);
  const Phase* calm = p.find_phase("calm");
  ASSERT_TRUE(calm);
  EXPECT_EQ(calm->spec.delay.latency, 20ms);
  EXPECT_EQ(calm->delay_table, TableSource::kNormal);
  EXPECT_EQ(calm->spec.delay.distribution, make_normal_table());
  const Phase* storm = p.find_phase("storm");
  const auto& ge = std::get<GilbertElliottLoss>(storm->spec.loss);
  EXPECT_DOUBLE_EQ(ge.p.value(), 0.01);
  EXPECT_DOUBLE_EQ(ge.loss_bad.value(), 1.0);  // default: Bad loses everything
  ASSERT_TRUE(p.schedule);
  EXPECT_TRUE(p.schedule->loop);
  EXPECT_EQ(p.schedule->steps[1].duration, 2500ms);
  EXPECT_EQ(load->digest.rfind("sha256:", 0), 0u);
}

TEST(Profile, WrittenFormReadsBackEqualWithTheSameDigest) {
  auto load = parse_profile(kMinimal);
  ASSERT_TRUE(load);
  Profile p = load->profile;
  p.description = "round trip";
  p.provenance = Provenance{"capture.txt",
                            "ping",
                            1764520081500000000ns,
                            1764520181000000000ns,
                            1000,
                            std::string(64, 'a'),
                            12300us,
                            true};
  Phase custom;
  custom.name = "custom";
  custom.spec.delay = {10ms, 8192ns * 3, Probability::zero(), DistributionTable{-32768, 0, 32767}};
  custom.delay_table = TableSource::kCustom;
  custom.spec.slot = SlotSpec{1ms, 3ms, std::nullopt, 5, 0};
  custom.spec.rate = {BytesPerSecond{12'500'000'000ull}, -4, 48, 5};
  custom.spec.reorder = {Probability::checked(0.1), Probability::zero(), 3};
  custom.spec.loss =
      FourStateLoss{Probability::checked(0.1), Probability::checked(0.2), Probability::checked(0.3),
                    Probability::checked(0.4), Probability::checked(0.05)};
  custom.spec.ecn = true;
  custom.spec.prng_seed = 7;
  p.phases.insert(p.phases.begin(), custom);
  // Phases are kept in canonical (name) order.
  std::sort(p.phases.begin(), p.phases.end(),
            [](const Phase& a, const Phase& b) { return a.name < b.name; });
  const std::string text = profile_to_json(p);
  const auto again = parse_profile(text);
  ASSERT_TRUE(again) << to_string(again.diagnostics()) << "\n" << text;
  EXPECT_EQ(canonical_profile_json(again->profile), canonical_profile_json(p));
  EXPECT_TRUE(again->profile == p);
  EXPECT_EQ(again->digest, profile_digest(p));
  // The canonical form does not depend on whitespace or key order.
  EXPECT_EQ(canonical_profile_json(again->profile), canonical_profile_json(p));
}

TEST(Profile, DigestDetectsEdits) {
  auto load = parse_profile(kMinimal);
  const std::string text = profile_to_json(load->profile);
  const auto edited = parse_profile(replace(text, "\"80ms\"", "\"81ms\""));
  const std::string message = only_message(edited, "/digest");
  EXPECT_NE(message.find("edited after it was written"), std::string::npos) << message;
}

// Issue 21: a profile with a value nested 100 000 deep (295 KB) crashed jitterctl inspect/validate,
// jitterd --check-config and jitterd's profile listing (SIGSEGV in nlohmann's recursion).
TEST(Profile, AValueNestedAHundredThousandDeepIsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto load = parse_profile(replace(kMinimal, "\"80ms\"", deep));
  ASSERT_EQ(load.diagnostics().size(), 1u) << to_string(load.diagnostics());
  EXPECT_EQ(load.diagnostics()[0].where.rfind("/phases/storm/delay/latency/0/0/", 0), 0u);
  EXPECT_EQ(load.diagnostics()[0].message, "nests deeper than 64 levels; it was not read");
  // 64 levels are read, and the error quotes an excerpt of the value.
  const auto at_limit =
      parse_profile(replace(kMinimal, "\"80ms\"", std::string(60, '[') + std::string(60, ']')));
  EXPECT_EQ(only_message(at_limit, "/phases/storm/delay/latency"),
            "expected a duration such as \"20ms\", \"1.5s\", \"250us\" or \"100ns\", found " +
                std::string(kExcerptChars, '[') + "...");
}

// A 6.9 MB error line was seen: the error path quoted the whole value.
TEST(Profile, ErrorsQuoteAnExcerptOfALargeValue) {
  const auto load =
      parse_profile(replace(kMinimal, "\"80ms\"", "\"" + std::string(7 << 20, '8') + "\""));
  ASSERT_EQ(load.diagnostics().size(), 1u);
  EXPECT_LT(load.diagnostics()[0].message.size(), 200u);
}

// Keys are quoted in pointers too: a phase name or an unknown key of megabytes made megabyte
// wheres.
TEST(Profile, LongKeysAreCutInPointersAndMessages) {
  const std::string name(1 << 20, 'p');
  const auto phase = parse_profile(replace(kMinimal, "\"calm\": {", "\"" + name + "\": {"));
  ASSERT_FALSE(phase);
  for (const auto& d : phase.diagnostics()) {
    EXPECT_LT(d.where.size() + d.message.size(), 400u) << d.where.substr(0, 100);
  }
  EXPECT_EQ(phase.diagnostics().at(0).message,
            "a phase name of 1048576 characters; at most 64 are allowed");
  const auto key =
      parse_profile(replace(kMinimal, "\"version\": 1,", "\"version\": 1, \"" + name + "\": 0,"));
  ASSERT_EQ(key.diagnostics().size(), 1u);
  EXPECT_EQ(key.diagnostics()[0].where, "/" + std::string(kExcerptChars, 'p') + "...");
}

TEST(Profile, ADigestThatIsNotAStringIsAWrongTypeNotAMismatch) {
  const auto load =
      parse_profile(replace(kMinimal, "\"version\": 1,", "\"version\": 1, \"digest\": 12,"));
  const std::string message = only_message(load, "/digest");
  EXPECT_EQ(message.rfind("expected a string such as \"sha256:<64 hex digits>\", found 12", 0), 0u)
      << message;
  // Reported with the other problems, not after them.
  const auto both =
      parse_profile(replace(replace(kMinimal, "\"version\": 1,", "\"version\": 1, \"digest\": 12,"),
                            "\"p\": 0.01", "\"p\": 2"));
  EXPECT_EQ(wheres(both.diagnostics()),
            (std::vector<std::string>{"/phases/storm/loss/p", "/digest"}));
}

TEST(Profile, ErrorsNameTheJsonPointerAndTheAllowedRange) {
  EXPECT_EQ(only_message(parse_profile(replace(kMinimal, "\"p\": 0.01", "\"p\": 1.7")),
                         "/phases/storm/loss/p"),
            "1.7 is not a probability; expected 0 to 1 (0.01 is 1%)");
  EXPECT_EQ(
      only_message(parse_profile(replace(kMinimal, "\"jitter\": \"2ms\"", "\"jiter\": \"2ms\"")),
                   "/phases/calm/delay/jiter"),
      "unknown key; expected one of: latency, jitter, correlation, distribution");
  EXPECT_EQ(only_message(parse_profile(replace(kMinimal, "\"80ms\"", "80")),
                         "/phases/storm/delay/latency"),
            "expected a duration such as \"20ms\", \"1.5s\", \"250us\" or \"100ns\", found 80");
  EXPECT_EQ(
      only_message(parse_profile(replace(kMinimal, "\"phase\": \"storm\"", "\"phase\": \"stomr\"")),
                   "/schedule/steps/1/phase"),
      "\"stomr\" is not a phase of this profile");
  EXPECT_EQ(only_message(parse_profile(replace(kMinimal, "\"gilbert-elliott\"", "\"gilbert\"")),
                         "/phases/storm/loss/model"),
            "expected \"random\", \"gilbert-elliott\" or \"4-state\", found \"gilbert\"");
  EXPECT_EQ(only_message(parse_profile(replace(kMinimal, "\"version\": 1", "\"version\": 2")),
                         "/version"),
            "2 is not supported; this jitterd reads version 1");
  EXPECT_EQ(
      only_message(parse_profile(replace(kMinimal, "\"name\": \"wan\"", "\"name\": \"w a n\"")),
                   "/name"),
      "\"w a n\" is not a valid name: use 1 to 64 letters, digits, '.', '_' or '-'");
  // Spec rules come through validate(NetemSpec), re-rooted at the phase.
  EXPECT_EQ(
      only_message(parse_profile(replace(kMinimal, "\"latency\": \"80ms\"}",
                                         "\"latency\": \"80ms\"}, \"ecn\": true, \"limit\": 0")),
                   "/phases/storm/limit"),
      "0 is out of range; expected 1 to 4294967295");
  const auto table_without_jitter = parse_profile(replace(kMinimal, "\"jitter\": \"2ms\", ", ""));
  EXPECT_NE(only_message(table_without_jitter, "/phases/calm/delay/distribution")
                .find("ignores the table"),
            std::string::npos);
}

TEST(Profile, TimestampsOutsideTheNanosecondRangeAreRefusedNotOverflowed) {
  // Found by fuzz_profile: a year of 1013 overflowed the int64 nanosecond count.
  const std::string with_start =
      replace(kMinimal, "\"name\": \"wan\",",
              "\"name\": \"wan\", \"provenance\": {\"capture\": \"c\", \"format\": "
              "\"ping\", \"sha256\": \"" +
                  std::string(64, 'a') + "\", \"start\": \"1013-11-30T16:28:01Z\"},");
  EXPECT_EQ(only_message(parse_profile(with_start), "/provenance/start"),
            "expected an RFC 3339 UTC time from 1970 to 2261, such as 2026-11-30T16:28:01.5Z");
}

TEST(Profile, NumbersBeyondDoubleAreAnErrorNotACrash) {
  // Found by fuzz_profile: nlohmann throws out_of_range, not parse_error, for 1e999.
  const auto load = parse_profile(replace(kMinimal, "\"p\": 0.01", "\"p\": 1e999"));
  ASSERT_EQ(load.diagnostics().size(), 1u);
  EXPECT_EQ(load.diagnostics()[0].message.rfind("invalid JSON: ", 0), 0u)
      << load.diagnostics()[0].message;
}

TEST(Profile, SyntaxErrorsGiveLineAndColumn) {
  const auto load = parse_profile("{\n  \"version\": 1,\n  \"name\": \"x\",,\n}");
  ASSERT_EQ(load.diagnostics().size(), 1u);
  EXPECT_EQ(load.diagnostics()[0].where, "3:15");
  EXPECT_EQ(load.diagnostics()[0].message.rfind("invalid JSON: ", 0), 0u)
      << load.diagnostics()[0].message;
}

TEST(Profile, RejectsDuplicateKeysAndOversizedInput) {
  const auto dup =
      parse_profile(replace(kMinimal, "\"name\": \"wan\"", "\"name\": \"wan\", \"name\": \"lan\""));
  EXPECT_FALSE(dup);
  ASSERT_EQ(dup.diagnostics().size(), 1u);
  EXPECT_EQ(dup.diagnostics()[0].where, "/name");
  EXPECT_EQ(dup.diagnostics()[0].message.rfind("the key \"name\" appears twice in one object", 0),
            0u)
      << dup.diagnostics()[0].message;
  // Deep in the document, with the pointer of the second one.
  const auto deep_dup = parse_profile(replace(kMinimal, "\"p\": 0.01", "\"p\": 0.01, \"p\": 0.02"));
  ASSERT_EQ(deep_dup.diagnostics().size(), 1u);
  EXPECT_EQ(deep_dup.diagnostics()[0].where, "/phases/storm/loss/p");
  const auto big = parse_profile(std::string(kMaxProfileBytes + 1, ' '));
  EXPECT_FALSE(big);
  EXPECT_NE(big.diagnostics().at(0).message.find("at most 8 MiB"), std::string::npos);
}

TEST(Profile, ReportsEveryProblemNotJustTheFirst) {
  std::string text = replace(kMinimal, "\"p\": 0.01", "\"p\": -1");
  text = replace(text, "\"30s\"", "\"0ms\"");
  text = replace(text, "\"normal\"", "\"gaussian\"");
  const auto load = parse_profile(text);
  EXPECT_FALSE(load);
  const auto w = wheres(load.diagnostics());
  EXPECT_NE(std::find(w.begin(), w.end(), "/phases/storm/loss/p"), w.end())
      << to_string(load.diagnostics());
  EXPECT_NE(std::find(w.begin(), w.end(), "/phases/calm/delay/distribution"), w.end());
}

TEST(Profile, LoadFileReadsAtMostTheLimit) {
  EXPECT_THROW(load_profile_file("/nonexistent/jitterd/profile.json"), SystemError);
  char path[] = "/tmp/jitterd-profile-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path);
    out << kMinimal;
  }
  EXPECT_TRUE(load_profile_file(path));
  {
    std::ofstream out(path);
    out << std::string(kMaxProfileBytes + 100, ' ');
  }
  const auto big = load_profile_file(path);
  EXPECT_FALSE(big);
  EXPECT_NE(big.diagnostics().at(0).message.find("at most 8 MiB"), std::string::npos);
  unlink(path);
}

TEST(Duration, MinutesAndHoursAreReadButNeverWritten) {
  EXPECT_EQ(shaper::parse_duration("10m"), std::chrono::minutes(10));
  EXPECT_EQ(shaper::parse_duration("1.5h"), std::chrono::minutes(90));
  EXPECT_EQ(shaper::parse_duration("5ms"), std::chrono::milliseconds(5));
  EXPECT_EQ(shaper::parse_duration("m"), std::nullopt);
  EXPECT_EQ(shaper::duration_to_string(std::chrono::minutes(2)), "120s");
}

TEST(UtcTimestamp, RoundTripsRfc3339) {
  const auto t = shaper::parse_utc_timestamp("2026-11-30T20:00:00.25Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->count(), 1796068800250000000);
  EXPECT_EQ(shaper::format_utc_timestamp(*t), "2026-11-30T20:00:00.25Z");
  EXPECT_EQ(shaper::parse_utc_timestamp("2026-11-30 20:00:00Z"), std::nullopt);
}

TEST(Profile, AReplayScheduleKeepsItsWindowThroughJson) {
  Profile p;
  p.name = "replayed";
  Phase a;
  a.name = "replay-01";
  a.spec.delay.latency = std::chrono::milliseconds(5);
  p.phases.push_back(a);
  p.schedule =
      Schedule{{{"replay-01", std::chrono::seconds(1)}}, true, std::chrono::milliseconds(400)};
  const ProfileLoad back = parse_profile(profile_to_json(p));
  ASSERT_TRUE(back) << to_string(back.diagnostics());
  EXPECT_EQ(back->profile.schedule->replay_window, std::chrono::milliseconds(400));
  // Absent: not a replay; zero: refused with its pointer.
  p.schedule->replay_window.reset();
  EXPECT_FALSE(parse_profile(profile_to_json(p))->profile.schedule->replay_window);
  p.schedule->replay_window = std::chrono::nanoseconds(0);
  const Diagnostics d = validate(p);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.front().where, "/schedule/replay_window");
}

// Issue 21: timegm read 2026-02-31 as 2026-03-03.
TEST(UtcTimestamp, ImpossibleDatesAreRefused) {
  for (const char* text :
       {"2026-02-31T00:00:00Z", "2026-02-29T00:00:00Z", "2100-02-29T00:00:00Z",
        "2026-04-31T12:00:00Z", "2026-11-31T00:00:00Z", "2026-00-10T00:00:00Z"}) {
    EXPECT_EQ(shaper::parse_utc_timestamp(text), std::nullopt) << text;
  }
  // Leap days that exist, and the last day of each month.
  EXPECT_EQ(shaper::format_utc_timestamp(*shaper::parse_utc_timestamp("2028-02-29T00:00:00Z")),
            "2028-02-29T00:00:00Z");
  EXPECT_EQ(shaper::format_utc_timestamp(*shaper::parse_utc_timestamp("2000-02-29T00:00:00Z")),
            "2000-02-29T00:00:00Z");
  for (const char* text : {"2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-04-30T00:00:00Z",
                           "2026-12-31T23:59:59Z"}) {
    const auto t = shaper::parse_utc_timestamp(text);
    ASSERT_TRUE(t) << text;
    EXPECT_EQ(shaper::format_utc_timestamp(*t), text);
  }
}
