// netem_apply: a test tool that puts one phase of a profile on an interface with libshaper's
// engine, so that scripts (tests/fixtures/captures/make-captures) can shape a path without tc. Runs
// in the network namespace it is started in (`ip netns exec NS netem_apply ...`).
//
//   netem_apply DEV PROFILE.json PHASE
//       install PHASE as DEV's root netem and leave it there (released: it outlives the tool)
//   netem_apply --follow DEV PROFILE.json SECS
//       replay the profile's schedule in place (looped if the profile says so) for SECS seconds,
//       then remove the qdisc
//   netem_apply --remove DEV
//       remove jitterd's qdisc from DEV, if there is one
//
// Exit codes: 0 done, 2 usage, 3 bad profile, 4 environment (netlink, files).
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/netem_engine.hpp"
#include "shaper/netlink.hpp"
#include "shaper/profile.hpp"

namespace {

using namespace shaper;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitBadProfile = 3;
constexpr int kExitEnvironment = 4;

constexpr const char* kUsage =
    "usage: netem_apply DEV PROFILE.json PHASE\n"
    "       netem_apply --follow DEV PROFILE.json SECONDS\n"
    "       netem_apply --remove DEV\n";

std::optional<Profile> load_profile(const std::string& path) {
  const ProfileLoad load = load_profile_file(path);
  for (const auto& d : load.diagnostics()) std::cerr << path << ": " << d.to_string() << '\n';
  if (!load) return std::nullopt;
  return load->profile;
}

int install_phase(const std::string& dev, const std::string& path, const std::string& phase_name) {
  const auto profile = load_profile(path);
  if (!profile) return kExitBadProfile;
  const Phase* phase = profile->find_phase(phase_name);
  if (!phase) {
    std::cerr << path << ": no phase \"" << phase_name << "\"; phases:";
    for (const auto& p : profile->phases) std::cerr << ' ' << p.name;
    std::cerr << '\n';
    return kExitBadProfile;
  }
  RouteSocket socket;
  NetemEngine engine(socket);
  NetemQdisc qdisc = engine.install(engine.resolve(dev), phase->spec);
  // The point of the tool: the qdisc outlives this process (--remove takes it away).
  qdisc.release();
  std::printf("%s: phase %s of %s installed (handle %s)\n", dev.c_str(), phase_name.c_str(),
              profile->name.c_str(), format_handle(kJitterdRootHandle).c_str());
  return kExitOk;
}

int follow_schedule(const std::string& dev, const std::string& path, double seconds) {
  const auto profile = load_profile(path);
  if (!profile) return kExitBadProfile;
  if (!profile->schedule || profile->schedule->steps.empty()) {
    std::cerr << path << ": no schedule to follow; install a phase instead\n";
    return kExitBadProfile;
  }
  const auto& steps = profile->schedule->steps;
  RouteSocket socket;
  NetemEngine engine(socket);
  // Owned: removed when this scope ends, also when a change throws.
  NetemQdisc qdisc =
      engine.install(engine.resolve(dev), profile->find_phase(steps.front().phase)->spec);
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds));
  // Step boundaries are computed from the start, not from the previous wake-up, so the schedule
  // does not drift by the sleeps' lateness.
  auto boundary = start;
  std::size_t changes = 0;
  for (std::size_t i = 0;; i = (i + 1) % steps.size()) {
    if (i == 0 && boundary != start && !profile->schedule->loop) break;
    if (boundary != start) {
      qdisc.change(profile->find_phase(steps[i].phase)->spec);
      ++changes;
    }
    boundary += steps[i].duration;
    if (boundary >= end) break;
    std::this_thread::sleep_until(boundary);
  }
  std::this_thread::sleep_until(end);
  qdisc.remove();
  std::printf("%s: followed %s for %.1f s (%zu changes), removed\n", dev.c_str(),
              profile->name.c_str(), seconds, changes);
  return kExitOk;
}

int remove_qdisc(const std::string& dev) {
  RouteSocket socket;
  NetemEngine engine(socket);
  const bool removed = engine.remove_if_ours(engine.resolve(dev));
  std::printf("%s: %s\n", dev.c_str(), removed ? "jitterd qdisc removed" : "no jitterd qdisc");
  return kExitOk;
}

std::optional<double> parse_seconds(const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !(v > 0)) return std::nullopt;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "--remove") return remove_qdisc(args[1]);
    if (args.size() == 4 && args[0] == "--follow") {
      const auto seconds = parse_seconds(args[3]);
      if (!seconds) {
        std::cerr << "netem_apply: \"" << args[3] << "\" is not a positive number of seconds\n"
                  << kUsage;
        return kExitUsage;
      }
      return follow_schedule(args[1], args[2], *seconds);
    }
    if (args.size() == 3 && !args[0].empty() && args[0][0] != '-')
      return install_phase(args[0], args[1], args[2]);
    std::cerr << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    // Environment failures: netlink refusals keep the kernel's text, file errors name the file.
    std::cerr << "netem_apply: " << e.what() << '\n';
    return kExitEnvironment;
  }
}
