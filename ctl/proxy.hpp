#pragma once
// `jitterctl proxy`: the remote end of `jitterctl --host ssh://...`. It connects to the local
// jitterd socket and copies bytes both ways, stdin to the socket and the socket to stdout, without
// reading or changing the protocol, until either side ends. jitterd sees the proxy's credentials
// (SO_PEERCRED): those of the ssh user, so its group check applies unchanged.

#include <ostream>
#include <string>

#include "shaper/quantities.hpp"

namespace jitterctl {

// Bridges `in_fd` and `out_fd` to jitterd's socket at `socket_path` (connect bounded by
// `timeout`). Returns the exit code: 0 when either side ended the conversation (EOF or reset on the
// socket, EOF on `in_fd`, or `out_fd` closed by its reader); 4 (kExitEnvironment) when the socket
// cannot be reached (the message, with its hint, goes to `err`) or a read or write fails.
int run_proxy(const std::string& socket_path, shaper::Nanoseconds timeout, int in_fd, int out_fd,
              std::ostream& err);

}  // namespace jitterctl

#include "options.hpp"

namespace jitterctl {

// `jitterctl proxy [--socket PATH]`: run_proxy on stdin and stdout (cli.cpp's registry).
int proxy_command(const Invocation& inv);

}  // namespace jitterctl
