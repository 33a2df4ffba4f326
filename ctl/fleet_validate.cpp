#include "fleet_validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "exit_codes.hpp"
#include "fleet.hpp"
#include "fleet_validation.hpp"
#include "shaper/files.hpp"
#include "shaper/json_reader.hpp"
#include "text_table.hpp"

namespace jitterctl {
namespace {

using Json = nlohmann::json;

// Probes simulated per lane: the expected series of a pair is two lanes crossed probe by probe, so
// it has this many probes. 200 000 against the seen pair's 1000 make the expected side's sampling
// noise a fourteenth of the seen side's (sqrt(1000 / 200 000)) in every interval, and keep the
// judge of twelve pairs to seconds in a Debug build.
constexpr std::size_t kExpectedProbes = 200'000;
// A calibration file is a --save output: a few MiB for a fleet of 16 hosts at 1000 probes.
constexpr std::size_t kMaxRunBytes = 256 * 1024 * 1024;

// Each lane's phase as a held profile, from --profiles DIR/<profile>.json; null for an unshaped
// lane. Problems are collected.
std::vector<std::optional<shaper::Profile>> load_lanes(const std::vector<LaneState>& lanes,
                                                       const std::string& dir,
                                                       std::vector<std::string>& problems) {
  std::vector<std::optional<shaper::Profile>> out;
  for (const LaneState& lane : lanes) {
    out.emplace_back();
    if (lane.profile.empty()) continue;
    if (!lane.held) {
      problems.push_back("host " + lane.host + ": profile " + lane.profile +
                         " runs its schedule; a pair is judged against one phase: switch to a "
                         "phase (jitterctl fleet switch P) or pause the schedule first");
      continue;
    }
    const std::string path = dir + "/" + lane.profile + ".json";
    auto loaded = shaper::load_profile_file(path);
    if (!loaded) {
      problems.push_back(path + ": " + to_string(loaded.diagnostics()));
      continue;
    }
    auto held = loaded->profile.held(lane.phase);
    if (!held) {
      problems.push_back("host " + lane.host + ": " + path + " has no phase \"" + lane.phase +
                         "\", which the host holds");
      continue;
    }
    out.back() = std::move(*held);
  }
  return out;
}

FleetProbeRun load_run(const std::string& path) {
  const std::string text = shaper::read_file_bounded(path, kMaxRunBytes);
  const shaper::JsonDocument doc = shaper::parse_json_bounded(text);
  std::vector<std::string> problems;
  FleetProbeRun run;
  if (doc.problem != shaper::JsonProblem::kNone) {
    problems.push_back(doc.where + ": " + doc.message);
  } else {
    run = read_probe_run(doc.value, problems);
  }
  if (!problems.empty()) throw FleetInputError(path + ": " + problems.front());
  return run;
}

// An interleaved calibration as a calibration run of its own: every lane in the calibration
// phase of its profile, and the calibration blocks' probes.
FleetProbeRun interleaved_calibration(const FleetProbeRun& run) {
  FleetProbeRun out;
  out.lanes = run.lanes;
  for (LaneState& lane : out.lanes) lane.phase = run.calibration_phase;
  out.pairs = run.calibration;
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

const shaper::Figure* figure(const shaper::Comparison& c, const std::string& name) {
  for (const auto& f : c.figures) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// A failure's figure and values, without the basis in parentheses (that is in --json and in
// validate's own report): "ks 0.1746 outside 0 to 0.1684".
std::string headline(const std::string& failure) {
  return failure.substr(0, failure.find(" ("));
}

struct PairRow {
  const PairProbes* probes;
  PairVerdict verdict;
};

Json pair_json(const PairRow& row) {
  // validate --json's object, its slots named for a pair: the seen probes sit in validate's
  // "capture" slot when a shaped trace is judged alone, and there is one comparison.
  Json v = Json::parse(shaper::validation_json(row.verdict.report));
  Json j = {{"from", row.probes->from},
            {"to", row.probes->to},
            {"address", row.probes->address},
            {"verdict", v["verdict"]},
            {"expected", v["profile"]},
            {"seen", v["capture"]},
            {"comparison", v["comparisons"].begin().value()},
            // The expected series as judged: with the calibrated link's noise added.
            {"judged_expected",
             {{"p50_ms", row.verdict.judged_expected.p50_ms},
              {"p90_ms", row.verdict.judged_expected.p90_ms},
              {"p99_ms", row.verdict.judged_expected.p99_ms},
              {"mean_ms", row.verdict.judged_expected.mean_ms},
              {"loss_rate", row.verdict.judged_expected.loss_rate}}},
            {"notes", v["notes"]}};
  for (const auto& n : row.verdict.notes) j["notes"].push_back(n);
  return j;
}

void print_table(const std::vector<PairRow>& rows, double level, std::ostream& out) {
  TextTable table({{"pair"},
                   {"probes", true},
                   {"loss expected", true},
                   {"loss seen (allowed)", true},
                   {"KS D / critical", true},
                   {"p50 exp / seen ms", true},
                   {"p99 exp / seen ms", true},
                   {"verdict"}});
  for (const PairRow& r : rows) {
    const shaper::Comparison& c = r.verdict.report.comparisons.front();
    const shaper::Figure* loss = figure(c, "loss_rate");
    const shaper::Figure* p99 = figure(c, "p99_ms");
    std::string loss_seen, loss_expected;
    if (loss && loss->a && loss->b) {
      loss_expected = fixed(*loss->a * 100, 2) + " %";
      loss_seen = fixed(*loss->b * 100, 2) + " %";
      if (std::isfinite(loss->low) && std::isfinite(loss->high)) {
        loss_seen += " (" + fixed(std::max(0.0, *loss->a + loss->low) * 100, 2) + "-" +
                     fixed((*loss->a + loss->high) * 100, 2) + ")";
      }
    }
    const auto& stats = r.verdict.report;
    table.add_row(
        {r.probes->from + " -> " + r.probes->to, std::to_string(r.probes->rtt.size()),
         loss_expected, loss_seen, fixed(c.ks, 4) + " / " + fixed(c.ks_limit, 4),
         fixed(r.verdict.judged_expected.p50_ms, 2) + " / " + fixed(stats.capture.p50_ms, 2),
         p99 && p99->a && p99->b ? fixed(*p99->a, 2) + " / " + fixed(*p99->b, 2) : "",
         c.pass() ? "pass" : "FAIL: " + headline(c.failures.front())});
  }
  table.print(out);
  out << "each pair judged at level " << level << " (Bonferroni over " << rows.size()
      << " pairs); seen: the RTT less the pair's base; expected: the two lanes crossed, with "
         "the calibrated link's noise\n";
}

}  // namespace

int fleet_validate_command(const Invocation& inv) {
  return with_fleet_exit_codes(inv, "jitterctl fleet validate", [&]() -> int {
    const auto dir = inv.args.text("--profiles");
    if (!dir) throw UsageError("validate needs --profiles DIR: the profiles the hosts run");
    FleetProbeOptions options;
    if (auto p = inv.args.text("--pairs")) {
      const auto mode = pair_mode_from_name(*p);
      if (!mode) throw UsageError("--pairs " + *p + ": give all or ring");
      options.pairs = *mode;
    }
    options.count = static_cast<std::uint32_t>(inv.args.whole_number("--count").value_or(1000));
    options.interval = inv.args.duration("--interval").value_or(options.interval);
    const double alpha = inv.args.number("--alpha").value_or(shaper::kVerdictAlpha);
    const std::uint64_t seed = inv.args.whole_number("--seed").value_or(1);
    std::optional<FleetProbeRun> calibration;
    if (auto c = inv.args.text("--calibration")) calibration = load_run(*c);
    options.calibration_phase = inv.args.text("--calibration-phase").value_or("");
    options.blocks = static_cast<std::uint32_t>(inv.args.whole_number("--blocks").value_or(4));
    options.lead = inv.args.duration("--lead").value_or(options.lead);
    options.ack_wait = inv.args.duration("--ack-wait").value_or(options.ack_wait);
    if (calibration && !options.calibration_phase.empty())
      throw UsageError("give --calibration FILE or --calibration-phase C, not both");

    const auto saved = inv.args.text("--probes");
    const FleetProbeRun run = saved ? load_run(*saved) : probe_fleet(inv, options);
    for (const auto& f : run.failures) inv.err << "jitterctl fleet validate: " << f << '\n';
    if (!run.failures.empty()) return kExitEnvironment;
    if (auto save = inv.args.text("--save")) {
      shaper::OutputFile file(*save);
      file.write(probe_run_json(run).dump() + "\n");
      file.commit();
    }
    if (!run.calibration_phase.empty()) calibration = interleaved_calibration(run);
    std::vector<std::string> problems;
    const auto phases = load_lanes(run.lanes, *dir, problems);
    std::map<std::string, Nanoseconds> constants;  // calibration: each host's constant delay
    if (calibration) {
      const auto cal_phases = load_lanes(calibration->lanes, *dir, problems);
      for (std::size_t i = 0; i < calibration->lanes.size(); ++i) {
        if (!cal_phases[i] && !calibration->lanes[i].profile.empty()) continue;  // a problem
        const auto d = constant_delay(cal_phases[i] ? &*cal_phases[i] : nullptr);
        if (!d) {
          problems.push_back("calibration: host " + calibration->lanes[i].host + " held " +
                             calibration->lanes[i].profile + " phase " +
                             calibration->lanes[i].phase +
                             ", not a constant delay (no jitter, loss, slots or rate)");
          continue;
        }
        constants[calibration->lanes[i].host] = *d;
      }
    }
    if (!problems.empty()) {
      for (const auto& p : problems) inv.err << "jitterctl fleet validate: " << p << '\n';
      return kExitBadInput;
    }
    std::map<std::string, std::size_t> index;
    std::vector<shaper::DelaySeries> lanes;
    for (std::size_t i = 0; i < run.lanes.size(); ++i) {
      index[run.lanes[i].host] = i;
      lanes.push_back(lane_series(phases[i] ? &*phases[i] : nullptr, kExpectedProbes,
                                  run.pairs.empty() ? options.interval : run.pairs[0].interval,
                                  seed + i));
    }
    const double level = pair_level(alpha, run.pairs.size());
    shaper::ValidationOptions vo;
    vo.alpha = level;
    std::vector<PairRow> rows;
    bool all_pass = true;
    for (const PairProbes& p : run.pairs) {
      const PairProbes* cal = nullptr;
      Nanoseconds cal_delay{0};
      if (calibration) {
        for (const PairProbes& c : calibration->pairs) {
          if (c.from == p.from && c.to == p.to) cal = &c;
        }
        if (!cal) {
          inv.err << "jitterctl fleet validate: the calibration has no pair " << p.from << " -> "
                  << p.to << '\n';
          return kExitBadInput;
        }
        cal_delay = constants[p.from] + constants[p.to];
      }
      const shaper::DelaySeries expected =
          cross_lanes(lanes[index.at(p.from)], lanes[index.at(p.to)]);
      rows.push_back({&p, judge_pair(expected, p, cal, cal_delay, vo)});
      all_pass = all_pass && rows.back().verdict.report.pass;
    }
    if (inv.args.has("--json")) {
      Json j = {{"verdict", all_pass ? "pass" : "fail"},
                {"alpha", alpha},
                {"pair_level", level},
                {"calibrated", calibration.has_value()},
                {"pairs", Json::array()}};
      for (const PairRow& r : rows) j["pairs"].push_back(pair_json(r));
      inv.out << j.dump(2) << '\n';
    } else {
      print_table(rows, level, inv.out);
      if (!calibration) {
        inv.out
            << "note: no --calibration: each pair's base is estimated from its own 1st "
               "percentile and the link's noise is not known (docs/validation.md, \"Fleets\")\n";
      }
      for (const PairRow& r : rows) {
        for (const auto& n : r.verdict.notes)
          inv.out << "note: " << r.probes->from << " -> " << r.probes->to << ": " << n << '\n';
      }
    }
    return all_pass ? kExitOk : kExitVerdictFail;
  });
}

}  // namespace jitterctl
