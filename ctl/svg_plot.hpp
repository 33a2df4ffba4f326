#pragma once
// The validation plot: CDFs (linear or log delay axis), histograms, and the time series with the
// profile's phases shaded, as one self-contained SVG file.

#include <string>
#include <vector>

#include "shaper/validation.hpp"

namespace jitterctl {

struct PlotOptions {
  bool log_scale = false;
  std::string title;
};

std::string validation_svg(const std::vector<const shaper::DelaySeries*>& series,
                           const PlotOptions& options);

}  // namespace jitterctl
