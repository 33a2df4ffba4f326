#include "timeline_plot.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "shaper/distribution_tables.hpp"
#include "shaper/quantities.hpp"
#include "svg_writer.hpp"

namespace jitterctl {

namespace {

using shaper::DelaySeries;
using shaper::Nanoseconds;
using svg::coord;
using svg::escape;

constexpr double kWidth =
    1200;  // wider than the validation plot: a replay has thousands of windows
constexpr double kLeft = 80, kRight = 24;
constexpr double kPanelHeight = 300;
constexpr double kPanelGap = 80;
constexpr double kLineHeight = 16;
constexpr const char* kCaptureColour = "#1f77b4";
constexpr const char* kLevelColour = "#e65100";
constexpr const char* kBandColour = "#ffcc80";
constexpr const char* kLossColour = "#c62828";
// The zoom panel: this long, around the capture's largest delay, when the capture is at least
// twice as long (a replay's windows are a few hundred ms: a whole capture shows them a pixel wide).
constexpr double kZoomSeconds = 60;
constexpr double kLogFloorMs = 0.01;  // as in the validation plot: a log axis cannot show 0

double ms(Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e6;
}

double seconds(Nanoseconds d) {
  return static_cast<double>(d.count()) / 1e9;
}

double quantile(const std::vector<double>& sorted, double level) {
  return sorted[static_cast<std::size_t>(level * static_cast<double>(sorted.size() - 1))];
}

struct Scales {
  svg::Axis x, y;
};

// The capture's probes in [from, to) s: one circle per delivered probe and one red tick at the top
// per lost one, in runs of `stride` probes (the largest delay of each run) when decimated.
void capture_points(std::ostringstream& out, const svg::Panel& p, const Scales& s,
                    const DelaySeries& capture, std::size_t stride) {
  out << "<g class='capture' fill='" << kCaptureColour << "' fill-opacity='0.7'>";
  std::ostringstream lost;
  for (std::size_t k = 0; k < capture.delay.size(); k += stride) {
    const std::size_t end = std::min(capture.delay.size(), k + stride);
    std::optional<Nanoseconds> largest;
    bool any_lost = false;
    for (std::size_t j = k; j < end; ++j) {
      if (!capture.delay[j])
        any_lost = true;
      else if (!largest || *capture.delay[j] > *largest)
        largest = capture.delay[j];
    }
    const double t = seconds(capture.sent[k]);
    if (t < s.x.lo || t > s.x.hi) continue;
    const std::string cx = coord(s.x.map(t));
    if (largest)
      out << "<circle r='1.4' cx='" << cx << "' cy='" << coord(s.y.map(ms(*largest))) << "'/>";
    if (any_lost)
      lost << "<line class='lost' x1='" << cx << "' y1='" << coord(p.top) << "' x2='" << cx
           << "' y2='" << coord(p.top + 8) << "'/>";
  }
  out << "</g>\n<g stroke='" << kLossColour << "' stroke-width='1.2'>" << lost.str() << "</g>\n";
}

// A window's loss: a red shade over the panel's height, its opacity 0.06 + 0.29 sqrt(loss) (a
// square root so that 0.1 % and 3 % differ to the eye, as they do to a user; 0.35 at loss 1 keeps
// the points readable through it), the rate on hover.
void loss_shade(std::ostringstream& out, const svg::Panel& p, double x0, double width, double loss,
                const char* kind) {
  char opacity[16], rate[32];
  std::snprintf(opacity, sizeof opacity, "%.3f",
                0.06 + 0.29 * std::sqrt(std::clamp(loss, 0.0, 1.0)));
  std::snprintf(rate, sizeof rate, "loss %.3g %%", 100 * loss);
  out << "<rect class='" << kind << "' x='" << coord(x0) << "' y='" << coord(p.top) << "' width='"
      << coord(width) << "' height='" << coord(p.height) << "' fill-opacity='" << opacity
      << "'><title>" << rate << "</title></rect>";
}

// Each window: its loss shade, its band (p5 to p95 of its phase's delays), and its median as one
// step line. A window that loses every probe (a replayed loss burst) has no delay to draw: it is
// its loss shade alone (class 'window lost'), and the line breaks there.
void schedule_layer(std::ostringstream& out, const svg::Panel& p, const Scales& s,
                    const std::vector<ScheduleWindow>& windows,
                    const std::map<const shaper::Phase*, PhaseBand>& bands) {
  std::ostringstream shades, windows_out, line;
  bool drawing = false;
  for (const auto& w : windows) {
    const double t0 = seconds(w.start), t1 = seconds(w.end);
    if (t1 < s.x.lo || t0 > s.x.hi) continue;
    const PhaseBand& b = bands.at(w.phase);
    const double x0 = s.x.map(t0), x1 = s.x.map(t1);
    const double width = std::max(x1 - x0, 0.3);
    if (b.loss >= 1) {
      loss_shade(shades, p, x0, width, b.loss, "window lost");
      drawing = false;
      continue;
    }
    windows_out << "<rect class='window' x='" << coord(x0) << "' y='" << coord(s.y.map(b.p95_ms))
                << "' width='" << coord(width) << "' height='"
                << coord(std::max(s.y.map(b.p5_ms) - s.y.map(b.p95_ms), 0.8)) << "'><title>"
                << escape(w.phase->name) << "</title></rect>";
    if (b.loss > 0) loss_shade(shades, p, x0, width, b.loss, "loss");
    const std::string y = coord(s.y.map(b.p50_ms));
    line << (drawing ? 'L' : 'M') << coord(x0) << ',' << y << 'L' << coord(x1) << ',' << y;
    drawing = true;
  }
  // The shades first: under the bands, which keep their colour.
  out << "<g fill='" << kLossColour << "'>" << shades.str() << "</g>\n<g class='schedule' fill='"
      << kBandColour << "'>" << windows_out.str() << "</g>\n";
  out << "<path class='level' fill='none' stroke='" << kLevelColour << "' stroke-width='1.5' d='"
      << line.str() << "'/>\n";
}

struct Drawing {
  const DelaySeries& capture;
  const std::vector<ScheduleWindow>& windows;
  const std::map<const shaper::Phase*, PhaseBand>& bands;
  double top_ms = 1;
  bool log_delay = false;
  std::size_t stride = 1;
};

void timeline_panel(std::ostringstream& out, const svg::Panel& p, const Drawing& d, double from_s,
                    double to_s, const std::string& id, const std::string& title) {
  const Scales s{svg::make_axis(from_s, to_s, false, 0, p.left, p.right()),
                 svg::make_axis(0, d.top_ms, d.log_delay, kLogFloorMs, p.bottom(), p.top)};
  out << "<g class='panel' id='" << id << "'>\n";
  svg::frame(out, p, s.x, s.y,
             {title, "time since the capture's first probe (s)",
              d.log_delay ? "delay (ms, log scale)" : "delay (ms)"});
  schedule_layer(out, p, s, d.windows, d.bands);
  capture_points(out, p, s, d.capture, d.stride);
  out << "</g>\n";
}

}  // namespace

std::vector<ScheduleWindow> schedule_windows(const shaper::Profile& profile, Nanoseconds until) {
  std::vector<ScheduleWindow> out;
  if (profile.phases.empty()) return out;
  if (!profile.schedule || profile.schedule->steps.empty()) {
    out.push_back({Nanoseconds{0}, until, &profile.phases.front()});
    return out;
  }
  const auto& steps = profile.schedule->steps;
  Nanoseconds pass{0};
  for (const auto& step : steps) pass += step.duration;
  const bool loop = profile.schedule->loop && pass > Nanoseconds{0};
  Nanoseconds at{0};
  for (std::size_t i = 0; out.size() < kMaxWindows; i = (i + 1) % steps.size()) {
    const shaper::Phase* phase = profile.find_phase(steps[i].phase);
    if (phase == nullptr) phase = &profile.phases.front();  // a loaded profile names real phases
    out.push_back({at, at + steps[i].duration, phase});
    at += steps[i].duration;
    if (at >= until) break;
    if (i + 1 == steps.size() && !loop) {
      out.back().end = until;  // the last phase stays in force
      break;
    }
  }
  return out;
}

namespace {

// The long-run loss rate of a phase's loss model: Bernoulli's probability; for Gilbert-Elliott,
// each state's loss weighted by the chain's time in it (Bad: p / (p + r)). The 4-state chain is not
// shaded (0): the compiler's replay never gives it, and its stationary rate needs a 4x4 solve.
double mean_loss(const shaper::LossModel& loss) {
  if (const auto* random = std::get_if<shaper::RandomLoss>(&loss))
    return random->probability.value();
  if (const auto* ge = std::get_if<shaper::GilbertElliottLoss>(&loss)) {
    const double p = ge->p.value(), r = ge->r.value();
    if (p + r <= 0) return ge->loss_good.value();  // never leaves Good
    return (r * ge->loss_good.value() + p * ge->loss_bad.value()) / (p + r);
  }
  return 0;
}

}  // namespace

PhaseBand phase_band(const shaper::Phase& phase) {
  const auto& delay = phase.spec.delay;
  PhaseBand band;
  band.loss = mean_loss(phase.spec.loss);
  std::vector<double> delays;
  if (delay.distribution && !(*delay.distribution).empty()) {
    // netem caps the jitter at INT_MAX ns (sch_netem's s32 sigma), as the simulator does.
    const auto jitter =
        static_cast<std::int32_t>(std::min<std::int64_t>(delay.jitter.count(), INT_MAX));
    for (const std::int16_t t : (*delay.distribution))
      delays.push_back(
          static_cast<double>(shaper::netem_table_delay_ns(delay.latency.count(), jitter, t)) /
          1e6);
  } else {
    // Uniform over latency +- jitter: its quantiles directly.
    for (const double q : {0.05, 0.5, 0.95})
      delays.push_back(ms(delay.latency) + (2 * q - 1) * ms(delay.jitter));
  }
  std::sort(delays.begin(), delays.end());
  band.p5_ms = std::max(0.0, quantile(delays, 0.05));
  band.p50_ms = std::max(0.0, quantile(delays, 0.5));
  band.p95_ms = std::max(0.0, quantile(delays, 0.95));
  return band;
}

namespace {

// The title lines, the schedule's description and the legend. Returns the y below them.
double timeline_header(std::ostringstream& out, const TimelinePlot& plot,
                       const std::vector<ScheduleWindow>& windows) {
  out << "<text x='" << coord(kLeft)
      << "' y='24' font-size='16' font-weight='bold'>jitterctl "
         "validate --timeline</text>\n";
  double y = 24;
  std::vector<std::string> lines = plot.inputs;
  const auto& schedule = plot.profile->schedule;
  std::string about = std::to_string(windows.size()) + " schedule windows over the capture";
  if (schedule && schedule->replay_window)
    about += " (a replay: windows of " + shaper::format_duration(*schedule->replay_window) + ")";
  if (!schedule) about += " (no schedule: its first phase throughout)";
  if (windows.size() == kMaxWindows)
    about += "; the first " + std::to_string(kMaxWindows) + " drawn";
  lines.push_back(about);
  for (const auto& line : lines) {
    y += kLineHeight;
    out << "<text x='" << coord(kLeft) << "' y='" << coord(y) << "' font-size='12'>" << escape(line)
        << "</text>\n";
  }
  y += kLineHeight + 8;
  svg::legend(out, kLeft, y,
              {{kCaptureColour, plot.capture->label + " (one point per probe)"},
               {kLevelColour, "the window's phase: median delay"},
               {kBandColour, "5th-95th percentile of its delays", true},
               {kLossColour, "loss (shade: probability; tick: a lost probe)", true}});
  return y + 30;
}

// The zoom: kZoomSeconds around the capture's largest delay (its worst stall).
std::pair<double, double> zoom_range(const DelaySeries& capture, double span_s) {
  std::size_t worst = 0;
  for (std::size_t k = 0; k < capture.delay.size(); ++k) {
    if (capture.delay[k] && (!capture.delay[worst] || *capture.delay[k] > *capture.delay[worst]))
      worst = k;
  }
  const double centre = capture.sent.empty() ? 0 : seconds(capture.sent[worst]);
  const double from = std::clamp(centre - kZoomSeconds / 2, 0.0, span_s - kZoomSeconds);
  return {from, from + kZoomSeconds};
}

}  // namespace

std::string timeline_svg(const TimelinePlot& plot) {
  const DelaySeries& capture = *plot.capture;
  const Nanoseconds span = capture.sent.empty() ? Nanoseconds{0} : capture.sent.back();
  const std::vector<ScheduleWindow> windows = schedule_windows(*plot.profile, span);
  std::map<const shaper::Phase*, PhaseBand> bands;
  double top_ms = 1;
  for (const auto& w : windows) {
    const auto [it, added] = bands.emplace(w.phase, PhaseBand{});
    if (added) it->second = phase_band(*w.phase);
    top_ms = std::max(top_ms, it->second.p95_ms);
  }
  for (const auto& d : capture.delay) {
    if (d) top_ms = std::max(top_ms, ms(*d));
  }
  const std::size_t stride = (capture.delay.size() + kMaxTimelinePoints - 1) / kMaxTimelinePoints;
  const Drawing drawing{capture,       windows,        bands,
                        top_ms * 1.05, plot.log_delay, std::max<std::size_t>(stride, 1)};
  std::ostringstream body;
  double y = timeline_header(body, plot, windows);
  const double span_s = std::max(seconds(span), 1e-3);
  const svg::Panel full{kLeft, y, kWidth - kLeft - kRight, kPanelHeight};
  timeline_panel(body, full, drawing, 0, span_s, "full", "Delay over time: the whole capture");
  y += kPanelHeight + kPanelGap;
  if (span_s >= 2 * kZoomSeconds) {
    const auto [from, to] = zoom_range(capture, span_s);
    timeline_panel(body, {kLeft, y, full.width, kPanelHeight}, drawing, from, to, "zoom",
                   "Zoom: the " + svg::label(kZoomSeconds) + " s around the largest delay");
    y += kPanelHeight + kPanelGap;
  }
  return svg::document(kWidth, y, body.str());
}

}  // namespace jitterctl
