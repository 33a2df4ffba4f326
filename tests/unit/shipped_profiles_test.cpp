// The profiles shipped in profiles/: each loads cleanly, says where it came from, and simulates (the
// offline netem simulator, seeded) to the figures profiles/README.md states for it.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "shaper/profile.hpp"
#include "shaper/validation.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

const std::string kProfiles = std::string(JITTERD_SOURCE_DIR) + "/profiles";

Profile load(const std::string& name) {
  ProfileLoad load = load_profile_file(kProfiles + "/" + name + ".json");
  if (!load.profile) throw std::runtime_error(name + ": " + to_string(load.diagnostics));
  return *load.profile;
}

// `phase` of `profile` held for 12 000 probes 10 ms apart, simulated.
SeriesStats held(const Profile& profile, const std::string& phase) {
  const auto one = profile.held(phase);
  if (!one) throw std::runtime_error("no phase " + phase + " in " + profile.name);
  DelaySeries like;
  for (int i = 0; i < 12000; ++i) {
    like.sent.push_back(Nanoseconds(10ms) * i);
    like.delay.push_back(Nanoseconds(0));
  }
  return series_stats(simulate_profile(*one, like, 10ms, 1));
}

}  // namespace

TEST(ShippedProfiles, EveryOneLoadsIsNamedAfterItsFileAndSaysWhereItCameFrom) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kProfiles)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    const Profile p = load(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.description.empty());
    EXPECT_TRUE(p.provenance.has_value()) << "a shipped profile records its capture";
  }
  EXPECT_GE(count, 1);
}

TEST(ShippedProfiles, LabRegimesSimulatesToItsStatedFigures) {
  const Profile p = load("lab-regimes");
  ASSERT_EQ(p.phases.size(), 2u);
  ASSERT_TRUE(p.schedule.has_value());
  // profiles/README.md: regime-1 (calm) p50 1.3 ms, loss 0.3 %; regime-2 (storm) p50 20 ms, loss 5 %.
  const SeriesStats calm = held(p, "regime-1"), storm = held(p, "regime-2");
  EXPECT_NEAR(calm.p50_ms, 1.3, 0.3);
  EXPECT_NEAR(calm.loss_rate, 0.003, 0.002);
  EXPECT_NEAR(storm.p50_ms, 20.0, 1.5);
  EXPECT_NEAR(storm.loss_rate, 0.05, 0.015);
}
