#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

#include "svg_writer.hpp"

namespace jitterctl {

namespace {

using shaper::DelaySeries;
using svg::coord;
using svg::escape;

constexpr double kWidth = 1000;
constexpr double kLeft = 80, kRight = 24;
constexpr double kPanelHeight = 260;
constexpr double kPanelGap = 80;  // below a panel: its tick labels, axis label and the next title
constexpr double kLineHeight = 16;
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
constexpr const char* kPass = "#1a7f37";
constexpr const char* kFail = "#c62828";
constexpr const char* kPhaseFills[] = {"#f2f2f2", "#e3ecf7", "#fbeedd",
                                       "#e6f3e6", "#f3e6f3", "#f7f3dc"};
// Points per series in the CDF and time series panels: enough for the eye, small files. The tail
// panel keeps every one of the kTailPoints largest delays besides, so p99.9 is drawn from data.
constexpr std::size_t kMaxPoints = 2000;
constexpr std::size_t kTailPoints = 2000;
// The log delay axis (--log) starts here at the least: delays with the baseline subtracted are
// often 0, which a log axis cannot show.
constexpr double kLogFloorMs = 0.01;

double ms(shaper::Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

std::string figure_text(double v) {
  if (v == 0) v = 0;  // -0 (an empty range's low end) reads "0"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The delivered delays of each series, sorted, in ms.
struct Sorted {
  std::vector<std::vector<double>> delays;
  double lo = INFINITY, hi = 0, p99 = 0;
  std::size_t most = 0;  // the largest series' count
};

Sorted sorted_delays(const std::vector<const DelaySeries*>& series) {
  Sorted out;
  for (const auto* s : series) {
    std::vector<double> d;
    for (const auto v : s->delivered()) d.push_back(ms(v));
    std::sort(d.begin(), d.end());
    if (!d.empty()) {
      out.lo = std::min(out.lo, d.front());
      out.hi = std::max(out.hi, d.back());
      out.p99 =
          std::max(out.p99, d[static_cast<std::size_t>(0.99 * static_cast<double>(d.size() - 1))]);
      out.most = std::max(out.most, d.size());
    }
    out.delays.push_back(std::move(d));
  }
  if (!std::isfinite(out.lo)) out.lo = 0;
  // A linear axis starts at 0 unless the delays sit far above it (a 600 ms satellite link).
  if (out.lo >= 0 && out.lo < 0.5 * out.hi) out.lo = 0;
  return out;
}

// ---- the verdict ----

std::string figure_name(const std::string& name) {
  constexpr std::pair<const char*, const char*> kNames[] = {
      {"ks", "KS distance"},
      {"p99_ms", "p99 (ms)"},
      {"p999_ms", "p99.9 (ms)"},
      {"loss_rate", "loss rate"},
      {"mean_loss_burst", "mean loss burst"},
      {"lag1_autocorr", "lag-1 autocorrelation"},
      {"stall_ks", "stall-length KS"}};
  for (const auto& [key, words] : kNames) {
    if (name == key) return words;
  }
  return name;
}

std::string allowed(const shaper::Figure& f) {
  const bool low = std::isfinite(f.low), high = std::isfinite(f.high);
  if (f.name == "ks" || f.name == "stall_ks") return "limit " + figure_text(f.high);
  if (low && high) return "allowed " + figure_text(f.low) + " to +" + figure_text(f.high);
  if (high) return "allowed up to +" + figure_text(f.high);
  if (low) return "allowed down to " + figure_text(f.low);
  return "unbounded";
}

// "p99 (ms) 23.1 -> 23.4: +0.3 (allowed -1.2 to +1.2)" and whether it passed.
std::string figure_line(const shaper::Figure& f) {
  std::string line = figure_name(f.name) + " ";
  if (f.a && f.b) {
    char diff[32];
    std::snprintf(diff, sizeof diff, "%+.3g", f.difference);
    line += figure_text(*f.a) + " \u2192 " + figure_text(*f.b) + ": " + diff;
  } else {
    line += figure_text(f.difference);
  }
  return line + " (" + allowed(f) + ")";
}

void verdict_text(std::ostringstream& out, double x, double y, const std::string& text,
                  const char* colour, bool bold = false) {
  out << "<text x='" << coord(x) << "' y='" << coord(y) << "' font-size='12' fill='" << colour
      << "'" << (bold ? " font-weight='bold'" : "") << ">" << escape(text) << "</text>\n";
}

// One comparison: its headline, then its figures in two columns. Returns the y below it.
double comparison_block(std::ostringstream& out, double y, const shaper::Comparison& c) {
  char head[200];
  std::snprintf(head, sizeof head, "%s vs %s: %s   (KS %.4f, limit %.4f; W1 %.3f ms; %s)",
                c.a.c_str(), c.b.c_str(), c.pass() ? "pass" : "FAIL", c.ks, c.ks_limit, c.w1_ms,
                c.level > 0 ? ("each figure judged at " + figure_text(100 * c.level) + " %").c_str()
                            : "figures");
  verdict_text(out, kLeft, y, head, c.pass() ? kPass : kFail, true);
  std::size_t i = 0;
  for (const auto& f : c.figures) {
    // One figure a line: two columns would not hold the longest (a lag-1 with its limits).
    const double x = kLeft + 16;
    const double row = y + kLineHeight * static_cast<double>(1 + i);
    const char* colour = !f.judged ? "#777" : f.pass ? "#222" : kFail;
    verdict_text(out, x, row,
                 figure_line(f) + (!f.judged ? ": not judged"
                                   : f.pass  ? ": pass"
                                             : ": FAIL"),
                 colour, f.judged && !f.pass);
    ++i;
  }
  for (const auto& failure : c.figures.empty() ? c.failures : std::vector<std::string>{}) {
    verdict_text(out, kLeft + 16, y + kLineHeight * static_cast<double>(1 + i++), failure, kFail);
  }
  return y + kLineHeight * static_cast<double>(1 + i) + 8;
}

// The verdict and every comparison's figures. Returns the y below it.
double verdict_block(std::ostringstream& out, double y, const shaper::ValidationReport& report) {
  out << "<text x='" << coord(kLeft) << "' y='" << coord(y)
      << "' font-size='16' font-weight='bold' fill='" << (report.pass ? kPass : kFail)
      << "'>verdict: " << (report.pass ? "PASS" : "FAIL") << "</text>\n";
  y += kLineHeight + 8;
  for (const auto& c : report.comparisons) y = comparison_block(out, y, c);
  return y;
}

// ---- the panels ----

// The capture wide and underneath, the profile over it, the shaped link dashed: where two series
// agree (the point of a good profile) each is still seen.
void polyline(std::ostringstream& out, std::size_t series,
              const std::vector<std::pair<double, double>>& points) {
  constexpr const char* kStrokes[] = {"stroke-width='3'", "stroke-width='1.6'",
                                      "stroke-width='1.6' stroke-dasharray='6 3'"};
  out << "<polyline class='series' fill='none' stroke='" << kColours[series % 3] << "' "
      << kStrokes[series % 3] << " points='";
  for (const auto& [x, y] : points) out << coord(x) << ',' << coord(y) << ' ';
  out << "'/>\n";
}

void cdf_panel(std::ostringstream& out, const svg::Panel& p, const Sorted& s, bool log_delay) {
  // The body: the delay axis ends a little past the highest p99 (unless the maximum is close to
  // it), so the median and the spread are readable with a heavy tail; the tail panel, which starts
  // at p99's level, shows the rest.
  // A log axis (--log) shows the tail as it is and is not cut.
  const bool cut = !log_delay && s.hi > 1.5 * s.p99;
  const double end = cut ? 1.2 * s.p99 : s.hi;
  const svg::Axis x = svg::make_axis(s.lo, end, log_delay, kLogFloorMs, p.left, p.right());
  const svg::Axis y = svg::make_axis(0, 1, false, 0, p.bottom(), p.top);
  std::string title = "CDF of the delivered delays";
  if (cut)
    title +=
        " (delay axis cut at " + figure_text(end) + " ms, past the highest p99; the tail is below)";
  svg::frame(out, p, x, y,
             {title, log_delay ? "delay (ms, log scale)" : "delay (ms)",
              "fraction of probes \u2264 delay"});
  for (std::size_t i = 0; i < s.delays.size(); ++i) {
    const auto& d = s.delays[i];
    std::vector<std::pair<double, double>> points;
    const std::size_t step = std::max<std::size_t>(1, d.size() / kMaxPoints);
    for (std::size_t k = 0; k < d.size(); k += step) {
      if (d[k] > end) break;
      points.emplace_back(x.map(d[k]), y.map(static_cast<double>(k + 1) / d.size()));
    }
    if (!d.empty()) points.emplace_back(x.map(std::min(d.back(), end)), y.map(1));
    polyline(out, i, points);
  }
}

// A dashed line across the tail panel at 1 - F = level, named at the left (where a tail, falling
// to the right, is still above it).
void tail_reference(std::ostringstream& out, const svg::Panel& p, const svg::Axis& y, double level,
                    const char* name) {
  if (level < y.lo) return;
  const std::string py = coord(y.map(level));
  out << "<line x1='" << coord(p.left) << "' y1='" << py << "' x2='" << coord(p.right()) << "' y2='"
      << py << "' stroke='#999' stroke-dasharray='5 4'/><text x='" << coord(p.left + 6) << "' y='"
      << coord(y.map(level) - 4) << "' font-size='11' fill='#555'>" << name << "</text>\n";
}

// The tail: 1 - F on a log axis, down to one probe in the longest series, so that p99 (0.01) and
// p99.9 (0.001) are a decade apart whatever the body does.
void tail_panel(std::ostringstream& out, const svg::Panel& p, const Sorted& s, bool log_delay) {
  const svg::Axis x = svg::make_axis(s.lo, s.hi, log_delay, kLogFloorMs, p.left, p.right());
  const double floor =
      std::pow(10, std::floor(std::log10(1.0 / std::max<std::size_t>(s.most, 10))));
  const svg::Axis y = svg::make_axis(floor, 1, true, floor, p.bottom(), p.top);
  svg::frame(
      out, p, x, y,
      {"Tail: fraction of probes above each delay (1 - F, log scale)",
       log_delay ? "delay (ms, log scale)" : "delay (ms)", "fraction of probes \u2265 delay"});
  out << "<g class='tail'>\n";
  tail_reference(out, p, y, 0.01, "p99");
  tail_reference(out, p, y, 0.001, "p99.9");
  for (std::size_t i = 0; i < s.delays.size(); ++i) {
    const auto& d = s.delays[i];
    const std::size_t n = d.size();
    const std::size_t step = std::max<std::size_t>(1, n / kMaxPoints);
    std::vector<std::pair<double, double>> points;
    for (std::size_t k = 0; k < n; ++k) {
      if (k % step != 0 && k + kTailPoints < n) continue;
      // P(delay >= d[k]): never 0, so the largest delay stays on the log axis at 1/n.
      points.emplace_back(x.map(d[k]), y.map(static_cast<double>(n - k) / static_cast<double>(n)));
    }
    polyline(out, i, points);
  }
  out << "</g>\n";
}

void phase_shading(std::ostringstream& out, const svg::Panel& p, const svg::Axis& x,
                   const DelaySeries& s, std::size_t probes) {
  std::map<std::string, std::size_t> colour;
  std::size_t start = 0;
  const std::size_t n = std::min(probes, s.phase.size());
  for (std::size_t k = 1; k <= n; ++k) {
    if (k < n && s.phase[k] == s.phase[start]) continue;
    const auto [it, inserted] = colour.emplace(s.phase[start], colour.size());
    const double x0 = x.map(ms(s.sent[start]) / 1000), x1 = x.map(ms(s.sent[k - 1]) / 1000);
    out << "<rect x='" << coord(x0) << "' y='" << coord(p.top + 1) << "' width='"
        << coord(std::max(x1 - x0, 0.5)) << "' height='" << coord(p.height - 2) << "' fill='"
        << kPhaseFills[it->second % 6] << "'><title>" << escape(s.phase[start])
        << "</title></rect>\n";
    start = k;
  }
}

// The time series (each series' first `probes`), phases shaded from the first series with them.
void time_series_panel(std::ostringstream& out, const svg::Panel& p,
                       const std::vector<const DelaySeries*>& series, const Sorted& s,
                       const ValidationPlot& plot) {
  const auto shown = [&](const DelaySeries& d) {
    return std::min(d.delay.size(), plot.time_series_probes);
  };
  double t_end = 1;
  for (const auto* d : series) {
    if (shown(*d) > 0) t_end = std::max(t_end, ms(d->sent[shown(*d) - 1]) / 1000);
  }
  const svg::Axis x = svg::make_axis(0, t_end, false, 0, p.left, p.right());
  const svg::Axis y = svg::make_axis(s.lo, s.hi, plot.log_delay, kLogFloorMs, p.bottom(), p.top);
  const auto shaded = std::find_if(series.begin(), series.end(),
                                   [](const DelaySeries* d) { return !d->phase.empty(); });
  if (shaded != series.end()) phase_shading(out, p, x, **shaded, shown(**shaded));
  svg::frame(
      out, p, x, y,
      {"Time series (the profile's first copy; its phases shaded, names on hover)",
       "time since the first probe (s)", plot.log_delay ? "delay (ms, log scale)" : "delay (ms)"});
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto* d = series[i];
    const std::size_t step = std::max<std::size_t>(1, shown(*d) / kMaxPoints);
    out << "<g fill='" << kColours[i % 3] << "' fill-opacity='0.6'>";
    for (std::size_t k = 0; k < shown(*d); k += step) {
      if (!d->delay[k]) continue;
      out << "<circle r='1.3' cx='" << coord(x.map(ms(d->sent[k]) / 1000)) << "' cy='"
          << coord(y.map(ms(*d->delay[k]))) << "'/>";
    }
    out << "</g>\n";
  }
}

// The title lines and the legend. Returns the y below them.
double header(std::ostringstream& out, const ValidationPlot& plot) {
  out << "<text x='" << coord(kLeft)
      << "' y='24' font-size='16' font-weight='bold'>jitterctl "
         "validate</text>\n";
  double y = 24;
  for (const auto& line : plot.inputs) {
    y += kLineHeight;
    out << "<text x='" << coord(kLeft) << "' y='" << coord(y) << "' font-size='12'>" << escape(line)
        << "</text>\n";
  }
  std::vector<svg::LegendEntry> entries;
  for (std::size_t i = 0; i < plot.series.size(); ++i)
    entries.push_back({kColours[i % 3], plot.series[i]->label});
  y += kLineHeight + 8;
  svg::legend(out, kLeft, y, entries);
  return y + 26;
}

}  // namespace

std::string validation_svg(const ValidationPlot& plot) {
  std::ostringstream body;
  double y = header(body, plot);
  if (plot.report) y = verdict_block(body, y, *plot.report) + 20;
  const Sorted sorted = sorted_delays(plot.series);
  const double width = kWidth - kLeft - kRight;
  cdf_panel(body, {kLeft, y, width, kPanelHeight}, sorted, plot.log_delay);
  y += kPanelHeight + kPanelGap;
  tail_panel(body, {kLeft, y, width, kPanelHeight}, sorted, plot.log_delay);
  y += kPanelHeight + kPanelGap;
  time_series_panel(body, {kLeft, y, width, kPanelHeight}, plot.series, sorted, plot);
  y += kPanelHeight + 50;
  return svg::document(kWidth, y, body.str());
}

}  // namespace jitterctl
