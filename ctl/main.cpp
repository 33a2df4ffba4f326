// jitterctl: the client of jitterd, and the offline tools (compile, inspect, validate).
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "offline_commands.hpp"
#include "online_commands.hpp"

namespace {

constexpr const char* kUsageHead =
    R"(usage: jitterctl [--socket PATH] [--json] [--timeout DURATION] COMMAND [ARGS]

Talking to jitterd (global options may also follow the command):
)";

constexpr const char* kUsageTail = R"(
  --socket PATH      jitterd's socket (default: $JITTERD_SOCKET, else /run/jitterd/jitterd.sock)
  --json             print the reply's result as JSON (subscribe: one compact event per line)
  --timeout DURATION how long to wait for jitterd (default 10s)

Offline (no daemon needed):
  compile TRACE... -o PROFILE.json   compile captures into a profile
      [--format ping|fping|epoch-rtt|csv|...] [--interval 100ms] [--host TARGET] [--name NAME]
      [--description TEXT]
      [--baseline min|none|pNN|DURATION] [--halves]
      [--regimes single|percentiles|K] [--window 10s] [--step 30s]
      [--replay [--replay-window 400ms] [--once]]
      [--spike EXTRA:PACKETS:EVERY] [--no-reorder] [--packet-rate PPS] [--entries N]
  inspect PROFILE [--json]           show a profile's phases, schedule and digest
  validate PROFILE [TRACE] [--shaped SHAPED_TRACE [--link-calibration T [--calibration-delay D]]] [--phase P] [--json] [--plot FILE.svg] [--log]
           [--seed N] [--probes N (simulated; default 1000000)]
                                     compare capture, profile (simulated) and shaped link

Exit codes:
  0 ok
  1 validation verdict "fail"
  2 usage
  3 bad input: a capture or profile with errors, or a request jitterd rejected
  4 environment: a file, jitterd unreachable, too slow or failing, the kernel refused
  5 jitterd denied permission
  6 conflict: the interface's root qdisc is not jitterd's (apply --force)
)";

void print_usage(std::ostream& out) {
  out << kUsageHead;
  jitterctl::print_online_usage(out);
  out << kUsageTail;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage(std::cout);
    return argc < 2 ? jitterctl::kExitUsage : jitterctl::kExitOk;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "compile") return jitterctl::compile_command(args);
    if (command == "inspect") return jitterctl::inspect_command(args);
    if (command == "validate") return jitterctl::validate_command(args);
    if (jitterctl::is_online_command(command)) {
      // The environment is read here, once, so that the commands themselves depend only on
      // arguments.
      return jitterctl::run_online_command(
          std::vector<std::string>(argv + 1, argv + argc),
          jitterctl::default_socket_path(std::getenv("JITTERD_SOCKET")), std::cout, std::cerr);
    }
    std::cerr << "jitterctl: unknown command \"" << command << "\"\n";
    print_usage(std::cerr);
    return jitterctl::kExitUsage;
  } catch (const std::exception& e) {
    // Environment failures (a file that cannot be read or written) end here.
    std::cerr << "jitterctl: " << e.what() << '\n';
    return jitterctl::kExitEnvironment;
  }
}
