// jitterctl: the client of jitterd, and the offline tools (compile, inspect, validate).
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "offline_commands.hpp"

namespace {

constexpr const char* kUsage = R"(usage: jitterctl COMMAND [ARGS]

Offline (no daemon needed):
  compile TRACE... -o PROFILE.json   compile captures into a profile
      [--format ping|fping|epoch-rtt|csv|...] [--interval 100ms] [--name NAME] [--description TEXT]
      [--baseline min|none|pNN|DURATION] [--halves]
      [--regimes single|percentiles|K] [--window 10s] [--step 30s]
      [--spike EXTRA:PACKETS:EVERY] [--no-reorder] [--packet-rate PPS] [--entries N]
  inspect PROFILE [--json]           show a profile's phases, schedule and digest
  validate PROFILE [TRACE] [--shaped SHAPED_TRACE] [--json] [--plot FILE.svg] [--log] [--seed N]
                                     compare capture, profile (simulated) and shaped link

Exit codes: 0 ok, 1 validation verdict "fail", 2 usage, 3 bad capture or profile, 4 environment.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::cout << kUsage;
    return argc < 2 ? jitterctl::kExitUsage : jitterctl::kExitOk;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "compile") return jitterctl::compile_command(args);
    if (command == "inspect") return jitterctl::inspect_command(args);
    if (command == "validate") return jitterctl::validate_command(args);
    std::cerr << "jitterctl: unknown command \"" << command << "\"\n" << kUsage;
    return jitterctl::kExitUsage;
  } catch (const std::exception& e) {
    // Environment failures (a file that cannot be read or written) end here.
    std::cerr << "jitterctl: " << e.what() << '\n';
    return jitterctl::kExitEnvironment;
  }
}
