#pragma once
// What the daemon's protocol tests share (besides test_files.hpp): parsed test profiles, and a rig
// that wires a SessionManager to a FakeBackend, a ledger in a temporary state folder and an event
// recorder, with an io_context the test drives itself (run_until / run_for on the test thread: no
// second thread, so nothing needs locking and fork() stays safe).

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "asio.hpp"
#include "config.hpp"
#include "events.hpp"
#include "fake_backend.hpp"
#include "ledger.hpp"
#include "logger.hpp"
#include "sessions.hpp"
#include "shaper/profile.hpp"
#include "test_files.hpp"

namespace jitterd::testing {

struct LoadedProfile {
  std::shared_ptr<const shaper::Profile> profile;
  std::string digest;
};
LoadedProfile parse_test_profile(const std::string& json_text);

// The peer every request in these tests comes from.
Peer test_peer();

// A config under which the test interfaces may be shaped.
Config test_config(const std::string& state_dir);

class DaemonRig {
 public:
  using Clock = std::chrono::steady_clock;

  // `adjust` may change the config before the session manager sees it.
  explicit DaemonRig(const std::function<void(Config&)>& adjust = {});

  // Runs the io_context until `done` holds or `timeout` passed; returns `done()`.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);
  // Runs the io_context for `duration` (returns early when it has nothing left to do).
  std::size_t run_for(std::chrono::milliseconds duration);

  ApplyRequest request(const std::string& interface, const LoadedProfile& profile) const;
  // Applies, failing the test on a RequestError.
  SessionStatus apply_ok(const ApplyRequest& request);

  std::vector<Event> events_of(EventType type) const;
  std::size_t count(EventType type) const { return events_of(type).size(); }
  std::string log_text() const { return log_stream.str(); }

  asio::io_context io;
  TempDir state;
  Config config;
  FakeBackend backend;
  Ledger ledger;
  EventBus bus;
  std::ostringstream log_stream;
  Logger log;
  SessionManager sessions;
  std::vector<Event> events;  // everything published, in order
};

}  // namespace jitterd::testing
