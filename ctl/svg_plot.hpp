#pragma once
// The validation plot (jitterctl validate --plot): one self-contained SVG with the inputs' names,
// the verdict with every judged figure, the CDFs on a linear delay axis, the tail as 1 - F on a log
// axis, and the time series with the profile's phases shaded. docs/validation.md shows one.

#include <cstdint>
#include <string>
#include <vector>

#include "shaper/validation.hpp"

namespace jitterctl {

struct ValidationPlot {
  // The capture (or the shaped trace judged alone), the profile as simulated, then the shaped
  // trace when there is one: drawn in that order, each in its own colour, named by its label.
  std::vector<const shaper::DelaySeries*> series;
  const shaper::ValidationReport* report = nullptr;  // the verdict written in the plot
  // What was compared, one line each, e.g. "profile heavy.json (heavy-tailed)".
  std::vector<std::string> inputs;
  bool log_delay = false;  // --log: the delay axes on a log scale
  // The time series draws each series' first this many probes: the capture's span, so the
  // profile's first copy only (the CDFs and the tail use every probe).
  std::size_t time_series_probes = SIZE_MAX;
};

std::string validation_svg(const ValidationPlot& plot);

}  // namespace jitterctl
