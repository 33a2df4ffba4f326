// The validation plot and the timeline plot (ctl/svg_plot.cpp, ctl/timeline_plot.cpp): what they
// draw, checked in the SVG text (series, tail panel, verdict, one point per probe, one band per
// schedule window), that the text is well-formed XML with finite coordinates and the same for the
// same input, and, where rsvg-convert is installed, that it renders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/temp_dir.hpp"
#include "run_jitterctl.hpp"
#include "shaper/profile.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"
#include "svg_plot.hpp"
#include "svg_writer.hpp"
#include "timeline_plot.hpp"

namespace {

using jitterctl::ValidationPlot;
using shaper::DelaySeries;
using shaper::Nanoseconds;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The part of `svg` inside <g ... id='ID'> ... up to the next panel (or the end).
std::string panel(const std::string& svg, const std::string& id) {
  const auto start = svg.find("id='" + id + "'");
  if (start == std::string::npos) return "";
  const auto end = svg.find("<g class='panel'", start);
  return svg.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// Where the entity reference at xml[i] ('&') ends, or npos if it is not one of the five XML has.
std::size_t entity_end(const std::string& xml, std::size_t i) {
  for (const char* e : {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"}) {
    if (xml.compare(i, std::strlen(e), e) == 0) return i + std::strlen(e);
  }
  return std::string::npos;
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_';
}

// One tag from xml[i] ('<'): its name onto `open` or off it. Returns where it ends, or npos.
std::size_t read_tag(const std::string& xml, std::size_t i, std::vector<std::string>& open,
                     int& roots) {
  const bool closing = xml[++i] == '/';
  if (closing) ++i;
  const std::size_t name_start = i;
  while (i < xml.size() && name_char(xml[i])) ++i;
  const std::string name = xml.substr(name_start, i - name_start);
  if (name.empty()) return std::string::npos;
  while (i < xml.size() && !closing) {  // attributes: name='value'
    while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
    if (xml[i] == '/' || xml[i] == '>') break;
    while (i < xml.size() && name_char(xml[i])) ++i;
    if (xml.compare(i, 2, "='") != 0) return std::string::npos;
    for (i += 2; i < xml.size() && xml[i] != '\''; ++i) {
      if (xml[i] == '<' || (xml[i] == '&' && entity_end(xml, i) == std::string::npos))
        return std::string::npos;
    }
    ++i;
  }
  const bool empty = xml.compare(i, 2, "/>") == 0;
  if (!empty && xml.compare(i, 1, ">") != 0) return std::string::npos;
  if (closing) {
    if (open.empty() || open.back() != name) return std::string::npos;
    open.pop_back();
  } else if (!empty) {
    if (open.empty()) ++roots;
    open.push_back(name);
  }
  return i + (empty ? 2 : 1);
}

// A well-formedness check of the XML the plots write: every tag closed in order, attributes
// single-quoted, no '<' or stray '&' in text or values (only the five predefined entities), one
// root element. Returns the first problem, or "" for a well-formed document.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  int roots = 0;
  std::size_t i = xml.compare(0, 5, "<?xml") == 0 ? xml.find("?>") + 2 : 0;
  while (i < xml.size()) {
    std::size_t next = i + 1;
    if (xml[i] == '<') {
      next = read_tag(xml, i, open, roots);
    } else if (xml[i] == '&') {
      next = entity_end(xml, i);
    } else if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i]))) {
      return "text outside the root";
    }
    if (next == std::string::npos) return "not well-formed at " + xml.substr(i, 60);
    i = next;
  }
  if (!open.empty()) return "<" + open.back() + "> not closed";
  return roots == 1 ? "" : std::to_string(roots) + " root elements";
}

// Every number in an attribute value is finite (no nan, no inf) and within a million units.
void expect_finite_coordinates(const std::string& svg) {
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf'"), std::string::npos);
  for (auto at = svg.find("='"); at != std::string::npos; at = svg.find("='", at + 1)) {
    const auto end = svg.find('\'', at + 2);
    const std::string value = svg.substr(at + 2, end - at - 2);
    for (std::size_t k = 0; k < value.size(); ++k) {
      const bool starts = std::isdigit(static_cast<unsigned char>(value[k])) &&
                          (k == 0 || !std::isalnum(static_cast<unsigned char>(value[k - 1])));
      if (!starts) continue;
      const double v = std::strtod(value.c_str() + k, nullptr);
      ASSERT_TRUE(std::isfinite(v) && std::abs(v) <= 1e6) << value.substr(0, 80);
      while (k < value.size() &&
             (std::isdigit(static_cast<unsigned char>(value[k])) || value[k] == '.'))
        ++k;
    }
    at = end;
  }
}

// n probes 10 ms apart with delays `base` + (k * 7919 mod 200) / 20 ms (a spread of 10 ms), every
// 97th lost: deterministic, with a body and a spread.
DelaySeries series(const std::string& label, std::size_t n, double base_ms) {
  DelaySeries s;
  s.label = label;
  for (std::size_t k = 0; k < n; ++k) {
    s.sent.push_back(Nanoseconds{static_cast<std::int64_t>(k) * 10'000'000});
    const double d = base_ms + static_cast<double>((k * 7919) % 200) / 20;
    s.delay.push_back(k % 97 == 96
                          ? std::nullopt
                          : std::optional(Nanoseconds{static_cast<std::int64_t>(d * 1e6)}));
  }
  return s;
}

std::string plot_of(const std::vector<const DelaySeries*>& s, const shaper::ValidationReport& r) {
  return jitterctl::validation_svg(
      ValidationPlot{s, &r, {"profile p.json (\"p\")", "capture c.txt"}, false, SIZE_MAX});
}

TEST(ValidationPlot, DrawsTheThreeSeriesInTheCdfAndTheTail) {
  const DelaySeries capture = series("capture", 3000, 10), profile = series("profile", 3000, 10),
                    shaped = series("shaped", 3000, 10);
  const auto report = shaper::validate_series(capture, profile, &shaped);
  const std::string svg = plot_of({&capture, &profile, &shaped}, report);
  // One polyline per series in the CDF and one in the tail, each in the series' colour.
  EXPECT_EQ(count(svg, "class='series'"), 6u);
  for (const char* colour : {"#1f77b4", "#ff7f0e", "#2ca02c"})
    EXPECT_EQ(count(svg, "class='series' fill='none' stroke='" + std::string(colour)), 2u)
        << colour;
  for (const char* label : {">capture</text>", ">profile</text>", ">shaped</text>"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;  // the legend
  // The tail panel: 1 - F on a log axis, down to one probe in 3000 (1e-4), p99 and p99.9 marked.
  EXPECT_NE(svg.find("1 - F, log scale"), std::string::npos);
  EXPECT_NE(svg.find("<g class='tail'>"), std::string::npos);
  EXPECT_NE(svg.find(">0.0001</text>"), std::string::npos);
  EXPECT_NE(svg.find(">p99</text>"), std::string::npos);
  EXPECT_NE(svg.find(">p99.9</text>"), std::string::npos);
  EXPECT_NE(svg.find("capture c.txt"), std::string::npos);  // the title names the inputs
  EXPECT_EQ(xml_problem(svg), "");
  expect_finite_coordinates(svg);
}

TEST(ValidationPlot, TheVerdictWrittenIsTheReportsPassAndFail) {
  const DelaySeries capture = series("capture", 3000, 10), same = series("profile", 3000, 10),
                    slower = series("profile", 3000, 14);
  const auto pass = shaper::validate_series(capture, same, nullptr);
  const auto fail = shaper::validate_series(capture, slower, nullptr);
  ASSERT_TRUE(pass.pass);
  ASSERT_FALSE(fail.pass);
  const std::string pass_svg = plot_of({&capture, &same}, pass);
  const std::string fail_svg = plot_of({&capture, &slower}, fail);
  EXPECT_NE(pass_svg.find(">verdict: PASS</text>"), std::string::npos);
  EXPECT_EQ(pass_svg.find("FAIL"), std::string::npos);
  EXPECT_NE(fail_svg.find(">verdict: FAIL</text>"), std::string::npos);
  // The comparison's headline carries its KS and limit as the text report prints them.
  char head[120];
  std::snprintf(head, sizeof head, "capture vs profile: FAIL   (KS %.4f, limit %.4f;",
                fail.comparisons.at(0).ks, fail.comparisons.at(0).ks_limit);
  EXPECT_NE(fail_svg.find(head), std::string::npos) << head;
  // Each failed figure is written FAIL, each passed one pass.
  std::size_t failed = 0, passed = 0;
  for (const auto& f : fail.comparisons.at(0).figures) {
    if (f.judged) (f.pass ? passed : failed) += 1;
  }
  ASSERT_GT(failed, 0u);
  EXPECT_EQ(count(fail_svg, ": FAIL</text>"), failed + 1);  // and "verdict: FAIL"
  EXPECT_EQ(count(fail_svg, ": pass</text>"), passed);
}

TEST(ValidationPlot, HostileNamesAreEscapedAndTheSameInputGivesTheSameFile) {
  const DelaySeries capture = series("capture <&'\">", 500, 10),
                    profile = series("profile", 500, 10);
  const auto report = shaper::validate_series(capture, profile, nullptr);
  const ValidationPlot plot{{&capture, &profile},
                            &report,
                            {"profile <a>&'b'\".json (\"\x01\xff\xc3\")", "capture c.txt"},
                            true,
                            SIZE_MAX};
  const std::string svg = jitterctl::validation_svg(plot);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("capture &lt;&amp;&apos;&quot;&gt;"), std::string::npos);
  EXPECT_EQ(svg, jitterctl::validation_svg(plot));
  expect_finite_coordinates(svg);
}

TEST(SvgText, EscapesMarkupAndReplacesWhatXmlCannotHold) {
  EXPECT_EQ(jitterctl::svg::escape("a<b>&'\""), "a&lt;b&gt;&amp;&apos;&quot;");
  // Well-formed UTF-8 stays; a stray byte, a truncated sequence, an overlong form, a surrogate and
  // control characters become '?'.
  EXPECT_EQ(jitterctl::svg::escape("d\xc3\xa9lai \xe2\x86\x92"), "d\xc3\xa9lai \xe2\x86\x92");
  EXPECT_EQ(jitterctl::svg::escape("\xff\xc3"), "??");
  EXPECT_EQ(jitterctl::svg::escape("\xc0\xaf \xed\xa0\x80"), "?? ???");
  EXPECT_EQ(jitterctl::svg::escape("a\x01\x1b\tb"), "a??\tb");
  // Shortened from the left, never inside a UTF-8 sequence.
  EXPECT_EQ(jitterctl::svg::shortened("abcdef", 3), "...def");
  EXPECT_EQ(jitterctl::svg::shortened("x\xc3\xa9y", 2), "...y");
}

TEST(ValidationPlot, AnEmptySeriesStillGivesAWellFormedFileWithFiniteCoordinates) {
  DelaySeries capture = series("capture", 10, 10), profile;
  profile.label = "profile";
  const std::string svg = jitterctl::validation_svg({{&capture, &profile}, nullptr, {}, true});
  EXPECT_EQ(xml_problem(svg), "");
  expect_finite_coordinates(svg);
}

// The replay of the fixture capture with stalls (tests/fixtures/captures/stalls.txt), compiled
// through the binary: the timeline of the capture against it.
class TimelinePlot : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string json = dir_.file("replay.json");
    const auto compiled =
        jitterctl_test::run("compile " + capture_path_ + " -o " + json + " --replay");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out;
    auto load = shaper::load_profile_file(json);
    ASSERT_TRUE(load);
    profile_ = load->profile;
    capture_ = shaper::capture_series(shaper::parse_trace_file(capture_path_), profile_);
    svg_ = jitterctl::timeline_svg({&capture_, &profile_, {"capture stalls.txt"}, false});
  }

  const std::string capture_path_ =
      std::string(JITTERD_SOURCE_DIR) + "/tests/fixtures/captures/stalls.txt";
  const test_support::TempDir dir_{"jitterctl-timeline-"};
  shaper::Profile profile_;
  DelaySeries capture_;
  std::string svg_;
};

TEST_F(TimelinePlot, OnePointPerDeliveredProbeAndOneTickPerLostOne) {
  const std::string full = panel(svg_, "full");
  ASSERT_LT(capture_.delay.size(), jitterctl::kMaxTimelinePoints);  // not decimated
  EXPECT_EQ(count(full, "<circle"), capture_.delivered().size());
  const auto lost = capture_.delay.size() - capture_.delivered().size();
  ASSERT_GT(lost, 0u);
  EXPECT_EQ(count(full, "class='lost'"), lost);
}

TEST_F(TimelinePlot, OneBandPerWindowOfTheReplaySchedule) {
  ASSERT_TRUE(profile_.schedule && profile_.schedule->replay_window);
  const auto windows = jitterctl::schedule_windows(profile_, capture_.sent.back());
  // The replay spans the capture: every step is a window, once.
  EXPECT_EQ(windows.size(), profile_.schedule->steps.size());
  const std::string full = panel(svg_, "full");
  // A band per window that delivers, a shade alone per window that loses every probe (the
  // replayed loss bursts: replay-lost).
  std::size_t lost = 0;
  for (const auto& w : windows) lost += jitterctl::phase_band(*w.phase).loss >= 1 ? 1 : 0;
  ASSERT_GT(lost, 0u);
  EXPECT_EQ(count(full, "class='window'"), windows.size() - lost);
  EXPECT_EQ(count(full, "class='window lost'"), lost);
  EXPECT_EQ(count(full, "class='level'"), 1u);
  // The median line has two points per delivering window.
  const auto line = full.find("class='level'");
  const auto points = full.substr(line, full.find("'/>", line) - line);
  EXPECT_EQ(count(points, ","), 2 * (windows.size() - lost));
  EXPECT_NE(svg_.find(std::to_string(windows.size()) + " schedule windows"), std::string::npos);
  EXPECT_NE(svg_.find("id='zoom'"), std::string::npos);  // 15 min of capture: a zoom is drawn
  EXPECT_EQ(xml_problem(svg_), "");
  expect_finite_coordinates(svg_);
  EXPECT_EQ(svg_, jitterctl::timeline_svg({&capture_, &profile_, {"capture stalls.txt"}, false}));
}

TEST(TimelineWindows, ALoopedScheduleRepeatsAndAOnceScheduleHoldsItsLastPhase) {
  shaper::Profile p;
  p.phases.resize(2);
  p.phases[0].name = "a";
  p.phases[1].name = "b";
  p.schedule = shaper::Schedule{
      {{"a", Nanoseconds{3'000'000'000}}, {"b", Nanoseconds{2'000'000'000}}}, true, std::nullopt};
  const auto looped = jitterctl::schedule_windows(p, Nanoseconds{12'000'000'000});
  ASSERT_EQ(looped.size(), 5u);  // a b a b a (the last from 10 s to 13 s)
  EXPECT_EQ(looped[4].phase->name, "a");
  p.schedule->loop = false;
  const auto once = jitterctl::schedule_windows(p, Nanoseconds{12'000'000'000});
  ASSERT_EQ(once.size(), 2u);
  EXPECT_EQ(once[1].end, Nanoseconds{12'000'000'000});
  p.schedule.reset();
  EXPECT_EQ(jitterctl::schedule_windows(p, Nanoseconds{5}).size(), 1u);
}

TEST(TimelineDecimation, AboveTheLimitEachRunIsOnePointAtItsLargestDelay) {
  const std::size_t n = 2 * jitterctl::kMaxTimelinePoints + 10;  // a stride of 3
  const DelaySeries capture = series("capture", n, 10);
  shaper::Profile p;
  p.phases.resize(1);
  p.phases[0].name = "only";
  const std::string svg = jitterctl::timeline_svg({&capture, &p, {}, false});
  const std::size_t stride = 3, runs = (n + stride - 1) / stride;
  // Every run here has a delivered probe: one point each.
  EXPECT_EQ(count(panel(svg, "full"), "<circle"), runs);
}

// rsvg-convert (librsvg2-bin, scripts/setup) renders both plots: they are SVG a viewer takes.
TEST(PlotRendering, RsvgConvertRendersBothPlots) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "rsvg-convert is not installed (apt-get install librsvg2-bin)";
  const test_support::TempDir dir{"jitterctl-render-"};
  const DelaySeries capture = series("capture", 2000, 10), profile = series("profile", 2000, 10);
  const auto report = shaper::validate_series(capture, profile, nullptr);
  shaper::Profile p;
  p.phases.resize(1);
  p.phases[0].name = "only";
  const std::string files[] = {plot_of({&capture, &profile}, report),
                               jitterctl::timeline_svg({&capture, &p, {}, false})};
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string svg = dir.file(std::to_string(i) + ".svg"),
                      png = dir.file(std::to_string(i) + ".png");
    std::ofstream(svg) << files[i];
    ASSERT_EQ(std::system(("rsvg-convert -o " + png + " " + svg).c_str()), 0) << svg;
    std::ifstream in(png, std::ios::binary);
    std::string magic(8, '\0');
    in.read(magic.data(), 8);
    EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");
  }
}

TEST(TimelineOption, AFileThatCannotBeWrittenIsNamedWithWhy) {
  const std::string capture =
      std::string(JITTERD_SOURCE_DIR) + "/tests/fixtures/captures/stalls.txt";
  const std::string profile = std::string(JITTERD_SOURCE_DIR) + "/profiles/wan-spikes.json";
  const auto r = jitterctl_test::run("validate " + profile + " " + capture +
                                     " --probes 1 --timeline /nonexistent-dir/t.svg");
  EXPECT_EQ(r.exit_code, 4) << r.out;
  // The file asked for, what failed (its temporary beside it, shaper::OutputFile), how to fix it.
  EXPECT_NE(
      r.out.find("create (/nonexistent-dir/t.svg, through its temporary /nonexistent-dir/.t.svg."),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("beside it; the folder must exist and be writable): No such file"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("No such file or directory"), std::string::npos) << r.out;
}

}  // namespace
