#pragma once
// jitterctl's offline commands: compile, inspect, validate. They use libshaper directly and never
// talk to the daemon.

#include <string>
#include <vector>

namespace jitterctl {

// Exit codes, documented in `jitterctl --help` and docs/validation.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitVerdictFail = 1;  // validate: the profile or the shaped link failed a threshold
inline constexpr int kExitUsage = 2;        // bad command line
inline constexpr int kExitBadInput = 3;     // a capture or profile with errors (diagnostics printed)
inline constexpr int kExitEnvironment = 4;  // a file could not be read or written

int compile_command(const std::vector<std::string>& args);
int inspect_command(const std::vector<std::string>& args);
int validate_command(const std::vector<std::string>& args);

}  // namespace jitterctl
