#include "test_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace jitterd::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(folder))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string profile_json(const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& steps, bool loop) {
  std::string out =
      R"({"version": 1, "name": ")" + name + R"(", "description": "test profile", "phases": {
      "a": {"delay": {"latency": "10ms"}},
      "b": {"delay": {"latency": "20ms"}},
      "c": {"delay": {"latency": "30ms"}}})";
  if (!steps.empty()) {
    out += R"(, "schedule": {"loop": )" + std::string(loop ? "true" : "false") + R"(, "steps": [)";
    for (std::size_t i = 0; i < steps.size(); ++i) {
      out += (i ? ", " : "") + std::string(R"({"phase": ")") + steps[i].first +
             R"(", "duration": ")" + steps[i].second + R"("})";
    }
    out += "]}";
  }
  return out + "}";
}

std::string phase_of(const shaper::NetemSpec& spec) {
  using namespace std::chrono_literals;
  if (spec.delay.latency == 10ms) return "a";
  if (spec.delay.latency == 20ms) return "b";
  if (spec.delay.latency == 30ms) return "c";
  return "?";
}

}  // namespace jitterd::testing
