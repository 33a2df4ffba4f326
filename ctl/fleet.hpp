#pragma once
// `jitterctl fleet`: one change on every jitterd of an inventory (docs/operations.md, "Fleets").
// Two-phase over the protocol's stage/commit/abort (docs/protocol.md): every host checks the change
// and answers with a token or a refusal; only when all are ready is it committed everywhere, at one
// CLOCK_REALTIME deadline; a refusal aborts every token, so no host changes. Each host's clock
// offset is estimated NTP-style with `clock`, and after the deadline each host's kernel
// acknowledgement (its transition record) gives the skew of the change across the fleet.

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "shaper/quantities.hpp"

namespace jitterctl {

using shaper::Nanoseconds;

// One `clock` exchange, NTP-style (RFC 5905, section 8), all four CLOCK_REALTIME: t0 the client
// sent the request, t1 the host read it, t2 the host made the reply, t3 the client read the reply.
struct ClockSample {
  Nanoseconds offset{0};      // the host's clock minus the client's
  Nanoseconds round_trip{0};  // both ways through the network (the host's time taken out)
};
ClockSample clock_sample(Nanoseconds t0, Nanoseconds t1, Nanoseconds t2, Nanoseconds t3);
// Of several exchanges, the one with the shortest round trip: its offset is off by at most half
// of it (NTP's clock filter takes the same one). nullopt for none.
std::optional<ClockSample> best_clock_sample(const std::vector<ClockSample>& samples);

// The spread of the kernels' acknowledgements: max - min (zero for one host, nullopt for none).
std::optional<Nanoseconds> skew_of(const std::vector<Nanoseconds>& times);

int fleet_command(const Invocation& inv);

// A bad inventory or command line content: exit code 3, each problem on a line.
class FleetInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs a fleet command's `body`, turning what it throws into the fleet commands' exit codes: a
// UsageError goes on (the caller prints the usage), a FleetInputError is bad input (3), any other
// exception the environment (4); each message goes to inv.err after `command` ("jitterctl fleet").
int with_fleet_exit_codes(const Invocation& inv, std::string_view command,
                          const std::function<int()>& body);

enum class PairMode { kAll, kRing };
std::optional<PairMode> pair_mode_from_name(std::string_view name);

// The ordered pairs (from, to) of `hosts` hosts: every ordered pair (all: n (n - 1)), or each host
// to the next and the last to the first (ring: n; none for one host, one each way for two).
std::vector<std::pair<std::size_t, std::size_t>> probe_pairs(std::size_t hosts, PairMode mode);

// ---- fleet validate: the probes (the judge is fleet_validation.hpp, in the offline layer) ------

// One pair's probes as jitterd's `probe` answered them on the `from` host.
struct PairProbes {
  std::string from, to;  // host names
  std::string address;   // what `from` probed
  Nanoseconds interval{0};
  std::vector<Nanoseconds> sent;                // CLOCK_REALTIME of each send
  std::vector<std::optional<Nanoseconds>> rtt;  // nullopt: lost
};

// A host's egress lane on its inventory interface while the probes ran, from its `status`.
struct LaneState {
  std::string host;
  std::string profile;  // "": unshaped
  std::string phase;
  std::string digest;
  bool held = true;  // no schedule running (a switch or a paused schedule)
};

// Everything `fleet validate` measured: each host's lane before the probes and each pair's probes.
struct FleetProbeRun {
  std::vector<LaneState> lanes;  // in inventory order
  std::vector<PairProbes> pairs;
  // With FleetProbeOptions::calibration_phase: the same pairs probed while every host held that
  // phase, in blocks interleaved with the pairs' own (empty otherwise).
  std::string calibration_phase;
  std::vector<PairProbes> calibration;
  std::vector<std::string> failures;  // hosts that could not be reached or probed, in words
};

struct FleetProbeOptions {
  PairMode pairs = PairMode::kAll;
  std::uint32_t count = 1000;
  Nanoseconds interval = std::chrono::milliseconds(20);
  // Set: calibrate in `blocks` blocks interleaved with the judged probes, switching every host to
  // this phase (a constant delay in each host's profile) and back (docs/validation.md, "Fleets").
  std::string calibration_phase;
  std::uint32_t blocks = 4;
  Nanoseconds lead = std::chrono::seconds(1);  // each switch's deadline after every host is ready
  // How long after each switch's deadline to wait for every host to report its transition.
  Nanoseconds ack_wait = std::chrono::seconds(10);
};

// Connects to every host of the inventory (--inventory), reads each one's lane, then has every
// host probe its pairs' addresses (all hosts at once, each with one `probe` request). Throws
// UsageError for a bad command line and reports a bad inventory as FleetInputError (exit 3).
FleetProbeRun probe_fleet(const Invocation& inv, const FleetProbeOptions& options);

// The run as JSON (`fleet validate --save`) and back (`--calibration`); problems reading it go to
// `problems`.
nlohmann::json probe_run_json(const FleetProbeRun& run);
FleetProbeRun read_probe_run(const nlohmann::json& j, std::vector<std::string>& problems);

}  // namespace jitterctl
