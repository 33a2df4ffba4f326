#pragma once
// Test helpers without Asio (so that the pure tests build apart): a temporary folder and the test
// profiles.

#include <string>
#include <utility>
#include <vector>

#include "../support/temp_dir.hpp"
#include "shaper/netem_spec.hpp"

namespace jitterd::testing {

// A fresh folder under /tmp, removed with everything in it (tests/support/temp_dir.hpp).
using test_support::TempDir;

std::string read_file(const std::string& path);

// The names of what `folder` holds (files, folders, links), sorted.
std::vector<std::string> names_in(const std::string& folder);

// Test profiles. Phases "a", "b", "c" differ only in latency (10, 20, 30 ms), so the spec the fake
// backend received says which phase was installed. `steps` are (phase, duration) pairs; none: no
// schedule.
std::string profile_json(const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& steps = {},
                         bool loop = true);
// "a", "b" or "c" for a spec made from a test profile; "?" otherwise.
std::string phase_of(const shaper::NetemSpec& spec);

}  // namespace jitterd::testing
