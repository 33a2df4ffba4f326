#pragma once
// The control protocol (docs/protocol.md): one JSON request per line in, one JSON reply per line out.
// The dispatcher converts each request to typed values at the edge, calls the session manager, and
// converts the outcome back. It is where the control session catches environment failures (kernel
// refusals, I/O errors) and turns them into error replies; nothing else in the daemon catches them.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "clock.hpp"
#include "config.hpp"
#include "events.hpp"
#include "profile_store.hpp"
#include "sessions.hpp"
#include "shaping_backend.hpp"

namespace jitterd {

inline constexpr int kProtocolVersion = 1;

// Counters the server keeps, for `metrics`.
struct ServerStats {
  std::uint64_t connections_total = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t connections_refused = 0;  // too many, or not permitted
  std::uint64_t requests_total = 0;
  std::uint64_t request_errors_total = 0;
  std::uint64_t subscribers_dropped = 0;  // slow subscribers disconnected
};

struct SubscribeFilter {
  std::set<std::string> interfaces;  // empty: all
  std::set<EventType> events;        // empty: all
  bool matches(const Event& e) const;
};

struct Reply {
  std::string line;  // the JSON reply, without the newline
  std::optional<SubscribeFilter> subscribe;  // set when the connection now streams events
};

class Dispatcher {
 public:
  Dispatcher(SessionManager& sessions, ProfileStore& profiles, ShapingBackend& backend, const Config& config,
             ServerStats& stats);

  // `authorized`: whether the peer may use the socket at all (see docs/protocol.md, Permissions).
  Reply handle(std::string_view line, const Peer& peer, bool authorized);

  // A reply for a line that was never parsed (too long, too many connections).
  static std::string error_line(std::string_view code, std::string_view message, std::string_view hint = {});
  static std::string event_line(const Event& event);
  std::string metrics_text();

 private:
  SessionManager& sessions_;
  ProfileStore& profiles_;
  ShapingBackend& backend_;
  const Config& config_;
  ServerStats& stats_;
  Stamp started_;
};

}  // namespace jitterd
