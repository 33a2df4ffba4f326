// jitterctl: the client of jitterd, and the offline tools (compile, inspect, validate). The
// commands, their options and their usage are cli.cpp's registry.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "online_commands.hpp"
#include "remote_host.hpp"

int main(int argc, char** argv) {
  // The environment is read here, once, so that the commands themselves depend only on arguments.
  const char* host = std::getenv("JITTERD_HOST");
  const jitterctl::Environment env{
      jitterctl::default_socket_path(std::getenv("JITTERD_SOCKET")),
      host ? host : "",
      {jitterctl::ssh_command_words(std::getenv("JITTERD_SSH")),
       jitterctl::kubectl_command_words(std::getenv("JITTERD_KUBECTL")),
       jitterctl::k8s_namespace_of(std::getenv("JITTERD_K8S_NAMESPACE"))}};
  return jitterctl::run_jitterctl(std::vector<std::string>(argv + 1, argv + argc), env, std::cout,
                                  std::cerr);
}
