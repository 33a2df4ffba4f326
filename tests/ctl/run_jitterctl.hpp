#pragma once
// Runs the built jitterctl through the shell (so a test may put `ulimit` or redirections in front)
// and collects its exit code and output.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace jitterctl_test {

struct Completed {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// `shell_prefix` runs first in the same shell ("ulimit -v 1048576 &&"); the binary is exec'd.
inline Completed run(const std::string& args, const std::string& shell_prefix = "") {
  const std::string command =
      shell_prefix + " exec " + std::string(JITTERCTL_BINARY) + " " + args + " 2>&1";
  Completed r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) r.out += buf;
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace jitterctl_test
