#include "fleet.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "control_client.hpp"
#include "event_merge.hpp"
#include "exit_codes.hpp"
#include "fleet_rollback.hpp"
#include "inventory.hpp"
#include "online_commands.hpp"
#include "replies.hpp"
#include "shaper/files.hpp"
#include "shaper/profile.hpp"
#include "text_table.hpp"

namespace jitterctl {
namespace {

using Json = nlohmann::json;
using jitterd::protocol::ErrorCode;
using namespace std::chrono_literals;

// `clock` exchanges per host: the shortest of five round trips is rarely one a scheduler delayed,
// and five over an open ssh connection cost milliseconds.
constexpr int kClockSamples = 5;
// How long before the deadline the commits go out, unless --lead says: the commits are sent one
// host after another, each a round trip (milliseconds over ssh on a LAN); a host that gets its
// commit after the deadline changes at once (jitterd takes a start up to 1 s in the past), late.
constexpr Nanoseconds kDefaultLead = 2s;
// How long after the deadline to look for every host's acknowledgement before saying it is
// missing, unless --ack-wait says.
constexpr Nanoseconds kDefaultAckWait = 10s;
constexpr auto kAckPoll = 100ms;
// The first look comes this long after the deadline, not at it: every host's daemon has its own
// work due at the deadline (its timer, or the kernel's gate and then its timer), on one event
// loop that a status request arriving then would only hold up, to find nothing yet. A host's
// transition is recorded a few ms after the deadline, so the first look mostly finds it.
constexpr auto kAckFirst = 20ms;

enum class Action { kApply, kSwitch, kClear, kStatus, kSubscribe };

// One host during a run.
struct Member {
  const FleetHost* host = nullptr;
  Json params;  // the change's params for this host (apply, switch, clear)
  std::optional<ControlClient> client;
  std::optional<jitterd::protocol::Error> error;  // its refusal, or why it failed
  std::string failure;                            // it could not be reached or broke the protocol
  std::optional<ClockSample> clock;
  std::string token;
  std::optional<Stamp> at;        // the deadline as the host's commit reply gave it
  std::optional<Stamp> accepted;  // the kernel's acknowledgement of the change
  bool gated = false;             // put in force by the host kernel's gate at the deadline
  std::vector<SessionStatus> sessions;
  // Its sessions on the interface before the change was staged (empty: unshaped), what a
  // rollback puts back.
  std::vector<SessionStatus> prior;
  enum class Rollback { kNone, kDone, kFailed } rollback = Rollback::kNone;
  std::string rollback_failure;         // why it could not be put back
  std::optional<Nanoseconds> restored;  // the client's CLOCK_REALTIME when its restore was done
};

Nanoseconds realtime_now() {
  return std::chrono::duration_cast<Nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
}

Inventory load_inventory(const std::string& path) {
  const std::string text = shaper::read_file_bounded(path, kMaxInventoryBytes);
  if (text.size() > kMaxInventoryBytes)
    throw FleetInputError(path + ": larger than 1 MiB; not an inventory");
  shaper::Diagnostics problems;
  Inventory inventory = read_inventory(text, problems);
  if (!problems.empty()) {
    std::string all;
    for (const auto& d : problems) all += (all.empty() ? "" : "\n") + d.in_file(path);
    throw FleetInputError(all);
  }
  return inventory;
}

// The params of the change for one host: its interface and target, and what the command line says.
Json change_params(Action action, const FleetHost& host, const std::vector<std::string>& operands,
                   const ParsedArgs& args) {
  Json params = {{"interface", host.interface}};
  if (host.target) params["target"] = host.target->to_json();
  if (action == Action::kApply) {
    const std::string profile =
        host.profile.empty() && operands.size() > 1 ? operands[1] : host.profile;
    if (profile.empty())
      throw FleetInputError("host " + host.name +
                            ": no profile; give one on the command line or a \"profile\" in the "
                            "inventory");
    params["profile"] = profile;
    if (auto phase = args.text("--phase")) params["phase"] = *phase;
  } else if (action == Action::kSwitch) {
    params["phase"] = operands[1];
  }
  return params;
}

// A call whose error reply is kept in the member (a refusal), and whose failure to get any reply
// is kept as its failure; true when it succeeded.
bool call(Member& m, const std::string& method, const Json& params, Json& result) {
  try {
    Reply reply = m.client->call(method, params);
    if (!reply.ok) {
      m.error = reply.error;
      return false;
    }
    result = std::move(reply.result);
    return true;
  } catch (const std::exception& e) {
    m.failure = e.what();
    m.client.reset();
    return false;
  }
}

// `call` on every member that `params_of` gives params for (nullopt: none), all requests in flight
// together: one round trip for the fleet, not one per host, so the last host's commit is not later
// than the first's by the sum of the others' (a control path through a shaped link of 200 ms made
// 16 sequential commits miss a 2 s lead). The replies are read as they come, whichever connection
// is readable first; `on_result` gets each success with the CLOCK_REALTIME at which its reply was
// seen (a clock exchange's fourth time stamp).
template <typename ParamsOf, typename OnResult>
void call_each(std::vector<Member>& members, const std::string& method, ParamsOf&& params_of,
               OnResult&& on_result) {
  std::vector<std::optional<ControlClient::Sent>> sent(members.size());
  const auto failed = [](Member& m, const std::exception& e) {
    m.failure = e.what();
    m.client.reset();
  };
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.client) continue;
    const std::optional<Json> params = params_of(m);
    if (!params) continue;
    try {
      sent[i] = m.client->send(method, *params);
    } catch (const std::exception& e) {
      failed(m, e);
    }
  }
  const auto receive = [&](std::size_t i) {
    Member& m = members[i];
    const Nanoseconds seen = realtime_now();
    try {
      Reply reply = m.client->receive(*std::exchange(sent[i], std::nullopt));
      if (!reply.ok) {
        m.error = reply.error;
        return;
      }
      on_result(m, reply.result, seen);
    } catch (const std::exception& e) {
      failed(m, e);
    }
  };
  for (;;) {
    std::vector<std::size_t> waiting;
    std::vector<pollfd> fds;
    std::optional<ControlClient::Clock::time_point> first_deadline;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (!sent[i]) continue;
      if (!members[i].client) {
        sent[i].reset();
        continue;
      }
      if (members[i].client->line_buffered()) {
        receive(i);
        continue;
      }
      waiting.push_back(i);
      fds.push_back({members[i].client->fd(), POLLIN, 0});
      if (!first_deadline || sent[i]->deadline < *first_deadline)
        first_deadline = sent[i]->deadline;
    }
    if (waiting.empty()) return;
    const int interrupt = members[waiting.front()].client->interrupt_fd();
    if (interrupt >= 0) fds.push_back({interrupt, POLLIN, 0});
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(*first_deadline - ControlClient::Clock::now());
    const int ready =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (ready == -1 && errno == EINTR) continue;
    shaper::check_syscall(ready, "poll", "the fleet's connections");
    if (interrupt >= 0 && fds.back().revents != 0) throw Interrupted();
    for (std::size_t k = 0; k < waiting.size(); ++k) {
      // Readable (or closed); with nothing readable by the first deadline, that request's receive
      // reports its timeout.
      if (fds[k].revents != 0 || (ready <= 0 && sent[waiting[k]]->deadline == *first_deadline))
        receive(waiting[k]);
    }
  }
}

// Where `m` is in `members` (what call_each's callbacks are given is an element of it).
std::size_t index_of(const std::vector<Member>& members, const Member& m) {
  return static_cast<std::size_t>(&m - members.data());
}

// Runs `read` on a result; a result jitterd got wrong (a ProtocolError) is that host's failure.
template <typename Read>
void read_result(Member& m, Read&& read) {
  try {
    read();
  } catch (const std::exception& e) {
    m.failure = e.what();
  }
}

// The ssh and kubectl commands for every host of `inventory`; a bad $JITTERD_K8S_NAMESPACE stops
// the run before any host is contacted when the inventory has a k8s:// host. A note about a pod
// choice (a rolling update on a node) goes to stderr, naming the host by its URL.
void use_remote_commands(const Inventory& inventory, const Invocation& inv, ClientOptions& base) {
  if (inv.remote_commands) base.commands = *inv.remote_commands;
  const bool k8s = std::any_of(inventory.hosts.begin(), inventory.hosts.end(), [](const auto& h) {
    return h.remote && h.remote->transport == Transport::kKubernetes;
  });
  if (k8s) check_k8s_namespace(base.commands.k8s_namespace);
  base.note = [&err = inv.err](const std::string& line) { err << "jitterctl: " << line << '\n'; };
}

void connect_all(std::vector<Member>& members, const ClientOptions& base) {
  for (Member& m : members) {
    ClientOptions options = base;
    options.remote = m.host->remote;
    if (!m.host->remote) options.socket_path = m.host->socket;
    try {
      m.client.emplace(ControlClient::connect(options));
    } catch (const std::exception& e) {
      m.failure = e.what();
    }
  }
}

// kClockSamples rounds, each a `clock` exchange with every host at once: a host's sample is its
// own request's send (t0) and its own reply's arrival (t3), whatever the others do.
void estimate_clocks(std::vector<Member>& members) {
  std::vector<std::vector<ClockSample>> samples(members.size());
  std::vector<Nanoseconds> sent_at(members.size());
  for (int round = 0; round < kClockSamples; ++round) {
    call_each(
        members, "clock",
        [&](const Member& m) -> std::optional<Json> {
          if (!m.failure.empty()) return std::nullopt;
          sent_at[index_of(members, m)] = realtime_now();
          return Json::object();
        },
        [&](Member& m, const Json& result, Nanoseconds t3) {
          read_result(m, [&] {
            const ClockReading r = read_clock_result(result);
            samples[index_of(members, m)].push_back(clock_sample(
                sent_at[index_of(members, m)], r.received.realtime, r.replied.realtime, t3));
          });
        });
  }
  for (Member& m : members) m.clock = best_clock_sample(samples[index_of(members, m)]);
}

bool usable(const Member& m) {
  return m.client && !m.error && m.failure.empty();
}

// A `status` answered not-found: no session on the interface, an unshaped lane (or no interface at
// all, which a stage then refuses), not a refusal.
void forgive_not_found(std::vector<Member>& members) {
  for (Member& m : members) {
    if (m.error && m.error->code == ErrorCode::kNotFound) m.error.reset();
  }
}

// The params of a `status` of the host's lane, for a member that can be asked (nullopt otherwise).
std::optional<Json> status_params(const Member& m) {
  if (!usable(m)) return std::nullopt;
  Json params = {{"interface", m.host->interface}};
  if (m.host->target) params["target"] = m.host->target->to_json();
  return params;
}

// The protocol method of a change (apply, switch or clear).
const char* method_of(Action action) {
  static constexpr const char* kMethods[] = {"apply", "switch", "clear"};
  return kMethods[static_cast<int>(action)];
}

// Each host's sessions on its interface before anything is staged, for a rollback. A host with
// none answers not-found: an unshaped interface (or none at all, which its stage then refuses).
void record_prior(std::vector<Member>& members) {
  call_each(members, "status", status_params, [](Member& m, const Json& result, Nanoseconds) {
    read_result(m, [&] { m.prior = read_status_result(result); });
  });
  forgive_not_found(members);
}

// Stages the change on every host; true when every one is ready.
bool stage_all(std::vector<Member>& members, Action action) {
  call_each(
      members, "stage",
      [&](const Member& m) -> std::optional<Json> {
        if (!usable(m)) return std::nullopt;
        return Json{{"method", method_of(action)}, {"params", m.params}};
      },
      [](Member& m, const Json& result, Nanoseconds) {
        read_result(m, [&] { m.token = read_stage_result(result).token; });
      });
  return std::all_of(members.begin(), members.end(),
                     [](const Member& m) { return !m.token.empty(); });
}

void abort_all(std::vector<Member>& members) {
  call_each(
      members, "abort",
      [](const Member& m) -> std::optional<Json> {
        if (m.token.empty()) return std::nullopt;
        return Json{{"token", m.token}};
      },
      [](Member&, const Json&, Nanoseconds) {});
}

void commit_all(std::vector<Member>& members, const std::string& at) {
  call_each(
      members, "commit",
      [&](const Member& m) -> std::optional<Json> {
        return Json{{"token", m.token}, {"at", at}};
      },
      [](Member& m, const Json& result, Nanoseconds) {
        read_result(m, [&] {
          const CommittedChange done = read_commit_result(result);
          m.at = done.at;
          m.sessions = done.sessions;
        });
      });
}

// The kernel's acknowledgement of the change committed for `at`: of each lane, its first
// transition due at or after the deadline (the host's own clock, so exact); the last of the lanes.
// Gated when every lane's was put in force by the kernel's gate (its applied time the deadline).
struct Acknowledgement {
  Stamp applied;
  bool gated = true;
};
std::optional<Acknowledgement> acknowledgement(const std::vector<SessionStatus>& sessions,
                                               const Stamp& at) {
  std::optional<Acknowledgement> last;
  bool gated = true;
  for (const SessionStatus& s : sessions) {
    for (const TransitionRecord& r : s.recent) {
      if (r.deadline.monotonic < at.monotonic) continue;
      gated = gated && r.gated;
      if (!last || r.applied.realtime > last->applied.realtime) last = Acknowledgement{r.applied};
      break;
    }
  }
  if (last) last->gated = gated;
  return last;
}

// Polls every host that committed until each reported the transition of its change, or `wait`
// after the deadline; a host that did not is marked failed, saying what was awaited.
void collect_acknowledgements(std::vector<Member>& members, Nanoseconds deadline,
                              Nanoseconds wait) {
  std::this_thread::sleep_for(std::max(Nanoseconds(0), deadline + kAckFirst - realtime_now()));
  const auto give_up =
      std::chrono::steady_clock::now() + std::max(Nanoseconds(0), wait - Nanoseconds(kAckFirst));
  for (;;) {
    call_each(
        members, "status",
        [](const Member& m) -> std::optional<Json> {
          if (m.accepted || !m.at) return std::nullopt;
          return status_params(m);
        },
        [](Member& m, const Json& result, Nanoseconds) {
          read_result(m, [&] {
            if (auto ack = acknowledgement(read_status_result(result), *m.at)) {
              m.accepted = ack->applied;
              m.gated = ack->gated;
            }
          });
        });
    if (std::none_of(members.begin(), members.end(),
                     [](const Member& m) { return m.at && !m.accepted && usable(m); }))
      return;
    if (std::chrono::steady_clock::now() > give_up) break;
    std::this_thread::sleep_for(kAckPoll);
  }
  for (Member& m : members) {
    if (m.accepted || !m.at || !usable(m)) continue;
    m.failure = "its commit was answered, but within " + format_human_duration(wait) +
                " of the deadline " + shaper::format_utc_timestamp(m.at->realtime) +
                " its status reported no transition due at or after it (the kernel may not have "
                "taken the change; check its log, or `jitterctl --host ... status --interface " +
                m.host->interface + "`; on a loaded host, a longer --ack-wait)";
  }
}

// ---- Rollback: the hosts that committed put back as they were ----------------------------------

std::string problem_of(const Member& m);

// One request of a rollback; its refusal or failure in words ("" when it succeeded). Kept apart
// from the member's `error` and `failure`, which say what went wrong with the change itself.
std::string rollback_call(Member& m, const std::string& method, const Json& params, Json& result) {
  try {
    Reply reply = m.client->call(method, params);
    if (!reply.ok) {
      return method + ": " + reply.error.message +
             (reply.error.hint.empty() ? "" : " (" + reply.error.hint + ")");
    }
    result = std::move(reply.result);
    return "";
  } catch (const std::exception& e) {
    m.client.reset();
    return method + ": " + e.what();
  }
}

// Stages the host's restore steps; their tokens, or the first problem (the tokens staged before
// it are aborted).
std::string stage_restore(Member& m, const RestorePlan& plan, std::vector<std::string>& tokens) {
  for (const RestoreStep& step : plan.steps) {
    Json result;
    std::string why =
        rollback_call(m, "stage", {{"method", step.method}, {"params", step.params}}, result);
    if (why.empty()) {
      try {
        tokens.push_back(read_stage_result(result).token);
      } catch (const std::exception& e) {
        why = std::string("stage: ") + e.what();
      }
    }
    if (!why.empty()) {
      for (const std::string& token : tokens) {
        if (m.client) rollback_call(m, "abort", {{"token", token}}, result);
      }
      tokens.clear();
      return why;
    }
  }
  return "";
}

// Every host that committed the change is put back to what `record_prior` read, as a second
// two-phase change: each host's restore is staged, then committed "now" (after the change's own
// deadline, which has passed, so it lands after the change whatever each host's scheduler holds).
// Per host, not all or nothing: a host that cannot be restored does not keep the others changed.
void rollback_all(std::vector<Member>& members, Action action) {
  std::vector<std::vector<std::string>> tokens(members.size());
  std::vector<RestorePlan> plans(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.at) continue;  // it never committed: it holds what it held
    m.rollback = Member::Rollback::kFailed;
    if (!m.client) {
      m.rollback_failure = "the connection was lost after its commit: " + problem_of(m);
      continue;
    }
    plans[i] = restore_plan(method_of(action), m.params, m.prior);
    m.rollback_failure = plans[i].impossible;
    if (m.rollback_failure.empty()) m.rollback_failure = stage_restore(m, plans[i], tokens[i]);
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.at || !m.rollback_failure.empty()) continue;
    Json result;
    for (const std::string& token : tokens[i]) {
      if (m.rollback_failure.empty() && m.client)
        m.rollback_failure = rollback_call(m, "commit", {{"token", token}, {"at", "now"}}, result);
    }
    for (const Json& lane : plans[i].resume) {
      if (m.rollback_failure.empty() && m.client)
        m.rollback_failure = rollback_call(m, "resume", lane, result);
    }
    if (m.rollback_failure.empty()) {
      m.rollback = Member::Rollback::kDone;
      m.restored = realtime_now();
    }
  }
}

// ---- What the run says -------------------------------------------------------------------------

std::string signed_duration(Nanoseconds d) {
  return (d < Nanoseconds(0) ? "-" : "+") + format_human_duration(d < Nanoseconds(0) ? -d : d);
}

std::string problem_of(const Member& m) {
  if (!m.failure.empty()) return m.failure;
  if (!m.error) return "";
  return m.error->message + (m.error->hint.empty() ? "" : " (" + m.error->hint + ")");
}

Json member_json(const Member& m) {
  Json j = {{"name", m.host->name}, {"interface", m.host->interface}, {"staged", !m.token.empty()}};
  if (m.clock) {
    j["offset_ns"] = m.clock->offset.count();
    j["round_trip_ns"] = m.clock->round_trip.count();
  }
  if (m.error) j["error"] = *m.error;
  if (!m.failure.empty()) j["failure"] = m.failure;
  if (m.at) j["deadline_realtime_ns"] = m.at->realtime.count();
  if (m.rollback != Member::Rollback::kNone)
    j["rollback"] = m.rollback == Member::Rollback::kDone ? "done" : "failed";
  if (!m.rollback_failure.empty()) j["rollback_failure"] = m.rollback_failure;
  if (m.restored) j["restored_realtime_ns"] = m.restored->count();
  if (m.accepted && m.at) {
    j["accepted_realtime_ns"] = m.accepted->realtime.count();
    // By the host's CLOCK_MONOTONIC, which its timer ran on: exact, where the realtime of the
    // deadline is the host's estimate from it.
    j["late_ns"] = (m.accepted->monotonic - m.at->monotonic).count();
    if (m.gated) j["gated"] = true;
  }
  return j;
}

// The exit code of a run where not every host did its part: a refusal's own code, else 4.
int failure_exit_code(const std::vector<Member>& members) {
  for (const Member& m : members) {
    if (m.error) return exit_code_for_error(m.error->code);
  }
  return kExitEnvironment;
}

void print_members(const std::vector<Member>& members, bool changed, std::ostream& out) {
  TextTable table({{"host"},
                   {"interface"},
                   {"state"},
                   {"clock offset", true},
                   {"round trip", true},
                   {"kernel took it (UTC)"},
                   {"after deadline", true}});
  for (const Member& m : members) {
    std::string state = changed ? (m.accepted ? (m.gated ? "changed (gate)" : "changed")
                                   : m.at     ? "committed"
                                              : "failed")
                                : (m.token.empty() ? "refused" : "ready, aborted");
    if (m.error) {
      state = (changed ? "failed: " : "refused: ") + problem_of(m);
    } else if (!m.failure.empty()) {
      state = (changed || !m.token.empty() ? "failed: " : "unreachable: ") + m.failure;
    }
    if (m.rollback == Member::Rollback::kDone) state = "rolled back";
    if (m.rollback == Member::Rollback::kFailed)
      state = "ROLLBACK FAILED, keeps the change: " + m.rollback_failure;
    table.add_row(
        {m.host->name, m.host->interface, state, m.clock ? signed_duration(m.clock->offset) : "",
         m.clock ? format_human_duration(m.clock->round_trip) : "",
         m.accepted ? shaper::format_utc_timestamp(m.accepted->realtime) : "",
         m.accepted && m.at ? signed_duration(m.accepted->monotonic - m.at->monotonic) : ""});
  }
  table.print(out);
}

int report_change(const std::vector<Member>& members, bool committed, Nanoseconds deadline,
                  const Invocation& inv) {
  std::vector<Nanoseconds> taken;
  std::vector<Nanoseconds> taken_by_client_clock;
  bool all = true;
  for (const Member& m : members) {
    all = all && m.accepted.has_value();
    if (!m.accepted) continue;
    taken.push_back(m.accepted->realtime);
    if (m.clock) taken_by_client_clock.push_back(m.accepted->realtime - m.clock->offset);
  }
  const auto skew = skew_of(taken);
  const auto count_rollbacks = [&](Member::Rollback r) {
    return std::count_if(members.begin(), members.end(),
                         [r](const Member& m) { return m.rollback == r; });
  };
  const auto rolled_back = count_rollbacks(Member::Rollback::kDone);
  const auto not_restored = count_rollbacks(Member::Rollback::kFailed);
  if (inv.args.has("--json")) {
    Json j = {{"committed", committed},
              {"rolled_back", rolled_back + not_restored > 0},
              {"hosts", Json::array()}};
    if (committed) j["deadline_realtime_ns"] = deadline.count();
    if (skew) j["skew_ns"] = skew->count();
    if (auto corrected = skew_of(taken_by_client_clock);
        corrected && taken_by_client_clock.size() == taken.size())
      j["skew_by_offsets_ns"] = corrected->count();
    for (const Member& m : members) j["hosts"].push_back(member_json(m));
    inv.out << j.dump(2) << '\n';
  } else {
    print_members(members, committed, inv.out);
    if (!committed) {
      inv.out << "no host changed: "
              << (members.size() - static_cast<std::size_t>(std::count_if(
                                       members.begin(), members.end(),
                                       [](const Member& m) { return m.token.empty(); })))
              << " of " << members.size() << " were ready; their staged changes were aborted\n";
    } else if (rolled_back > 0 || not_restored > 0) {
      inv.out << "not every host took the change: " << rolled_back << " host(s) rolled back to "
              << "what they held before" << (not_restored ? ", " : "")
              << (not_restored ? std::to_string(not_restored) + " could not be (above)" : "")
              << "\n";
    } else if (skew) {
      inv.out << "deadline " << shaper::format_utc_timestamp(deadline) << ", skew "
              << format_human_duration(*skew) << " (the last kernel to take it minus the first, "
              << taken.size() << " of " << members.size() << " hosts, by their own clocks)\n";
    }
  }
  if (committed && all) return kExitOk;
  for (const Member& m : members) {
    if (!problem_of(m).empty())
      inv.err << "jitterctl fleet: " << m.host->name << ": " << problem_of(m) << '\n';
    if (m.rollback == Member::Rollback::kFailed)
      inv.err << "jitterctl fleet: " << m.host->name
              << ": rollback failed, it keeps the change: " << m.rollback_failure << '\n';
  }
  return not_restored > 0 ? kExitFleetNotWhole : failure_exit_code(members);
}

int report_status(std::vector<Member>& members, const Invocation& inv) {
  Json all = {{"hosts", Json::array()}};
  TextTable table(
      {{"host"}, {"interface"}, {"profile"}, {"phase"}, {"since (UTC)"}, {"clock offset", true}});
  bool ok = true;
  std::vector<std::optional<Json>> results(members.size());
  call_each(members, "status", status_params, [&](Member& m, const Json& result, Nanoseconds) {
    results[index_of(members, m)] = result;
  });
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    Json j = member_json(m);
    if (results[i]) j["sessions"] = (*results[i])["sessions"];
    all["hosts"].push_back(j);
    const std::string offset = m.clock ? signed_duration(m.clock->offset) : "";
    if (!results[i]) {
      ok = false;
      table.add_row({m.host->name, m.host->interface, "", problem_of(m), "", offset});
      continue;
    }
    for (const SessionStatus& s : read_status_result(*results[i])) {
      table.add_row({m.host->name, s.interface, s.profile, s.phase,
                     s.phase_since ? shaper::format_utc_timestamp(s.phase_since->realtime) : "",
                     offset});
    }
  }
  if (inv.args.has("--json")) {
    inv.out << all.dump(2) << '\n';
  } else {
    table.print(inv.out);
  }
  return ok ? kExitOk : failure_exit_code(members);
}

// ---- subscribe: every host's events in one stream ----------------------------------------------

// How long an event may be held for the other hosts' streams to pass its time, unless
// --reorder-window says: a fleet switch's events reach the client within a few round trips of one
// another (tens of milliseconds over ssh in the bed, one CPU for four hosts and their sshds), and a
// harness reading the stream live should not wait much longer than that for a quiet host.
constexpr Nanoseconds kDefaultReorderWindow = 500ms;

Nanoseconds steady_now() {
  return std::chrono::duration_cast<Nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
}

// Events from the hosts' threads to the printing one, merged in the order of their time on the
// client's clock (EventMerge), and the hosts' failures.
class EventQueue {
 public:
  EventQueue(std::vector<std::optional<Nanoseconds>> offsets, Nanoseconds window)
      : offsets_(std::move(offsets)), merge_(offsets_.size(), window) {}
  void push(std::size_t host, Json event) {
    const std::lock_guard lock(mutex_);
    const Nanoseconds time = client_time_of(event, offsets_[host], realtime_now());
    merge_.push(host, time, steady_now(), std::move(event));
    ready_.notify_one();
  }
  void fail(const std::string& host, const std::string& why) {
    const std::lock_guard lock(mutex_);
    failures_.push_back(host + ": " + why);
    ready_.notify_one();
  }
  // A host's stream ended (`follower`: its thread ended; otherwise it never had one).
  void ended(std::size_t host, bool follower) {
    const std::lock_guard lock(mutex_);
    merge_.end(host);
    if (follower) ++ended_;
    ready_.notify_one();
  }
  // The next event, or nullopt once `followers` threads have ended and nothing is left.
  std::optional<EventMerge::Entry> next(std::size_t followers) {
    std::unique_lock lock(mutex_);
    for (;;) {
      // Once every stream ended, every held event may go (merge_ knows they all ended).
      if (auto entry = merge_.pop_due(steady_now())) return entry;
      if (merge_.empty() && ended_ == followers) return std::nullopt;
      if (const auto due = merge_.next_due()) {
        ready_.wait_until(
            lock, std::chrono::steady_clock::time_point(
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(*due)));
      } else {
        ready_.wait(lock);
      }
    }
  }
  std::vector<std::string> failures() const {
    const std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<std::optional<Nanoseconds>> offsets_;  // each host's clock minus the client's
  EventMerge merge_;
  std::vector<std::string> failures_;
  std::size_t ended_ = 0;
};

// One host's subscription until `stop`, an interrupt or the connection's end. A host with a target
// gets every event: its sessions are named by the host side's interface, not the inventory's.
void follow(std::size_t host, Member& m, EventQueue& queue, const std::atomic<bool>& stop) {
  try {
    Json params = Json::object();
    if (!m.host->target) params["interfaces"] = Json::array({m.host->interface});
    const Reply reply = m.client->call("subscribe", params);
    if (!reply.ok) {
      queue.fail(m.host->name, reply.error.message);
    } else {
      while (!stop) {
        // Short waits, so that the thread sees `stop` when another host's events were the last.
        if (auto event = m.client->next_event(std::chrono::steady_clock::now() + 200ms))
          queue.push(host, std::move(*event));
      }
    }
  } catch (const Interrupted&) {
  } catch (const std::exception& e) {
    queue.fail(m.host->name, e.what());
  }
  queue.ended(host, true);
}

int run_subscribe(std::vector<Member>& members, ClientOptions base, const Invocation& inv) {
  // Before the threads start, so that they inherit the blocked signals: SIGINT and SIGTERM make
  // every wait throw Interrupted instead of killing the process.
  const InterruptSignals signals;
  base.interrupt_fd = signals.fd();
  connect_all(members, base);
  // Each host's offset moves its events' times onto this clock.
  estimate_clocks(members);
  std::vector<std::optional<Nanoseconds>> offsets;
  for (const Member& m : members)
    offsets.push_back(m.clock ? std::optional(m.clock->offset) : std::nullopt);
  EventQueue queue(std::move(offsets),
                   inv.args.duration("--reorder-window").value_or(kDefaultReorderWindow));
  std::atomic<bool> stop = false;
  std::vector<std::thread> followers;
  for (std::size_t h = 0; h < members.size(); ++h) {
    Member& m = members[h];
    if (usable(m)) {
      followers.emplace_back([h, &m, &queue, &stop] { follow(h, m, queue, stop); });
    } else {
      queue.fail(m.host->name, problem_of(m));
      queue.ended(h, false);
    }
  }
  const std::optional<std::uint64_t> count = inv.args.whole_number("--count");
  std::uint64_t seen = 0;
  while (!count || seen < *count) {
    auto next = queue.next(followers.size());
    if (!next) break;
    ++seen;
    const std::string& host = members[next->host].host->name;
    // Flushed per line, as `subscribe`: a pipe should see events live.
    if (inv.args.has("--json")) {
      next->event["host"] = host;
      next->event["at_client_ns"] = next->time.count();
      if (next->late) next->event["late"] = true;
      inv.out << next->event.dump() << std::endl;
    } else {
      inv.out << host << "  " << format_event_line(read_event(next->event))
              << (next->late ? "  (late: after a later event)" : "") << std::endl;
    }
  }
  stop = true;
  for (auto& t : followers) t.join();
  const auto failures = queue.failures();
  for (const auto& f : failures) inv.err << "jitterctl fleet: " << f << '\n';
  return failures.empty() ? kExitOk : kExitEnvironment;
}

Action action_of(const std::vector<std::string>& words) {
  static constexpr std::pair<const char*, Action> kActions[] = {{"apply", Action::kApply},
                                                                {"switch", Action::kSwitch},
                                                                {"clear", Action::kClear},
                                                                {"status", Action::kStatus},
                                                                {"subscribe", Action::kSubscribe}};
  if (words.empty()) throw UsageError("which action? apply, switch, clear, status or subscribe");
  for (const auto& [name, action] : kActions) {
    if (words[0] != name) continue;
    if (action == Action::kSwitch && words.size() != 2) throw UsageError("switch needs a PHASE");
    if ((action == Action::kClear || action == Action::kStatus || action == Action::kSubscribe) &&
        words.size() != 1)
      throw UsageError(std::string(name) + " takes no operand");
    return action;
  }
  throw UsageError("\"" + words[0] +
                   "\" is not a fleet action; give apply, switch, clear, status, subscribe or "
                   "validate");
}

int run_fleet(const Invocation& inv) {
  const std::vector<std::string>& words = inv.args.operands(2);
  const Action action = action_of(words);
  if (inv.args.has("--host") || inv.args.has("--socket"))
    throw UsageError("the inventory names the hosts; drop --host and --socket");
  const auto path = inv.args.text("--inventory");
  if (!path) throw UsageError("which hosts? give --inventory FILE");
  const Inventory inventory = load_inventory(*path);
  ClientOptions base;
  base.timeout = inv.args.duration("--timeout").value_or(kDefaultTimeout);
  use_remote_commands(inventory, inv, base);
  std::vector<Member> members(inventory.hosts.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    members[i].host = &inventory.hosts[i];
    // Every host's params before any connection: a host without a profile stops the run here.
    if (action != Action::kStatus && action != Action::kSubscribe)
      members[i].params = change_params(action, inventory.hosts[i], words, inv.args);
  }
  if (action == Action::kSubscribe) return run_subscribe(members, base, inv);
  connect_all(members, base);
  estimate_clocks(members);
  if (action == Action::kStatus) return report_status(members, inv);

  record_prior(members);
  if (!stage_all(members, action)) {
    abort_all(members);
    return report_change(members, false, Nanoseconds(0), inv);
  }
  const bool now = action == Action::kClear;
  const Nanoseconds deadline =
      realtime_now() + (now ? Nanoseconds(0) : inv.args.duration("--lead").value_or(kDefaultLead));
  commit_all(members, now ? "now" : shaper::format_utc_timestamp(deadline));
  if (now) {
    // A clear is done when its commit is read: the commit reply's time is the acknowledgement.
    for (Member& m : members) m.accepted = m.at;
  } else {
    collect_acknowledgements(members, deadline,
                             inv.args.duration("--ack-wait").value_or(kDefaultAckWait));
  }
  // "If any host refuses, no host commits": a host that failed at its commit (or whose kernel did
  // not take the change) means every host that committed is put back.
  if (!std::all_of(members.begin(), members.end(),
                   [](const Member& m) { return m.accepted.has_value(); }))
    rollback_all(members, action);
  return report_change(members, true, deadline, inv);
}

}  // namespace

ClockSample clock_sample(Nanoseconds t0, Nanoseconds t1, Nanoseconds t2, Nanoseconds t3) {
  ClockSample s;
  s.offset = ((t1 - t0) + (t2 - t3)) / 2;
  s.round_trip = (t3 - t0) - (t2 - t1);
  return s;
}

std::optional<ClockSample> best_clock_sample(const std::vector<ClockSample>& samples) {
  if (samples.empty()) return std::nullopt;
  return *std::min_element(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return a.round_trip < b.round_trip;
  });
}

std::optional<Nanoseconds> skew_of(const std::vector<Nanoseconds>& times) {
  if (times.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
  return *hi - *lo;
}

std::optional<PairMode> pair_mode_from_name(std::string_view name) {
  if (name == "all") return PairMode::kAll;
  if (name == "ring") return PairMode::kRing;
  return std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> probe_pairs(std::size_t hosts, PairMode mode) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (hosts < 2) return out;
  if (mode == PairMode::kRing) {
    // Two hosts: the ring's two edges are the pair both ways, not the same pair twice.
    for (std::size_t i = 0; i < hosts; ++i) out.emplace_back(i, (i + 1) % hosts);
    return out;
  }
  for (std::size_t i = 0; i < hosts; ++i) {
    for (std::size_t j = 0; j < hosts; ++j) {
      if (i != j) out.emplace_back(i, j);
    }
  }
  return out;
}

// ---- fleet validate: the probes -----------------------------------------------------------------

namespace {

// What a `probe` may wait for the last reply: a probe delayed longer than this is counted lost.
constexpr Nanoseconds kProbeWait = 2s;
// jitterd's limits of one probe request (daemon/prober.hpp; docs/protocol.md).
constexpr std::size_t kMaxProbeTargets = 16;
constexpr Nanoseconds kMaxProbeRequest = 120s;
// Beyond the probes' own duration, how long the client waits for the reply (ssh, a busy host).
constexpr Nanoseconds kProbeReplyMargin = 30s;

// `address` as the IPv4 dotted quad jitterd's probe takes: itself, or what the name resolves to
// here (the first IPv4 address).
std::string ipv4_of(const std::string& host_name, const std::string& address) {
  in_addr parsed{};
  if (::inet_pton(AF_INET, address.c_str(), &parsed) == 1) return address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(address.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found) {
    throw FleetInputError("host " + host_name + ": probe_address \"" + address +
                          "\" does not resolve to an IPv4 address here (" + ::gai_strerror(rc) +
                          "); give \"probe_address\" in the inventory");
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
  ::freeaddrinfo(found);
  return text;
}

LaneState lane_of(const FleetHost& host, const std::vector<SessionStatus>& sessions) {
  LaneState lane;
  lane.host = host.name;
  for (const SessionStatus& s : sessions) {
    if (s.direction != Direction::kEgress || !s.set.empty()) continue;
    lane.profile = s.profile;
    lane.phase = s.phase;
    lane.digest = s.digest;
    lane.held = !s.schedule || s.schedule->state == "paused";
    break;
  }
  return lane;
}

// One host's probe of its pairs' addresses; the pairs get their series.
void probe_from(Member& m, const std::vector<std::size_t>& pair_indexes,
                std::vector<PairProbes>& pairs, const FleetProbeOptions& options) {
  Json addresses = Json::array();
  for (std::size_t i : pair_indexes) addresses.push_back(pairs[i].address);
  const Json params = {{"addresses", addresses},
                       {"count", options.count},
                       {"interval", options.interval.count()},
                       {"wait", kProbeWait.count()}};
  Json result;
  if (!call(m, "probe", params, result)) return;
  read_result(m, [&] {
    const Json& targets = result.at("targets");
    if (targets.size() != pair_indexes.size())
      throw std::runtime_error("probe answered " + std::to_string(targets.size()) +
                               " targets for " + std::to_string(pair_indexes.size()));
    for (std::size_t k = 0; k < pair_indexes.size(); ++k) {
      PairProbes& p = pairs[pair_indexes[k]];
      p.interval = options.interval;
      for (const Json& t : targets[k].at("sent_realtime_ns"))
        p.sent.emplace_back(t.get<std::int64_t>());
      for (const Json& r : targets[k].at("rtt_ns")) {
        p.rtt.push_back(r.is_null() ? std::nullopt
                                    : std::optional<Nanoseconds>(r.get<std::int64_t>()));
      }
      if (p.sent.size() != p.rtt.size())
        throw std::runtime_error("probe answered unequal sent_realtime_ns and rtt_ns");
    }
  });
}

// Every host's probes of its pairs, at once (one thread per host, each on its own connection);
// the series are appended to `pairs`.
void probe_round(std::vector<Member>& members,
                 const std::vector<std::pair<std::size_t, std::size_t>>& pair_list,
                 std::vector<PairProbes>& pairs, const FleetProbeOptions& options) {
  std::vector<std::thread> threads;
  for (std::size_t h = 0; h < members.size(); ++h) {
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < pair_list.size(); ++i) {
      if (pair_list[i].first == h) mine.push_back(i);
    }
    if (mine.empty() || !usable(members[h])) continue;
    threads.emplace_back([&, h, mine] { probe_from(members[h], mine, pairs, options); });
  }
  for (auto& t : threads) t.join();
}

// Every host to `phase` at one deadline, as `fleet switch` does; throws when a host refuses or
// does not take it (the hosts that staged are aborted).
void switch_every_host(std::vector<Member>& members, const std::string& phase,
                       const FleetProbeOptions& options) {
  for (Member& m : members) {
    m.params = {{"interface", m.host->interface}, {"phase", phase}};
    if (m.host->target) m.params["target"] = m.host->target->to_json();
    m.token.clear();
    m.at.reset();
    m.accepted.reset();
  }
  std::string why;
  if (!stage_all(members, Action::kSwitch)) {
    abort_all(members);
    why = "refused";
  } else {
    const Nanoseconds deadline = realtime_now() + options.lead;
    commit_all(members, shaper::format_utc_timestamp(deadline));
    collect_acknowledgements(members, deadline, options.ack_wait);
    for (const Member& m : members) {
      if (!m.accepted && why.empty()) why = "not taken";
    }
  }
  if (why.empty()) return;
  std::string hosts;
  for (const Member& m : members) {
    if (!m.accepted) hosts += "; " + m.host->name + ": " + problem_of(m);
  }
  throw std::runtime_error("switching every host to phase " + phase + ": " + why + hosts);
}

// The judged probes in `blocks` blocks, each after a block of calibration probes through
// `options.calibration_phase`; every host ends in the phase it held (docs/validation.md,
// "Fleets": load that changes during the run meets calibration and measurement alike).
void probe_interleaved(std::vector<Member>& members,
                       const std::vector<std::pair<std::size_t, std::size_t>>& pair_list,
                       FleetProbeRun& run, const FleetProbeOptions& options) {
  std::string held;
  for (const LaneState& lane : run.lanes) {
    if (lane.profile.empty() || !lane.held || (!held.empty() && lane.phase != held))
      throw FleetInputError(
          "--calibration-phase switches every host between it and the phase they hold: give "
          "every host a session holding one phase of the same name (" +
          lane.host + (lane.profile.empty() ? " has none" : " holds " + lane.phase) + ")");
    held = lane.phase;
  }
  run.calibration_phase = options.calibration_phase;
  run.calibration = run.pairs;  // the same pairs, no probes yet
  FleetProbeOptions block = options;
  block.count = std::max<std::uint32_t>(1, options.count / options.blocks);
  for (std::uint32_t b = 0; b < options.blocks; ++b) {
    switch_every_host(members, options.calibration_phase, options);
    probe_round(members, pair_list, run.calibration, block);
    switch_every_host(members, held, options);
    probe_round(members, pair_list, run.pairs, block);
  }
}

}  // namespace

FleetProbeRun probe_fleet(const Invocation& inv, const FleetProbeOptions& options) {
  if (inv.args.has("--host") || inv.args.has("--socket"))
    throw UsageError("the inventory names the hosts; drop --host and --socket");
  const auto path = inv.args.text("--inventory");
  if (!path) throw UsageError("which hosts? give --inventory FILE");
  const Inventory inventory = load_inventory(*path);
  const auto pair_list = probe_pairs(inventory.hosts.size(), options.pairs);
  if (pair_list.empty()) throw FleetInputError(*path + ": one host has no pairs to probe");
  // jitterd's probe takes at most 16 addresses and 120 s a request (docs/protocol.md), and each
  // host sends one.
  if (options.pairs == PairMode::kAll && inventory.hosts.size() > kMaxProbeTargets + 1)
    throw UsageError("--pairs all has each of " + std::to_string(inventory.hosts.size()) +
                     " hosts probe " + std::to_string(inventory.hosts.size() - 1) +
                     " others, more than the 16 a probe takes; give --pairs ring");
  if (options.interval < 1ms || options.interval > 10s)
    throw UsageError("--interval " + shaper::format_duration(options.interval) +
                     ": give 1ms to 10s");
  if (options.interval * options.count + kProbeWait > kMaxProbeRequest)
    throw UsageError("--count x --interval is " +
                     shaper::format_duration(options.interval * options.count) +
                     "; a probe may take at most 120s including its 2s wait");
  FleetProbeRun run;
  for (const auto& [from, to] : pair_list) {
    const FleetHost& target = inventory.hosts[to];
    if (target.probe_address.empty())
      throw FleetInputError("host " + target.name +
                            ": no probe_address (a host reached by its socket has no ssh address "
                            "to default to); give \"probe_address\" in the inventory");
    PairProbes p;
    p.from = inventory.hosts[from].name;
    p.to = target.name;
    p.address = ipv4_of(target.name, target.probe_address);
    run.pairs.push_back(std::move(p));
  }
  ClientOptions base;
  const Nanoseconds probing = options.interval * options.count + kProbeWait + kProbeReplyMargin;
  base.timeout = std::max(inv.args.duration("--timeout").value_or(kDefaultTimeout), probing);
  use_remote_commands(inventory, inv, base);
  std::vector<Member> members(inventory.hosts.size());
  for (std::size_t i = 0; i < members.size(); ++i) members[i].host = &inventory.hosts[i];
  connect_all(members, base);
  for (Member& m : members) {
    run.lanes.emplace_back();
    run.lanes.back().host = m.host->name;
  }
  call_each(members, "status", status_params, [&](Member& m, const Json& result, Nanoseconds) {
    LaneState& lane = run.lanes[index_of(members, m)];
    read_result(m, [&] { lane = lane_of(*m.host, read_status_result(result)); });
  });
  forgive_not_found(members);
  bool reached = true;
  for (const Member& m : members) reached = reached && usable(m);
  if (reached && !options.calibration_phase.empty()) {
    probe_interleaved(members, pair_list, run, options);
  } else if (reached) {
    probe_round(members, pair_list, run.pairs, options);
  }
  for (const Member& m : members) {
    if (!usable(m)) run.failures.push_back(m.host->name + ": " + problem_of(m));
  }
  return run;
}

Json probe_run_json(const FleetProbeRun& run) {
  Json j = {{"version", 1}, {"lanes", Json::array()}, {"pairs", Json::array()}};
  for (const LaneState& l : run.lanes) {
    j["lanes"].push_back({{"host", l.host},
                          {"profile", l.profile},
                          {"phase", l.phase},
                          {"digest", l.digest},
                          {"held", l.held}});
  }
  const auto pairs_json = [](const std::vector<PairProbes>& pairs) {
    Json out = Json::array();
    for (const PairProbes& p : pairs) {
      Json sent = Json::array(), rtt = Json::array();
      for (const auto& s : p.sent) sent.push_back(s.count());
      for (const auto& r : p.rtt) rtt.push_back(r ? Json(r->count()) : Json(nullptr));
      out.push_back({{"from", p.from},
                     {"to", p.to},
                     {"address", p.address},
                     {"interval_ns", p.interval.count()},
                     {"sent_realtime_ns", std::move(sent)},
                     {"rtt_ns", std::move(rtt)}});
    }
    return out;
  };
  j["pairs"] = pairs_json(run.pairs);
  if (!run.calibration_phase.empty()) {
    j["calibration_phase"] = run.calibration_phase;
    j["calibration"] = pairs_json(run.calibration);
  }
  return j;
}

FleetProbeRun read_probe_run(const Json& j, std::vector<std::string>& problems) {
  FleetProbeRun run;
  try {
    if (j.at("version") != 1) problems.push_back("/version: expected 1");
    for (const Json& l : j.at("lanes")) {
      run.lanes.push_back({l.at("host").get<std::string>(), l.at("profile").get<std::string>(),
                           l.at("phase").get<std::string>(), l.at("digest").get<std::string>(),
                           l.at("held").get<bool>()});
    }
    const auto read_pairs = [&](const Json& list, std::vector<PairProbes>& into) {
      for (const Json& p : list) {
        PairProbes out;
        out.from = p.at("from").get<std::string>();
        out.to = p.at("to").get<std::string>();
        out.address = p.at("address").get<std::string>();
        out.interval = Nanoseconds(p.at("interval_ns").get<std::int64_t>());
        for (const Json& s : p.at("sent_realtime_ns")) out.sent.emplace_back(s.get<std::int64_t>());
        for (const Json& r : p.at("rtt_ns")) {
          out.rtt.push_back(r.is_null() ? std::nullopt
                                        : std::optional<Nanoseconds>(r.get<std::int64_t>()));
        }
        if (out.sent.size() != out.rtt.size())
          problems.push_back("pair " + out.from + " -> " + out.to +
                             ": sent_realtime_ns and rtt_ns differ in length");
        into.push_back(std::move(out));
      }
    };
    read_pairs(j.at("pairs"), run.pairs);
    if (j.contains("calibration")) {
      run.calibration_phase = j.at("calibration_phase").get<std::string>();
      read_pairs(j.at("calibration"), run.calibration);
    }
  } catch (const Json::exception& e) {
    problems.push_back(std::string("not a fleet validate --save file: ") + e.what());
  }
  return run;
}

int with_fleet_exit_codes(const Invocation& inv, std::string_view command,
                          const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError&) {
    throw;
  } catch (const FleetInputError& e) {
    inv.err << command << ": " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    inv.err << command << ": " << e.what() << '\n';
    return kExitEnvironment;
  }
}

int fleet_command(const Invocation& inv) {
  return with_fleet_exit_codes(inv, "jitterctl fleet", [&] { return run_fleet(inv); });
}

}  // namespace jitterctl
