#include "offline_commands.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>

#include "shaper/compiler.hpp"
#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/profile.hpp"
#include "shaper/sha256.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"
#include "svg_plot.hpp"
#include "svg_writer.hpp"
#include "timeline_plot.hpp"

namespace jitterctl {

namespace {

using namespace shaper;

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SystemError("open", path, errno);
  Sha256 hash;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    hash.update(std::string_view(buf, static_cast<std::size_t>(in.gcount())));
  }
  return hash.finish_hex();
}

// A spike of more probes than this lasts longer than any `every` worth giving (a million probes at
// 1 ms is 17 min); the bound keeps packets x interval far from overflowing.
constexpr std::uint64_t kMaxSpikePackets = 1'000'000;
// compile --regimes K: compile_profile's own limit, checked here too so that the command line is
// refused with the option's name rather than the compiler's field name.
constexpr std::uint64_t kMaxRegimes = 16;

// Parses a capture, printing its diagnostics. Returns nullopt when it has nothing usable.
std::optional<Trace> load_trace(const std::string& path, const ParseOptions& options) {
  Trace trace = parse_trace_file(path, options);
  for (const auto& d : trace.diagnostics) std::cerr << d.to_string() << '\n';
  if (trace.unrecognised_lines) {
    std::cerr << path << ": " << trace.unrecognised_lines << " of " << trace.lines
              << " lines were not recognised (see above)\n";
  }
  if (trace.samples.empty()) {
    std::cerr << path << ": no RTT samples found (format " << to_string(trace.format)
              << "); mtr and iperf3 captures hold summaries, not sample series\n";
    return std::nullopt;
  }
  if (trace.send_times_inferred) {
    std::cerr << path << ": no timestamps in the capture; send times inferred from a "
              << duration_to_string(trace.interval) << " interval\n";
  }
  return trace;
}

std::optional<Profile> load_profile(const std::string& path) {
  const ProfileLoad load = load_profile_file(path);
  for (const auto& d : load.diagnostics()) std::cerr << d.in_file(path) << '\n';
  if (!load) return std::nullopt;
  return load->profile;
}

// --format, --interval and --host: how compile and validate read captures.
ParseOptions capture_options(const ParsedArgs& a) {
  ParseOptions options;
  if (const auto name = a.text("--format")) {
    const auto format = trace_format_from_name(*name);
    if (!format) throw UsageError("--format: unknown format \"" + *name + "\"");
    options.format = *format;
  }
  if (const auto interval = a.duration("--interval")) options.interval = *interval;
  if (const auto host = a.text("--host")) options.host = *host;
  return options;
}

void print_phase_table(const Profile& profile) {
  // MEAN: the delay a packet gets on average from latency, jitter and table (before rate and
  // queueing), e.g. for a constant-delay link that stands beside the phase (scripts/demo).
  std::printf("%-16s %10s %10s %10s %10s %8s  %-16s %s\n", "PHASE", "LATENCY", "JITTER", "MEAN",
              "TABLE", "LIMIT", "LOSS", "OTHER");
  for (const auto& phase : profile.phases) {
    const NetemSpec& s = phase.spec;
    std::string loss = "none";
    if (const auto* r = std::get_if<RandomLoss>(&s.loss)) {
      loss = "random " + format_probability(r->probability);
    } else if (const auto* ge = std::get_if<GilbertElliottLoss>(&s.loss)) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "GE p=%.4g r=%.4g", ge->p.value(), ge->r.value());
      loss = buf;
    } else if (std::holds_alternative<FourStateLoss>(s.loss)) {
      loss = "4-state";
    }
    std::string other;
    // A compiled exact table decodes to latency + entry x jitter / 8192: its resolution
    // (docs/compiler.md).
    if (phase.delay_table == TableSource::kCustom && s.delay.jitter.count() % kDistScale == 0) {
      other += "step=" + format_duration(s.delay.jitter / kDistScale) + " ";
    }
    if (s.rate.rate.value) other += "rate=" + std::to_string(s.rate.rate.value) + "B/s ";
    if (s.slot) other += "slot ";
    if (s.ecn) other += "ecn ";
    if (!s.duplicate.probability.is_zero()) other += "duplicate ";
    if (!s.corrupt.probability.is_zero()) other += "corrupt ";
    if (s.reorder.gap) other += "reorder ";
    std::printf("%-16s %10s %10s %10s %10zu %8u  %-16s %s\n", phase.name.c_str(),
                format_duration(s.delay.latency).c_str(), format_duration(s.delay.jitter).c_str(),
                format_duration(mean_netem_delay(s.delay)).c_str(),
                s.delay.distribution ? s.delay.distribution->size() : 0, s.limit, loss.c_str(),
                other.c_str());
  }
}

}  // namespace

namespace {

// --regimes, --replay and --replay-window choose one mode: the one given last counts.
void choose_regimes(const ParsedArgs& a, CompileOptions& options) {
  const std::string_view chosen = a.last_of({"--regimes", "--replay", "--replay-window"});
  if (chosen == "--regimes") {
    const std::string v = *a.text(chosen);
    if (v == "single") {
      options.regimes = RegimeMode::kSingle;
    } else if (v == "percentiles") {
      options.regimes = RegimeMode::kPercentiles;
    } else {
      options.regimes = RegimeMode::kClusters;
      options.clusters = static_cast<std::size_t>(read_whole_number(chosen, v, 1, kMaxRegimes));
    }
  } else if (!chosen.empty()) {
    options.regimes = RegimeMode::kReplay;
  }
  // --replay-window given before a later --regimes still sets the window, as it always did.
  if (const auto window = a.duration("--replay-window")) options.replay_window = *window;
}

CompileOptions compile_options(const ParsedArgs& a) {
  CompileOptions options;
  if (const auto name = a.text("--name")) options.name = *name;
  if (const auto description = a.text("--description")) options.description = *description;
  if (const auto v = a.text("--baseline")) {
    if (*v == "min") {
      options.baseline = {BaselineKind::kMinimum, 0, {}};
    } else if (*v == "none") {
      options.baseline = {BaselineKind::kNone, 0, {}};
    } else if (v->size() > 1 && (*v)[0] == 'p') {
      options.baseline = {BaselineKind::kPercentile, read_number("--baseline", v->substr(1)), {}};
    } else {
      options.baseline = {BaselineKind::kFixed, 0, read_duration("--baseline", *v)};
    }
  }
  if (a.has("--halves")) options.split = DirectionSplit::kHalves;
  choose_regimes(a, options);
  if (a.has("--once")) options.replay_loop = false;
  if (const auto window = a.duration("--window")) options.window = *window;
  if (const auto step = a.duration("--step")) options.percentile_step = *step;
  if (const auto v = a.text("--spike")) {
    // EXTRA:PACKETS:EVERY, e.g. 100ms:2:30s
    const auto c1 = v->find(':'), c2 = v->rfind(':');
    if (c1 == std::string::npos || c1 == c2)
      throw UsageError("--spike: expected EXTRA:PACKETS:EVERY, e.g. 100ms:2:30s");
    options.spikes =
        PeriodicSpikes{read_duration("--spike", v->substr(0, c1)),
                       static_cast<std::size_t>(read_whole_number(
                           "--spike", v->substr(c1 + 1, c2 - c1 - 1), 1, kMaxSpikePackets)),
                       read_duration("--spike", v->substr(c2 + 1))};
  }
  if (a.has("--no-reorder")) options.reorder = false;
  if (const auto rate = a.number("--packet-rate")) options.packet_rate = *rate;
  if (const auto entries = a.whole_number("--entries"))
    options.table_entries = static_cast<std::size_t>(*entries);
  return options;
}

}  // namespace

int compile_command(const Invocation& inv) {
  const ParsedArgs& a = inv.args;
  const std::vector<std::string>& traces = a.operands();
  const std::optional<std::string> output = a.text("--output");
  const ParseOptions parse = capture_options(a);
  const CompileOptions options = compile_options(a);
  if (traces.empty() || !output) throw UsageError("give at least one TRACE and -o PROFILE.json");
  if (!options.replay_loop && options.regimes != RegimeMode::kReplay) {
    throw UsageError(
        "--once goes with --replay (the replay then plays once; other schedules loop)");
  }
  std::vector<CaptureInput> captures;
  for (const auto& path : traces) {
    // The capture is hashed on a second thread while this one parses it: they are the two largest
    // parts of a compile that need nothing of each other (figures: docs/benchmarks.md). A failure
    // of either comes out here, as it would have one after the other.
    std::future<std::string> sha256 = std::async(std::launch::async, file_sha256, path);
    auto trace = load_trace(path, parse);
    if (!trace) return kExitBadInput;
    captures.push_back({path, sha256.get(), std::move(*trace)});
  }
  const CompileResult result = compile_profile(captures, options);
  for (const auto& d : result.diagnostics) std::cerr << "compile: " << d.to_string() << '\n';
  if (!result.profile) return kExitBadInput;
  write_file_atomically(*output, profile_to_json(*result.profile));
  const CompileReport& r = result.report;
  std::printf("%s: %zu probes (%zu delivered), baseline %s subtracted%s\n", output->c_str(),
              r.probes, r.delivered, format_duration(r.baseline).c_str(),
              options.split == DirectionSplit::kHalves ? ", halved" : "");
  for (const auto& p : r.phases) {
    std::printf(
        "  %-16s %7zu samples  table %5zu entries at %s resolution  loss %s (capture %.4f, mean "
        "burst %.2f)\n",
        p.name.c_str(), p.samples, p.table_entries, format_duration(p.resolution).c_str(),
        to_string(p.loss.chosen.kind).c_str(), p.loss.capture_loss_rate, p.loss.capture_mean_burst);
  }
  for (const auto& note : r.notes) std::printf("  note: %s\n", note.c_str());
  std::printf("  digest %s\n", profile_digest(*result.profile).c_str());
  return kExitOk;
}

int inspect_command(const Invocation& inv) {
  const std::vector<std::string>& operands = inv.args.operands(1);
  if (operands.empty()) throw UsageError("which profile?");
  const std::string& path = operands.front();
  const bool json = inv.args.has("--json");
  const ProfileLoad load = load_profile_file(path);
  for (const auto& d : load.diagnostics()) std::cerr << d.in_file(path) << '\n';
  if (!load) return kExitBadInput;
  const Profile& p = load->profile;
  if (json) {
    std::cout << profile_to_json(p);
    return kExitOk;
  }
  std::printf("profile  %s\ndigest   %s\n", p.name.c_str(), load->digest.c_str());
  if (!p.description.empty()) std::printf("about    %s\n", p.description.c_str());
  if (p.provenance) {
    std::printf("capture  %s (%s, %llu samples, sha256 %.16s..., baseline %s%s)\n",
                p.provenance->capture.c_str(), p.provenance->format.c_str(),
                static_cast<unsigned long long>(p.provenance->samples),
                p.provenance->sha256.c_str(), format_duration(p.provenance->baseline).c_str(),
                p.provenance->halved ? ", halved" : "");
  }
  std::printf("reorder  %s\n\n", p.reorder ? "allowed" : "kept in order (rate)");
  print_phase_table(p);
  if (p.schedule) {
    Nanoseconds total{0};
    for (const auto& s : p.schedule->steps) total += s.duration;
    std::printf("\nschedule %zu steps, %s per pass%s%s\n", p.schedule->steps.size(),
                format_duration(total).c_str(), p.schedule->loop ? ", looped" : "",
                p.schedule->replay_window ? (", replays the capture in windows of " +
                                             format_duration(*p.schedule->replay_window))
                                                .c_str()
                                          : "");
    for (std::size_t i = 0; i < p.schedule->steps.size() && i < 20; ++i) {
      std::printf("  %-16s %s\n", p.schedule->steps[i].phase.c_str(),
                  format_duration(p.schedule->steps[i].duration).c_str());
    }
    if (p.schedule->steps.size() > 20)
      std::printf("  ... %zu more\n", p.schedule->steps.size() - 20);
  }
  return kExitOk;
}

namespace {

// The spread of a series' delivered delays (p75 - p25): what a calibration's print step is weighed
// against. Zero for fewer than two delivered probes.
Nanoseconds interquartile_range(const DelaySeries& series) {
  const SortedSamples sorted(series.delivered());
  const auto p25 = quantile(sorted, 0.25, QuantileType::kLinear);
  const auto p75 = quantile(sorted, 0.75, QuantileType::kLinear);
  if (!p25 || !p75) return Nanoseconds{0};
  return std::chrono::duration_cast<Nanoseconds>(*p75 - *p25);
}

// --link-calibration: the trace of a constant-delay link (delay D, --calibration-delay), read for
// the link's own noise; nullopt after saying why on stderr. ping prints 3 significant digits (10 us
// steps from 1 ms, 100 us from 10 ms): a step that is large against the spread being judged
// (`judged_spread`, the profile's interquartile range) hides the noise it is meant to measure, so
// it is warned of; against a wide phase the rounding is harmless and nothing is said.
std::optional<LinkCalibration> read_link_calibration(const std::string& path,
                                                     std::optional<Nanoseconds> delay,
                                                     Nanoseconds judged_spread,
                                                     const ParseOptions& parse) {
  const auto calibration = load_trace(path, parse);
  if (!calibration) return std::nullopt;
  auto measured = link_calibration(*calibration, delay);
  if (!measured) {
    std::cerr << "jitterctl: validate: " << path << ": " << to_string(measured.diagnostics())
              << '\n';
    return std::nullopt;
  }
  constexpr int kStepsPerSpread = 50;  // a step below 2 % of the judged IQR is harmless
  if (measured->print_step >= std::chrono::microseconds(100) &&
      measured->print_step * kStepsPerSpread > judged_spread) {
    std::cerr
        << "jitterctl: validate: " << path << ": warning: every RTT is printed to "
        << format_duration(measured->print_step)
        << ", coarse against the spread being judged (the profile's interquartile range is "
        << format_duration(judged_spread)
        << "); calibrate through a delay below 10 ms (ping prints 10 us steps there) or below "
           "1 ms (microseconds)\n";
  }
  return std::move(measured).take_value();
}

// validate's text report: the series' figures, each comparison's judged figures, the verdict.
// `first` names the first series (the capture, or the shaped trace judged without one).
void print_validation(const ValidationReport& report, const char* first) {
  auto row = [](const char* name, const SeriesStats& s) {
    std::printf("%-8s %8zu %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %7.4f %7s %7s\n", name,
                s.samples, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms, s.max_ms, s.mean_ms,
                s.stddev_ms, s.loss_rate,
                s.mean_loss_burst ? std::to_string(*s.mean_loss_burst).substr(0, 5).c_str() : "-",
                s.lag1_autocorr ? std::to_string(*s.lag1_autocorr).substr(0, 6).c_str() : "-");
  };
  std::printf("%-8s %8s %8s %8s %8s %8s %8s %8s %8s %7s %7s %7s\n", "", "samples", "p50 ms",
              "p90 ms", "p99 ms", "p99.9 ms", "max ms", "mean ms", "std ms", "loss", "burst",
              "lag1");
  row(first, report.capture);
  row("profile", report.profile);
  if (report.shaped) row("shaped", *report.shaped);
  std::printf("\n");
  for (const auto& c : report.comparisons) {
    std::printf("%s vs %s: KS %.4f (limit %.4f), W1 %.3f ms: %s\n", c.a.c_str(), c.b.c_str(), c.ks,
                c.ks_limit, c.w1_ms, c.pass() ? "pass" : "FAIL");
    // Every figure with its limit and why (judged at c.level each), the failed ones marked
    // FAIL.
    std::printf("  each judged figure at level %.3g %%:\n", 100 * c.level);
    for (const auto& f : c.figures) std::printf("  - %s\n", describe(f).c_str());
    if (c.figures.empty()) {
      for (const auto& f : c.failures) std::printf("  - %s\n", f.c_str());
    }
  }
  for (const auto& n : report.notes) std::printf("note: %s\n", n.c_str());
  std::printf("verdict: %s\n", report.pass ? "pass" : "fail");
}

// What validate compared, one line each, for the plots' titles: the paths as given (shortened from
// the left when long), the profile's own name beside its file.
struct PlotInputs {
  std::string profile_path, profile_name, trace_path, shaped_path, calibration_path;
  std::vector<std::string> lines() const {
    std::vector<std::string> out{"profile " + svg::shortened(profile_path) + " (\"" +
                                 svg::shortened(profile_name) + "\")"};
    if (!trace_path.empty()) out.push_back("capture " + svg::shortened(trace_path));
    if (!shaped_path.empty()) out.push_back("shaped link " + svg::shortened(shaped_path));
    if (!calibration_path.empty())
      out.push_back("link calibration " + svg::shortened(calibration_path));
    return out;
  }
};

// validate --plot: the capture, the profile (all its copies in the CDF and the tail; the time
// series shows the capture's span: the first copy) and the shaped trace, with the verdict.
void write_validation_plot(const std::string& plot_path, const DelaySeries& capture_s,
                           const DelaySeries& profile_s, const std::optional<DelaySeries>& shaped_s,
                           const ValidationReport& report, const PlotInputs& inputs,
                           bool log_scale) {
  std::vector<const DelaySeries*> series{&capture_s, &profile_s};
  if (shaped_s) series.push_back(&*shaped_s);
  write_file_atomically(plot_path,
                        validation_svg({series, &report, inputs.lines(), log_scale,
                                        std::min(profile_s.delay.size(), capture_s.delay.size())}));
}

}  // namespace

int validate_command(const Invocation& inv) {
  const ParsedArgs& a = inv.args;
  const std::vector<std::string>& operands = a.operands(2);
  const std::string profile_path = operands.empty() ? "" : operands[0];
  const std::string trace_path = operands.size() < 2 ? "" : operands[1];
  const std::string shaped_path = a.text("--shaped").value_or("");
  const std::string calibration_path = a.text("--link-calibration").value_or("");
  const std::string plot_path = a.text("--plot").value_or("");
  const std::string timeline_path = a.text("--timeline").value_or("");
  const std::string phase = a.text("--phase").value_or("");
  const std::optional<Nanoseconds> calibration_delay = a.duration("--calibration-delay");
  const bool json = a.has("--json"), log_scale = a.has("--log");
  const std::uint64_t seed = a.whole_number("--seed").value_or(1);
  const std::size_t probes =
      static_cast<std::size_t>(a.whole_number("--probes").value_or(kValidationProbes));
  ValidationOptions options;
  if (const auto alpha = a.number("--alpha")) options.alpha = *alpha;
  const ParseOptions parse = capture_options(a);
  if (profile_path.empty() || (trace_path.empty() && shaped_path.empty())) {
    throw UsageError("give PROFILE and a TRACE, or --shaped SHAPED_TRACE");
  }
  if (!calibration_path.empty() && shaped_path.empty()) {
    throw UsageError("--link-calibration describes the link of --shaped; give both");
  }
  if (calibration_delay && calibration_path.empty()) {
    throw UsageError("--calibration-delay is the delay of --link-calibration's netem; give both");
  }
  auto profile = load_profile(profile_path);
  if (!profile) return kExitBadInput;
  if (!phase.empty()) {
    // One phase held: what a link shows while jitterd holds that phase (a switch, or a paused
    // schedule). The capture as a whole spans every phase, so only a shaped trace is compared.
    if (!trace_path.empty()) {
      throw UsageError(
          "--phase judges a shaped trace taken while that phase held; give --shaped, not "
          "the capture");
    }
    auto held = profile->held(phase);
    if (!held) {
      std::string names;
      for (const auto& p : profile->phases) names += (names.empty() ? "" : ", ") + p.name;
      std::cerr << "jitterctl validate: " << profile_path << ": no phase \"" << phase
                << "\" (phases: " << names << ")\n";
      return kExitBadInput;
    }
    profile = std::move(held);
  }
  // A replay profile claims the capture's time line: its correlation and stalls are judged too (a
  // phase held alone claims none).
  options.judge_timeline = profile->schedule && profile->schedule->replay_window.has_value();
  std::optional<Trace> capture, shaped;
  if (!trace_path.empty() && !(capture = load_trace(trace_path, parse))) return kExitBadInput;
  if (!shaped_path.empty() && !(shaped = load_trace(shaped_path, parse))) return kExitBadInput;
  const bool halved = profile->provenance && profile->provenance->halved;
  // Without the capture, the shaped trace is judged against the profile alone.
  DelaySeries capture_s =
      capture ? capture_series(*capture, *profile) : shaped_series(*shaped, {}, halved);
  if (!capture) capture_s.label = "shaped";
  const Nanoseconds interval = capture ? capture->interval : shaped->interval;
  // The profile is simulated for the capture's probes, as many times over as reach `probes` (at
  // least once): the verdict is then on the profile, not on one draw as short as the capture.
  const std::size_t copies = simulation_copies(capture_s.delay.size(), probes);
  DelaySeries profile_s = simulate_profile(*profile, capture_s, interval, seed, copies);
  std::optional<LinkNoise> noise;
  if (!calibration_path.empty()) {
    auto measured = read_link_calibration(calibration_path, calibration_delay,
                                          interquartile_range(profile_s), parse);
    if (!measured) return kExitBadInput;
    noise = with_link_noise(std::move(*measured), profile_s, halved);
  }
  const LinkNoise* noise_p = noise ? &*noise : nullptr;
  std::optional<DelaySeries> shaped_s;
  if (shaped && capture) shaped_s = shaped_series(*shaped, profile_s, halved, noise_p);
  if (!capture) capture_s = shaped_series(*shaped, profile_s, halved, noise_p);
  // Without the capture, the shaped trace (in the capture's slot) is judged at the shaped link's
  // thresholds.
  ValidationReport report =
      capture
          ? validate_series(capture_s, profile_s, shaped_s ? &*shaped_s : nullptr, noise_p, options)
          : validate_shaped_only(capture_s, profile_s, noise_p, options);
  if (profile_s.delay.size() < capture_s.delay.size() * copies) {
    report.notes.push_back(
        "the profile was simulated for " + std::to_string(profile_s.delay.size()) +
        " probes, not " + std::to_string(capture_s.delay.size() * copies) +
        ": its schedule changes phase so often that more copies would take more than " +
        std::to_string(kMaxSimulatedPhases) + " phase changes (docs/validation.md)");
  }
  if (json) {
    std::cout << validation_json(report) << '\n';
  } else {
    print_validation(report, capture ? "capture" : "shaped");
  }
  const PlotInputs inputs{profile_path, profile->name, trace_path, shaped_path, calibration_path};
  if (!plot_path.empty()) {
    write_validation_plot(plot_path, capture_s, profile_s, shaped_s, report, inputs, log_scale);
    if (!json) std::printf("plot: %s\n", plot_path.c_str());
  }
  if (!timeline_path.empty()) {
    write_file_atomically(timeline_path,
                          timeline_svg({&capture_s, &*profile, inputs.lines(), log_scale}));
    if (!json) std::printf("timeline: %s\n", timeline_path.c_str());
  }
  return report.pass ? kExitOk : kExitVerdictFail;
}

}  // namespace jitterctl
