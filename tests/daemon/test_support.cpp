#include "test_support.hpp"

#include <gtest/gtest.h>
#include <stdexcept>

namespace jitterd::testing {

LoadedProfile parse_test_profile(const std::string& json_text) {
  auto load = shaper::parse_profile(json_text);
  if (!load) throw std::runtime_error("test profile: " + shaper::to_string(load.diagnostics()));
  return {std::make_shared<const shaper::Profile>(std::move(load->profile)), load->digest};
}

Peer test_peer() {
  return Peer{1000, 1000, 4242, "harness"};
}

Config test_config(const std::string& state_dir) {
  Config config;
  config.state_dir = state_dir;
  config.profile_dirs.clear();
  config.allow_interfaces = {"veth*", "test[0-9]"};
  return config;
}

namespace {

Config adjusted(const std::string& state_dir, const std::function<void(Config&)>& adjust) {
  Config config = test_config(state_dir);
  if (adjust) adjust(config);
  return config;
}

}  // namespace

DaemonRig::DaemonRig(const std::function<void(Config&)>& adjust)
    : config(adjusted(state.path(), adjust)),
      ledger(state.path()),
      log(log_stream),
      sessions(io.get_executor(), backend, ledger, bus, config, log) {
  backend.add_interface("veth0", 5);
  backend.add_interface("veth1", 6);
  backend.add_interface("eth0", 2);  // not in the allowlist
  bus.subscribe([this](const Event& e) { events.push_back(e); });
}

bool DaemonRig::run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    io.restart();
    // One handler at a time, so `done` is checked after each; 5 ms caps the wait when none is due.
    if (io.run_one_until(std::min(deadline, now + std::chrono::milliseconds(5))) == 0 &&
        io.stopped()) {
      // Nothing left to run (no timer armed): nothing can change any more.
      return done();
    }
  }
  return true;
}

std::size_t DaemonRig::run_for(std::chrono::milliseconds duration) {
  io.restart();
  return io.run_for(duration);
}

ApplyRequest DaemonRig::request(const std::string& interface, const LoadedProfile& profile) const {
  ApplyRequest r;
  r.interface = interface;
  r.profile = profile.profile;
  r.digest = profile.digest;
  r.start = Clock::now();
  return r;
}

SessionStatus DaemonRig::apply_ok(const ApplyRequest& request) {
  auto outcome = sessions.apply(request, test_peer());
  if (!outcome) {
    const RequestError& e = outcome.error();
    ADD_FAILURE() << "apply refused: " << e.code << ": " << e.message << " at " << e.where;
    return {};
  }
  auto& list = *outcome;
  if (list.empty()) {
    ADD_FAILURE() << "apply answered with no session";
    return {};
  }
  return list.front();
}

std::vector<Event> DaemonRig::events_of(EventType type) const {
  std::vector<Event> out;
  for (const auto& e : events) {
    if (e.type == type) out.push_back(e);
  }
  return out;
}

}  // namespace jitterd::testing
