#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace jitterctl {

namespace {

constexpr double kWidth = 960;
constexpr double kPanelHeight = 280;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kGap = 70;
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
constexpr const char* kPhaseFills[] = {"#f2f2f2", "#e3ecf7", "#fbeedd",
                                       "#e6f3e6", "#f3e6f3", "#f7f3dc"};
constexpr std::size_t kMaxPoints = 2000;  // per series and panel: enough for the eye, small files

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double ms(shaper::Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

struct Axis {
  double lo, hi;
  bool log;
  double map(double v, double from, double to) const {
    double a = lo, b = hi, x = v;
    if (log) {
      a = std::log10(lo);
      b = std::log10(hi);
      x = std::log10(std::max(v, lo));
    }
    return from + (x - a) / (b - a) * (to - from);
  }
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string label_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Ticks: 1-2-5 steps on a linear axis, decades on a log axis.
std::vector<double> ticks(const Axis& a) {
  std::vector<double> out;
  if (a.log) {
    for (double d = std::pow(10, std::floor(std::log10(a.lo))); d <= a.hi * 1.0001; d *= 10) {
      if (d >= a.lo * 0.9999) out.push_back(d);
    }
    return out;
  }
  const double span = a.hi - a.lo;
  double step = std::pow(10, std::floor(std::log10(span / 5)));
  if (span / step > 10) step *= 2;
  if (span / step > 10) step *= 2.5;
  for (double t = std::ceil(a.lo / step) * step; t <= a.hi + step * 1e-9; t += step)
    out.push_back(t);
  return out;
}

void frame(std::ostringstream& svg, double top, const std::string& title, const Axis& x,
           const Axis& y, const std::string& xlabel, const std::string& ylabel) {
  const double bottom = top + kPanelHeight;
  svg << "<text x='" << kLeft << "' y='" << top - 8 << "' font-size='14' font-weight='bold'>"
      << escape(title) << "</text>\n";
  svg << "<rect x='" << kLeft << "' y='" << top << "' width='" << kWidth - kLeft - kRight
      << "' height='" << kPanelHeight << "' fill='none' stroke='#444'/>\n";
  for (double t : ticks(x)) {
    const double px = x.map(t, kLeft, kWidth - kRight);
    svg << "<line x1='" << fmt(px) << "' y1='" << bottom << "' x2='" << fmt(px) << "' y2='"
        << bottom + 5 << "' stroke='#444'/><text x='" << fmt(px) << "' y='" << bottom + 18
        << "' font-size='11' text-anchor='middle'>" << label_number(t) << "</text>\n";
  }
  for (double t : ticks(y)) {
    const double py = y.map(t, bottom, top);
    svg << "<line x1='" << kLeft - 5 << "' y1='" << fmt(py) << "' x2='" << kLeft << "' y2='"
        << fmt(py) << "' stroke='#444'/><text x='" << kLeft - 8 << "' y='" << fmt(py + 4)
        << "' font-size='11' text-anchor='end'>" << label_number(t) << "</text>\n";
  }
  svg << "<text x='" << (kLeft + kWidth - kRight) / 2 << "' y='" << bottom + 34
      << "' font-size='12' text-anchor='middle'>" << escape(xlabel) << "</text>\n";
  svg << "<text x='16' y='" << (top + bottom) / 2
      << "' font-size='12' text-anchor='middle' transform='rotate(-90 16 " << (top + bottom) / 2
      << ")'>" << escape(ylabel) << "</text>\n";
}

// Panel 1: the CDFs.
void cdf_panel(std::ostringstream& svg, double top, const std::vector<std::vector<double>>& delays,
               double lo, double hi, const PlotOptions& options) {
  const Axis cdf_x{options.log_scale ? std::max(lo, 0.01) : lo, hi, options.log_scale};
  const Axis cdf_y{0, 1, false};
  frame(svg, top, options.log_scale ? "CDF (log delay axis)" : "CDF", cdf_x, cdf_y, "delay (ms)",
        "fraction");
  for (std::size_t i = 0; i < delays.size(); ++i) {
    const auto& d = delays[i];
    if (d.empty()) continue;
    svg << "<polyline fill='none' stroke-width='1.5' stroke='" << kColours[i % 3] << "' points='";
    const std::size_t step = std::max<std::size_t>(1, d.size() / kMaxPoints);
    for (std::size_t k = 0; k < d.size(); k += step) {
      svg << fmt(cdf_x.map(d[k], kLeft, kWidth - kRight)) << ','
          << fmt(cdf_y.map(static_cast<double>(k + 1) / static_cast<double>(d.size()),
                           top + kPanelHeight, top))
          << ' ';
    }
    svg << fmt(cdf_x.map(d.back(), kLeft, kWidth - kRight)) << ',' << fmt(top) << "'/>\n";
  }
}

// Panel 2: histograms (fraction per bin), 60 bins over the common range.
void histogram_panel(std::ostringstream& svg, double top,
                     const std::vector<std::vector<double>>& delays, double lo, double hi) {
  constexpr int kBins = 60;
  std::vector<std::vector<double>> fractions;
  double peak = 0;
  for (const auto& d : delays) {
    std::vector<double> f(kBins, 0);
    for (double v : d) {
      int b = static_cast<int>((v - lo) / (hi - lo) * kBins);
      f[static_cast<std::size_t>(std::clamp(b, 0, kBins - 1))] +=
          1.0 / static_cast<double>(d.size());
    }
    for (double v : f) peak = std::max(peak, v);
    fractions.push_back(std::move(f));
  }
  const Axis hist_x{lo, hi, false};
  const Axis hist_y{0, std::max(peak * 1.05, 1e-6), false};
  frame(svg, top, "Histogram", hist_x, hist_y, "delay (ms)", "fraction of probes");
  for (std::size_t i = 0; i < fractions.size(); ++i) {
    svg << "<polyline fill='none' stroke-width='1.5' stroke='" << kColours[i % 3] << "' points='";
    for (int b = 0; b < kBins; ++b) {
      const double x0 = lo + (hi - lo) * b / kBins, x1 = lo + (hi - lo) * (b + 1) / kBins;
      const double y =
          hist_y.map(fractions[i][static_cast<std::size_t>(b)], top + kPanelHeight, top);
      svg << fmt(hist_x.map(x0, kLeft, kWidth - kRight)) << ',' << fmt(y) << ' '
          << fmt(hist_x.map(x1, kLeft, kWidth - kRight)) << ',' << fmt(y) << ' ';
    }
    svg << "'/>\n";
  }
}

// Panel 3: the time series, phases shaded from the first series that knows them.
void time_series_panel(std::ostringstream& svg, double top,
                       const std::vector<const shaper::DelaySeries*>& series, double lo, double hi,
                       const PlotOptions& options) {
  double t_end = 1;
  for (const auto* s : series) {
    if (!s->sent.empty()) t_end = std::max(t_end, ms(s->sent.back()) / 1000);
  }
  const Axis ts_x{0, t_end, false};
  const Axis ts_y{options.log_scale ? std::max(lo, 0.01) : lo, hi, options.log_scale};
  frame(svg, top, "Time series (phases shaded)", ts_x, ts_y, "time (s)", "delay (ms)");
  for (const auto* s : series) {
    if (s->phase.empty()) continue;
    std::map<std::string, std::size_t> colour;
    std::size_t start = 0;
    for (std::size_t k = 1; k <= s->phase.size(); ++k) {
      if (k < s->phase.size() && s->phase[k] == s->phase[start]) continue;
      const auto [it, inserted] = colour.emplace(s->phase[start], colour.size());
      const double x0 = ts_x.map(ms(s->sent[start]) / 1000, kLeft, kWidth - kRight);
      const double x1 = ts_x.map(ms(s->sent[k - 1]) / 1000, kLeft, kWidth - kRight);
      svg << "<rect x='" << fmt(x0) << "' y='" << top + 1 << "' width='"
          << fmt(std::max(x1 - x0, 0.5)) << "' height='" << kPanelHeight - 2 << "' fill='"
          << kPhaseFills[it->second % 6] << "'><title>" << escape(s->phase[start])
          << "</title></rect>\n";
      start = k;
    }
    break;
  }
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto* s = series[i];
    const std::size_t step = std::max<std::size_t>(1, s->delay.size() / kMaxPoints);
    svg << "<g fill='" << kColours[i % 3] << "' fill-opacity='0.6'>";
    for (std::size_t k = 0; k < s->delay.size(); k += step) {
      if (!s->delay[k]) continue;
      svg << "<circle r='1.3' cx='" << fmt(ts_x.map(ms(s->sent[k]) / 1000, kLeft, kWidth - kRight))
          << "' cy='" << fmt(ts_y.map(ms(*s->delay[k]), top + kPanelHeight, top)) << "'/>";
    }
    svg << "</g>\n";
  }
}

}  // namespace

std::string validation_svg(const std::vector<const shaper::DelaySeries*>& series,
                           const PlotOptions& options) {
  std::ostringstream svg;
  const double height = kTop + 3 * (kPanelHeight + kGap) + 10;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << height
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  svg << "<text x='" << kLeft << "' y='22' font-size='16' font-weight='bold'>"
      << escape(options.title) << "</text>\n";

  std::vector<std::vector<double>> delays;
  double lo = INFINITY, hi = 0;
  for (const auto* s : series) {
    std::vector<double> d;
    for (auto v : s->delivered()) d.push_back(ms(v));
    std::sort(d.begin(), d.end());
    if (!d.empty()) {
      lo = std::min(lo, d.front());
      hi = std::max(hi, d.back());
    }
    delays.push_back(std::move(d));
  }
  if (!std::isfinite(lo)) lo = 0;
  if (hi <= lo) hi = lo + 1;
  // Legend.
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double x = kWidth - kRight - 130 * static_cast<double>(series.size() - i);
    svg << "<rect x='" << x << "' y='12' width='14' height='4' fill='" << kColours[i % 3]
        << "'/><text x='" << x + 20 << "' y='18' font-size='12'>" << escape(series[i]->label)
        << "</text>\n";
  }

  const double top = kTop + 20;
  cdf_panel(svg, top, delays, lo, hi, options);
  histogram_panel(svg, top + (kPanelHeight + kGap), delays, lo, hi);
  time_series_panel(svg, top + 2 * (kPanelHeight + kGap), series, lo, hi, options);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace jitterctl
