// libFuzzer target for the trace parsers: one binary per format (JITTERD_FUZZ_FORMAT names it; kAuto
// runs detection and then whichever parser it picks). Hostile input must never crash, abort, hang or
// trip a sanitizer, and every line must be accounted for (recognised or counted as unrecognised).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shaper/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  shaper::ParseOptions options;
  options.format = shaper::TraceFormat::JITTERD_FUZZ_FORMAT;
  const shaper::Trace trace = shaper::parse_trace_text(text, "fuzz", options);
  // Invariants that hold for any input.
  if (trace.unrecognised_lines > trace.lines) std::abort();
  if (trace.diagnostics.size() > options.max_diagnostics + 1) std::abort();
  for (std::size_t i = 1; i < trace.samples.size(); ++i) {
    if (trace.samples[i].seq < trace.samples[i - 1].seq) std::abort();  // probe order
  }
  return 0;
}
