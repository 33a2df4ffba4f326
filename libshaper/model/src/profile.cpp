#include "shaper/profile.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/json_reader.hpp"
#include "shaper/sha256.hpp"

namespace shaper {

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Names and times

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Days in `month` (1 to 12) of `year`, Gregorian.
int days_in_month(int year, int month) {
  constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

std::optional<Nanoseconds> parse_timestamp(std::string_view text) {
  // RFC 3339 in UTC: 2026-11-30T16:28:01Z or with a fraction of up to 9 digits.
  if (text.size() < 20 || text.back() != 'Z') return std::nullopt;
  std::tm tm{};
  int fields[6];
  const int positions[6][2] = {{0, 4}, {5, 2}, {8, 2}, {11, 2}, {14, 2}, {17, 2}};
  if (text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' || text[16] != ':')
    return std::nullopt;
  for (int i = 0; i < 6; ++i) {
    const char* b = text.data() + positions[i][0];
    auto [p, ec] = std::from_chars(b, b + positions[i][1], fields[i]);
    if (ec != std::errc() || p != b + positions[i][1]) return std::nullopt;
  }
  tm.tm_year = fields[0] - 1900;
  tm.tm_mon = fields[1] - 1;
  tm.tm_mday = fields[2];
  tm.tm_hour = fields[3];
  tm.tm_min = fields[4];
  tm.tm_sec = fields[5];
  // Nanoseconds since the epoch in an int64 cover 1970 to 2262; anything else is a typo, and must
  // not overflow (found by fuzz_profile).
  if (fields[0] < 1970 || fields[0] > 2261 || tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 ||
      tm.tm_mday > days_in_month(fields[0], fields[1]) || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60) {
    return std::nullopt;  // timegm would read 2026-02-31 as 2026-03-03 (issue 21)
  }
  std::int64_t fraction_ns = 0;
  std::string_view rest = text.substr(19, text.size() - 20);
  if (!rest.empty()) {
    if (rest.front() != '.' || rest.size() < 2 || rest.size() > 10) return std::nullopt;
    std::int64_t scale = 100000000;
    for (char c : rest.substr(1)) {
      if (c < '0' || c > '9') return std::nullopt;
      fraction_ns += (c - '0') * scale;
      scale /= 10;
    }
  }
  const std::time_t seconds = timegm(&tm);
  return Nanoseconds(static_cast<std::int64_t>(seconds) * 1000000000 + fraction_ns);
}

std::string format_timestamp(Nanoseconds t) {
  const std::int64_t ns = t.count();
  std::time_t seconds = static_cast<std::time_t>(ns / 1000000000);
  std::int64_t fraction = ns % 1000000000;
  if (fraction < 0) {
    fraction += 1000000000;
    --seconds;
  }
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (fraction) {
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lld", static_cast<long long>(fraction));
    std::string f = frac;
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  return out + "Z";
}

// A table: a name of a standard distribution, or {"table": [int16...]}.
std::optional<std::pair<TableSource, DistributionTable>> read_table(JsonReader& r, const json& v,
                                                                    const std::string& pointer) {
  if (v.is_string()) {
    const std::string name = v.get<std::string>();
    if (name == "normal") return std::pair{TableSource::kNormal, make_normal_table()};
    if (name == "pareto") return std::pair{TableSource::kPareto, make_pareto_table()};
    if (name == "paretonormal")
      return std::pair{TableSource::kParetoNormal, make_paretonormal_table()};
    if (name == "uniform") return std::pair{TableSource::kUniform, make_uniform_table()};
    r.error(pointer,
            "unknown distribution \"" + name +
                "\"; expected normal, pareto, paretonormal, uniform, or {\"table\": [...]}");
    return std::nullopt;
  }
  if (!r.object(v, pointer, {"table"})) return std::nullopt;
  const json* t = r.member(v, pointer, "table", true);
  if (!t) return std::nullopt;
  if (!t->is_array()) {
    r.error(pointer + "/table", "expected an array of integers from -32768 to 32767");
    return std::nullopt;
  }
  if (t->empty() || t->size() > kMaxTableEntries) {
    r.error(pointer + "/table",
            "has " + std::to_string(t->size()) + " entries; expected 1 to 16384");
    return std::nullopt;
  }
  DistributionTable out;
  out.reserve(t->size());
  for (std::size_t i = 0; i < t->size(); ++i) {
    const json& e = (*t)[i];
    if (!e.is_number_integer() || e.get<std::int64_t>() < -32768 || e.get<std::int64_t>() > 32767) {
      r.error(pointer + "/table/" + std::to_string(i),
              json_excerpt(e) + " is not an integer from -32768 to 32767");
      return std::nullopt;
    }
    out.push_back(static_cast<std::int16_t>(e.get<std::int64_t>()));
  }
  return std::pair{TableSource::kCustom, std::move(out)};
}

template <typename T>
bool assign(std::optional<T> value, T& target) {
  if (!value) return false;
  target = *value;
  return true;
}

// The phase's "delay": latency, jitter, correlation and its distribution table.
bool read_delay(JsonReader& r, const json& j, const std::string& ptr, Phase& phase) {
  NetemSpec& s = phase.spec;
  bool ok = true;
  if (const json* d = r.member(j, ptr, "delay", false)) {
    const std::string p = ptr + "/delay";
    if (r.object(*d, p, {"latency", "jitter", "correlation", "distribution"})) {
      ok &= assign(r.duration(*d, p, "latency", false), s.delay.latency);
      ok &= assign(r.duration(*d, p, "jitter", false), s.delay.jitter);
      ok &= assign(r.probability(*d, p, "correlation"), s.delay.correlation);
      if (const json* t = r.member(*d, p, "distribution", false)) {
        if (auto table = read_table(r, *t, p + "/distribution")) {
          phase.delay_table = table->first;
          s.delay.distribution = std::move(table->second);
        } else {
          ok = false;
        }
      }
    } else {
      ok = false;
    }
  }
  return ok;
}

// The phase's "loss": one of the three models, by its "model" member.
bool read_loss(JsonReader& r, const json& j, const std::string& ptr, NetemSpec& s) {
  bool ok = true;
  if (const json* l = r.member(j, ptr, "loss", false)) {
    const std::string p = ptr + "/loss";
    const json* model = l->is_object() ? r.member(*l, p, "model", true) : nullptr;
    const std::string m = model && model->is_string() ? model->get<std::string>() : "";
    if (!l->is_object()) {
      r.error(p, "expected an object, found " + std::string(l->type_name()));
      ok = false;
    } else if (m == "random") {
      RandomLoss loss;
      ok &= r.object(*l, p, {"model", "probability", "correlation"});
      ok &= assign(r.probability(*l, p, "probability"), loss.probability);
      ok &= assign(r.probability(*l, p, "correlation"), loss.correlation);
      s.loss = loss;
    } else if (m == "gilbert-elliott") {
      GilbertElliottLoss loss;
      ok &= r.object(*l, p, {"model", "p", "r", "loss_bad", "loss_good"});
      ok &= assign(r.probability(*l, p, "p"), loss.p);
      ok &= assign(r.probability(*l, p, "r"), loss.r);
      if (l->contains("loss_bad")) ok &= assign(r.probability(*l, p, "loss_bad"), loss.loss_bad);
      ok &= assign(r.probability(*l, p, "loss_good"), loss.loss_good);
      s.loss = loss;
    } else if (m == "4-state") {
      FourStateLoss loss;
      ok &= r.object(*l, p, {"model", "p13", "p31", "p32", "p23", "p14"});
      ok &= assign(r.probability(*l, p, "p13"), loss.p13);
      ok &= assign(r.probability(*l, p, "p31"), loss.p31);
      ok &= assign(r.probability(*l, p, "p32"), loss.p32);
      ok &= assign(r.probability(*l, p, "p23"), loss.p23);
      ok &= assign(r.probability(*l, p, "p14"), loss.p14);
      s.loss = loss;
    } else if (model) {
      r.error(p + "/model", "expected \"random\", \"gilbert-elliott\" or \"4-state\", found " +
                                json_excerpt(*model));
      ok = false;
    } else {
      ok = false;
    }
  }
  return ok;
}

// The phase's "reorder".
bool read_reorder(JsonReader& r, const json& j, const std::string& ptr, NetemSpec& s) {
  bool ok = true;
  if (const json* v = r.member(j, ptr, "reorder", false)) {
    const std::string p = ptr + "/reorder";
    if (r.object(*v, p, {"probability", "correlation", "gap"})) {
      ok &= assign(r.probability(*v, p, "probability"), s.reorder.probability);
      ok &= assign(r.probability(*v, p, "correlation"), s.reorder.correlation);
      ok &= assign(
          r.integer<std::uint32_t>(*v, p, "gap", 0, std::numeric_limits<std::uint32_t>::max(), 0),
          s.reorder.gap);
    } else {
      ok = false;
    }
  }
  return ok;
}

// The phase's "rate" and its overheads.
bool read_rate(JsonReader& r, const json& j, const std::string& ptr, NetemSpec& s) {
  bool ok = true;
  if (const json* v = r.member(j, ptr, "rate", false)) {
    const std::string p = ptr + "/rate";
    if (r.object(*v, p, {"bytes_per_second", "packet_overhead", "cell_size", "cell_overhead"})) {
      std::uint64_t bps = 0;
      ok &= assign(r.integer<std::uint64_t>(*v, p, "bytes_per_second", 0,
                                            std::numeric_limits<std::uint64_t>::max(), 0),
                   bps);
      s.rate.rate = BytesPerSecond{bps};
      constexpr auto kI32 = std::numeric_limits<std::int32_t>::max();
      ok &= assign(r.integer<std::int32_t>(*v, p, "packet_overhead", -kI32, kI32, 0),
                   s.rate.packet_overhead);
      ok &= assign(r.integer<std::uint32_t>(*v, p, "cell_size", 0,
                                            std::numeric_limits<std::uint32_t>::max(), 0),
                   s.rate.cell_size);
      ok &= assign(r.integer<std::int32_t>(*v, p, "cell_overhead", -kI32, kI32, 0),
                   s.rate.cell_overhead);
    } else {
      ok = false;
    }
  }
  return ok;
}

// The phase's "slot", with its optional distribution table.
bool read_slot(JsonReader& r, const json& j, const std::string& ptr, Phase& phase) {
  NetemSpec& s = phase.spec;
  bool ok = true;
  if (const json* v = r.member(j, ptr, "slot", false)) {
    const std::string p = ptr + "/slot";
    SlotSpec slot;
    if (r.object(*v, p, {"min_delay", "max_delay", "distribution", "max_packets", "max_bytes"})) {
      ok &= assign(r.duration(*v, p, "min_delay", false), slot.min_delay);
      ok &= assign(r.duration(*v, p, "max_delay", false), slot.max_delay);
      constexpr auto kI32 = std::numeric_limits<std::int32_t>::max();
      ok &= assign(r.integer<std::int32_t>(*v, p, "max_packets", 0, kI32, 0), slot.max_packets);
      ok &= assign(r.integer<std::int32_t>(*v, p, "max_bytes", 0, kI32, 0), slot.max_bytes);
      if (const json* d = r.member(*v, p, "distribution", false)) {
        const std::string dp = p + "/distribution";
        if (r.object(*d, dp, {"delay", "jitter", "table"})) {
          SlotDistribution dist;
          ok &= assign(r.duration(*d, dp, "delay", false), dist.delay);
          ok &= assign(r.duration(*d, dp, "jitter", false), dist.jitter);
          if (const json* t = r.member(*d, dp, "table", true)) {
            if (auto table = read_table(r, *t, dp + "/table")) {
              phase.slot_table = table->first;
              dist.table = std::move(table->second);
            } else {
              ok = false;
            }
          } else {
            ok = false;
          }
          slot.distribution = std::move(dist);
        } else {
          ok = false;
        }
      }
      s.slot = std::move(slot);
    } else {
      ok = false;
    }
  }
  return ok;
}

std::optional<Phase> read_phase(JsonReader& r, const std::string& name, const json& j,
                                const std::string& ptr) {
  if (!r.object(j, ptr,
                {"description", "delay", "loss", "duplicate", "corrupt", "reorder", "rate", "slot",
                 "limit", "ecn", "seed"})) {
    return std::nullopt;
  }
  Phase phase;
  phase.name = name;
  bool ok =
      assign(r.string(j, ptr, "description", false, kMaxDescriptionLength), phase.description);
  NetemSpec& s = phase.spec;

  ok &= read_delay(r, j, ptr, phase);
  ok &= read_loss(r, j, ptr, s);

  auto pair_of = [&](const char* key, Probability& probability, Probability& correlation) {
    if (const json* v = r.member(j, ptr, key, false)) {
      const std::string p = ptr + "/" + key;
      if (!r.object(*v, p, {"probability", "correlation"})) return false;
      bool good = assign(r.probability(*v, p, "probability"), probability);
      good &= assign(r.probability(*v, p, "correlation"), correlation);
      return good;
    }
    return true;
  };
  ok &= pair_of("duplicate", s.duplicate.probability, s.duplicate.correlation);
  ok &= pair_of("corrupt", s.corrupt.probability, s.corrupt.correlation);

  ok &= read_reorder(r, j, ptr, s);
  ok &= read_rate(r, j, ptr, s);
  ok &= read_slot(r, j, ptr, phase);

  ok &= assign(
      r.integer<std::uint32_t>(j, ptr, "limit", 1, std::numeric_limits<std::uint32_t>::max(), 1000),
      s.limit);
  ok &= assign(r.boolean(j, ptr, "ecn", false), s.ecn);
  if (r.member(j, ptr, "seed", false)) {
    std::uint64_t seed = 0;
    ok &= assign(
        r.integer<std::uint64_t>(j, ptr, "seed", 0, std::numeric_limits<std::uint64_t>::max(), 0),
        seed);
    s.prng_seed = seed;
  }
  if (!ok) return std::nullopt;
  return phase;
}

// Table sources round-trip by name; a custom table is written out in full.
json table_json(TableSource source, const DistributionTable& table) {
  switch (source) {
    case TableSource::kNormal:
      return "normal";
    case TableSource::kPareto:
      return "pareto";
    case TableSource::kParetoNormal:
      return "paretonormal";
    case TableSource::kUniform:
      return "uniform";
    case TableSource::kNone:
    case TableSource::kCustom:
      break;
  }
  return json{{"table", table}};
}

json phase_json(const Phase& phase) {
  const NetemSpec& s = phase.spec;
  json j = json::object();
  if (!phase.description.empty()) j["description"] = phase.description;
  json delay = json::object();
  if (s.delay.latency.count()) delay["latency"] = duration_to_string(s.delay.latency);
  if (s.delay.jitter.count()) delay["jitter"] = duration_to_string(s.delay.jitter);
  if (!s.delay.correlation.is_zero()) delay["correlation"] = s.delay.correlation.value();
  if (s.delay.distribution)
    delay["distribution"] = table_json(phase.delay_table, *s.delay.distribution);
  if (!delay.empty()) j["delay"] = delay;
  if (const auto* l = std::get_if<RandomLoss>(&s.loss)) {
    j["loss"] = {{"model", "random"},
                 {"probability", l->probability.value()},
                 {"correlation", l->correlation.value()}};
  } else if (const auto* ge = std::get_if<GilbertElliottLoss>(&s.loss)) {
    j["loss"] = {{"model", "gilbert-elliott"},
                 {"p", ge->p.value()},
                 {"r", ge->r.value()},
                 {"loss_bad", ge->loss_bad.value()},
                 {"loss_good", ge->loss_good.value()}};
  } else if (const auto* gi = std::get_if<FourStateLoss>(&s.loss)) {
    j["loss"] = {{"model", "4-state"},     {"p13", gi->p13.value()}, {"p31", gi->p31.value()},
                 {"p32", gi->p32.value()}, {"p23", gi->p23.value()}, {"p14", gi->p14.value()}};
  }
  if (!s.duplicate.probability.is_zero() || !s.duplicate.correlation.is_zero()) {
    j["duplicate"] = {{"probability", s.duplicate.probability.value()},
                      {"correlation", s.duplicate.correlation.value()}};
  }
  if (!s.corrupt.probability.is_zero() || !s.corrupt.correlation.is_zero()) {
    j["corrupt"] = {{"probability", s.corrupt.probability.value()},
                    {"correlation", s.corrupt.correlation.value()}};
  }
  if (s.reorder.gap || !s.reorder.probability.is_zero()) {
    j["reorder"] = {{"probability", s.reorder.probability.value()},
                    {"correlation", s.reorder.correlation.value()},
                    {"gap", s.reorder.gap}};
  }
  if (s.rate.rate.value) {
    j["rate"] = {{"bytes_per_second", s.rate.rate.value},
                 {"packet_overhead", s.rate.packet_overhead},
                 {"cell_size", s.rate.cell_size},
                 {"cell_overhead", s.rate.cell_overhead}};
  }
  if (s.slot) {
    json slot = {{"min_delay", duration_to_string(s.slot->min_delay)},
                 {"max_delay", duration_to_string(s.slot->max_delay)},
                 {"max_packets", s.slot->max_packets},
                 {"max_bytes", s.slot->max_bytes}};
    if (s.slot->distribution) {
      slot["distribution"] = {{"delay", duration_to_string(s.slot->distribution->delay)},
                              {"jitter", duration_to_string(s.slot->distribution->jitter)},
                              {"table", table_json(phase.slot_table, s.slot->distribution->table)}};
    }
    j["slot"] = slot;
  }
  j["limit"] = s.limit;
  if (s.ecn) j["ecn"] = true;
  if (s.prng_seed) j["seed"] = *s.prng_seed;
  return j;
}

json profile_json_without_digest(const Profile& p) {
  json j = {{"version", p.version}, {"name", p.name}, {"reorder", p.reorder}};
  if (!p.description.empty()) j["description"] = p.description;
  if (p.provenance) {
    json prov = {{"capture", p.provenance->capture},
                 {"format", p.provenance->format},
                 {"samples", p.provenance->samples},
                 {"sha256", p.provenance->sha256},
                 {"baseline", duration_to_string(p.provenance->baseline)},
                 {"halved", p.provenance->halved}};
    if (p.provenance->start) prov["start"] = format_timestamp(*p.provenance->start);
    if (p.provenance->end) prov["end"] = format_timestamp(*p.provenance->end);
    j["provenance"] = prov;
  }
  json phases = json::object();
  for (const auto& phase : p.phases) phases[phase.name] = phase_json(phase);
  j["phases"] = phases;
  if (p.schedule) {
    json steps = json::array();
    for (const auto& step : p.schedule->steps) {
      steps.push_back({{"phase", step.phase}, {"duration", duration_to_string(step.duration)}});
    }
    j["schedule"] = {{"steps", steps}, {"loop", p.schedule->loop}};
    if (p.schedule->replay_window)
      j["schedule"]["replay_window"] = duration_to_string(*p.schedule->replay_window);
  }
  return j;
}

}  // namespace

const Phase* Profile::find_phase(std::string_view phase_name) const {
  for (const auto& p : phases) {
    if (p.name == phase_name) return &p;
  }
  return nullptr;
}

std::optional<Profile> Profile::held(std::string_view phase_name) const {
  const Phase* phase = find_phase(phase_name);
  if (!phase) return std::nullopt;
  Profile out = *this;
  out.phases = {*phase};
  out.schedule.reset();
  out.name += " (phase " + std::string(phase_name) + ")";
  return out;
}

std::optional<Nanoseconds> parse_utc_timestamp(std::string_view text) {
  return parse_timestamp(text);
}
std::string format_utc_timestamp(Nanoseconds since_epoch) {
  return format_timestamp(since_epoch);
}

Diagnostics validate(const Profile& profile) {
  Diagnostics out;
  if (profile.version != kProfileVersion) {
    out.push_back({"/version", std::to_string(profile.version) +
                                   " is not supported; this jitterd reads version " +
                                   std::to_string(kProfileVersion)});
  }
  if (!valid_name(profile.name)) {
    out.push_back(
        {"/name", "\"" + profile.name +
                      "\" is not a valid name: use 1 to 64 letters, digits, '.', '_' or '-'"});
  }
  if (profile.phases.empty()) out.push_back({"/phases", "a profile needs at least one phase"});
  if (profile.phases.size() > kMaxPhases) {
    out.push_back(
        {"/phases", std::to_string(profile.phases.size()) + " phases; at most 64 are allowed"});
  }
  std::set<std::string> names;
  for (const auto& phase : profile.phases) {
    const std::string ptr = "/phases/" + pointer_escape(phase.name);
    if (!valid_name(phase.name)) {
      out.push_back(
          {ptr, "\"" + phase.name +
                    "\" is not a valid phase name: use 1 to 64 letters, digits, '.', '_' or '-'"});
    }
    if (!names.insert(phase.name).second) out.push_back({ptr, "duplicate phase name"});
    for (const auto& d : validate(phase.spec)) {
      std::string field = d.where;
      std::replace(field.begin(), field.end(), '.', '/');
      out.push_back({ptr + "/" + field, d.message});
    }
  }
  if (profile.schedule) {
    if (profile.schedule->steps.empty())
      out.push_back({"/schedule/steps", "a schedule needs at least one step"});
    if (profile.schedule->steps.size() > kMaxScheduleSteps) {
      out.push_back({"/schedule/steps", std::to_string(profile.schedule->steps.size()) +
                                            " steps; at most 10000 are allowed"});
    }
    if (profile.schedule->replay_window && profile.schedule->replay_window->count() <= 0) {
      out.push_back({"/schedule/replay_window",
                     duration_to_string(*profile.schedule->replay_window) +
                         " is not a window; expected a duration above 0, e.g. \"400ms\""});
    }
    for (std::size_t i = 0; i < profile.schedule->steps.size(); ++i) {
      const auto& step = profile.schedule->steps[i];
      const std::string ptr = "/schedule/steps/" + std::to_string(i);
      if (!names.count(step.phase)) {
        out.push_back({ptr + "/phase", "\"" + step.phase + "\" is not a phase of this profile"});
      }
      if (step.duration < std::chrono::milliseconds(1)) {
        out.push_back({ptr + "/duration", duration_to_string(step.duration) +
                                              " is too short; steps last at least 1ms"});
      }
    }
  }
  return out;
}

namespace {

// The steps of parse_profile, in the order its diagnostics come: each reads one member of the
// profile object (type, range, unknown keys), reporting through `r`.

std::optional<Provenance> read_provenance(JsonReader& r, const json& v) {
  if (!r.object(v, "/provenance",
                {"capture", "format", "start", "end", "samples", "sha256", "baseline", "halved"})) {
    return std::nullopt;
  }
  Provenance prov;
  assign(r.string(v, "/provenance", "capture", true, 4096), prov.capture);
  assign(r.string(v, "/provenance", "format", true, 64), prov.format);
  assign(r.integer<std::uint64_t>(v, "/provenance", "samples", 0,
                                  std::numeric_limits<std::uint64_t>::max(), 0),
         prov.samples);
  assign(r.duration(v, "/provenance", "baseline", false), prov.baseline);
  assign(r.boolean(v, "/provenance", "halved", false), prov.halved);
  if (auto hex = r.string(v, "/provenance", "sha256", true, 64)) {
    const bool is_hex = hex->size() == 64 && std::all_of(hex->begin(), hex->end(), [](char c) {
                          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                        });
    if (!is_hex) r.error("/provenance/sha256", "expected 64 lower-case hex digits");
    prov.sha256 = *hex;
  }
  for (const char* key : {"start", "end"}) {
    if (auto t = r.string(v, "/provenance", key, false, 64); t && !t->empty()) {
      auto when = parse_timestamp(*t);
      if (!when) {
        r.error(std::string("/provenance/") + key,
                "expected an RFC 3339 UTC time from 1970 to 2261, such as 2026-11-30T16:28:01.5Z");
      }
      (std::string(key) == "start" ? prov.start : prov.end) = when;
    }
  }
  return prov;
}

// `out` is the list `r` reports to: object() reports every phase name as an unknown key, and those
// reports are taken back.
void read_phases(JsonReader& r, const json& v, Diagnostics& out, std::vector<Phase>& phases) {
  if (!r.object(v, "/phases", {})) return;
  // object() reported every key as unknown against the empty list; phases are free-form names.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const Diagnostic& d) {
                             return d.where.rfind("/phases/", 0) == 0 &&
                                    d.message.rfind("unknown key", 0) == 0 &&
                                    std::count(d.where.begin(), d.where.end(), '/') == 2;
                           }),
            out.end());
  if (v.size() > kMaxPhases) {
    r.error("/phases", std::to_string(v.size()) + " phases; at most 64 are allowed");
    return;
  }
  for (const auto& [name, body] : v.items()) {
    if (name.size() > kMaxNameLength) {
      // Refused here, so that no pointer or message below quotes a name of megabytes.
      r.error("/phases/" + pointer_escape(text_excerpt(name, kMaxNameLength)),
              "a phase name of " + std::to_string(name.size()) + " characters; at most " +
                  std::to_string(kMaxNameLength) + " are allowed");
      continue;
    }
    if (auto phase = read_phase(r, name, body, "/phases/" + pointer_escape(name))) {
      phases.push_back(std::move(*phase));
    }
  }
}

std::optional<Schedule> read_schedule(JsonReader& r, const json& v) {
  if (!r.object(v, "/schedule", {"steps", "loop", "replay_window"})) return std::nullopt;
  Schedule schedule;
  assign(r.boolean(v, "/schedule", "loop", false), schedule.loop);
  if (r.member(v, "/schedule", "replay_window", false)) {
    schedule.replay_window = r.duration(v, "/schedule", "replay_window", true);
  }
  const json* steps = r.member(v, "/schedule", "steps", true);
  if (!steps) return schedule;
  if (!steps->is_array()) {
    r.error("/schedule/steps", "expected an array of {\"phase\": NAME, \"duration\": \"30s\"}");
  } else if (steps->size() > kMaxScheduleSteps) {
    r.error("/schedule/steps", std::to_string(steps->size()) + " steps; at most 10000 are allowed");
  } else {
    for (std::size_t i = 0; i < steps->size(); ++i) {
      const std::string ptr = "/schedule/steps/" + std::to_string(i);
      if (!r.object((*steps)[i], ptr, {"phase", "duration"})) continue;
      ScheduleStep step;
      assign(r.string((*steps)[i], ptr, "phase", true, kMaxNameLength), step.phase);
      assign(r.duration((*steps)[i], ptr, "duration", true), step.duration);
      schedule.steps.push_back(std::move(step));
    }
  }
  return schedule;
}

// Every member of the profile object `j`, each checked on its own; `out` as for read_phases. The
// profile is complete only if nothing was reported.
Profile read_profile_members(JsonReader& r, const json& j, Diagnostics& out) {
  Profile p;
  if (const json* v = r.member(j, "", "version", true)) {
    if (v->is_number_integer()) {
      p.version = v->get<int>();
    } else {
      r.error("/version", "expected the integer 1");
    }
  }
  assign(r.string(j, "", "name", true, kMaxNameLength), p.name);
  assign(r.string(j, "", "description", false, kMaxDescriptionLength), p.description);
  assign(r.boolean(j, "", "reorder", true), p.reorder);
  if (const json* v = r.member(j, "", "provenance", false)) p.provenance = read_provenance(r, *v);
  if (const json* v = r.member(j, "", "phases", true)) read_phases(r, *v, out, p.phases);
  if (const json* v = r.member(j, "", "schedule", false)) p.schedule = read_schedule(r, *v);
  return p;
}

}  // namespace

ProfileLoad parse_profile(std::string_view text) {
  Diagnostics out;
  if (text.size() > kMaxProfileBytes) {
    out.push_back({"", "the profile is " + std::to_string(text.size()) +
                           " bytes; at most 8 MiB are accepted"});
    return out;
  }
  // Bounded before any document is built: depth (a value nested 100 000 deep crashed every error
  // path that quoted it), repeated keys (nlohmann keeps the last silently), a NUL byte.
  JsonDocument doc = parse_json_bounded(text);
  if (doc.problem != JsonProblem::kNone) {
    out.push_back(
        {doc.where, (doc.problem == JsonProblem::kSyntax ? "invalid JSON: " : "") + doc.message});
    return out;
  }
  const json& j = doc.value;

  JsonReader r(out);
  if (!r.object(j, "",
                {"version", "name", "description", "provenance", "reorder", "phases", "schedule",
                 "digest"})) {
    return out;
  }
  Profile p = read_profile_members(r, j, out);

  // The digest's type is checked with the other members; whether it matches, once there is a
  // profile.
  const json* written_digest = r.member(j, "", "digest", false);
  if (written_digest && !written_digest->is_string()) {
    r.error("/digest", "expected a string such as \"sha256:<64 hex digits>\", found " +
                           json_excerpt(*written_digest) +
                           "; it is optional: remove it to load the profile without the check");
  }

  if (!out.empty()) return out;
  std::sort(p.phases.begin(), p.phases.end(),
            [](const Phase& a, const Phase& b) { return a.name < b.name; });
  for (auto& d : validate(p)) out.push_back(std::move(d));
  if (!out.empty()) return out;

  std::string digest = profile_digest(p);
  if (written_digest && written_digest->get<std::string>() != digest) {
    out.push_back(
        {"/digest", "does not match the content (" + digest +
                        "): the profile was edited after it was written; remove \"digest\" to "
                        "accept the edit"});
    return out;
  }
  return LoadedProfile{std::move(p), std::move(digest)};
}

ProfileLoad load_profile_file(const std::string& path) {
  // One byte past the limit is enough for parse_profile to refuse the file by its size.
  return parse_profile(read_file_bounded(path, kMaxProfileBytes));
}

std::string canonical_profile_json(const Profile& profile) {
  return profile_json_without_digest(profile).dump();
}

std::string profile_digest(const Profile& profile) {
  return "sha256:" + sha256_hex(canonical_profile_json(profile));
}

std::string profile_to_json(const Profile& profile) {
  json j = profile_json_without_digest(profile);
  j["digest"] = profile_digest(profile);
  return j.dump(2) + "\n";
}

}  // namespace shaper
