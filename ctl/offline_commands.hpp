#pragma once
// jitterctl's offline commands: compile, inspect, validate. They use libshaper directly and never
// talk to the daemon.

#include "exit_codes.hpp"
#include "options.hpp"

namespace jitterctl {

// The handlers that cli.cpp's registry names with their options. They print to the process's stdout
// and stderr; a bad command line is a UsageError, left to the caller.
int compile_command(const Invocation& inv);
int inspect_command(const Invocation& inv);
int validate_command(const Invocation& inv);

}  // namespace jitterctl
