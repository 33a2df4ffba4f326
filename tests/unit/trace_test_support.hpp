#pragma once
// Shared by the trace parser tests: where the fixtures are (tests/fixtures/traces, provenance in
// its README.md) and compact views of a Trace for assertions.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/trace.hpp"

namespace trace_test {

inline std::string fixture_path(std::string_view name) {
  return std::string(JITTERD_TRACE_FIXTURES) + "/" + std::string(name);
}

// Options that name the format (aggregate initialisation would leave the other fields unnamed).
inline shaper::ParseOptions with_format(shaper::TraceFormat format) {
  shaper::ParseOptions options;
  options.format = format;
  return options;
}

inline shaper::Trace parse_fixture(std::string_view name,
                                   const shaper::ParseOptions& options = {}) {
  return shaper::parse_trace_file(fixture_path(name), options);
}

// Diagnostics as "file:line:column: message" with the fixture directory cut off.
inline std::vector<std::string> diagnostics_of(const shaper::Trace& trace) {
  const std::string directory = std::string(JITTERD_TRACE_FIXTURES) + "/";
  std::vector<std::string> out;
  for (const auto& diagnostic : trace.diagnostics) {
    std::string text = diagnostic.to_string();
    if (text.compare(0, directory.size(), directory) == 0) text.erase(0, directory.size());
    out.push_back(text);
  }
  return out;
}

// Indices of the lost samples.
inline std::vector<std::size_t> lost_indices(const shaper::Trace& trace) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < trace.samples.size(); ++i) {
    if (trace.samples[i].lost()) out.push_back(i);
  }
  return out;
}

// RTTs in microseconds, -1 for a lost probe: one line of expectations per capture.
inline std::vector<long long> rtts_us(const shaper::Trace& trace) {
  std::vector<long long> out;
  for (const auto& sample : trace.samples) {
    out.push_back(sample.rtt ? static_cast<long long>(sample.rtt->count() / 1000) : -1);
  }
  return out;
}

// Every sample's seq equals its index: the series is in probe order without holes.
inline bool dense(const shaper::Trace& trace) {
  for (std::size_t i = 0; i < trace.samples.size(); ++i) {
    if (trace.samples[i].seq != i) return false;
  }
  return true;
}

// What a child process that parsed a streamed capture reported.
struct StreamedParse {
  bool child_ok = false;          // exited 0: `check` held for the trace it parsed
  double peak_rss_mib = 0;        // the child's ru_maxrss
  std::size_t bytes_written = 0;  // of the capture, before the child stopped reading
};

// Parses `head`, `filler_bytes` copies of `filler`, then `tail` in a forked child that reads them
// from a pipe through parse_trace_file (so the capture is never whole in this process or on disk),
// and measures the child's peak RSS. The child exits 0 when `check(trace)` holds. Writing stops
// when the child stops reading.
inline StreamedParse parse_streamed_in_child(
    const std::string& head, char filler, std::size_t filler_bytes, const std::string& tail,
    const shaper::ParseOptions& options, const std::function<bool(const shaper::Trace&)>& check) {
  StreamedParse result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return result;
  const pid_t child = ::fork();
  if (child < 0) return result;
  if (child == 0) {
    ::close(fds[1]);
    const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
    bool ok = false;
    try {
      ok = check(shaper::parse_trace_file(path, options));
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[0]);
  // A reader that stops early makes write() fail with EPIPE instead of killing this process.
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  const auto write_all = [&](const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fds[1], data, size);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
      result.bytes_written += static_cast<std::size_t>(n);
    }
    return true;
  };
  const std::string block(std::size_t{1} << 20, filler);
  bool open = write_all(head.data(), head.size());
  for (std::size_t left = filler_bytes; open && left > 0;) {
    const std::size_t n = left < block.size() ? left : block.size();
    open = write_all(block.data(), n);
    left -= n;
  }
  if (open) write_all(tail.data(), tail.size());
  ::close(fds[1]);
  std::signal(SIGPIPE, previous);
  int status = 0;
  rusage usage{};
  if (::wait4(child, &status, 0, &usage) != child) return result;
  result.child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  result.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  return result;
}

}  // namespace trace_test
