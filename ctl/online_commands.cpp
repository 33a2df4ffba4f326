#include "online_commands.hpp"

#include <algorithm>
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
#include "remote_host.hpp"
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

// One request to send: the method and its params.
struct Request {
  std::string method;
  Json params = Json::object();
};

// ---- Arguments ---------------------------------------------------------------------------------

// What the global options chose.
Settings settings_of(const Invocation& inv) {
  Settings settings;
  settings.client.socket_path = inv.args.text("--socket").value_or(inv.default_socket);
  // --host wins over $JITTERD_HOST; an empty --host "" means the local socket.
  const std::string host = inv.args.text("--host").value_or(std::string(inv.default_host));
  if (!host.empty()) {
    if (inv.args.has("--socket"))
      throw UsageError(
          "with --host, name the remote socket in the URL: ssh://HOST/run/x.sock, "
          "k8s://NODE/run/x.sock");
    settings.client.remote = parse_host_url(host);
    if (inv.remote_commands) settings.client.commands = *inv.remote_commands;
    if (settings.client.remote->transport == Transport::kKubernetes)
      check_k8s_namespace(settings.client.commands.k8s_namespace);
    settings.client.note = [&err = inv.err](const std::string& line) {
      err << "jitterctl: " << line << '\n';
    };
  }
  if (const auto timeout = inv.args.duration("--timeout")) settings.client.timeout = *timeout;
  settings.json = inv.args.has("--json");
  return settings;
}

// Options sent as the user wrote them, under their name without "--": durations and start times
// (checked by the parser, so that a typo is a usage error) keep the forms the protocol takes
// ("250ms", "1.5m", "+2s") and jitterd's logs stay readable.
void send_as_given(const ParsedArgs& a, std::initializer_list<std::string_view> names, Request& r) {
  for (const auto name : names) {
    if (const auto value = a.text(name)) r.params[std::string(name.substr(2))] = *value;
  }
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
    throw BadInput(path + ":" +
                   (doc.problem == shaper::JsonProblem::kSyntax ? doc.where + ": not JSON: "
                                                                : " " + doc.where + ": ") +
                   doc.message);
  }
  if (!doc.value.is_object()) throw BadInput(path + ": a profile is a JSON object");
  return std::move(doc.value);
}

// The interface a target's request names when the command line names none.
constexpr const char* kTargetDefaultInterface = "eth0";

// --netns, --netns-path, --pid, --container or --pod (one of them) and --via: the request's
// "target".
void target_params(const ParsedArgs& a, Request& r) {
  Json target = Json::object();
  for (const auto& [option, key] : {std::pair{"--netns", "netns"},
                                    {"--netns-path", "netns_path"},
                                    {"--container", "container"},
                                    {"--pod", "pod"}}) {
    if (const auto value = a.text(option)) target[key] = *value;
  }
  if (const auto pid = a.whole_number("--pid")) target["pid"] = *pid;
  if (target.size() > 1) {
    throw UsageError("give one target: --netns, --netns-path, --pid, --container or --pod");
  }
  if (const auto via = a.text("--via")) {
    if (target.empty())
      throw UsageError(
          "--via says how to reach a target; name one with --container, --pod, --netns, "
          "--netns-path or --pid");
    target["via"] = *via;
  }
  if (!target.empty()) r.params["target"] = std::move(target);
}

// The interface operand, `words[0]` (for a target: eth0 when the command line has only `others`
// operands, as in `apply --container redis0 lab-regimes`); returns the operands after it.
std::vector<std::string> interface_param(const std::vector<std::string>& words, std::size_t others,
                                         Request& r) {
  if (r.params.contains("target") && words.size() == others) {
    r.params["interface"] = kTargetDefaultInterface;
    return words;
  }
  if (words.empty()) return {};
  r.params["interface"] = words[0];
  return {words.begin() + 1, words.end()};
}

// --direction (or --egress, --ingress: the last one counts) and --set, which narrow a request to
// one lane of an interface; and the target options.
void lane_params(const ParsedArgs& a, Request& r) {
  target_params(a, r);
  const std::string_view direction = a.last_of({"--direction", "--egress", "--ingress"});
  if (direction == "--direction") {
    r.params["direction"] = *a.text(direction);
  } else if (!direction.empty()) {
    r.params["direction"] = std::string(direction.substr(2));
  }
  send_as_given(a, {"--set"}, r);
}

// `--match dst=10.0.0.0/8,proto=tcp,dport=6379`, checked here (with the column of a mistake) and
// sent as the protocol's rule object.
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
    return p.first == p.last ? std::to_string(p.first)
                             : std::to_string(p.first) + "-" + std::to_string(p.last);
  };
  if (rule.src_ports) j["src_port"] = ports(*rule.src_ports);
  if (rule.dst_ports) j["dst_port"] = ports(*rule.dst_ports);
  return j;
}

// " ingress", " egress/redis"; nothing for the whole egress (what most sessions are).
std::string lane_suffix(Direction direction, const std::string& set) {
  if (direction == Direction::kEgress && set.empty()) return "";
  return " " + std::string(to_string(direction)) + (set.empty() ? "" : "/" + set);
}

// "veth0" for the whole egress, "veth0 ingress", "veth0 egress/redis". A target's lane as the
// target sees it, with where it is shaped: "container redis0 eth0 (on veth3c9a1f2 ingress)", or
// "container redis0 eth0 (inside)"; "(inside, followed)" for an apply with --follow.
std::string lane_name(const SessionStatus& s) {
  if (!s.target) return s.interface + lane_suffix(s.direction, s.set);
  const auto& t = *s.target;
  const std::string where = t.via == jitterd::protocol::kViaInside
                                ? "inside"
                                : "on " + s.interface + " " + to_string(s.direction);
  return t.kind + " " + t.name + " " + t.interface + lane_suffix(t.direction, s.set) + " (" +
         where + (t.follow ? ", followed" : "") + ")";
}

// The request builders take the method's name (the command's) and the command line.
Request no_params(std::string_view method, const ParsedArgs& a) {
  a.operands(0);
  return {std::string(method), Json::object()};
}

Request apply_request(std::string_view method, const ParsedArgs& a) {
  Request r{std::string(method)};
  const std::vector<std::string>& words = a.operands(2);
  send_as_given(a, {"--phase", "--start", "--lease", "--confirm", "--offloads"}, r);
  if (const auto schedule = a.last_of({"--schedule", "--no-schedule"}); !schedule.empty()) {
    r.params["schedule"] = schedule == "--schedule";
  }
  if (a.has("--force")) r.params["force"] = true;
  lane_params(a, r);
  if (a.has("--follow")) {
    const Json* target = r.params.contains("target") ? &r.params["target"] : nullptr;
    if (!target ||
        !(target->contains("container") || target->contains("netns") || target->contains("pod"))) {
      throw UsageError(
          "--follow needs --container, --pod or --netns, names that survive a restart (--pid and "
          "--netns-path name one namespace, which does not come back)");
    }
    r.params["target"]["follow"] = true;
  }
  for (const auto& rule : a.texts("--match"))
    r.params["match"].push_back(match_rule("--match", rule));
  if (a.has("--no-ssh-guard")) r.params["protect_ssh"] = false;
  const std::optional<std::string> file = a.text("--file");
  const std::vector<std::string> rest = interface_param(words, file ? 0 : 1, r);
  if (!r.params.contains("interface")) throw UsageError("which interface?");
  if (r.params.contains("match") && !r.params.contains("set")) {
    throw UsageError(
        "name the rule set with --set NAME (switch, status and clear address it by that name)");
  }
  if (r.params.contains("set") && !r.params.contains("match")) {
    throw UsageError("--set names a rule set; give its rules with --match RULE");
  }
  // Over SSH: jitterd keeps this very connection unshaped on an interface with the default route.
  if (const char* ssh = std::getenv("SSH_CONNECTION"); ssh && *ssh)
    r.params["ssh_connection"] = ssh;
  if (file && rest.size() == 1) throw UsageError("give a profile name or --file, not both");
  if (file) {
    r.params["profile"] = profile_file(*file);
  } else if (rest.size() == 1) {
    r.params["profile"] = rest[0];
  } else {
    throw UsageError("which profile? (a name from `jitterctl profiles`, or --file PROFILE.json)");
  }
  return r;
}

Request switch_request(std::string_view method, const ParsedArgs& a) {
  Request r{std::string(method)};
  const std::vector<std::string>& words = a.operands(2);
  send_as_given(a, {"--at"}, r);
  lane_params(a, r);
  const std::vector<std::string> rest = interface_param(words, 1, r);
  if (rest.size() != 1) throw UsageError("needs an interface and a phase");
  r.params["phase"] = rest[0];
  return r;
}

// The interface (one operand) and the lane options, which every command that names an interface
// takes.
Request interface_request(std::string_view method, const ParsedArgs& a) {
  Request r{std::string(method)};
  const std::vector<std::string>& words = a.operands(1);
  lane_params(a, r);
  interface_param(words, 0, r);
  if (!r.params.contains("interface")) throw UsageError("which interface?");
  return r;
}

Request skip_request(std::string_view method, const ParsedArgs& a) {
  Request r = interface_request(method, a);
  send_as_given(a, {"--phase"}, r);
  if (const auto step = a.whole_number("--step")) r.params["step"] = *step;
  if (r.params.contains("phase") == r.params.contains("step"))
    throw UsageError("give one of --phase P or --step N");
  return r;
}

Request status_request(std::string_view method, const ParsedArgs& a) {
  Request r{std::string(method)};
  const std::vector<std::string>& words = a.operands(1);
  lane_params(a, r);
  interface_param(words, 0, r);
  if (!r.params.contains("interface") && !r.params.empty())
    throw UsageError("--direction and --set need an interface");
  return r;
}

Request clear_request(std::string_view method, const ParsedArgs& a) {
  Request r{std::string(method)};
  const std::vector<std::string>& words = a.operands(1);
  lane_params(a, r);
  const bool all = a.has("--all");
  if (!all) interface_param(words, 0, r);
  if (all == r.params.contains("interface") || (all && !words.empty())) {
    throw UsageError("give an interface or --all");
  }
  if (all && r.params.contains("target"))
    throw UsageError("--all clears every session; drop the target");
  if (all) r.params["all"] = true;
  return r;
}

Request renew_request(std::string_view method, const ParsedArgs& a) {
  Request r = interface_request(method, a);
  send_as_given(a, {"--lease"}, r);
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
  if (s.next_transition)
    return s.next_transition->phase + " in " + format_human_duration(s.next_transition->in);
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

int run_subscribe(const Invocation& inv, const Settings& settings) {
  if (!inv.args.operands().empty()) {
    throw UsageError("unexpected argument \"" + inv.args.operands().front() +
                     "\" (interfaces are given with --interface)");
  }
  Json params = Json::object();
  if (const auto interfaces = inv.args.texts("--interface"); !interfaces.empty())
    params["interfaces"] = interfaces;
  if (const auto events = inv.args.texts("--event"); !events.empty()) params["events"] = events;
  const std::optional<std::uint64_t> count = inv.args.whole_number("--count");
  const InterruptSignals signals;
  ClientOptions options = settings.client;
  options.interrupt_fd = signals.fd();
  try {
    ControlClient client = ControlClient::connect(options);
    call_for_result(client, "subscribe", params);
    for (std::uint64_t seen = 0; !count || seen < *count; ++seen) {
      // Without a deadline next_event returns an event or throws.
      const Json event = client.next_event(std::nullopt).value();
      // Flushed per line: subscribers are often pipes (| grep, | tee) that should see events live.
      if (settings.json) {
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
                 s.state == "pending" || s.state == "waiting"
                     ? "-"
                     : format_human_duration(s.time_in_phase),
                 next_transition(s), std::to_string(counters.packets), format_bytes(counters.bytes),
                 std::to_string(counters.drops), std::to_string(counters.backlog_packets),
                 std::to_string(s.transitions),
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

int run_watch(const Invocation& inv, const Settings& settings) {
  const std::vector<std::string>& interfaces = inv.args.operands();
  const bool once = inv.args.has("--once");
  const shaper::Nanoseconds interval =
      inv.args.duration("--interval").value_or(std::chrono::seconds(1));
  // --once is for scripts and tests: one frame, no signal handling, no escape codes.
  std::optional<InterruptSignals> signals;
  ClientOptions options = settings.client;
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
      std::string header = "jitterd " + version.version + " at " + control.endpoint() + ", " +
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

// ---- Running a command ------------------------------------------------------------------------

void print_error_reply(const std::string& method, const ErrorReply& error, std::ostream& err) {
  err << "jitterctl: " << method << ": " << error.message << '\n';
  if (!error.where.empty()) err << "  at " << error.where << '\n';
  if (!error.hint.empty()) err << "  hint: " << error.hint << '\n';
}

// Runs `body` with the global options' settings and turns what it throws into a message on
// inv.err and an exit code. A UsageError goes on to cli, which prints it with the usage.
template <class Body>
int reporting_failures(const Invocation& inv, Body&& body) {
  const std::string name(inv.command);
  try {
    return body(settings_of(inv));
  } catch (const UsageError&) {
    throw;
  } catch (const BadInput& e) {
    inv.err << "jitterctl " << name << ": " << e.what() << '\n';
    return kExitBadInput;
  } catch (const ReplyFailure& e) {
    print_error_reply(e.method(), e.error(), inv.err);
    return exit_code_for_error(e.error().code);
  } catch (const ConnectError& e) {
    inv.err << "jitterctl: " << e.what() << '\n';
    return kExitEnvironment;
  } catch (const Interrupted&) {
    return kExitOk;
  } catch (const Json::exception& e) {
    // Only a request can get here (replies are read without exceptions): an argument that is not
    // UTF-8 cannot be put into JSON text.
    inv.err << "jitterctl " << name << ": cannot send the request: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    // The connection or jitterd failed (timeout, closed, a reply we cannot read), or a file could
    // not be read: the environment, not the request.
    inv.err << "jitterctl: " << name << ": " << e.what() << '\n';
    return kExitEnvironment;
  }
}

// A command of one request: its result printed by `render`, or as JSON with --json.
int one_request(const Invocation& inv, Request (*make)(std::string_view method, const ParsedArgs&),
                void (*render)(const Json& result, std::ostream& out)) {
  return reporting_failures(inv, [&](const Settings& settings) {
    Request request = make(inv.command, inv.args);
    // With --host, this host's SSH connection (if any) is not one that reaches the remote jitterd.
    if (settings.client.remote) request.params.erase("ssh_connection");
    ControlClient client = ControlClient::connect(settings.client);
    const Json result = call_for_result(client, request.method, request.params);
    if (settings.json) {
      print_json(result, inv.out);
    } else {
      render(result, inv.out);
    }
    return kExitOk;
  });
}

}  // namespace

int list_commands_command(const Invocation& inv) {
  return one_request(inv, no_params, render_list_commands);
}
int version_command(const Invocation& inv) {
  return one_request(inv, no_params, render_version);
}
int interfaces_command(const Invocation& inv) {
  return one_request(inv, no_params, render_interfaces);
}
int profiles_command(const Invocation& inv) {
  return one_request(inv, no_params, render_profiles);
}
int metrics_command(const Invocation& inv) {
  return one_request(inv, no_params, render_metrics);
}
int apply_command(const Invocation& inv) {
  return one_request(inv, apply_request, render_session);
}
int switch_command(const Invocation& inv) {
  return one_request(inv, switch_request, render_session);
}
int confirm_command(const Invocation& inv) {
  return one_request(inv, interface_request, render_session);
}
int pause_command(const Invocation& inv) {
  return one_request(inv, interface_request, render_session);
}
int resume_command(const Invocation& inv) {
  return one_request(inv, interface_request, render_session);
}
int skip_command(const Invocation& inv) {
  return one_request(inv, skip_request, render_session);
}
int status_command(const Invocation& inv) {
  return one_request(inv, status_request, render_status);
}
int clear_command(const Invocation& inv) {
  return one_request(inv, clear_request, render_clear);
}
int renew_command(const Invocation& inv) {
  return one_request(inv, renew_request, render_session);
}
int subscribe_command(const Invocation& inv) {
  return reporting_failures(inv,
                            [&](const Settings& settings) { return run_subscribe(inv, settings); });
}
int watch_command(const Invocation& inv) {
  return reporting_failures(inv,
                            [&](const Settings& settings) { return run_watch(inv, settings); });
}

std::string default_socket_path(const char* environment_value) {
  return environment_value && *environment_value ? environment_value : kDefaultSocketPath;
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
               s.state == "pending" || s.state == "waiting"
                   ? "-"
                   : format_human_duration(s.time_in_phase),
               next_transition(s), s.lease ? format_human_duration(s.lease->remaining) : "-",
               std::to_string(counters.packets), std::to_string(counters.drops), late_max(s)});
  }
  t.print(out);
  // What the table cannot say in a column: the rules, what stays unshaped, a pending confirm.
  std::vector<std::string> said;
  for (const auto& s : sessions) {
    const std::string who =
        s.interface + " " + to_string(s.direction) + (s.set.empty() ? "" : "/" + s.set);
    for (const auto& m : s.match) out << who << ": matches " << m << '\n';
    std::string unshaped;
    for (const auto& u : s.unshaped) unshaped += (unshaped.empty() ? "" : "; ") + u;
    if (!unshaped.empty() &&
        std::find(said.begin(), said.end(), s.interface + unshaped) == said.end()) {
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
  std::string line =
      pad(e.at ? format_local_time(e.at->realtime.count(), date, 6) : "-", time_width) + "  " +
      pad(or_dash(e.interface), kInterfaceWidth) + "  " + pad(or_dash(e.event), kEventWidth);
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
