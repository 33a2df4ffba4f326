#pragma once
// The control protocol (docs/protocol.md): one JSON request per line in, one JSON reply per line
// out. The dispatcher converts each request to typed values at the edge, calls the session manager,
// and converts the outcome back. It is where the control session catches environment failures
// (kernel refusals, I/O errors) and turns them into error replies; nothing else in the daemon
// catches them.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "clock.hpp"
#include "config.hpp"
#include "events.hpp"
#include "inside_places.hpp"
#include "prober.hpp"
#include "profile_store.hpp"
#include "protocol/methods.hpp"
#include "sessions.hpp"
#include "shaping_backend.hpp"
#include "staged_changes.hpp"
#include "target_resolver.hpp"

namespace jitterd {

class Follows;

// Counters the server keeps, for `metrics`.
struct ServerStats {
  std::uint64_t connections_total = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t connections_refused = 0;  // too many, or not permitted
  std::uint64_t requests_total = 0;
  std::uint64_t request_errors_total = 0;
  std::uint64_t subscribers_dropped = 0;  // slow subscribers disconnected
  std::uint64_t events_written = 0;  // events serialised for subscribers: once each, however many
};

struct SubscribeFilter {
  std::set<std::string> interfaces;  // empty: all
  std::set<EventType> events;        // empty: all
  bool matches(const Event& e) const;
};

struct Reply {
  std::string line;                          // the JSON reply, without the newline
  std::optional<SubscribeFilter> subscribe;  // set when the connection now streams events
  // Set for an accepted `probe`: `line` is empty, and the reply is probe_reply(id, ...) once the
  // probes ran (off the loop: they take seconds).
  std::optional<ProbeRequest> probe;
  nlohmann::json id;  // the request's id, for the probe's reply
};

// A request line read as JSON, the first step of handling it. It depends on the line alone (no
// state, no I/O), so the server may take it on a helper thread for a long line while the loop
// serves everyone else: an 8 MiB line takes the parser most of a second (tests/bench/load_clients).
struct ReadRequest {
  nlohmann::json request;  // the document, when there is no `error`
  std::optional<RequestError>
      error;          // not JSON (parse-error), or nested too deep (invalid-request)
  nlohmann::json id;  // the id the error's reply carries; null: none
};

class Dispatcher {
 public:
  // `targets`: how requests naming a target (a namespace, a process, a container) are resolved;
  // null: such requests are refused.
  // `inside`: where targets reached with via inside are shaped (one session manager per target
  // namespace); null: such targets are refused.
  Dispatcher(SessionManager& sessions, ProfileStore& profiles, ShapingBackend& backend,
             const Config& config, ServerStats& stats, TargetResolver* targets = nullptr,
             InsidePlaces* inside = nullptr);

  // Where applies with "follow": true are kept while their target is gone (follows.hpp); null (the
  // default): such applies are refused.
  void follow_with(Follows* follows) { follows_ = follows; }

  // `authorized`: whether the peer may use the socket at all (see docs/protocol.md, Permissions).
  Reply handle(std::string_view line, const Peer& peer, bool authorized) {
    return handle(read(line), peer, authorized);
  }
  // The same in two steps; read() touches nothing but its argument and may run on any thread.
  static ReadRequest read(std::string_view line);
  Reply handle(const ReadRequest& read, const Peer& peer, bool authorized);

  // A reply for a line that was never parsed (too long, too many connections).
  static std::string error_line(ErrorCode code, std::string_view message,
                                std::string_view hint = {});
  // The same with the code's wire spelling ("too-large"), as tests name it.
  static std::string error_line(std::string_view code, std::string_view message,
                                std::string_view hint = {});
  static std::string event_line(const Event& event);
  // Why `peer` may not use jitterd at all: the one wording, for the server's refusal at accept and
  // for handle() when called unauthorized.
  static RequestError permission_denied(const Peer& peer, const std::string& socket_group);
  std::string metrics_text();
  // The reply of an accepted `probe`: runs it (blocking, for seconds: call it off the loop) and
  // answers with its series, or with the error that stopped it.
  static std::string probe_reply(const nlohmann::json& id, const ProbeRequest& request,
                                 const std::atomic<bool>& stop);

 private:
  // One request being answered (protocol.cpp).
  struct Call;
  using Handler = Outcome<nlohmann::json> (Dispatcher::*)(Call&);
  struct MethodHandler {
    protocol::Method method;
    Handler handler;
  };
  // Each method's handler, in protocol::kMethods' order: the table that names a method carries its
  // handler.
  static const MethodHandler kHandlers[];
  static const MethodHandler& handler_of(protocol::Method method);

  // The methods. Each reads its params (problems go to the call's diagnostics) and answers with a
  // result or a RequestError; environment failures are thrown, and handle() turns them into
  // replies.
  Outcome<nlohmann::json> list_commands(Call& c);
  Outcome<nlohmann::json> version(Call& c);
  Outcome<nlohmann::json> interfaces(Call& c);
  Outcome<nlohmann::json> profiles(Call& c);
  Outcome<nlohmann::json> apply(Call& c);
  Outcome<nlohmann::json> switch_phase(Call& c);
  Outcome<nlohmann::json> confirm(Call& c);
  Outcome<nlohmann::json> pause(Call& c);
  Outcome<nlohmann::json> resume(Call& c);
  Outcome<nlohmann::json> skip(Call& c);
  Outcome<nlohmann::json> status(Call& c);
  Outcome<nlohmann::json> clear(Call& c);
  Outcome<nlohmann::json> renew(Call& c);
  Outcome<nlohmann::json> subscribe(Call& c);
  Outcome<nlohmann::json> metrics(Call& c);
  Outcome<nlohmann::json> clock_reading(Call& c);
  // Two-phase changes (docs/protocol.md): stage runs apply's, switch's or clear's handler in check
  // mode (Call::check_only) and keeps the request; commit runs it for real, with the deadline.
  Outcome<nlohmann::json> stage(Call& c);
  Outcome<nlohmann::json> commit(Call& c);
  Outcome<nlohmann::json> abort_staged(Call& c);
  // probe checks its params and leaves the probing to the server (Reply::probe).
  Outcome<nlohmann::json> probe(Call& c);

  static void read_apply_lane(Call& c, ApplyRequest& a);
  std::optional<RequestError> read_apply_profile(Call& c, const nlohmann::json& prof,
                                                 ApplyRequest& a);
  using LaneRequest = Outcome<SessionManager::Statuses> (SessionManager::*)(const Target&,
                                                                            const Peer&);
  Outcome<nlohmann::json> on_target(Call& c, LaneRequest request);
  // A request's "target" (a namespace, process or container whose `interface` it names): checked
  // against the config's target allow-list and resolved to where jitterd shapes it; nullopt when
  // the request names none. Problems with its form go to the call's diagnostics.
  // `via`, when given, stands for the request's.
  Outcome<std::optional<ResolvedTarget>> resolve_target(Call& c, const std::string& interface,
                                                        std::string_view via = {});
  // The same for a request naming sessions: for host-veth, `target` rewritten to the host side
  // (its interface, and its direction reversed); for inside, the call's sessions are the target
  // namespace's (c.lanes), `target` unchanged.
  std::optional<RequestError> retarget(Call& c, Target& target);
  // Whose sessions the call acts on: a target namespace's (via inside), else jitterd's own.
  SessionManager& lanes(const Call& c);
  // status and clear of everything: jitterd's own sessions, then every target namespace's.
  std::vector<SessionManager*> every_place();
  SessionManager::Statuses every_status();
  // The target a request names when it is a followed target that is gone, whose follow waits
  // (follows.hpp): the request acts on the follow, as the target cannot be resolved.
  std::optional<TargetRequest> waiting_follow(const Call& c) const;

  SessionManager& sessions_;
  ProfileStore& profiles_;
  ShapingBackend& backend_;
  const Config& config_;
  ServerStats& stats_;
  TargetResolver* targets_;
  InsidePlaces* inside_;
  Follows* follows_ = nullptr;
  StagedChanges staged_;
  Stamp started_;
};

}  // namespace jitterd
