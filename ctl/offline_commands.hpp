#pragma once
// jitterctl's offline commands: compile, inspect, validate. They use libshaper directly and never
// talk to the daemon.

#include <string>
#include <vector>

#include "exit_codes.hpp"

namespace jitterctl {

int compile_command(const std::vector<std::string>& args);
int inspect_command(const std::vector<std::string>& args);
int validate_command(const std::vector<std::string>& args);

}  // namespace jitterctl
