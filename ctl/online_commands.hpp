#pragma once
// jitterctl's online commands: one per method of docs/protocol.md, plus `watch`. They talk to
// jitterd only through the protocol (ControlClient) and print for people, or the raw result with
// --json. Everything they print goes to the streams they are given, so tests run them in-process.

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "options.hpp"
#include "protocol/errors.hpp"
#include "replies.hpp"

namespace jitterctl {

// The socket used without --socket: $JITTERD_SOCKET when set and not empty, else the default path.
std::string default_socket_path(const char* environment_value);

// The online commands' handlers (cli.cpp's registry names them with their options). Each sends
// its request (after reading the global options --socket, --json, --timeout from the command
// line) and prints the result, or maps the failure to a message on `err` and an exit code; a bad
// command line is a UsageError, left to the caller.
int list_commands_command(const Invocation& inv);
int version_command(const Invocation& inv);
int interfaces_command(const Invocation& inv);
int profiles_command(const Invocation& inv);
int metrics_command(const Invocation& inv);
int apply_command(const Invocation& inv);
int switch_command(const Invocation& inv);
int confirm_command(const Invocation& inv);
int pause_command(const Invocation& inv);
int resume_command(const Invocation& inv);
int skip_command(const Invocation& inv);
int status_command(const Invocation& inv);
int clear_command(const Invocation& inv);
int renew_command(const Invocation& inv);
int subscribe_command(const Invocation& inv);
int watch_command(const Invocation& inv);

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
