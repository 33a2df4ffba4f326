#include "online_commands.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "control_client.hpp"
#include "exit_codes.hpp"
#include "protocol/methods.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"
#include "shaper/match_rules.hpp"
#include "shaper/profile.hpp"
#include "text_table.hpp"

#ifndef JITTERCTL_VERSION
#error "the build passes JITTERCTL_VERSION (the project version)"
#endif

namespace jitterctl {

namespace {

using Json = nlohmann::json;

using jitterd::protocol::ErrorCode;
using jitterd::protocol::kProtocolVersion;
// `digest` values are "sha256:<64 hex>"; twelve hex digits tell profiles apart in a table.
constexpr std::size_t kShortDigest = 12;
// watch: how many events it keeps under the table, and how soon after an event it redraws at the
// earliest, so that a schedule with 10 ms steps does not turn into 100 status requests a second.
constexpr std::size_t kWatchEvents = 8;
constexpr auto kWatchMinRedraw = std::chrono::milliseconds(100);
// ANSI: cursor home, then erase the screen. Plain enough for every terminal jitterctl will meet.
constexpr const char* kClearScreen = "\x1b[H\x1b[2J";

// A bad command line: printed with the command's usage, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad data given on the command line (a profile file that is not JSON): exit code 3.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// jitterd answered a request with an error reply.
class ReplyFailure : public std::runtime_error {
 public:
  ReplyFailure(std::string method, ErrorReply error)
      : std::runtime_error(error.message), method_(std::move(method)), error_(std::move(error)) {}
  const std::string& method() const { return method_; }
  const ErrorReply& error() const { return error_; }

 private:
  std::string method_;
  ErrorReply error_;
};

// What the global options chose.
struct Settings {
  ClientOptions client;
  bool json = false;
};

// The command's own arguments, read left to right.
class Args {
 public:
  explicit Args(std::vector<std::string> args) : args_(std::move(args)) {}
  bool done() const { return i_ >= args_.size(); }
  std::string take() { return args_[i_++]; }
  std::string value(const std::string& option) {
    if (done()) throw UsageError(option + " needs a value");
    return take();
  }

 private:
  std::vector<std::string> args_;
  std::size_t i_ = 0;
};

// One request to send: the method and its params.
struct Request {
  std::string method;
  Json params = Json::object();
};

// One run of a streaming command: the global options, its own arguments, where to print.
struct Invocation {
  const Settings& settings;
  Args& args;
  std::ostream& out;
  std::ostream& err;
};

// One command: either `request` + `render` (one request, its result printed) or `run` (streams).
struct CommandSpec {
  std::string_view name;
  std::string_view alias;
  std::string_view usage;  // the arguments after the name
  std::string_view summary;
  Request (*request)(Args&) = nullptr;
  void (*render)(const Json& result, std::ostream& out) = nullptr;
  int (*run)(const Invocation&) = nullptr;
};

// ---- Arguments ---------------------------------------------------------------------------------

bool is_option(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-';
}

[[noreturn]] void unknown_option(const std::string& arg) {
  throw UsageError("unknown option " + arg);
}

// Positional arguments go to `positional`; more than `max` of them is a usage error.
void positional(const std::string& arg, std::vector<std::string>& out, std::size_t max) {
  if (is_option(arg)) unknown_option(arg);
  if (out.size() == max) throw UsageError("unexpected argument \"" + arg + "\"");
  out.push_back(arg);
}

// Durations are checked here, so that a typo is a usage error, and sent as the user wrote them: the
// protocol takes the same forms ("250ms", "30s", "1.5m", "1h") and jitterd's logs stay readable.
std::string duration_text(const std::string& option, const std::string& text) {
  const auto d = shaper::parse_duration(text);
  if (!d)
    throw UsageError(option + ": \"" + text + "\" is not a duration such as 30s, 500ms, 1.5m, 1h");
  return text;
}

shaper::Nanoseconds positive_duration(const std::string& option, const std::string& text) {
  const auto d = shaper::parse_duration(text);
  if (!d || d->count() <= 0)
    throw UsageError(option + ": \"" + text + "\" is not a positive duration such as 10s");
  return *d;
}

// A start time (docs/protocol.md, "Times"): now, +DURATION or an RFC 3339 UTC time.
std::string start_time(const std::string& option, const std::string& text) {
  if (text == "now") return text;
  if (text.size() > 1 && text[0] == '+' && shaper::parse_duration(std::string_view(text).substr(1)))
    return text;
  if (shaper::parse_utc_timestamp(text)) return text;
  throw UsageError(
      option + ": \"" + text +
      "\" is not a start time: now, +DURATION (+2s) or a UTC time (2026-11-30T20:00:00Z)");
}

std::uint64_t step_number(const std::string& option, const std::string& text) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(option + ": \"" + text + "\" is not a step number (0, 1, 2 ...)");
  }
  return n;
}

// An inline profile for `apply --file`: read and parsed as JSON here; jitterd validates the profile
// and answers with the pointer of any problem.
Json profile_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw shaper::SystemError("open", path, errno);
  // Bounded like libshaper's own profile reader: a larger file is not a profile.
  std::string text(shaper::kMaxProfileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw shaper::SystemError("read", path, errno);
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > shaper::kMaxProfileBytes) {
    throw BadInput(path + ": larger than " +
                   std::to_string(shaper::kMaxProfileBytes / (1024 * 1024)) +
                   " MiB; not a profile");
  }
  // Bounded like every reader of user JSON: a profile nested 100 000 deep crashed jitterctl here.
  shaper::JsonDocument doc = shaper::parse_json_bounded(text);
  if (doc.problem != shaper::JsonProblem::kNone) {
    throw BadInput(path + ":" + (doc.problem == shaper::JsonProblem::kSyntax ? doc.where + ": not JSON: "
                                                                              : " " + doc.where + ": ") +
                   doc.message);
  }
  if (!doc.value.is_object()) throw BadInput(path + ": a profile is a JSON object");
  return std::move(doc.value);
}

// --direction and --set, which narrow a request to one lane of an interface. True if `arg` was one.
bool lane_option(const std::string& arg, Args& a, Request& r, bool both_allowed) {
  if (arg == "--direction") {
    const std::string d = a.value(arg);
    if (d != "egress" && d != "ingress" && !(both_allowed && d == "both")) {
      throw UsageError(arg + ": \"" + d + "\" is not a direction: egress, ingress" +
                       (both_allowed ? ", both" : ""));
    }
    r.params["direction"] = d;
    return true;
  }
  if (arg == "--ingress" || arg == "--egress") {
    r.params["direction"] = arg.substr(2);
    return true;
  }
  if (arg == "--set") {
    r.params["set"] = a.value(arg);
    return true;
  }
  return false;
}

// `--match dst=10.0.0.0/8,proto=tcp,dport=6379`, checked here (with the column of a mistake) and sent
// as the protocol's rule object.
Json match_rule(const std::string& option, const std::string& text) {
  const auto parsed = shaper::parse_match_rule_text(text);
  if (!parsed.rule) {
    std::string why;
    for (const auto& d : parsed.diagnostics) why += (why.empty() ? "" : "; ") + d.to_string();
    throw BadInput(option + " \"" + text + "\": " + why);
  }
  const shaper::MatchRule& rule = *parsed.rule;
  Json j = Json::object();
  if (rule.src) j["src"] = shaper::to_string(*rule.src);
  if (rule.dst) j["dst"] = shaper::to_string(*rule.dst);
  if (rule.protocol) j["protocol"] = *rule.protocol;
  auto ports = [](const shaper::PortRange& p) {
    return p.first == p.last ? std::to_string(p.first) : std::to_string(p.first) + "-" + std::to_string(p.last);
  };
  if (rule.src_ports) j["src_port"] = ports(*rule.src_ports);
  if (rule.dst_ports) j["dst_port"] = ports(*rule.dst_ports);
  return j;
}

// "veth0" for the whole egress (what most sessions are), "veth0 ingress", "veth0 egress/redis".
std::string lane_name(const SessionStatus& s) {
  if (s.direction == Direction::kEgress && s.set.empty()) return s.interface;
  return s.interface + " " + to_string(s.direction) + (s.set.empty() ? "" : "/" + s.set);
}

Request no_params(const char* method, Args& a) {
  if (!a.done()) {
    const std::string arg = a.take();
    if (is_option(arg)) unknown_option(arg);
    throw UsageError("unexpected argument \"" + arg + "\"");
  }
  return {method, Json::object()};
}

Request list_commands_request(Args& a) {
  return no_params("list-commands", a);
}
Request version_request(Args& a) {
  return no_params("version", a);
}
Request interfaces_request(Args& a) {
  return no_params("interfaces", a);
}
Request profiles_request(Args& a) {
  return no_params("profiles", a);
}
Request metrics_request(Args& a) {
  return no_params("metrics", a);
}

Request apply_request(Args& a) {
  Request r{"apply"};
  std::vector<std::string> words;
  std::optional<std::string> file;
  while (!a.done()) {
    const std::string arg = a.take();
    if (arg == "--phase") {
      r.params["phase"] = a.value(arg);
    } else if (arg == "--no-schedule") {
      r.params["schedule"] = false;
    } else if (arg == "--schedule") {
      r.params["schedule"] = true;
    } else if (arg == "--start") {
      r.params["start"] = start_time(arg, a.value(arg));
    } else if (arg == "--lease") {
      r.params["lease"] = duration_text(arg, a.value(arg));
    } else if (arg == "--force") {
      r.params["force"] = true;
    } else if (lane_option(arg, a, r, true)) {
    } else if (arg == "--match") {
      if (!r.params.contains("match")) r.params["match"] = Json::array();
      r.params["match"].push_back(match_rule(arg, a.value(arg)));
    } else if (arg == "--confirm") {
      r.params["confirm"] = duration_text(arg, a.value(arg));
    } else if (arg == "--offloads") {
      const std::string v = a.value(arg);
      if (v != "off" && v != "keep") throw UsageError(arg + ": \"" + v + "\" is not off or keep");
      r.params["offloads"] = v;
    } else if (arg == "--no-ssh-guard") {
      r.params["protect_ssh"] = false;
    } else if (arg == "--file") {
      file = a.value(arg);
    } else {
      positional(arg, words, 2);
    }
  }
  if (words.empty()) throw UsageError("which interface?");
  r.params["interface"] = words[0];
  if (r.params.contains("match") && !r.params.contains("set")) {
    throw UsageError("name the rule set with --set NAME (switch, status and clear address it by that name)");
  }
  if (r.params.contains("set") && !r.params.contains("match")) {
    throw UsageError("--set names a rule set; give its rules with --match RULE");
  }
  // Over SSH: jitterd keeps this very connection unshaped on an interface with the default route.
  if (const char* ssh = std::getenv("SSH_CONNECTION"); ssh && *ssh) r.params["ssh_connection"] = ssh;
  if (file && words.size() == 2) throw UsageError("give a profile name or --file, not both");
  if (file) {
    r.params["profile"] = profile_file(*file);
  } else if (words.size() == 2) {
    r.params["profile"] = words[1];
  } else {
    throw UsageError("which profile? (a name from `jitterctl profiles`, or --file PROFILE.json)");
  }
  return r;
}

Request switch_request(Args& a) {
  Request r{"switch"};
  std::vector<std::string> words;
  while (!a.done()) {
    const std::string arg = a.take();
    if (arg == "--at") {
      r.params["at"] = start_time(arg, a.value(arg));
    } else if (!lane_option(arg, a, r, false)) {
      positional(arg, words, 2);
    }
  }
  if (words.size() != 2) throw UsageError("needs an interface and a phase");
  r.params["interface"] = words[0];
  r.params["phase"] = words[1];
  return r;
}

// pause, resume, confirm: the interface (and a lane of it) and nothing else.
Request interface_only(const char* method, Args& a) {
  Request r{method};
  std::vector<std::string> words;
  while (!a.done()) {
    const std::string arg = a.take();
    if (!lane_option(arg, a, r, false)) positional(arg, words, 1);
  }
  if (words.empty()) throw UsageError("which interface?");
  r.params["interface"] = words[0];
  return r;
}

Request pause_request(Args& a) {
  return interface_only("pause", a);
}
Request resume_request(Args& a) {
  return interface_only("resume", a);
}
Request confirm_request(Args& a) {
  return interface_only("confirm", a);
}

Request skip_request(Args& a) {
  Request r{"skip"};
  std::vector<std::string> words;
  while (!a.done()) {
    const std::string arg = a.take();
    if (arg == "--phase") {
      r.params["phase"] = a.value(arg);
    } else if (arg == "--step") {
      r.params["step"] = step_number(arg, a.value(arg));
    } else if (!lane_option(arg, a, r, false)) {
      positional(arg, words, 1);
    }
  }
  if (words.empty()) throw UsageError("which interface?");
  if (r.params.contains("phase") == r.params.contains("step"))
    throw UsageError("give one of --phase P or --step N");
  r.params["interface"] = words[0];
  return r;
}

Request status_request(Args& a) {
  Request r{"status"};
  std::vector<std::string> words;
  while (!a.done()) {
    const std::string arg = a.take();
    if (!lane_option(arg, a, r, false)) positional(arg, words, 1);
  }
  if (words.empty() && !r.params.empty()) throw UsageError("--direction and --set need an interface");
  if (!words.empty()) r.params["interface"] = words[0];
  return r;
}

Request clear_request(Args& a) {
  Request r{"clear"};
  std::vector<std::string> words;
  bool all = false;
  while (!a.done()) {
    const std::string arg = a.take();
    if (arg == "--all") {
      all = true;
    } else if (!lane_option(arg, a, r, false)) {
      positional(arg, words, 1);
    }
  }
  if (all == !words.empty()) throw UsageError("give an interface or --all");
  if (all) {
    r.params["all"] = true;
  } else {
    r.params["interface"] = words[0];
  }
  return r;
}

Request renew_request(Args& a) {
  Request r{"renew"};
  std::vector<std::string> words;
  while (!a.done()) {
    const std::string arg = a.take();
    if (arg == "--lease") {
      r.params["lease"] = duration_text(arg, a.value(arg));
    } else if (!lane_option(arg, a, r, false)) {
      positional(arg, words, 1);
    }
  }
  if (words.empty()) throw UsageError("which interface?");
  r.params["interface"] = words[0];
  return r;
}

// ---- Talking to jitterd ------------------------------------------------------------------------

// The result of `method`, or ReplyFailure.
Json call_for_result(ControlClient& client, const std::string& method, const Json& params) {
  Reply reply = client.call(method, params);
  if (!reply.ok) throw ReplyFailure(method, std::move(reply.error));
  return std::move(reply.result);
}

// --json: the result as jitterd sent it, indented for people who read it too.
void print_json(const Json& value, std::ostream& out) {
  out << value.dump(2) << '\n';
}

// ---- Rendering ---------------------------------------------------------------------------------

std::string or_dash(const std::string& text) {
  return text.empty() ? "-" : text;
}

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

// "sha256:3f1a9c0b7d2e..." -> "3f1a9c0b7d2e".
std::string short_digest(const std::string& digest) {
  std::string_view hex = digest;
  if (const auto colon = hex.find(':'); colon != std::string_view::npos)
    hex = hex.substr(colon + 1);
  return or_dash(std::string(hex.substr(0, kShortDigest)));
}

// "140000" -> "137 KiB": counters for people.
std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  const char* unit = "B";
  for (const char* next : {"KiB", "MiB", "GiB", "TiB"}) {
    if (value < 1024) break;
    value /= 1024;
    unit = next;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %s", value, unit);
  return buf;
}

// The NEXT column: the next phase and how soon, or why there is none.
std::string next_transition(const SessionStatus& s) {
  if (s.next_transition) return s.next_transition->phase + " in " + format_human_duration(s.next_transition->in);
  if (!s.schedule) return "held";
  return s.schedule->state == "paused" ? "paused" : "-";
}

std::string late_max(const SessionStatus& s) {
  return s.transitions == 0 ? "-" : format_human_duration(s.late_max);
}

// Event lines give lateness and apply time in whole µs, the resolution that matters for a switch.
std::string lateness_us(Nanoseconds d) {
  return std::to_string(std::llround(static_cast<double>(d.count()) / 1000.0)) + " µs";
}

void render_status(const Json& result, std::ostream& out) {
  const auto sessions = read_status_result(result);
  if (sessions.empty()) {
    out << "no sessions\n";
    return;
  }
  print_status_table(sessions, out);
}

void render_session(const Json& result, std::ostream& out) {
  print_status_table(read_session_statuses(result), out);
}

void render_interfaces(const Json& result, std::ostream& out) {
  const auto interfaces = read_interfaces_result(result);
  if (interfaces.empty()) {
    out << "no interfaces\n";
    return;
  }
  print_interfaces_table(interfaces, out);
}

void render_profiles(const Json& result, std::ostream& out) {
  print_profiles_table(read_profiles_result(result), out);
}

void render_version(const Json& result, std::ostream& out) {
  const VersionInfo v = read_version_result(result);
  TextTable t({{"jitterd"}, {or_dash(v.version) + ", protocol " + std::to_string(v.protocol)}});
  t.add_row({"pid", std::to_string(v.pid)});
  t.add_row({"kernel", or_dash(v.kernel)});
  t.add_row({"started", v.started ? format_local_time(v.started->realtime.count(), true, 0) : "-"});
  t.add_row({"jitterctl",
             std::string(JITTERCTL_VERSION) + ", protocol " + std::to_string(kProtocolVersion)});
  t.print(out);
  if (v.protocol != kProtocolVersion) {
    out << "note: jitterd speaks protocol " << v.protocol << " and jitterctl protocol "
        << kProtocolVersion << "; some commands may fail\n";
  }
}

void render_list_commands(const Json& result, std::ostream& out) {
  TextTable t({{"COMMAND"}, {"MUTATING"}, {"SUMMARY"}});
  for (const auto& c : read_list_commands_result(result))
    t.add_row({c.name, yes_no(c.mutating), c.summary});
  t.print(out);
}

void render_clear(const Json& result, std::ostream& out) {
  const auto cleared = read_clear_result(result);
  if (cleared.empty()) out << "nothing to clear\n";
  for (const auto& name : cleared) out << "cleared " << name << '\n';
}

void render_metrics(const Json& result, std::ostream& out) {
  const std::string text = read_metrics_result(result);
  out << text;
  if (!text.empty() && text.back() != '\n') out << '\n';
}

// ---- subscribe and watch -----------------------------------------------------------------------

int run_subscribe(const Invocation& inv) {
  Json params = Json::object();
  std::optional<std::uint64_t> count;
  while (!inv.args.done()) {
    const std::string arg = inv.args.take();
    if (arg == "--interface") {
      params["interfaces"].push_back(inv.args.value(arg));
    } else if (arg == "--event") {
      params["events"].push_back(inv.args.value(arg));
    } else if (arg == "--count") {
      count = step_number(arg, inv.args.value(arg));
    } else if (is_option(arg)) {
      unknown_option(arg);
    } else {
      throw UsageError("unexpected argument \"" + arg +
                       "\" (interfaces are given with --interface)");
    }
  }
  const InterruptSignals signals;
  ClientOptions options = inv.settings.client;
  options.interrupt_fd = signals.fd();
  try {
    ControlClient client = ControlClient::connect(options);
    call_for_result(client, "subscribe", params);
    for (std::uint64_t seen = 0; !count || seen < *count; ++seen) {
      // Without a deadline next_event returns an event or throws.
      const Json event = client.next_event(std::nullopt).value();
      // Flushed per line: subscribers are often pipes (| grep, | tee) that should see events live.
      if (inv.settings.json) {
        inv.out << event.dump() << std::endl;
      } else {
        inv.out << format_event_line(read_event(event)) << std::endl;
      }
    }
    return kExitOk;
  } catch (const Interrupted&) {
    return kExitOk;
  }
}

// What one watch screen shows.
struct WatchFrame {
  std::string header;
  std::vector<SessionStatus> sessions;
  const std::deque<Event>& events;
};

void print_watch_frame(const WatchFrame& frame, std::ostream& out) {
  out << frame.header << "\n\n";
  if (frame.sessions.empty()) {
    out << "no sessions\n";
  } else {
    TextTable t({{"INTERFACE"},
                 {"STATE"},
                 {"PROFILE"},
                 {"PHASE"},
                 {"IN-PHASE", true},
                 {"NEXT"},
                 {"SENT", true},
                 {"BYTES", true},
                 {"DROPS", true},
                 {"BACKLOG", true},
                 {"SWITCHES", true},
                 {"LATE-LAST", true},
                 {"LATE-MAX", true},
                 {"MISSED", true}});
    for (const auto& s : frame.sessions) {
      const auto& recent = s.recent;
      const Counters counters = s.counters.value_or(Counters{});  // none while pending
      t.add_row({lane_name(s), or_dash(s.state), or_dash(s.profile), or_dash(s.phase),
                 s.state == "pending" ? "-" : format_human_duration(s.time_in_phase),
                 next_transition(s), std::to_string(counters.packets),
                 format_bytes(counters.bytes), std::to_string(counters.drops),
                 std::to_string(counters.backlog_packets), std::to_string(s.transitions),
                 recent.empty() ? "-" : format_human_duration(recent.back().lateness), late_max(s),
                 std::to_string(s.missed)});
    }
    t.print(out);
  }
  if (!frame.events.empty()) {
    out << "\nrecent events:\n";
    for (const auto& e : frame.events) out << "  " << format_event_line(e, false) << '\n';
  }
}

std::int64_t realtime_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int run_watch(const Invocation& inv) {
  std::vector<std::string> interfaces;
  bool once = false;
  shaper::Nanoseconds interval = std::chrono::seconds(1);
  while (!inv.args.done()) {
    const std::string arg = inv.args.take();
    if (arg == "--once") {
      once = true;
    } else if (arg == "--interval") {
      interval = positive_duration(arg, inv.args.value(arg));
    } else {
      positional(arg, interfaces, SIZE_MAX);
    }
  }
  // --once is for scripts and tests: one frame, no signal handling, no escape codes.
  std::optional<InterruptSignals> signals;
  ClientOptions options = inv.settings.client;
  if (!once) {
    signals.emplace();
    options.interrupt_fd = signals->fd();
  }
  try {
    // Two connections: events arrive on one whenever they happen, status is asked on the other.
    ControlClient events = ControlClient::connect(options);
    Json subscribe = Json::object();
    if (!interfaces.empty()) subscribe["interfaces"] = interfaces;
    call_for_result(events, "subscribe", subscribe);
    ControlClient control = ControlClient::connect(options);
    const VersionInfo version =
        read_version_result(call_for_result(control, "version", Json::object()));

    std::deque<Event> recent;
    auto draw = [&] {
      std::vector<SessionStatus> sessions =
          read_status_result(call_for_result(control, "status", Json::object()));
      if (!interfaces.empty()) {
        std::erase_if(sessions, [&](const SessionStatus& s) {
          return std::find(interfaces.begin(), interfaces.end(), s.interface) == interfaces.end();
        });
      }
      std::string header = "jitterd " + version.version + " at " + options.socket_path + ", " +
                           format_local_time(realtime_now_ns(), false, 0);
      if (!once) header += "; every " + format_human_duration(interval) + ", Ctrl-C quits";
      std::ostringstream frame;
      // One write per frame, so the terminal never shows half of one.
      if (!once) frame << kClearScreen;
      print_watch_frame({header, std::move(sessions), recent}, frame);
      inv.out << frame.str() << std::flush;
    };
    if (once) {
      draw();
      return kExitOk;
    }
    using Clock = ControlClient::Clock;
    auto last_draw = Clock::now();
    draw();
    bool dirty = false;
    for (;;) {
      const auto next_tick = last_draw + interval;
      const auto wake = dirty ? std::min(next_tick, last_draw + kWatchMinRedraw) : next_tick;
      if (const std::optional<Json> event = events.next_event(wake)) {
        recent.push_back(read_event(*event));
        if (recent.size() > kWatchEvents) recent.pop_front();
        dirty = true;
      }
      const auto now = Clock::now();
      if (now >= next_tick || (dirty && now >= last_draw + kWatchMinRedraw)) {
        last_draw = now;
        dirty = false;
        draw();
      }
    }
  } catch (const Interrupted&) {
    inv.out << '\n';
    return kExitOk;
  }
}

// ---- The command table -------------------------------------------------------------------------

constexpr CommandSpec kCommands[] = {
    {"list-commands", "", "", "the methods jitterd offers", list_commands_request,
     render_list_commands, nullptr},
    {"version", "", "", "jitterd's version, pid and kernel", version_request, render_version,
     nullptr},
    {"interfaces", "", "", "interfaces, their root qdisc, whether jitterd may shape them",
     interfaces_request, render_interfaces, nullptr},
    {"profiles", "", "", "profiles in jitterd's folders (and invalid files)", profiles_request,
     render_profiles, nullptr},
    {"apply", "",
     "INTERFACE PROFILE|--file F\n"
     "[--phase P] [--no-schedule] [--start now|+2s|RFC3339] [--lease 30s] [--force]\n"
     "[--direction egress|ingress|both] [--set NAME --match RULE...] [--confirm 30s]\n"
     "[--offloads off|keep] [--no-ssh-guard]",
     "start shaping (replaces a session in place)", apply_request, render_session, nullptr},
    {"switch", "", "INTERFACE PHASE\n[--direction D] [--set NAME] [--at now|+1s|RFC3339]",
     "hold PHASE on every lane of the interface at once (or one lane); pauses schedules", switch_request,
     render_session, nullptr},
    {"confirm", "", "INTERFACE [--direction D] [--set NAME]", "keep a commit-confirmed apply",
     confirm_request, render_session, nullptr},
    {"pause", "", "INTERFACE [--direction D] [--set NAME]", "freeze the schedule", pause_request,
     render_session, nullptr},
    {"resume", "", "INTERFACE [--direction D] [--set NAME]", "continue the schedule", resume_request,
     render_session, nullptr},
    {"skip", "", "INTERFACE --phase P|--step N\n[--direction D] [--set NAME]", "start that schedule step now",
     skip_request, render_session, nullptr},
    {"status", "", "[INTERFACE [--direction D] [--set NAME]]", "sessions: phase, next transition, lease, counters",
     status_request, render_status, nullptr},
    {"clear", "", "INTERFACE [--direction D] [--set NAME]|--all",
     "stop shaping, restore the kernel's default qdisc", clear_request, render_clear, nullptr},
    {"renew", "", "INTERFACE [--lease 30s] [--direction D] [--set NAME]", "extend the session's lease",
     renew_request, render_session, nullptr},
    {"subscribe", "events", "\n[--interface X]... [--event E]... [--count N]",
     "print events as they happen", nullptr, nullptr, run_subscribe},
    {"metrics", "", "", "Prometheus metrics text", metrics_request, render_metrics, nullptr},
    {"watch", "", "[INTERFACE]...\n[--interval 1s] [--once]",
     "live table of sessions and events (Ctrl-C quits)", nullptr, nullptr, run_watch},
};

const CommandSpec* find_command(std::string_view word) {
  for (const auto& c : kCommands) {
    if (c.name == word || (!c.alias.empty() && c.alias == word)) return &c;
  }
  return nullptr;
}

// The usage on one line, for error messages ("\n" in a usage only wraps it in --help).
std::string usage_line(const CommandSpec& c) {
  std::string line = "jitterctl " + std::string(c.name);
  if (!c.usage.empty()) line += " " + std::string(c.usage);
  std::replace(line.begin(), line.end(), '\n', ' ');
  if (const auto p = line.find("  "); p != std::string::npos) line.erase(p, 1);
  return line;
}

// Takes --socket, --json and --timeout out of `args` (anywhere before "--") into `settings`.
std::vector<std::string> take_global_options(const std::vector<std::string>& args,
                                             Settings& settings) {
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const bool takes_value = arg == "--socket" || arg == "--timeout";
    if (takes_value && i + 1 == args.size()) throw UsageError(arg + " needs a value");
    if (arg == "--socket") {
      settings.client.socket_path = args[++i];
    } else if (arg == "--timeout") {
      settings.client.timeout = positive_duration(arg, args[++i]);
    } else if (arg == "--json") {
      settings.json = true;
    } else {
      rest.push_back(arg);
    }
  }
  return rest;
}

void print_error_reply(const std::string& method, const ErrorReply& error, std::ostream& err) {
  err << "jitterctl: " << method << ": " << error.message << '\n';
  if (!error.where.empty()) err << "  at " << error.where << '\n';
  if (!error.hint.empty()) err << "  hint: " << error.hint << '\n';
}

}  // namespace

std::string default_socket_path(const char* environment_value) {
  return environment_value && *environment_value ? environment_value : kDefaultSocketPath;
}

bool is_online_command(std::string_view word) {
  return find_command(word) || word == "--socket" || word == "--json" || word == "--timeout";
}

void print_online_usage(std::ostream& out) {
  // Name and arguments, then the summary in a column (on a line of its own when the arguments are
  // too long); options after a "\n" in the usage go on an indented line, as for compile.
  constexpr std::size_t kSummaryColumn = 37;
  for (const auto& c : kCommands) {
    const std::string_view usage = c.usage;
    const auto wrap = usage.find('\n');
    std::string left = "  " + std::string(c.name);
    if (!usage.empty() && wrap != 0) left += " " + std::string(usage.substr(0, wrap));
    std::string summary(c.summary);
    if (!c.alias.empty()) summary += " (alias: " + std::string(c.alias) + ")";
    if (left.size() + 1 <= kSummaryColumn) {
      out << left << std::string(kSummaryColumn - left.size(), ' ') << summary << '\n';
    } else {
      out << left << '\n' << std::string(kSummaryColumn, ' ') << summary << '\n';
    }
    if (wrap != std::string_view::npos) out << "      " << usage.substr(wrap + 1) << '\n';
  }
}

int exit_code_for_error(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidParams:
    case ErrorCode::kNotFound:
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kParseError:
    case ErrorCode::kUnknownMethod:
    case ErrorCode::kTooLarge:
      return kExitBadInput;
    case ErrorCode::kPermissionDenied:
      return kExitPermission;
    case ErrorCode::kConflict:
      return kExitConflict;
    case ErrorCode::kKernelError:
    case ErrorCode::kSystemError:
    case ErrorCode::kBusy:
    case ErrorCode::kInternalError:
    case ErrorCode::kUnknown:
      // jitterd or its environment failed (or a code newer than this jitterctl), not the request.
      return kExitEnvironment;
  }
  return kExitEnvironment;
}

int exit_code_for_error(std::string_view code) {
  return exit_code_for_error(jitterd::protocol::error_code_from_string(code));
}

int run_online_command(const std::vector<std::string>& raw, const std::string& default_socket,
                       std::ostream& out, std::ostream& err) {
  Settings settings;
  settings.client.socket_path = default_socket;
  std::vector<std::string> words;
  try {
    words = take_global_options(raw, settings);
  } catch (const UsageError& e) {
    err << "jitterctl: " << e.what() << '\n';
    return kExitUsage;
  }
  if (words.empty()) {
    err << "jitterctl: which command? (jitterctl --help lists them)\n";
    return kExitUsage;
  }
  const CommandSpec* command = find_command(words.front());
  if (!command) {
    err << "jitterctl: unknown command \"" << words.front() << "\" (jitterctl --help lists them)\n";
    return kExitUsage;
  }
  const std::string name(command->name);
  Args args(std::vector<std::string>(words.begin() + 1, words.end()));
  if (std::find(words.begin() + 1, words.end(), "--help") != words.end()) {
    out << "usage: " << usage_line(*command) << "\n  " << command->summary << '\n';
    return kExitOk;
  }
  try {
    const Invocation inv{settings, args, out, err};
    if (command->run) return command->run(inv);
    const Request request = command->request(args);
    ControlClient client = ControlClient::connect(settings.client);
    const Json result = call_for_result(client, request.method, request.params);
    if (settings.json) {
      print_json(result, out);
    } else {
      command->render(result, out);
    }
    return kExitOk;
  } catch (const UsageError& e) {
    err << "jitterctl " << name << ": " << e.what() << "\nusage: " << usage_line(*command) << '\n';
    return kExitUsage;
  } catch (const BadInput& e) {
    err << "jitterctl " << name << ": " << e.what() << '\n';
    return kExitBadInput;
  } catch (const ReplyFailure& e) {
    print_error_reply(e.method(), e.error(), err);
    return exit_code_for_error(e.error().code);
  } catch (const ConnectError& e) {
    err << "jitterctl: " << e.what() << '\n';
    return kExitEnvironment;
  } catch (const Interrupted&) {
    return kExitOk;
  } catch (const Json::exception& e) {
    // Only a request can get here (replies are read without exceptions): an argument that is not
    // UTF-8 cannot be put into JSON text.
    err << "jitterctl " << name << ": cannot send the request: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    // The connection or jitterd failed (timeout, closed, a reply we cannot read), or a file could
    // not be read: the environment, not the request.
    err << "jitterctl: " << name << ": " << e.what() << '\n';
    return kExitEnvironment;
  }
}

void print_status_table(const std::vector<SessionStatus>& sessions, std::ostream& out) {
  TextTable t({{"INTERFACE"},
               {"STATE"},
               {"PROFILE"},
               {"PHASE"},
               {"IN-PHASE", true},
               {"NEXT"},
               {"LEASE", true},
               {"SENT", true},
               {"DROPS", true},
               {"LATE-MAX", true}});
  for (const auto& s : sessions) {
    const Counters counters = s.counters.value_or(Counters{});  // none while pending
    t.add_row({lane_name(s), or_dash(s.state), or_dash(s.profile), or_dash(s.phase),
               s.state == "pending" ? "-" : format_human_duration(s.time_in_phase),
               next_transition(s), s.lease ? format_human_duration(s.lease->remaining) : "-",
               std::to_string(counters.packets), std::to_string(counters.drops), late_max(s)});
  }
  t.print(out);
  // What the table cannot say in a column: the rules, what stays unshaped, a pending confirm.
  std::vector<std::string> said;
  for (const auto& s : sessions) {
    const std::string who = s.interface + " " + to_string(s.direction) + (s.set.empty() ? "" : "/" + s.set);
    for (const auto& m : s.match) out << who << ": matches " << m << '\n';
    std::string unshaped;
    for (const auto& u : s.unshaped) unshaped += (unshaped.empty() ? "" : "; ") + u;
    if (!unshaped.empty() && std::find(said.begin(), said.end(), s.interface + unshaped) == said.end()) {
      said.push_back(s.interface + unshaped);
      out << s.interface << " carries the default route; left unshaped: " << unshaped << '\n';
    }
    if (s.confirm) {
      out << who << ": rolls back in " << format_human_duration(s.confirm->remaining)
          << " unless confirmed: jitterctl confirm " << s.interface << '\n';
    }
  }
}

void print_interfaces_table(const std::vector<InterfaceInfo>& interfaces, std::ostream& out) {
  TextTable t({{"NAME"}, {"INDEX", true}, {"ROOT"}, {"OWNER"}, {"ALLOWED"}, {"SESSION"}});
  for (const auto& i : interfaces) {
    std::string root = "-";
    if (i.root) root = or_dash(i.root->kind) + (i.root->handle.empty() ? "" : " " + i.root->handle);
    t.add_row({i.name, std::to_string(i.index), root, i.root ? or_dash(i.root->owner) : "-",
               yes_no(i.allowed), yes_no(i.session)});
  }
  t.print(out);
}

void print_profiles_table(const ProfileListing& listing, std::ostream& out) {
  if (listing.profiles.empty()) {
    out << "no profiles in jitterd's profile folders\n";
  } else {
    TextTable t({{"NAME"}, {"PHASES"}, {"SCHEDULE"}, {"DIGEST"}, {"FILE"}});
    for (const auto& p : listing.profiles) {
      std::string phases;
      for (const auto& phase : p.phases) phases += (phases.empty() ? "" : ",") + phase;
      std::string schedule = "-";
      if (p.schedule) {
        schedule =
            std::to_string(p.schedule->steps) + (p.schedule->steps == 1 ? " step, " : " steps, ") +
            format_human_duration(p.schedule->duration) + (p.schedule->loop ? ", loop" : ", once");
      }
      t.add_row({p.name, or_dash(phases), schedule, short_digest(p.digest), or_dash(p.file)});
    }
    t.print(out);
  }
  if (!listing.invalid.empty()) {
    out << "\ninvalid profile files:\n";
    for (const auto& bad : listing.invalid) {
      out << "  " << bad.file << '\n';
      for (const auto& e : bad.errors) out << "    " << e << '\n';
    }
  }
}

std::string format_event_line(const Event& e, bool date) {
  // Fixed widths for the time, the interface and the event name ("external-change" is the longest),
  // so that a stream of events reads as columns.
  const std::size_t time_width = date ? 26 : 15;
  constexpr std::size_t kInterfaceWidth = 8, kEventWidth = 15;
  auto pad = [](std::string text, std::size_t width) {
    const std::size_t w = display_width(text);
    if (w < width) text.append(width - w, ' ');
    return text;
  };
  std::string line = pad(e.at ? format_local_time(e.at->realtime.count(), date, 6) : "-", time_width) +
                     "  " + pad(or_dash(e.interface), kInterfaceWidth) + "  " +
                     pad(or_dash(e.event), kEventWidth);
  std::vector<std::string> details;
  if (!e.phase.empty()) details.push_back(e.phase);
  if (e.event == "applied" && !e.profile.empty()) details.push_back("profile " + e.profile);
  if (e.lateness) details.push_back("late " + lateness_us(*e.lateness));
  if (e.apply) details.push_back("apply " + lateness_us(*e.apply));
  if (!e.previous.empty()) details.push_back("from " + e.previous);
  if (e.step) details.push_back("step " + std::to_string(*e.step));
  if (!e.reason.empty()) details.push_back("reason " + e.reason);
  if (e.lease) details.push_back("lease " + format_human_duration(*e.lease));
  if (!e.what.empty()) details.push_back(e.what);
  if (e.ended) details.push_back(*e.ended ? "session ended" : "session kept");
  if (!e.message.empty()) details.push_back(e.message);
  for (const auto& d : details) line += "  " + d;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

}  // namespace jitterctl
