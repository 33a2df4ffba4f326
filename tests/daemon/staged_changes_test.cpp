// StagedChanges: the tokens of `stage` (docs/protocol.md, "Two-phase changes"): one use each, by
// the uid that staged, until the expiry; the oldest dropped beyond kMaxStagedChanges.
#include "staged_changes.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace std::chrono_literals;

namespace jitterd {
namespace {

StagedChanges::Change change_of(std::uint32_t uid, MonotonicTime expires) {
  StagedChanges::Change c;
  c.method = protocol::Method::kSwitch;
  c.params = {{"interface", "veth0"}, {"phase", "high"}};
  c.expires = expires;
  c.uid = uid;
  return c;
}

const MonotonicTime kT0(std::chrono::hours(1));

TEST(StagedChanges, ATokenIsTakenOnceByItsUidAndKeepsTheRequest) {
  StagedChanges staged;
  const std::string token = staged.add(change_of(1000, kT0 + 30s), kT0);
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  const auto stranger = staged.take(token, 1001, kT0);
  ASSERT_FALSE(stranger);
  EXPECT_EQ(stranger.error().code, protocol::ErrorCode::kNotFound);
  EXPECT_EQ(stranger.error().where, "/params/token");
  const auto taken = staged.take(token, 1000, kT0 + 1s);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->method, protocol::Method::kSwitch);
  EXPECT_EQ(taken->params["phase"], "high");
  EXPECT_FALSE(staged.take(token, 1000, kT0 + 1s)) << "one use";
  EXPECT_EQ(staged.size(), 0u);
}

TEST(StagedChanges, AnExpiredTokenIsGone) {
  StagedChanges staged;
  const std::string token = staged.add(change_of(0, kT0 + 30s), kT0);
  EXPECT_FALSE(staged.take(token, 0, kT0 + 30s));
  EXPECT_EQ(staged.size(), 0u);
  const std::string fresh = staged.add(change_of(0, kT0 + 30s), kT0);
  EXPECT_TRUE(staged.take(fresh, 0, kT0 + 30s - 1ns));
}

TEST(StagedChanges, BeyondTheLimitTheOneExpiringSoonestIsDropped) {
  StagedChanges staged;
  std::set<std::string> tokens;
  const std::string soonest = staged.add(change_of(0, kT0 + 1s), kT0);
  tokens.insert(soonest);
  for (std::size_t i = 1; i < kMaxStagedChanges; ++i)
    tokens.insert(staged.add(change_of(0, kT0 + 60s), kT0));
  EXPECT_EQ(tokens.size(), kMaxStagedChanges) << "every token differs";
  EXPECT_EQ(staged.size(), kMaxStagedChanges);
  const std::string one_more = staged.add(change_of(0, kT0 + 60s), kT0);
  EXPECT_EQ(staged.size(), kMaxStagedChanges);
  EXPECT_FALSE(staged.take(soonest, 0, kT0));
  EXPECT_TRUE(staged.take(one_more, 0, kT0));
}

}  // namespace
}  // namespace jitterd
