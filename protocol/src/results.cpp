#include "protocol/results.hpp"

#include <nlohmann/json.hpp>

namespace jitterd::protocol {
namespace {

using json = nlohmann::json;

// An optional member is null on the wire when there is nothing to say.
template <typename T>
json nullable(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}
json nullable(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

}  // namespace

void to_json(json& j, const Counters& c) {
  j = {{"packets", c.packets},
       {"bytes", c.bytes},
       {"drops", c.drops},
       {"backlog_bytes", c.backlog_bytes},
       {"backlog_packets", c.backlog_packets}};
}

void to_json(json& j, const TransitionRecord& t) {
  j = {{"phase", t.phase},
       {"step", nullable(t.step)},
       {"deadline", t.deadline},
       {"applied", t.applied},
       {"lateness_ns", t.lateness.count()},
       {"apply_ns", t.apply_time.count()}};
  if (t.gated) j["gated"] = true;
}

void to_json(json& j, const TargetInfo& t) {
  j = {{"kind", t.kind},
       {"name", t.name},
       {"interface", t.interface},
       {"direction", to_string(t.direction)},
       {"namespace", t.namespace_id},
       {"via", t.via}};
  if (t.follow) j["follow"] = true;
}

void to_json(json& j, const SessionStatus& s) {
  j = {{"interface", s.interface},
       {"index", s.index},
       {"direction", to_string(s.direction)},
       {"set", nullable(s.set)},
       {"match", s.match},
       {"unshaped", s.unshaped},
       {"offloads_off", s.offloads_off},
       {"state", s.state},
       {"profile", s.profile},
       {"digest", s.digest},
       {"phase", nullable(s.phase)},
       {"phase_since", nullable(s.phase_since)},
       {"time_in_phase_ns", s.time_in_phase.count()},
       {"client", {{"uid", s.client.uid}, {"pid", s.client.pid}}}};
  j["target"] = nullptr;
  if (s.target) j["target"] = *s.target;
  j["schedule"] = nullptr;
  if (const auto& p = s.schedule) {
    j["schedule"] = {{"state", p->state},
                     {"step", p->step},
                     {"steps", p->steps},
                     {"loop", p->loop},
                     {"iteration", p->iteration}};
  }
  j["next_transition"] = nullptr;
  if (const auto& n = s.next_transition) {
    j["next_transition"] = {{"phase", n->phase},
                            {"step", nullable(n->step)},
                            {"deadline", n->deadline},
                            {"in_ns", n->in.count()}};
  }
  j["lease"] = nullptr;
  if (const auto& l = s.lease) {
    j["lease"] = {{"lease_ns", l->length.count()},
                  {"expires", l->expires},
                  {"remaining_ns", l->remaining.count()}};
  }
  j["confirm"] = nullptr;
  if (const auto& c = s.confirm) {
    j["confirm"] = {{"deadline", c->deadline}, {"remaining_ns", c->remaining.count()}};
  }
  j["counters"] = nullable(s.counters);
  j["transitions"] = {{"count", s.transitions},
                      {"missed", s.missed},
                      {"late_max_ns", s.late_max.count()},
                      {"recent", s.recent}};
}

void to_json(json& j, const InterfaceInfo& i) {
  json root = nullptr;
  if (i.root) root = {{"kind", i.root->kind}, {"handle", i.root->handle}, {"owner", i.root->owner}};
  j = {{"name", i.name},
       {"index", i.index},
       {"allowed", i.allowed},
       {"session", i.session},
       {"root", root}};
}

void to_json(json& j, const ProfileSummary& p) {
  json schedule = nullptr;
  if (p.schedule) {
    schedule = {{"steps", p.schedule->steps},
                {"loop", p.schedule->loop},
                {"duration_ns", p.schedule->duration.count()}};
  }
  j = {{"name", p.name},     {"file", p.file},
       {"digest", p.digest}, {"description", p.description},
       {"phases", p.phases}, {"schedule", schedule}};
}

void to_json(json& j, const InvalidProfile& p) {
  j = {{"file", p.file}, {"errors", p.errors}};
}

void to_json(json& j, const ProfileListing& l) {
  j = {{"profiles", l.profiles}, {"invalid", l.invalid}};
}

void to_json(json& j, const VersionInfo& v) {
  j = {{"version", v.version},
       {"protocol", v.protocol},
       {"pid", v.pid},
       {"kernel", v.kernel},
       {"started", nullable(v.started)}};
}

void to_json(json& j, const CommandInfo& c) {
  j = {{"name", c.name}, {"summary", c.summary}, {"mutating", c.mutating}};
}

void to_json(json& j, const SessionList& l) {
  j = {{"sessions", l.sessions}};
}
void to_json(json& j, const InterfaceList& l) {
  j = {{"interfaces", l.interfaces}};
}
void to_json(json& j, const CommandList& l) {
  j = {{"commands", l.commands}};
}
void to_json(json& j, const Cleared& c) {
  j = {{"cleared", c.cleared}};
}
void to_json(json& j, const MetricsText& m) {
  j = {{"text", m.text}};
}
void to_json(json& j, const ClockReading& c) {
  j = {{"received", c.received}, {"replied", c.replied}};
}
void to_json(json& j, const StagedChange& s) {
  j = {{"token", s.token}, {"method", s.method}, {"expires", s.expires}};
}
void to_json(json& j, const CommittedChange& c) {
  j = {{"token", c.token},
       {"method", c.method},
       {"at", c.at},
       {"sessions", c.sessions},
       {"cleared", c.cleared}};
}
void to_json(json& j, const AbortedChange& a) {
  j = {{"token", a.token}};
}

void read_members(const Members& m, Counters& out) {
  out = {m.count("packets"), m.count("bytes"), m.count("drops"), m.count("backlog_bytes"),
         m.count("backlog_packets")};
}

void read_members(const Members& m, TransitionRecord& out) {
  out.phase = m.text("phase");
  out.step = m.optional_count("step");
  out.deadline = m.time("deadline").value_or(Stamp{});
  out.applied = m.time("applied").value_or(Stamp{});
  out.lateness = m.duration("lateness_ns");
  out.apply_time = m.duration("apply_ns");
  out.gated = m.flag("gated");
}

void read_members(const Members& m, SessionStatus::Schedule& out) {
  out = {m.text("state"), m.count("step"), m.count("steps"), m.flag("loop"), m.count("iteration")};
}

void read_members(const Members& m, SessionStatus::Next& out) {
  out = {m.text("phase"), m.optional_count("step"), m.time("deadline").value_or(Stamp{}),
         m.duration("in_ns")};
}

void read_members(const Members& m, SessionStatus::Lease& out) {
  out = {m.duration("lease_ns"), m.time("expires").value_or(Stamp{}), m.duration("remaining_ns")};
}

void read_members(const Members& m, SessionStatus::Confirm& out) {
  out = {m.time("deadline").value_or(Stamp{}), m.duration("remaining_ns")};
}

void read_members(const Members& m, Client& out) {
  out = {static_cast<std::uint32_t>(m.count("uid")), static_cast<std::int32_t>(m.integer("pid"))};
}

void read_members(const Members& m, TargetInfo& t) {
  t.kind = m.text("kind");
  t.name = m.text("name");
  t.interface = m.text("interface");
  t.direction = direction_from_string(m.text("direction")).value_or(Direction::kEgress);
  t.namespace_id = m.text("namespace");
  t.via = m.text("via");
  t.follow = m.flag("follow");
}

void read_members(const Members& m, SessionStatus& s) {
  s.interface = m.text("interface");
  s.target = m.object<TargetInfo>("target");
  s.index = m.integer("index");
  // An older jitterd did not say: it shaped egress only.
  if (const std::string text = m.text("direction"); !text.empty()) {
    const auto direction = direction_from_string(text);
    if (!direction)
      m.wrong(m.pointer("direction"), "\"egress\" or \"ingress\"", *m.get("direction"));
    s.direction = *direction;
  }
  s.set = m.text("set");
  s.match = m.strings("match");
  s.unshaped = m.strings("unshaped");
  s.offloads_off = m.flag("offloads_off");
  s.state = m.text("state");
  s.profile = m.text("profile");
  s.digest = m.text("digest");
  s.phase = m.text("phase");
  s.phase_since = m.time("phase_since");
  s.time_in_phase = m.duration("time_in_phase_ns");
  s.schedule = m.object<SessionStatus::Schedule>("schedule");
  s.next_transition = m.object<SessionStatus::Next>("next_transition");
  s.lease = m.object<SessionStatus::Lease>("lease");
  s.confirm = m.object<SessionStatus::Confirm>("confirm");
  s.counters = m.object<Counters>("counters");
  if (const Json* t = m.get("transitions")) {
    const Members tm(*t, m.pointer("transitions"), m.on_wrong_type());
    s.transitions = tm.count("count");
    s.missed = tm.count("missed");
    s.late_max = tm.duration("late_max_ns");
    s.recent = tm.array<TransitionRecord>("recent");
  }
  s.client = m.object<Client>("client").value_or(Client{});
}

void read_members(const Members& m, RootQdisc& out) {
  out = {m.text("kind"), m.text("handle"), m.text("owner")};
}

void read_members(const Members& m, InterfaceInfo& out) {
  out = {m.text("name"), m.integer("index"), m.flag("allowed"), m.flag("session"),
         m.object<RootQdisc>("root")};
}

void read_members(const Members& m, ScheduleSummary& out) {
  out = {m.count("steps"), m.flag("loop"), m.duration("duration_ns")};
}

void read_members(const Members& m, ProfileSummary& out) {
  out = {m.text("name"),        m.text("file"),      m.text("digest"),
         m.text("description"), m.strings("phases"), m.object<ScheduleSummary>("schedule")};
}

void read_members(const Members& m, InvalidProfile& out) {
  out = {m.text("file"), m.strings("errors")};
}

void read_members(const Members& m, ProfileListing& out) {
  out = {m.array<ProfileSummary>("profiles"), m.array<InvalidProfile>("invalid")};
}

void read_members(const Members& m, VersionInfo& out) {
  out = {m.text("version"), m.integer("protocol"), m.integer("pid"), m.text("kernel"),
         m.time("started")};
}

void read_members(const Members& m, CommandInfo& out) {
  out = {m.text("name"), m.text("summary"), m.flag("mutating")};
}

void read_members(const Members& m, SessionList& out) {
  out.sessions = m.array<SessionStatus>("sessions");
}
void read_members(const Members& m, InterfaceList& out) {
  out.interfaces = m.array<InterfaceInfo>("interfaces");
}
void read_members(const Members& m, CommandList& out) {
  out.commands = m.array<CommandInfo>("commands");
}
void read_members(const Members& m, Cleared& out) {
  out.cleared = m.strings("cleared");
}
void read_members(const Members& m, MetricsText& out) {
  out.text = m.text("text");
}

json lanes_result(const std::vector<SessionStatus>& sessions) {
  if (sessions.size() == 1) return sessions.front();
  return SessionList{sessions};
}

std::vector<SessionStatus> read_lanes_result(const json& result, const std::string& pointer,
                                             WrongType wrong_type) {
  if (result.is_object() && result.contains("sessions")) {
    return read_as<SessionList>(result, pointer, wrong_type).sessions;
  }
  return {read_as<SessionStatus>(result, pointer, wrong_type)};
}

void read_members(const Members& m, ClockReading& out) {
  out.received = m.time("received").value_or(Stamp{});
  out.replied = m.time("replied").value_or(Stamp{});
}
void read_members(const Members& m, StagedChange& out) {
  out.token = m.text("token");
  out.method = m.text("method");
  out.expires = m.time("expires").value_or(Stamp{});
}
void read_members(const Members& m, CommittedChange& out) {
  out.token = m.text("token");
  out.method = m.text("method");
  out.at = m.time("at").value_or(Stamp{});
  out.sessions = m.array<SessionStatus>("sessions");
  out.cleared = m.strings("cleared");
}
void read_members(const Members& m, AbortedChange& out) {
  out.token = m.text("token");
}

}  // namespace jitterd::protocol
