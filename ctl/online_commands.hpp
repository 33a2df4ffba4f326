#pragma once
// jitterctl's online commands: one per method of docs/protocol.md, plus `watch`. They talk to
// jitterd only through the protocol (ControlClient) and print for people, or the raw result with
// --json. Everything they print goes to the streams they are given, so tests run them in-process.

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"
#include "replies.hpp"

namespace jitterctl {

// The socket used without --socket: $JITTERD_SOCKET when set and not empty, else the default path.
std::string default_socket_path(const char* environment_value);

// Whether `word` starts an online command line: a command name or a global option (--socket ...).
bool is_online_command(std::string_view word);

// The online part of `jitterctl --help`: the global options and one line per command.
void print_online_usage(std::ostream& out);

// Runs one online command line (`args` as after "jitterctl": global options, the command and its
// arguments) and returns the exit code (exit_codes.hpp). Results go to `out`, errors to `err`.
int run_online_command(const std::vector<std::string>& args, const std::string& default_socket,
                       std::ostream& out, std::ostream& err);

// The exit code for an error reply's code (docs/jitterctl.md, "Exit codes"); the second takes the
// code's wire spelling.
int exit_code_for_error(jitterd::protocol::ErrorCode code);
int exit_code_for_error(std::string_view code);

// The tables and lines the commands print, exposed for tests.
void print_status_table(const std::vector<SessionStatus>& sessions, std::ostream& out);
void print_interfaces_table(const std::vector<InterfaceInfo>& interfaces, std::ostream& out);
void print_profiles_table(const ProfileListing& listing, std::ostream& out);
// One event for people: local time (with the date unless `date` is false), interface, event,
// details.
std::string format_event_line(const Event& event, bool date = true);

}  // namespace jitterctl
