#pragma once
// Shared by the trace parser tests: where the fixtures are (tests/fixtures/traces, provenance in
// its README.md) and compact views of a Trace for assertions.

#include <cstddef>
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

}  // namespace trace_test
