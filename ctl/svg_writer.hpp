#pragma once
// What the two plots (svg_plot.cpp, timeline_plot.cpp) draw with: text escaping, axes with their
// ticks, a framed panel with its labels, a legend. Coordinates are SVG user units (pixels at 100
// %); values are in the axis's unit (ms, s, a fraction).

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace jitterctl::svg {

// `text` safe inside an element or a quoted attribute: control characters and bytes that are not
// well-formed UTF-8 become '?', since an XML 1.0 document can hold neither.
std::string escape(std::string_view text);

// A coordinate: one decimal (a tenth of a pixel), never "nan" or "inf" (clamped to the canvas).
std::string coord(double v);

// A tick label: the shortest of %g.
std::string label(double v);

// A value axis mapped onto a pixel range [from, to] (to < from for a y axis: up is smaller).
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double from = 0, to = 1;
  double map(double v) const;         // clamped to the axis's range, so every coordinate is finite
  std::vector<double> ticks() const;  // 1-2-5 steps on a linear axis, decades (or 1-2-5) on a log
};

// An axis from lo to hi that is never empty nor (on a log scale) below `log_floor`.
Axis make_axis(double lo, double hi, bool log, double log_floor, double from, double to);

struct Panel {
  double left = 0, top = 0, width = 0, height = 0;
  double bottom() const { return top + height; }
  double right() const { return left + width; }
};

struct Frame {
  std::string title, x_label, y_label;
};

// The panel's title above it, its border, ticks and grid lines on both axes, the axis labels.
void frame(std::ostringstream& out, const Panel& panel, const Axis& x, const Axis& y,
           const Frame& labels);

struct LegendEntry {
  std::string colour;
  std::string text;
  bool band = false;  // a filled box (a band or a shade) rather than a line
};

// One row of legend entries from (x, y), each as wide as its text needs.
void legend(std::ostringstream& out, double x, double y, const std::vector<LegendEntry>& entries);

// The whole file: the XML declaration, the <svg> element `width` x `height` on a white ground,
// `body` inside it.
std::string document(double width, double height, const std::string& body);

// A path or file name short enough for a title: the last `keep` characters, "..." before them.
std::string shortened(std::string_view name, std::size_t keep = 60);

}  // namespace jitterctl::svg
