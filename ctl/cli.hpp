#pragma once
// jitterctl's command registry: every command with its name, form, summary, options and handler, in
// one table (cli.cpp). main runs a command line through it; `jitterctl --help` and each command's
// --help are printed from it, so the usage cannot leave out an option the command takes.

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "options.hpp"
#include "remote_host.hpp"

namespace jitterctl {

struct Command {
  std::string_view name;
  std::string_view alias;     // subscribe is also `events`
  std::string_view operands;  // the form after the name: "INTERFACE PROFILE|--file F"
  std::string_view summary;
  std::span<const Option> options;
  bool online;  // talks to jitterd, and so takes the global options (--socket, --json, --timeout)
  int (*handler)(const Invocation&);
};

std::span<const Command> commands();
// --socket, --json, --timeout: given before or after an online command.
std::span<const Option> global_options();

// `jitterctl --help`: every command, its form and summary, its options' synopsis, the global
// options and the exit codes.
void print_usage(std::ostream& out);
// `jitterctl COMMAND --help`: the usage line, the summary and one line per option.
void print_command_usage(const Command& command, std::ostream& out);
// "jitterctl skip INTERFACE --phase P|--step N [--direction D] ...", on one line.
std::string usage_line(const Command& command);

// What jitterctl reads from its environment, once, in main.
struct Environment {
  std::string socket;              // $JITTERD_SOCKET, else the default path
  std::string host;                // $JITTERD_HOST; "": the local socket
  RemoteCommands remote_commands;  // $JITTERD_SSH, $JITTERD_KUBECTL, $JITTERD_K8S_NAMESPACE
};

// Runs a command line (the words after "jitterctl") and returns the exit code (exit_codes.hpp).
// `default_socket` is used without --socket; results go to `out`, errors to `err` (the offline
// commands print to the process's stdout and stderr).
int run_jitterctl(const std::vector<std::string>& args, const std::string& default_socket,
                  std::ostream& out, std::ostream& err);
int run_jitterctl(const std::vector<std::string>& args, const Environment& env, std::ostream& out,
                  std::ostream& err);

}  // namespace jitterctl
