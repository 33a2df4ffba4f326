#include "protocol.hpp"

#include <arpa/inet.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "follows.hpp"
#include "protocol/methods.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"
#include "shaper/match_rules.hpp"
#include "shaper/route_facts.hpp"
#include "target_resolver.hpp"

namespace jitterd {
namespace {

using json = nlohmann::json;
using shaper::JsonReader;

// A start time may lie this far in the past (a harness that computed "now" a moment ago) ...
constexpr Nanoseconds kStartPast = std::chrono::seconds(1);
// ... and this far ahead (further is a typo of the year or the time zone).
constexpr Nanoseconds kStartFuture = std::chrono::hours(24 * 7);

// A rule set's u32 matches (each one a filter in the kernel): port ranges split into aligned
// blocks.
constexpr std::size_t kMaxSelectorsPerSet = 256;

// How deep a request may nest: the limit of every user JSON (shaper::kMaxJsonDepth, where the
// deepest valid request is counted). A parsed document costs about 70 bytes per level, so a line of
// '[' as long as limits.max_request_bytes (9 MiB) would take 600 MB and seconds to build while
// every other client waits (measured with tests/bench/load_clients --hostile --garbage-kind
// nested): deeper lines are judged by ShallowScan, which builds nothing.
constexpr std::size_t kMaxRequestDepth = shaper::kMaxJsonDepth;

// Reads a line without building a document, in memory that does not grow with its nesting (the
// parser keeps one bit per level): whether it is JSON (and the parser's words where it is not),
// whether it is an object, and its top-level id when that is one jitterd echoes (a string or an
// integer; none when "id" is repeated).
class ShallowScan final : public nlohmann::json_sax<json> {
 public:
  // The parser's message when `line` is not JSON, empty when it is.
  std::string read(std::string_view line) {
    json::sax_parse(line.begin(), line.end(), this);
    return error_;
  }
  bool is_object() const { return top_is_object_; }
  const std::optional<json>& id() const { return id_; }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override { return value(v); }
  bool binary(binary_t&) override { return value(nullptr); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    at_id_ = depth_ == 1 && k == "id";
    if (at_id_ && ids_++ > 0) at_id_ = false;  // a second id: neither is the request's
    if (ids_ > 1) id_.reset();
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = shaper::json_parser_words(e.what());
    return false;
  }

 private:
  bool value(json v) {
    if (at_id_) {
      id_ =
          v.is_string() || v.is_number_integer() ? std::optional<json>(std::move(v)) : std::nullopt;
    }
    at_id_ = false;
    return true;
  }
  bool open(bool object) {
    if (at_id_) id_.reset();  // an id that is an object or an array is no id
    at_id_ = false;
    if (depth_++ == 0) top_is_object_ = object;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }

  std::size_t depth_ = 0;
  bool top_is_object_ = false;
  bool at_id_ = false;
  std::size_t ids_ = 0;  // top-level "id" keys seen
  std::optional<json> id_;
  std::string error_;
};

// A reply or event as one line. Bytes that are not UTF-8 (a garbage request line quoted in a
// parse-error message, an interface name) become U+FFFD: dump() would otherwise throw on them, and
// the line would never be sent.
std::string to_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_json(const json& id, const RequestError& e) {
  json reply = {{"ok", false}, {"error", e}};
  if (!id.is_null()) reply["id"] = id;
  return reply;
}

RequestError invalid(const shaper::Diagnostics& diagnostics) {
  const auto& first = diagnostics.front();
  std::string hint;
  if (diagnostics.size() > 1) {
    hint = "also: ";
    for (std::size_t i = 1; i < diagnostics.size() && i < 4; ++i) {
      hint += (i > 1 ? "; " : "") + diagnostics[i].to_string();
    }
  }
  return {ErrorCode::kInvalidParams, first.message, first.where, hint};
}

// A duration in a request: "250ms" or integer nanoseconds.
std::optional<Nanoseconds> read_duration(JsonReader& r, const json& params,
                                         const std::string& pointer, const char* key) {
  const json* v = params.contains(key) ? &params[key] : nullptr;
  if (!v) return std::nullopt;
  if (v->is_number_unsigned())
    return Nanoseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(
        v->get<std::uint64_t>(),
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))));
  return r.duration(params, pointer, key, true);
}

// "now", "+2s", or "2026-11-30T20:00:00.25Z", as a CLOCK_MONOTONIC deadline.
std::optional<MonotonicTime> read_start(JsonReader& r, const json& params,
                                        const std::string& pointer, const char* key,
                                        const Stamp& now) {
  const MonotonicTime mono_now(now.monotonic);
  if (!params.contains(key)) return mono_now;
  const json& v = params[key];
  const std::string where = pointer + "/" + key;
  const std::string expected =
      "expected \"now\", an offset such as \"+2s\", or a UTC time such as "
      "\"2026-11-30T20:00:00.250Z\"";
  if (!v.is_string()) {
    r.error(where, expected + ", found " + shaper::json_excerpt(v));
    return std::nullopt;
  }
  const std::string text = v.get<std::string>();
  std::optional<MonotonicTime> at;
  if (text == "now") {
    at = mono_now;
  } else if (!text.empty() && text.front() == '+') {
    if (auto d = shaper::parse_duration(text.substr(1))) at = mono_now + *d;
  } else if (auto wall = shaper::parse_utc_timestamp(text)) {
    at = mono_now + (*wall - now.realtime);
  }
  if (!at) {
    r.error(where, "\"" + shaper::text_excerpt(text) + "\" is not a start time; " + expected);
    return std::nullopt;
  }
  if (*at < mono_now - kStartPast) {
    r.error(where, "\"" + text + "\" is " + shaper::format_duration(mono_now - *at) +
                       " in the past; check the host's clock (timedatectl) or use \"now\"");
    return std::nullopt;
  }
  if (*at > mono_now + kStartFuture) {
    r.error(where,
            "\"" + text +
                "\" is more than 7 days ahead; is the date or time zone right? Times are UTC");
    return std::nullopt;
  }
  return at;
}

// "target": exactly one of {"netns": NAME}, {"netns_path": PATH}, {"pid": PID}, {"container":
// NAME}, {"pod": "NAMESPACE/NAME"}, and optionally "via" (how it is reached: "host-veth"). nullopt
// when absent or wrong (the problems are in `r`).
std::optional<TargetRequest> read_target_request(JsonReader& r, const json& params,
                                                 const std::string& p) {
  const json* t = r.member(params, p, "target", false);
  if (!t) return std::nullopt;
  const std::string tp = p + "/target";
  if (!r.object(*t, tp, {"netns", "netns_path", "pid", "container", "pod", "via", "follow"})) {
    return std::nullopt;
  }
  TargetRequest out;
  int given = 0;
  for (const auto& [key, kind] : {std::pair{"netns", "netns"},
                                  {"netns_path", "netns-path"},
                                  {"container", "container"},
                                  {"pod", "pod"}}) {
    if (!t->contains(key)) continue;
    ++given;
    out.kind = kind;
    out.name = r.string(*t, tp, key, true, 4096).value_or("");
  }
  if (t->contains("pid")) {
    ++given;
    out.kind = "pid";
    if (auto pid = r.integer<std::int64_t>(*t, tp, "pid", 1, 4194304, 0)) {
      out.name = std::to_string(*pid);
    }
  }
  if (given != 1) {
    r.error(
        tp,
        "give exactly one of \"netns\" (an `ip netns` name), \"netns_path\" (a namespace "
        "file), \"pid\" (a process), \"container\" (a Docker, Podman or CRI container) and \"pod\" "
        "(a Kubernetes pod's sandbox, \"NAMESPACE/NAME\")");
    return std::nullopt;
  }
  const auto via = r.string(*t, tp, "via", false, 32).value_or("");
  if (!via.empty()) out.via = via;
  out.follow = r.boolean(*t, tp, "follow", false).value_or(false);
  if (out.follow && out.kind != "container" && out.kind != "netns" && out.kind != "pod") {
    r.error(tp + "/follow",
            "\"follow\" needs a target whose name survives a restart: a \"container\", a "
            "\"pod\" or an \"netns\" name; a " +
                std::string(out.kind == "pid" ? "\"pid\"" : "\"netns_path\"") +
                " names one namespace, which does not come back");
  }
  return out;
}

// A check (stage) that found nothing to refuse: an empty result.
Outcome<json> checked_only(const std::optional<RequestError>& refused) {
  if (refused) return *refused;
  return json::object();
}

// One session: its status; several (both directions, a whole-tree switch): {"sessions": [...]}.
Outcome<json> lanes_outcome(const Outcome<SessionManager::Statuses>& o) {
  if (!o) return o.error();
  return protocol::lanes_result(*o);
}

std::string kernel_release() {
  utsname u{};
  if (::uname(&u) != 0) return "";
  return u.release;
}

// Prometheus label values escape \, " and newline.
std::string label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The labels that tell one lane's series from another's: its interface (for a target, the host-side
// one), its direction and rule set, and the target's kind, name and interface as the target sees
// it. Two lanes of one interface (egress and ingress) would otherwise be two series with one label
// set, which a scraper rejects.
std::string lane_labels(const SessionStatus& s) {
  std::string out =
      "interface=\"" + label(s.interface) + "\",direction=\"" + to_string(s.direction) + '"';
  if (!s.set.empty()) out += ",set=\"" + label(s.set) + '"';
  if (s.target) {
    out += ",target=\"" + label(s.target->kind) + ':' + label(s.target->name) +
           "\",target_interface=\"" + label(s.target->interface) + '"';
  }
  return out;
}

}  // namespace

bool SubscribeFilter::matches(const Event& e) const {
  return (interfaces.empty() || interfaces.contains(e.interface)) &&
         (events.empty() || events.contains(e.type));
}

Dispatcher::Dispatcher(SessionManager& sessions, ProfileStore& profiles, ShapingBackend& backend,
                       const Config& config, ServerStats& stats, TargetResolver* targets,
                       InsidePlaces* inside)
    : sessions_(sessions),
      profiles_(profiles),
      backend_(backend),
      config_(config),
      stats_(stats),
      targets_(targets),
      inside_(inside),
      started_(now_stamp()) {}

std::string Dispatcher::error_line(ErrorCode code, std::string_view message,
                                   std::string_view hint) {
  return to_line(
      error_json(nullptr, RequestError{code, std::string(message), "", std::string(hint)}));
}

std::string Dispatcher::error_line(std::string_view code, std::string_view message,
                                   std::string_view hint) {
  return error_line(protocol::error_code_from_string(code), message, hint);
}

RequestError Dispatcher::permission_denied(const Peer& peer, const std::string& socket_group) {
  return {ErrorCode::kPermissionDenied,
          "uid " + std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) +
              ") may not use jitterd",
          "",
          "ask an administrator to add you to the socket's group" +
              (socket_group.empty() ? std::string() : " (" + socket_group + ")")};
}

std::string Dispatcher::event_line(const Event& e) {
  json j = {{"event", to_string(e.type)}, {"seq", e.seq}, {"interface", e.interface}, {"at", e.at}};
  if (e.target) j["target"] = *e.target;
  if (!e.direction.empty()) j["direction"] = e.direction;
  if (!e.direction.empty()) j["set"] = e.set.empty() ? json(nullptr) : json(e.set);
  if (!e.profile.empty()) j["profile"] = e.profile;
  if (!e.digest.empty()) j["digest"] = e.digest;
  if (!e.phase.empty()) j["phase"] = e.phase;
  if (e.type == EventType::kPhaseChanged) j["previous"] = e.previous;
  if (e.step) {
    j["step"] = *e.step;
  } else if (e.type == EventType::kPhaseChanged) {
    j["step"] = nullptr;  // a switch, not a schedule step
  }
  if (e.deadline) j["deadline"] = *e.deadline;
  if (e.lateness) j["lateness_ns"] = e.lateness->count();
  if (e.apply_time) j["apply_ns"] = e.apply_time->count();
  if (e.gated) j["gated"] = true;
  if (e.lease) j["lease_ns"] = e.lease->count();
  if (!e.reason.empty()) j["reason"] = e.reason;
  if (!e.message.empty()) j[e.type == EventType::kExternalChange ? "what" : "message"] = e.message;
  if (e.ended) j["ended"] = *e.ended;
  if (e.type == EventType::kTargetGone && e.target && e.target->follow) j["following"] = true;
  if (e.type == EventType::kTargetFollowed) j["previous_namespace"] = e.previous;
  if (!e.lanes.empty()) {
    json lanes = json::array();
    for (const auto& l : e.lanes) {
      lanes.push_back({{"direction", l.direction},
                       {"set", l.set.empty() ? json(nullptr) : json(l.set)},
                       {"profile", l.profile},
                       {"previous", l.previous.empty() ? json(nullptr) : json(l.previous)},
                       {"phase", l.phase}});
    }
    j["lanes"] = lanes;
  }
  return to_line(j);
}

ReadRequest Dispatcher::read(std::string_view line) {
  ReadRequest out;
  const std::string not_json_hint = "send one JSON object per line: {\"method\": \"status\"}";
  shaper::JsonDocument doc = shaper::parse_json_bounded(line, kMaxRequestDepth);
  switch (doc.problem) {
    case shaper::JsonProblem::kNone:
      out.request = std::move(doc.value);
      break;
    case shaper::JsonProblem::kSyntax: {
      // A request is one line: "1:19" is column 19.
      const std::string column = doc.where.substr(doc.where.find(':') + 1);
      out.error = RequestError{ErrorCode::kParseError,
                               "the request is not JSON: column " + column + ": " + doc.message, "",
                               not_json_hint};
      break;
    }
    case shaper::JsonProblem::kDuplicateKey: {
      // The first pass stopped at the repeated key; a line that is not JSON further on is a
      // parse-error without an id, as any other (found by fuzz_control).
      ShallowScan scan;
      if (const std::string error = scan.read(line); !error.empty()) {
        out.error = RequestError{ErrorCode::kParseError, "the request is not JSON: " + error, "",
                                 not_json_hint};
      } else {
        out.id = scan.id().value_or(nullptr);
        out.error = RequestError{ErrorCode::kInvalidRequest, doc.message, doc.where, ""};
      }
      break;
    }
    case shaper::JsonProblem::kTooDeep: {
      // The first pass stopped at the first level too deep; whether the rest is JSON, and the id,
      // come from a reading of the whole line that builds nothing.
      ShallowScan scan;
      if (const std::string error = scan.read(line); !error.empty()) {
        out.error = RequestError{ErrorCode::kParseError, "the request is not JSON: " + error, "",
                                 not_json_hint};
      } else if (!scan.is_object()) {
        out.error =
            RequestError{ErrorCode::kInvalidRequest, "the request is a JSON array, not an object",
                         "", "send {\"method\": \"...\", \"params\": {...}}"};
      } else {
        out.id = scan.id().value_or(nullptr);
        out.error = RequestError{
            ErrorCode::kInvalidRequest,
            "the request nests deeper than " + std::to_string(kMaxRequestDepth) +
                " levels; it was not read",
            doc.where, "no request nests more than 8 levels (an apply with an inline profile)"};
      }
      break;
    }
  }
  return out;
}

// One request being answered: its peer and params, the problems found in them so far, and whether
// the connection now streams events. Handlers read params through `r`; any diagnostic makes the
// reply invalid-params, whatever the handler returned.
struct Dispatcher::Call {
  Call(const Peer& requester, const json& request_params, std::string pointer = "/params")
      : peer(requester), params(request_params), p(std::move(pointer)) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool ok() const { return diagnostics.empty(); }
  // "interface", and optionally "direction" and "set", naming sessions.
  Target read_target(bool interface_required);

  const Peer& peer;
  const json& params;
  const std::string p;
  shaper::Diagnostics diagnostics;
  JsonReader r{diagnostics};
  std::optional<SubscribeFilter> subscribe;
  // stage: apply, switch and clear check what they would do, and do nothing.
  bool check_only = false;
  // probe: the checked request, which the server runs off the loop.
  std::optional<ProbeRequest> probe;
  // Both clocks when the request was read (for `clock`).
  Stamp received = now_stamp();
  SessionManager* lanes = nullptr;  // a target namespace's sessions (via inside)
};

Target Dispatcher::Call::read_target(bool interface_required) {
  Target t;
  t.interface = r.string(params, p, "interface", interface_required, 15).value_or("");
  if (params.contains("direction")) {
    const auto d = r.string(params, p, "direction", true, 16).value_or("");
    if (auto dir = direction_from_string(d)) {
      t.direction = dir;
    } else if (d != "both") {
      r.error(p + "/direction", "\"" + d + "\" is not a direction; give egress, ingress or both");
    }
  }
  if (params.contains("set")) {
    if (params["set"].is_null()) {
      t.set = std::string();
    } else {
      t.set = r.string(params, p, "set", true, shaper::kMaxNameLength).value_or("");
    }
  }
  return t;
}

// The handler of each method, in the order of protocol::kMethods.
const Dispatcher::MethodHandler Dispatcher::kHandlers[] = {
    {protocol::Method::kListCommands, &Dispatcher::list_commands},
    {protocol::Method::kVersion, &Dispatcher::version},
    {protocol::Method::kInterfaces, &Dispatcher::interfaces},
    {protocol::Method::kProfiles, &Dispatcher::profiles},
    {protocol::Method::kApply, &Dispatcher::apply},
    {protocol::Method::kSwitch, &Dispatcher::switch_phase},
    {protocol::Method::kConfirm, &Dispatcher::confirm},
    {protocol::Method::kPause, &Dispatcher::pause},
    {protocol::Method::kResume, &Dispatcher::resume},
    {protocol::Method::kSkip, &Dispatcher::skip},
    {protocol::Method::kStatus, &Dispatcher::status},
    {protocol::Method::kClear, &Dispatcher::clear},
    {protocol::Method::kRenew, &Dispatcher::renew},
    {protocol::Method::kSubscribe, &Dispatcher::subscribe},
    {protocol::Method::kMetrics, &Dispatcher::metrics},
    {protocol::Method::kClock, &Dispatcher::clock_reading},
    {protocol::Method::kStage, &Dispatcher::stage},
    {protocol::Method::kCommit, &Dispatcher::commit},
    {protocol::Method::kAbort, &Dispatcher::abort_staged},
    {protocol::Method::kProbe, &Dispatcher::probe},
};
const Dispatcher::MethodHandler& Dispatcher::handler_of(protocol::Method method) {
  static_assert(std::size(kHandlers) == std::size(protocol::kMethods),
                "a handler for every method");
  const MethodHandler& h = kHandlers[static_cast<std::size_t>(method)];
  if (h.method != method) std::abort();  // kHandlers is out of protocol::kMethods' order
  return h;
}

Reply Dispatcher::handle(const ReadRequest& read, const Peer& peer, bool authorized) {
  ++stats_.requests_total;
  json id = read.id;
  auto fail = [&](RequestError e) {
    ++stats_.request_errors_total;
    return Reply{to_line(error_json(id, e)), std::nullopt, std::nullopt, nullptr};
  };
  if (read.error) return fail(*read.error);
  const json& request = read.request;
  if (!request.is_object()) {
    return fail({ErrorCode::kInvalidRequest,
                 "the request is a JSON " + std::string(request.type_name()) + ", not an object",
                 "", "send {\"method\": \"...\", \"params\": {...}}"});
  }
  if (auto it = request.find("id"); it != request.end()) {
    // Echoed exactly or not at all: a number with a fraction or an exponent, or an integer beyond
    // 64 bits, is a double to nlohmann and would come back rounded (a 30-digit id did).
    if (!it->is_string() && !it->is_number_integer()) {
      return fail(
          {ErrorCode::kInvalidRequest,
           it->is_number()
               ? "id " + shaper::json_excerpt(*it) +
                     " is not an integer jitterd can echo exactly (a fraction, an exponent, or "
                     "more than 64 bits)"
               : "id must be a string or an integer, found " + std::string(it->type_name()),
           "/id",
           "give a string, or an integer from -9223372036854775808 to 18446744073709551615"});
    }
    id = *it;
  }
  shaper::Diagnostics envelope;
  JsonReader er(envelope);
  er.object(request, "", {"id", "method", "params"});
  const auto method = er.string(request, "", "method", true, 64);
  const json empty = json::object();
  const json* params = request.contains("params") ? &request["params"] : &empty;
  if (!params->is_object()) er.error("/params", "params must be an object");
  if (!envelope.empty()) {
    return fail({ErrorCode::kInvalidRequest, envelope.front().message, envelope.front().where,
                 "the envelope is {\"id\": ..., \"method\": \"...\", \"params\": {...}}"});
  }
  const protocol::MethodInfo* known = protocol::find_method(*method);
  if (!known) {
    return fail({ErrorCode::kUnknownMethod, "no method \"" + *method + "\"", "/method",
                 "methods: " + protocol::method_names()});
  }
  if (!authorized) return fail(permission_denied(peer, config_.socket.group));

  Call call(peer, *params);
  // A target namespace a request opened and left without a session (a refused apply, a clear) is
  // let go once the request is answered, whatever the answer.
  struct ReleaseIdle {
    InsidePlaces* inside;
    const Call& call;
    ~ReleaseIdle() {
      if (inside && call.lanes) inside->release_idle_soon();
    }
  } release{inside_, call};
  Outcome<json> outcome = json::object();
  try {
    outcome = (this->*handler_of(known->method).handler)(call);
  } catch (const shaper::NetlinkError& e) {
    // what() ends with the hint; the reply carries it in its own member.
    return fail({ErrorCode::kKernelError, e.without_hint(), "", e.hint()});
  } catch (const shaper::OwnershipError& e) {
    return fail({ErrorCode::kConflict, e.what(), "", ""});
  } catch (const shaper::SystemError& e) {
    return fail({ErrorCode::kSystemError, e.what(), "", e.hint()});
  } catch (const std::exception& e) {
    return fail({ErrorCode::kInternalError, e.what(), "",
                 "this is a bug in jitterd; please report it with the request"});
  }
  if (!call.ok()) return fail(invalid(call.diagnostics));
  if (!outcome) return fail(outcome.error());
  json reply = {{"ok", true}, {"result", *outcome}};
  if (!id.is_null()) reply["id"] = id;
  if (call.probe) return Reply{"", std::nullopt, std::move(call.probe), id};
  return Reply{to_line(reply), call.subscribe, std::nullopt, nullptr};
}

// ---- The methods -------------------------------------------------------------------------------

Outcome<json> Dispatcher::list_commands(Call& c) {
  c.r.object(c.params, c.p, {});
  protocol::CommandList list;
  for (const auto& m : protocol::kMethods)
    list.commands.push_back({std::string(m.name), std::string(m.summary), m.mutating});
  return json(list);
}

Outcome<json> Dispatcher::version(Call& c) {
  c.r.object(c.params, c.p, {});
  return json(protocol::VersionInfo{JITTERD_VERSION, protocol::kProtocolVersion, ::getpid(),
                                    kernel_release(), started_});
}

Outcome<json> Dispatcher::interfaces(Call& c) {
  c.r.object(c.params, c.p, {});
  if (!c.ok()) return json::object();
  const auto roots = backend_.root_qdiscs();
  protocol::InterfaceList list;
  for (const auto& i : backend_.interfaces()) {
    protocol::InterfaceInfo& info = list.interfaces.emplace_back();
    info = {i.name, i.index, config_.interface_allowed(i.name), sessions_.has_session(i.index),
            std::nullopt};
    for (const auto& q : roots) {
      if (q.ifindex != i.index) continue;
      info.root = {q.kind, shaper::format_handle(q.handle),
                   q.is_jitterd()   ? "jitterd"
                   : q.is_default() ? "kernel"
                                    : "other"};
    }
  }
  return json(list);
}

Outcome<std::optional<ResolvedTarget>> Dispatcher::resolve_target(Call& c,
                                                                  const std::string& interface,
                                                                  std::string_view via) {
  auto request = read_target_request(c.r, c.params, c.p);
  if (request && !via.empty()) request->via = via;
  if (!request || !c.ok()) return std::optional<ResolvedTarget>();
  const std::string where = c.p + "/target";
  if (!config_.target_allowed(request->kind, request->name)) {
    return RequestError{
        ErrorCode::kPermissionDenied,
        request->kind + " " + request->name + " is not in the target allowlist", where,
        "add \"" + request->kind + ":" + request->name + "\" (or a pattern such as \"" +
            request->kind + ":lab-*\") to targets.allow in the config and restart jitterd"};
  }
  if (targets_ == nullptr) {
    return RequestError{ErrorCode::kInvalidParams, "this jitterd cannot shape targets", where, ""};
  }
  auto resolved = targets_->resolve(*request, interface);
  if (!resolved) {
    RequestError e = std::move(resolved.error());
    e.where = c.p + e.where;
    return e;
  }
  return std::optional<ResolvedTarget>(std::move(*resolved));
}

std::optional<RequestError> Dispatcher::retarget(Call& c, Target& target) {
  if (!c.params.contains("target")) return std::nullopt;
  if (c.params["target"].is_object() && c.params["target"].contains("follow")) {
    c.r.error(c.p + "/target/follow",
              "\"follow\" is given to apply; other requests name the target without it");
    return std::nullopt;
  }
  if (target.interface.empty()) {
    c.r.error(c.p + "/interface", "a target's interface is named as the target sees it, e.g. eth0");
    return std::nullopt;
  }
  auto resolved = resolve_target(c, target.interface);
  if (!resolved) return std::move(resolved.error());
  if (!*resolved) return std::nullopt;
  if ((*resolved)->inside) {
    c.lanes = inside_ ? inside_->find(**resolved) : nullptr;
    if (c.lanes) return std::nullopt;
    const protocol::TargetInfo& info = (*resolved)->info;
    RequestError none{ErrorCode::kNotFound,
                      "no session on " + info.interface + " of " + info.kind + " " + info.name,
                      c.p + "/target", "the status method lists the sessions"};
    // No via named and nothing shaped from inside: the target's sessions may be on its host side
    // (applied with via host-veth, or by a jitterd that could not enter then).
    if (c.params["target"].contains("via")) return none;
    resolved = resolve_target(c, target.interface, protocol::kViaHostVeth);
    if (!resolved || !*resolved) return none;
  }
  target.interface = (*resolved)->host_interface;
  if (target.direction) target.direction = reversed(*target.direction);
  return std::nullopt;
}

std::optional<TargetRequest> Dispatcher::waiting_follow(const Call& c) const {
  if (!follows_ || !c.params.contains("target")) return std::nullopt;
  shaper::Diagnostics ignored;  // the request's own reading reports them
  JsonReader r(ignored);
  auto request = read_target_request(r, c.params, c.p);
  if (!request || !ignored.empty()) return std::nullopt;
  const auto it = c.params.find("interface");
  const std::string interface =
      it != c.params.end() && it->is_string() ? it->get<std::string>() : "";
  if (interface.empty() || !follows_->waiting(request->kind, request->name, interface)) {
    return std::nullopt;
  }
  return request;
}

SessionManager& Dispatcher::lanes(const Call& c) {
  return c.lanes ? *c.lanes : sessions_;
}

std::vector<SessionManager*> Dispatcher::every_place() {
  std::vector<SessionManager*> out{&sessions_};
  if (inside_) {
    for (SessionManager* m : inside_->all()) out.push_back(m);
  }
  return out;
}

SessionManager::Statuses Dispatcher::every_status() {
  SessionManager::Statuses out;
  for (SessionManager* place : every_place()) {
    if (auto s = place->status(Target{})) out.insert(out.end(), s->begin(), s->end());
  }
  return out;
}

Outcome<json> Dispatcher::profiles(Call& c) {
  c.r.object(c.params, c.p, {});
  const auto listing = profiles_.list();
  protocol::ProfileListing out;
  for (const auto& sp : listing.profiles) {
    protocol::ProfileSummary& p = out.profiles.emplace_back();
    p = {sp.name, sp.file, sp.digest, sp.profile->description, {}, std::nullopt};
    for (const auto& ph : sp.profile->phases) p.phases.push_back(ph.name);
    if (sp.profile->schedule) {
      Nanoseconds total{0};
      for (const auto& s : sp.profile->schedule->steps) total += s.duration;
      p.schedule = {sp.profile->schedule->steps.size(), sp.profile->schedule->loop, total};
    }
  }
  out.invalid = listing.invalid;
  return json(out);
}

// The members of an apply that say where and how to shape (everything but the profile and its
// phase).
void Dispatcher::read_apply_lane(Call& c, ApplyRequest& a) {
  auto& r = c.r;
  const auto& params = c.params;
  const std::string& p = c.p;
  const auto direction = r.string(params, p, "direction", false, 16).value_or("egress");
  if (direction == "both") {
    a.directions = {Direction::kEgress, Direction::kIngress};
  } else if (auto d = direction_from_string(direction.empty() ? "egress" : direction)) {
    a.directions = {*d};
  } else {
    r.error(p + "/direction",
            "\"" + direction +
                "\" is not a direction; give egress (leaving the interface), ingress (arriving, "
                "shaped on an IFB jitterd owns) or both");
  }
  if (params.contains("match")) {
    if (auto rules = shaper::read_match_rules(r, params["match"], p + "/match")) {
      for (const auto& rule : *rules) {
        a.match.push_back(shaper::to_string(rule));
        const auto selectors = shaper::compile_match(rule);
        a.selectors.insert(a.selectors.end(), selectors.begin(), selectors.end());
      }
      if (a.selectors.size() > kMaxSelectorsPerSet) {
        r.error(p + "/match",
                "these rules need " + std::to_string(a.selectors.size()) +
                    " u32 matches; a rule set may use " + std::to_string(kMaxSelectorsPerSet) +
                    " (port ranges split into aligned blocks; use fewer or rounder ranges)");
      }
    }
    const auto set = r.string(params, p, "set", true, shaper::kMaxNameLength);
    if (set && !set->empty()) a.set = *set;
  } else if (params.contains("set")) {
    r.error(
        p + "/set",
        "a rule set needs its rules: add \"match\": [{\"protocol\": \"tcp\", \"dst_port\": 6379}]");
  }
  a.protect_ssh = r.boolean(params, p, "protect_ssh", true).value_or(true);
  if (const auto ssh = r.string(params, p, "ssh_connection", false, 256); ssh && !ssh->empty()) {
    const auto conn = shaper::parse_ssh_connection(*ssh);
    if (!conn) {
      for (const auto& d : conn.diagnostics()) r.error(p + "/ssh_connection", d.message);
    } else if (*conn) {  // always, the text being non-empty
      a.ssh_connections.push_back(**conn);
    }
  }
  a.confirm = read_duration(r, params, p, "confirm");
  const auto offloads = r.string(params, p, "offloads", false, 8).value_or("keep");
  if (offloads == "off") {
    a.offloads_off = true;
  } else if (offloads != "keep" && !offloads.empty()) {
    r.error(p + "/offloads", "\"" + offloads +
                                 "\" is not an offload setting; give \"off\" (TSO, GSO and GRO off "
                                 "until the interface is clear) or \"keep\"");
  }
  a.start = read_start(r, params, p, "start", c.received).value_or(MonotonicTime{});
  a.lease = read_duration(r, params, p, "lease");
  a.force = r.boolean(params, p, "force", false).value_or(false);
}

// `profile`: a name in the profile folders, or a whole profile inline.
std::optional<RequestError> Dispatcher::read_apply_profile(Call& c, const json& prof,
                                                           ApplyRequest& a) {
  const std::string where = c.p + "/profile";
  if (prof.is_string()) {
    auto stored = profiles_.load(prof.get<std::string>());
    if (!stored) {
      const ProfileRefusal& refusal = stored.error();
      return RequestError{
          refusal.not_found ? ErrorCode::kNotFound : ErrorCode::kInvalidParams, refusal.message,
          where,
          refusal.not_found ? "the profiles method lists them; or send the profile inline" : ""};
    }
    a.profile = stored->profile;
    a.digest = stored->digest;
  } else if (prof.is_object()) {
    auto load = shaper::parse_profile(prof.dump());
    if (!load) {
      for (auto& d : load.diagnostics()) d.where = where + d.where;
      return invalid(load.diagnostics());
    }
    a.profile = std::make_shared<const shaper::Profile>(std::move(load->profile));
    a.digest = load->digest;
  } else {
    c.r.error(where, "expected a profile name or a profile object, found " +
                         std::string(prof.type_name()));
  }
  return std::nullopt;
}

Outcome<json> Dispatcher::apply(Call& c) {
  c.r.object(c.params, c.p,
             {"interface", "profile", "phase", "schedule", "direction", "set", "match", "start",
              "lease", "force", "confirm", "protect_ssh", "ssh_connection", "offloads", "target"});
  ApplyRequest a;
  a.interface = c.r.string(c.params, c.p, "interface", true, 15).value_or("");
  if (c.params.contains("target") && c.ok()) {
    auto resolved = resolve_target(c, a.interface);
    if (!resolved) return resolved.error();
    if (*resolved) {
      a.interface = (*resolved)->host_interface;
      a.target = (*resolved)->info;
      a.target->follow = c.params["target"].value("follow", false);
      if (a.target->follow && !follows_) {
        return RequestError{ErrorCode::kInvalidParams, "this jitterd cannot follow targets",
                            c.p + "/target/follow", "apply without \"follow\""};
      }
      if ((*resolved)->inside) {
        if (!inside_) {
          return RequestError{ErrorCode::kInvalidParams,
                              "this jitterd cannot shape inside a target", c.p + "/target/via",
                              "give \"via\": \"host-veth\""};
        }
        auto place = inside_->open(**resolved);
        if (!place) return place.error();
        c.lanes = *place;
      }
    }
  }
  const json* prof = c.r.member(c.params, c.p, "profile", true);
  const auto phase = c.r.string(c.params, c.p, "phase", false, shaper::kMaxNameLength);
  if (phase && !phase->empty()) a.phase = *phase;
  read_apply_lane(c, a);
  if (a.target && a.target->via != protocol::kViaInside) {
    for (Direction& d : a.directions) d = reversed(d);
  }
  if (c.lanes && a.offloads_off) {
    // OffloadGuard's ethtool ioctls name the interface in jitterd's own namespace.
    c.r.error(c.p + "/offloads",
              "\"offloads\": \"off\" is not available inside a target yet; give \"via\": "
              "\"host-veth\" to turn the host side's offloads off");
  }
  if (prof && c.ok()) {
    if (auto refused = read_apply_profile(c, *prof, a)) return *refused;
  }
  if (!c.ok() || !a.profile) return json::object();
  const bool has_schedule = a.profile->schedule.has_value();
  a.schedule = c.r.boolean(c.params, c.p, "schedule", has_schedule && !a.phase).value_or(false);
  if (a.schedule && a.phase)
    c.r.error(c.p + "/schedule", "give a phase to hold or run the schedule, not both");
  if (!c.ok()) return json::object();
  if (c.check_only) return checked_only(lanes(c).check_apply_request(a));
  auto applied = lanes(c).apply(a, c.peer);
  if (applied && a.target && a.target->follow) follows_->track(c.params, c.peer, *applied);
  return lanes_outcome(applied);
}

Outcome<json> Dispatcher::switch_phase(Call& c) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "phase", "at", "target"});
  Target target = c.read_target(true);
  if (auto refused = retarget(c, target)) return *refused;
  const auto phase = c.r.string(c.params, c.p, "phase", true, shaper::kMaxNameLength);
  const auto at = read_start(c.r, c.params, c.p, "at", c.received);
  if (!c.ok()) return json::object();
  if (c.check_only) return checked_only(lanes(c).check_switch(target, *phase));
  std::optional<MonotonicTime> when;
  if (c.params.contains("at")) when = at;
  return lanes_outcome(lanes(c).switch_phase(target, *phase, when, c.peer));
}

// pause, resume and confirm: a target and nothing else.
Outcome<json> Dispatcher::on_target(Call& c, LaneRequest request) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "target"});
  Target target = c.read_target(true);
  if (auto refused = retarget(c, target)) return *refused;
  if (!c.ok()) return json::object();
  return lanes_outcome((lanes(c).*request)(target, c.peer));
}

Outcome<json> Dispatcher::pause(Call& c) {
  return on_target(c, &SessionManager::pause);
}
Outcome<json> Dispatcher::resume(Call& c) {
  return on_target(c, &SessionManager::resume);
}
Outcome<json> Dispatcher::confirm(Call& c) {
  return on_target(c, &SessionManager::confirm);
}

Outcome<json> Dispatcher::skip(Call& c) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "phase", "step", "target"});
  Target target = c.read_target(true);
  if (auto refused = retarget(c, target)) return *refused;
  std::optional<std::string> phase;
  std::optional<std::size_t> step;
  if (c.params.contains("phase"))
    phase = c.r.string(c.params, c.p, "phase", true, shaper::kMaxNameLength);
  if (c.params.contains("step"))
    step = c.r.integer<std::size_t>(c.params, c.p, "step", 0, shaper::kMaxScheduleSteps, 0);
  if (c.params.contains("phase") == c.params.contains("step")) {
    c.r.error(c.p,
              "give exactly one of \"phase\" (the next step of that phase) and \"step\" (0-based)");
  }
  if (!c.ok()) return json::object();
  return lanes_outcome(lanes(c).skip(target, step, phase, c.peer));
}

Outcome<json> Dispatcher::status(Call& c) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "target"});
  Target target = c.read_target(false);
  if (auto followed = waiting_follow(c); followed && c.ok()) {
    return json(protocol::SessionList{
        follows_->statuses(followed->kind, followed->name, target.interface)});
  }
  if (auto refused = retarget(c, target)) return *refused;
  if (c.ok() && target.interface.empty() && (target.direction || target.set)) {
    c.r.error(c.p,
              "\"direction\" and \"set\" narrow an interface's sessions; give \"interface\" too");
  }
  if (!c.ok()) return json::object();
  if (target.interface.empty()) {
    SessionManager::Statuses all = every_status();
    if (follows_) {
      for (auto& waiting : follows_->statuses()) all.push_back(std::move(waiting));
    }
    return json(protocol::SessionList{all});
  }
  auto s = lanes(c).status(target);
  if (!s) return s.error();
  return json(protocol::SessionList{*s});
}

Outcome<json> Dispatcher::clear(Call& c) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "all", "target"});
  Target target = c.read_target(false);
  if (auto followed = waiting_follow(c); followed && c.ok() && !c.check_only) {
    return json(protocol::Cleared{
        follows_->clear_waiting(followed->kind, followed->name, target.interface)});
  }
  if (auto refused = retarget(c, target)) return *refused;
  const bool all = c.r.boolean(c.params, c.p, "all", false).value_or(false);
  if (c.ok() && (target.interface.empty() == !all)) {
    c.r.error(c.p, "give \"interface\", or \"all\": true to clear every session");
  }
  if (c.ok() && all && (target.direction || target.set)) {
    c.r.error(c.p,
              "\"all\" clears every session of every interface; drop \"direction\" and \"set\"");
  }
  if (!c.ok()) return json::object();
  if (c.check_only) {
    if (all) return json::object();
    auto found = lanes(c).status(target);
    return found ? Outcome<json>(json::object()) : Outcome<json>(found.error());
  }
  if (!all) {
    auto cleared = lanes(c).clear(target, c.peer);
    if (!cleared) return cleared.error();
    return json(protocol::Cleared{*cleared});
  }
  std::vector<std::string> every;
  for (SessionManager* place : every_place()) {
    auto cleared = place->clear(Target{}, c.peer);
    if (!cleared) return cleared.error();
    every.insert(every.end(), cleared->begin(), cleared->end());
  }
  if (inside_) inside_->release_idle_soon();
  if (follows_) {
    for (auto& waiting : follows_->clear_all_waiting()) every.push_back(std::move(waiting));
  }
  return json(protocol::Cleared{every});
}

Outcome<json> Dispatcher::renew(Call& c) {
  c.r.object(c.params, c.p, {"interface", "direction", "set", "lease", "target"});
  Target target = c.read_target(true);
  if (auto followed = waiting_follow(c); followed && c.ok()) {
    const auto lease = read_duration(c.r, c.params, c.p, "lease");
    if (!c.ok()) return json::object();
    return protocol::lanes_result(
        follows_->renew_waiting(followed->kind, followed->name, target.interface, lease));
  }
  if (auto refused = retarget(c, target)) return *refused;
  const auto lease = read_duration(c.r, c.params, c.p, "lease");
  if (!c.ok()) return json::object();
  return lanes_outcome(lanes(c).renew(target, lease, c.peer));
}

Outcome<json> Dispatcher::subscribe(Call& c) {
  c.r.object(c.params, c.p, {"interfaces", "events"});
  SubscribeFilter filter;
  for (const char* key : {"interfaces", "events"}) {
    if (!c.params.contains(key)) continue;
    const json& list = c.params[key];
    if (!list.is_array()) {
      c.r.error(c.p + "/" + key, "expected an array of strings");
      continue;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string where = c.p + "/" + key + "/" + std::to_string(i);
      if (!list[i].is_string()) {
        c.r.error(where, "expected a string, found " + shaper::json_excerpt(list[i]));
      } else if (std::string_view(key) == "interfaces") {
        filter.interfaces.insert(list[i].get<std::string>());
      } else if (auto t = event_type_from_string(list[i].get<std::string>())) {
        filter.events.insert(*t);
      } else {
        std::string names;
        for (const auto name : event_type_names())
          names += (names.empty() ? "" : ", ") + std::string(name);
        c.r.error(where, "no event \"" + shaper::text_excerpt(list[i].get<std::string>()) +
                             "\"; events: " + names);
      }
    }
  }
  if (!c.ok()) return json::object();
  c.subscribe = filter;
  return json{{"subscribed", true}};
}

Outcome<json> Dispatcher::metrics(Call& c) {
  c.r.object(c.params, c.p, {});
  return json(protocol::MetricsText{metrics_text()});
}

Outcome<json> Dispatcher::clock_reading(Call& c) {
  c.r.object(c.params, c.p, {});
  protocol::ClockReading reading;
  reading.received = c.received;
  reading.replied = now_stamp();
  return json(reading);
}

Outcome<json> Dispatcher::stage(Call& c) {
  c.r.object(c.params, c.p, {"method", "params", "ttl"});
  const auto name = c.r.string(c.params, c.p, "method", true, 64).value_or("");
  const json* params = c.r.member(c.params, c.p, "params", true);
  const Nanoseconds ttl = read_duration(c.r, c.params, c.p, "ttl").value_or(kDefaultStageTtl);
  const protocol::MethodInfo* method = protocol::find_method(name);
  const bool stageable = method && (method->method == protocol::Method::kApply ||
                                    method->method == protocol::Method::kSwitch ||
                                    method->method == protocol::Method::kClear);
  if (c.ok() && !stageable)
    c.r.error(c.p + "/method", "\"" + name + "\" cannot be staged; stage apply, switch or clear");
  if (c.ok() && !params->is_object()) c.r.error(c.p + "/params", "params must be an object");
  if (c.ok() && (ttl <= Nanoseconds(0) || ttl > kMaxStageTtl))
    c.r.error(c.p + "/ttl", "a staged change stays valid from 1 ns to 10 minutes");
  for (const char* deadline : {"start", "at"}) {
    if (c.ok() && params->contains(deadline))
      c.r.error(c.p + "/params/" + deadline,
                std::string("the commit gives the time; drop \"") + deadline + "\" here");
  }
  if (!c.ok()) return json::object();
  // The method's own handler, in check mode: its pointers are under /params/params.
  Call check(c.peer, *params, c.p + "/params");
  check.check_only = true;
  Outcome<json> checked = (this->*handler_of(method->method).handler)(check);
  if (!check.ok()) {
    c.diagnostics = check.diagnostics;
    return json::object();
  }
  if (!checked) {
    // The session manager names the params of a request of its own: these are one level down.
    RequestError refused = checked.error();
    if (refused.where.rfind(c.p + "/", 0) == 0 && refused.where.rfind(check.p, 0) != 0)
      refused.where = c.p + refused.where;
    return refused;
  }
  const MonotonicTime now = MonotonicClock::now();
  StagedChanges::Change change;
  change.method = method->method;
  change.params = *params;
  change.expires = now + ttl;
  change.uid = c.peer.uid;
  protocol::StagedChange out;
  out.token = staged_.add(std::move(change), now);
  out.method = name;
  out.expires = stamp_of(now + ttl);
  return json(out);
}

Outcome<json> Dispatcher::commit(Call& c) {
  c.r.object(c.params, c.p, {"token", "at"});
  const auto token = c.r.string(c.params, c.p, "token", true, 64).value_or("");
  // One reading of the clocks for the commit and the change it runs: a wall-clock deadline becomes
  // one CLOCK_MONOTONIC time, the one the reply and the change's transition record carry (two
  // readings would differ by whatever passed between reading CLOCK_MONOTONIC and CLOCK_REALTIME in
  // each, milliseconds on a loaded host, and a fleet client would miss the acknowledgement).
  const Stamp& now = c.received;
  const auto at = read_start(c.r, c.params, c.p, "at", now);
  if (!c.ok()) return json::object();
  auto change = staged_.take(token, c.peer.uid, MonotonicTime(now.monotonic));
  if (!change) return change.error();
  const std::string name(protocol::kMethods[static_cast<std::size_t>(change->method)].name);
  json params = change->params;
  const std::string at_text = c.params.value("at", "now");
  if (change->method == protocol::Method::kApply) params["start"] = at_text;
  if (change->method == protocol::Method::kSwitch) params["at"] = at_text;
  if (change->method == protocol::Method::kClear && *at > MonotonicTime(now.monotonic)) {
    // The change is gone from the store: the client stages it again without a deadline.
    return RequestError{ErrorCode::kInvalidParams, "a clear is done when its commit is read",
                        c.p + "/at", "commit a staged clear with \"at\": \"now\""};
  }
  Call run(c.peer, params);
  run.received = c.received;
  Outcome<json> done = (this->*handler_of(change->method).handler)(run);
  if (!run.ok()) return invalid(run.diagnostics);
  if (!done) return done.error();
  protocol::CommittedChange out;
  out.token = token;
  out.method = name;
  out.at = stamp_of(*at);
  if (change->method == protocol::Method::kClear) {
    out.cleared = done->get<protocol::Cleared>().cleared;
  } else {
    out.sessions = protocol::read_lanes_result(*done, "/result", protocol::throw_wire_error);
  }
  return json(out);
}

Outcome<json> Dispatcher::abort_staged(Call& c) {
  c.r.object(c.params, c.p, {"token"});
  const auto token = c.r.string(c.params, c.p, "token", true, 64).value_or("");
  if (!c.ok()) return json::object();
  auto dropped = staged_.take(token, c.peer.uid, MonotonicClock::now());
  if (!dropped) return dropped.error();
  return json(protocol::AbortedChange{token});
}

// ---- probe -------------------------------------------------------------------------------------

Outcome<json> Dispatcher::probe(Call& c) {
  c.r.object(c.params, c.p, {"addresses", "count", "interval", "wait"});
  ProbeRequest req;
  const std::string where = c.p + "/addresses";
  const json* list = c.r.member(c.params, c.p, "addresses", true);
  if (list && (!list->is_array() || list->empty() || list->size() > kMaxProbeAddresses)) {
    c.r.error(where, "expected an array of 1 to " + std::to_string(kMaxProbeAddresses) +
                         " IPv4 addresses, found " + shaper::json_excerpt(*list));
  } else if (list) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const json& a = (*list)[i];
      in_addr parsed{};
      if (!a.is_string() || a.get<std::string>().size() > 15 ||
          ::inet_pton(AF_INET, a.get<std::string>().c_str(), &parsed) != 1) {
        c.r.error(where + "/" + std::to_string(i),
                  shaper::json_excerpt(a) +
                      " is not an IPv4 address; give a dotted quad such as \"198.18.0.2\" (IPv6 "
                      "is not probed yet)");
        continue;
      }
      req.addresses.push_back(a.get<std::string>());
    }
  }
  req.count =
      c.r.integer<std::uint32_t>(c.params, c.p, "count", 1, kMaxProbeCount, 100).value_or(0);
  req.interval =
      read_duration(c.r, c.params, c.p, "interval").value_or(std::chrono::milliseconds(20));
  req.wait = read_duration(c.r, c.params, c.p, "wait").value_or(std::chrono::seconds(1));
  if (!c.ok()) return json::object();
  if (req.interval < kMinProbeInterval || req.interval > kMaxProbeInterval) {
    c.r.error(c.p + "/interval",
              shaper::format_duration(req.interval) + " is out of range; give 1ms to 10s");
  }
  if (req.wait > kMaxProbeWait) {
    c.r.error(c.p + "/wait", shaper::format_duration(req.wait) + " is longer than 10s");
  }
  if (!c.ok()) return json::object();
  const Nanoseconds total = req.interval * (req.count - 1) + req.wait;
  if (total > kMaxProbeDuration) {
    return RequestError{ErrorCode::kInvalidParams,
                        "the probes would take " + shaper::format_duration(total) +
                            " (count x interval + wait), more than the limit of " +
                            shaper::format_duration(kMaxProbeDuration),
                        c.p + "/count",
                        "send fewer probes, or at a shorter interval, in several requests"};
  }
  c.probe = std::move(req);
  return json::object();
}

std::string Dispatcher::probe_reply(const json& id, const ProbeRequest& request,
                                    const std::atomic<bool>& stop) {
  json reply;
  try {
    const std::vector<ProbeSeries> runs = run_probes(request, stop);
    json targets = json::array();
    for (const ProbeSeries& s : runs) {
      json rtt = json::array(), sent = json::array();
      for (std::size_t i = 0; i < s.rtt.size(); ++i) {
        rtt.push_back(s.rtt[i] ? json(s.rtt[i]->count()) : json(nullptr));
        sent.push_back(s.sent[i].count());
      }
      targets.push_back({{"address", s.address},
                         {"sent", s.rtt.size()},
                         {"received", std::count_if(s.rtt.begin(), s.rtt.end(),
                                                    [](const auto& r) { return r.has_value(); })},
                         {"icmp_errors", s.errors},
                         {"sent_realtime_ns", std::move(sent)},
                         {"rtt_ns", std::move(rtt)}});
    }
    reply = {{"ok", true},
             {"result",
              {{"count", request.count},
               {"interval_ns", request.interval.count()},
               {"stopped", stop.load()},
               {"targets", std::move(targets)}}}};
  } catch (const shaper::SystemError& e) {
    reply = error_json(nullptr, {ErrorCode::kSystemError, e.what(), "", e.hint()});
  } catch (const std::exception& e) {
    reply = error_json(nullptr, {ErrorCode::kInternalError, e.what(), "",
                                 "this is a bug in jitterd; please report it with the request"});
  }
  if (!id.is_null()) reply["id"] = id;
  return to_line(reply);
}

std::string Dispatcher::metrics_text() {
  std::ostringstream out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  // A metric with one sample and no labels.
  auto scalar = [&](const char* name, const char* type, const char* help, const auto& value) {
    metric(name, type, help);
    out << name << ' ' << value << '\n';
  };
  // Jitterd's own namespace's and every target namespace's shaped from inside.
  SessionMetrics m = sessions_.metrics();
  if (inside_) m += inside_->metrics();
  std::size_t sessions = 0;
  for (SessionManager* place : every_place()) sessions += place->session_count();
  scalar("jitterd_sessions", "gauge", "Interfaces with a jitterd session.", sessions);
  scalar("jitterd_transitions_total", "counter", "Phase transitions applied.", m.transitions);
  scalar("jitterd_missed_deadlines_total", "counter",
         "Schedule steps that started after their own end.", m.missed_deadlines);
  scalar("jitterd_transition_errors_total", "counter", "Scheduled transitions the kernel refused.",
         m.transition_errors);
  scalar("jitterd_lease_expirations_total", "counter",
         "Sessions removed because their lease ran out.", m.lease_expirations);
  scalar("jitterd_interfaces_gone_total", "counter",
         "Sessions ended because their interface disappeared.", m.interfaces_gone);
  scalar("jitterd_external_changes_total", "counter", "Changes others made to jitterd's qdiscs.",
         m.external_changes);
  scalar("jitterd_rollbacks_total", "counter",
         "Commit-confirmed applies rolled back for want of a confirm.", m.rollbacks);
  metric("jitterd_transition_lateness_seconds", "histogram",
         "From a transition's deadline to the kernel's acknowledgement.");
  for (std::size_t b = 0; b < std::size(SessionMetrics::kBuckets); ++b) {
    out << "jitterd_transition_lateness_seconds_bucket{le=\"" << SessionMetrics::kBuckets[b]
        << "\"} " << m.lateness_buckets[b] << '\n';
  }
  out << "jitterd_transition_lateness_seconds_bucket{le=\"+Inf\"} " << m.transitions << '\n';
  out << "jitterd_transition_lateness_seconds_sum " << m.lateness_sum_seconds << '\n';
  out << "jitterd_transition_lateness_seconds_count " << m.transitions << '\n';
  scalar("jitterd_connections", "gauge", "Open control connections.", stats_.connections_open);
  scalar("jitterd_connections_total", "counter", "Control connections accepted.",
         stats_.connections_total);
  scalar("jitterd_connections_refused_total", "counter",
         "Connections refused: too many, or a peer not permitted.", stats_.connections_refused);
  scalar("jitterd_requests_total", "counter", "Requests read.", stats_.requests_total);
  scalar("jitterd_request_errors_total", "counter", "Requests answered with an error.",
         stats_.request_errors_total);
  scalar("jitterd_subscribers_dropped_total", "counter",
         "Subscribers disconnected for not reading events.", stats_.subscribers_dropped);
  scalar("jitterd_events_written_total", "counter",
         "Events serialised for subscribers (once an event, however many subscribers it reaches).",
         stats_.events_written);

  const SessionManager::Statuses statuses = every_status();
  metric("jitterd_session_info", "gauge", "A session's profile and phase (value 1).");
  for (const auto& s : statuses) {
    out << "jitterd_session_info{" << lane_labels(s) << ",profile=\"" << label(s.profile)
        << "\",digest=\"" << label(s.digest) << "\",phase=\"" << label(s.phase) << "\",state=\""
        << s.state << "\"} 1\n";
  }
  metric("jitterd_qdisc_packets_total", "counter", "Packets sent by jitterd's qdisc.");
  for (const auto& s : statuses) {
    if (s.counters)
      out << "jitterd_qdisc_packets_total{" << lane_labels(s) << "} " << s.counters->packets
          << '\n';
  }
  metric("jitterd_qdisc_drops_total", "counter",
         "Packets dropped by jitterd's qdisc (loss model and limit).");
  for (const auto& s : statuses) {
    if (s.counters)
      out << "jitterd_qdisc_drops_total{" << lane_labels(s) << "} " << s.counters->drops << '\n';
  }
  metric("jitterd_qdisc_backlog_packets", "gauge", "Packets held by jitterd's qdisc.");
  for (const auto& s : statuses) {
    if (s.counters)
      out << "jitterd_qdisc_backlog_packets{" << lane_labels(s) << "} "
          << s.counters->backlog_packets << '\n';
  }
  metric("jitterd_lease_remaining_seconds", "gauge",
         "Time left on a session's lease before jitterd removes its shaping.");
  for (const auto& s : statuses) {
    if (s.lease)
      out << "jitterd_lease_remaining_seconds{" << lane_labels(s) << "} "
          << std::chrono::duration<double>(s.lease->remaining).count() << '\n';
  }
  return out.str();
}

}  // namespace jitterd
