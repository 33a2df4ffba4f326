// Output for people: column alignment (with multi-byte characters) and human durations and times.
#include "text_table.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <sstream>

namespace jitterctl {
namespace {

using namespace std::chrono_literals;

TEST(TextTable, AlignsColumnsByCharactersNotBytes) {
  TextTable t({{"NAME"}, {"LATE", true}, {"NOTE"}});
  t.add_row({"veth0", "95 µs", "ok"});
  t.add_row(
      {"a-long-name", "1.19 s"});  // a missing last cell prints empty, without trailing blanks
  std::ostringstream out;
  t.print(out);
  EXPECT_EQ(out.str(),
            "NAME           LATE  NOTE\n"
            "veth0         95 µs  ok\n"
            "a-long-name  1.19 s\n");
}

TEST(TextTable, DisplayWidthCountsCodePoints) {
  EXPECT_EQ(display_width("µs"), 2u);
  EXPECT_EQ(display_width("—"), 1u);
  EXPECT_EQ(display_width(""), 0u);
}

TEST(HumanDuration, ThreeSignificantDigitsBelowAMinute) {
  EXPECT_EQ(format_human_duration(0ns), "0 ns");
  EXPECT_EQ(format_human_duration(999ns), "999 ns");
  EXPECT_EQ(format_human_duration(1500ns), "1.5 µs");
  EXPECT_EQ(format_human_duration(95us), "95 µs");
  EXPECT_EQ(format_human_duration(812ms), "812 ms");
  EXPECT_EQ(format_human_duration(1188ms), "1.19 s");
  EXPECT_EQ(format_human_duration(29s), "29 s");
  EXPECT_EQ(format_human_duration(-210us), "-210 µs");
}

TEST(HumanDuration, RoundingUpMovesToTheNextUnit) {
  // 999.6 µs has three significant digits only as "1 ms", not "1e+03 µs".
  EXPECT_EQ(format_human_duration(999600ns), "1 ms");
  EXPECT_EQ(format_human_duration(999'700'000ns), "1 s");
}

TEST(HumanDuration, WholeUnitsFromAMinute) {
  EXPECT_EQ(format_human_duration(60s), "1 min");
  EXPECT_EQ(format_human_duration(245s), "4 min 5 s");
  EXPECT_EQ(format_human_duration(3h + 2min + 10s), "3 h 2 min");
  EXPECT_EQ(format_human_duration(51h), "2 d 3 h");
}

TEST(LocalTime, FormatsInTheLocalZoneWithAFraction) {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  // 2026-11-30T20:00:00Z plus 123456789 ns.
  constexpr std::int64_t kNs = 1796068800123456789;
  EXPECT_EQ(format_local_time(kNs, true, 6), "2026-11-30 20:00:00.123456");
  EXPECT_EQ(format_local_time(kNs, false, 0), "20:00:00");
  EXPECT_EQ(format_local_time(kNs, false, 9), "20:00:00.123456789");
  // Before 1970 the fraction still counts forward from the second.
  EXPECT_EQ(format_local_time(-1, true, 9), "1969-12-31 23:59:59.999999999");
}

}  // namespace
}  // namespace jitterctl
