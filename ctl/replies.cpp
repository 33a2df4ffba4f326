#include "replies.hpp"

#include "control_client.hpp"
#include "shaper/json_reader.hpp"

namespace jitterctl {

namespace {

using Json = nlohmann::json;

[[noreturn]] void wrong_type(const std::string& pointer, const char* expected, const Json& found) {
  const std::string shown = shaper::json_excerpt(found);
  throw ProtocolError(
      "unexpected reply from jitterd: " + (pointer.empty() ? std::string("/") : pointer) +
      ": expected " + expected + ", found " + shown);
}

// The members of one JSON object, read by name with the object's pointer kept for messages. Absent
// and null members read as "not there".
class Fields {
 public:
  Fields(const Json& object, std::string pointer) : object_(object), pointer_(std::move(pointer)) {
    if (!object_.is_object()) wrong_type(pointer_, "an object", object_);
  }

  const std::string& pointer() const { return pointer_; }
  std::string pointer(const char* key) const { return pointer_ + "/" + key; }

  const Json* get(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::string text(const char* key) const {
    const Json* v = get(key);
    if (!v) return {};
    if (!v->is_string()) wrong_type(pointer(key), "a string", *v);
    return v->get<std::string>();
  }

  std::optional<std::int64_t> optional_integer(const char* key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(pointer(key), "an integer", *v);
    return v->get<std::int64_t>();
  }
  std::int64_t integer(const char* key) const { return optional_integer(key).value_or(0); }

  std::uint64_t count(const char* key) const {
    const Json* v = get(key);
    if (!v) return 0;
    if (!v->is_number_unsigned()) wrong_type(pointer(key), "a count (an integer >= 0)", *v);
    return v->get<std::uint64_t>();
  }

  std::optional<bool> optional_flag(const char* key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(pointer(key), "true or false", *v);
    return v->get<bool>();
  }
  bool flag(const char* key) const { return optional_flag(key).value_or(false); }

  // Durations in replies are integers in nanoseconds, in members named *_ns.
  std::optional<Nanoseconds> optional_duration(const char* key) const {
    const auto ns = optional_integer(key);
    if (!ns) return std::nullopt;
    return Nanoseconds(*ns);
  }
  Nanoseconds duration(const char* key) const {
    return optional_duration(key).value_or(Nanoseconds(0));
  }

  std::optional<Timestamp> time(const char* key) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    const Fields t(*v, pointer(key));
    return Timestamp{t.integer("monotonic_ns"), t.integer("realtime_ns")};
  }

  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    const Json* v = get(key);
    if (!v) return out;
    if (!v->is_array()) wrong_type(pointer(key), "an array of strings", *v);
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        wrong_type(pointer(key) + "/" + std::to_string(i), "a string", (*v)[i]);
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  // Calls read(element, pointer) for every element of the array `key` (absent: none).
  template <typename Read>
  auto array(const char* key, Read read) const {
    std::vector<decltype(read(std::declval<const Json&>(), std::string()))> out;
    const Json* v = get(key);
    if (!v) return out;
    if (!v->is_array()) wrong_type(pointer(key), "an array", *v);
    for (std::size_t i = 0; i < v->size(); ++i)
      out.push_back(read((*v)[i], pointer(key) + "/" + std::to_string(i)));
    return out;
  }

 private:
  const Json& object_;
  std::string pointer_;
};

TransitionRecord read_transition(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  return {f.text("phase"), f.time("deadline"), f.time("applied"), f.duration("lateness_ns"),
          f.duration("apply_ns")};
}

SessionStatus read_status_at(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  SessionStatus s;
  s.interface = f.text("interface");
  s.index = f.integer("index");
  s.direction = f.text("direction");
  s.set = f.text("set");
  s.match = f.strings("match");
  s.unshaped = f.strings("unshaped");
  if (const Json* confirm = f.get("confirm")) {
    s.confirm_remaining = Fields(*confirm, f.pointer("confirm")).duration("remaining_ns");
  }
  s.state = f.text("state");
  s.profile = f.text("profile");
  s.digest = f.text("digest");
  s.phase = f.text("phase");
  s.phase_since = f.time("phase_since");
  s.time_in_phase = f.duration("time_in_phase_ns");
  if (const Json* schedule = f.get("schedule")) {
    const Fields sf(*schedule, f.pointer("schedule"));
    ScheduleStatus& out = s.schedule.emplace();
    out.state = sf.text("state");
    out.step = sf.integer("step");
    out.steps = sf.integer("steps");
    out.loop = sf.flag("loop");
    out.iteration = sf.integer("iteration");
  }
  if (const Json* next = f.get("next_transition")) {
    const Fields nf(*next, f.pointer("next_transition"));
    s.next_transition =
        NextTransition{nf.text("phase"), nf.integer("step"), nf.time("deadline"), nf.duration("in_ns")};
  }
  if (const Json* lease = f.get("lease")) {
    const Fields lf(*lease, f.pointer("lease"));
    s.lease = LeaseStatus{lf.time("expires"), lf.duration("remaining_ns")};
  }
  if (const Json* counters = f.get("counters")) {
    const Fields cf(*counters, f.pointer("counters"));
    s.counters = Counters{cf.count("packets"), cf.count("bytes"), cf.count("drops"),
                          cf.count("backlog_bytes"), cf.count("backlog_packets")};
  }
  if (const Json* transitions = f.get("transitions")) {
    const Fields tf(*transitions, f.pointer("transitions"));
    s.transitions.count = tf.count("count");
    s.transitions.missed = tf.count("missed");
    s.transitions.late_max = tf.duration("late_max_ns");
    s.transitions.recent = tf.array("recent", read_transition);
  }
  return s;
}

InterfaceInfo read_interface(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  InterfaceInfo i;
  i.name = f.text("name");
  i.index = f.integer("index");
  i.allowed = f.flag("allowed");
  i.session = f.flag("session");
  if (const Json* root = f.get("root")) {
    const Fields rf(*root, f.pointer("root"));
    i.root = RootQdisc{rf.text("kind"), rf.text("handle"), rf.text("owner")};
  }
  return i;
}

ProfileSummary read_profile(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  ProfileSummary p;
  p.name = f.text("name");
  p.file = f.text("file");
  p.digest = f.text("digest");
  p.description = f.text("description");
  p.phases = f.strings("phases");
  if (const Json* schedule = f.get("schedule")) {
    const Fields sf(*schedule, f.pointer("schedule"));
    p.schedule = ScheduleSummary{sf.integer("steps"), sf.flag("loop"), sf.duration("duration_ns")};
  }
  return p;
}

InvalidProfile read_invalid_profile(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  return {f.text("file"), f.strings("errors")};
}

CommandInfo read_command(const Json& j, const std::string& pointer) {
  const Fields f(j, pointer);
  return {f.text("name"), f.text("summary"), f.flag("mutating")};
}

}  // namespace

SessionStatus read_session_status(const Json& status) {
  return read_status_at(status, "/result");
}

std::vector<SessionStatus> read_session_statuses(const Json& result) {
  // `result` is the reply's result member itself: several sessions come as {"sessions": [...]}.
  if (result.is_object() && result.contains("sessions")) return read_status_result(result);
  return {read_session_status(result)};
}

std::vector<SessionStatus> read_status_result(const Json& result) {
  return Fields(result, "/result").array("sessions", read_status_at);
}

std::vector<InterfaceInfo> read_interfaces_result(const Json& result) {
  return Fields(result, "/result").array("interfaces", read_interface);
}

ProfileListing read_profiles_result(const Json& result) {
  const Fields f(result, "/result");
  return {f.array("profiles", read_profile), f.array("invalid", read_invalid_profile)};
}

VersionInfo read_version_result(const Json& result) {
  const Fields f(result, "/result");
  return {f.text("version"), f.integer("protocol"), f.integer("pid"), f.text("kernel"),
          f.time("started")};
}

std::vector<CommandInfo> read_list_commands_result(const Json& result) {
  return Fields(result, "/result").array("commands", read_command);
}

std::vector<std::string> read_clear_result(const Json& result) {
  return Fields(result, "/result").strings("cleared");
}

std::string read_metrics_result(const Json& result) {
  return Fields(result, "/result").text("text");
}

Event read_event(const Json& event) {
  const Fields f(event, "");
  Event e;
  e.event = f.text("event");
  e.seq = f.count("seq");
  e.interface = f.text("interface");
  e.profile = f.text("profile");
  e.phase = f.text("phase");
  e.previous = f.text("previous");
  e.step = f.optional_integer("step");
  e.at = f.time("at");
  e.deadline = f.time("deadline");
  e.lateness = f.optional_duration("lateness_ns");
  e.apply = f.optional_duration("apply_ns");
  e.lease = f.optional_duration("lease_ns");
  e.reason = f.text("reason");
  e.what = f.text("what");
  e.ended = f.optional_flag("ended");
  e.message = f.text("message");
  return e;
}

}  // namespace jitterctl
