// Expected<T, E>: a value or the reason there is none, with warnings beside a value.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "shaper/expected.hpp"

using namespace shaper;

namespace {

Expected<int> parse_digit(char c) {
  if (c < '0' || c > '9') return Diagnostics{{"0", "'" + std::string(1, c) + "' is not a digit"}};
  if (c == '0') return {0, {{"0", "a leading zero"}}};
  return c - '0';
}

struct Refusal {
  int code = 0;
  std::string message;
};

}  // namespace

TEST(Expected, AValueAlone) {
  const Expected<int> r = parse_digit('7');
  ASSERT_TRUE(r);
  EXPECT_TRUE(r.has_value());
  EXPECT_EQ(*r, 7);
  EXPECT_TRUE(r.diagnostics().empty());
}

TEST(Expected, AValueWithWarnings) {
  const Expected<int> r = parse_digit('0');
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 0);
  EXPECT_EQ(r.diagnostics(), (Diagnostics{{"0", "a leading zero"}}));
}

TEST(Expected, NoValueAndWhy) {
  const Expected<int> r = parse_digit('x');
  EXPECT_FALSE(r);
  EXPECT_EQ(to_string(r.diagnostics()), "0: 'x' is not a digit");
  EXPECT_EQ(&r.error(), &r.diagnostics());
}

TEST(Expected, AnotherErrorType) {
  const auto refuse = [](bool refused) -> Expected<std::string, Refusal> {
    if (refused) return Refusal{404, "no such session"};
    return "eth0";  // converts to the value type
  };
  const auto no = refuse(true);
  EXPECT_FALSE(no);
  EXPECT_EQ(no.error().code, 404);
  EXPECT_EQ(no.error().message, "no such session");
  const auto yes = refuse(false);
  ASSERT_TRUE(yes);
  EXPECT_EQ(*yes, "eth0");
  EXPECT_EQ(yes->size(), 4u);
  EXPECT_EQ(yes.error().code, 0);  // default-constructed beside a value
}

TEST(Expected, MovesItsValueOut) {
  Expected<std::unique_ptr<int>> r = std::make_unique<int>(5);
  std::unique_ptr<int> p = *std::move(r);
  EXPECT_EQ(*p, 5);
  Expected<std::unique_ptr<int>> empty = Diagnostics{{"", "none"}};
  EXPECT_EQ(std::move(empty).take_value(), std::nullopt);
}

TEST(ExpectedDeathTest, ReadingAMissingValueAborts) {
  const Expected<int> r = parse_digit('x');
  EXPECT_DEATH((void)*r, "");
}
