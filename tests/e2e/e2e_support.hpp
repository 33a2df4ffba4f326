#pragma once
// End-to-end test bed: the built jitterd running in namespace a of a VethPair (tests/kernel),
// driven by the built jitterctl, with iproute2 (`tc -j`), ping and the ledger file as independent
// witnesses. Processes are spawned with pipes or output files, and every wait has a deadline, so
// that a hung daemon fails a test instead of hanging the suite.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/temp_dir.hpp"
#include "test_network.hpp"

namespace jitterd_e2e {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// A fresh folder under /tmp (the guest's own tmpfs in the VM), mode 0755 so that the unprivileged
// clients of the permission tests can reach the socket inside; removed with everything in it.
struct TempDir : test_support::TempDir {
  TempDir() : test_support::TempDir("jitterd-e2e.", 0755) {}
};

// The file's content; throws std::runtime_error (naming the file) when it cannot be read.
std::string read_file(const std::string& path);

// Who a spawned process runs as (setgroups, setgid, setuid before exec).
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups; empty: none
};

struct SpawnOptions {
  std::string netns;                       // a name under /run/netns; empty: the caller's namespace
  std::optional<Credentials> credentials;  // unset: the caller's
  // Both stdout and stderr go to this file (created or appended) instead of pipes: for long-running
  // processes whose output nobody reads while they run (jitterd's log, ping's probe lines).
  std::string output_file;
};

// A child process; owns its pid and pipes. Destroying one that still runs kills (SIGKILL) and reaps
// it. Children also get SIGKILL when the test process dies (PR_SET_PDEATHSIG).
class Process {
 public:
  // argv[0] is looked up in PATH unless it contains a '/'. Throws std::runtime_error when it is not
  // found or fork fails; a failing exec in the child exits with 127 and says why on its stderr.
  static Process spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // The next line of stdout, without the newline; nullopt when `deadline` passed or stdout ended.
  std::optional<std::string> read_line(Clock::time_point deadline);
  bool stdout_ended() const { return out_fd_ < 0; }
  // What the process wrote to stderr so far (collected while reading stdout and when it ends).
  const std::string& err_text() const { return err_; }

  void signal(int signal_number) const;
  // Waits up to `timeout` for it to end, collecting what its pipes still hold: its exit code, or
  // 128+N when signal N killed it; nullopt if it still runs.
  std::optional<int> wait(Clock::duration timeout);
  // Whether it still runs (reaps it if it ended).
  bool running();
  // Everything on stdout not yet returned by read_line (after wait: all of it).
  std::string take_stdout();

 private:
  Process() = default;
  // Reads what the pipes have until `deadline`; returns false when it passed first.
  bool pump(Clock::time_point deadline, bool until_line);
  void close_fds();
  void kill_and_reap();

  pid_t pid_ = -1;
  std::string name_;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  std::optional<int> exit_code_;
};

struct Completed {
  int exit_code = -1;  // 128+N: killed by signal N
  std::string out;
  std::string err;
};

// Runs `argv` to completion, collecting stdout and stderr; kills it and throws std::runtime_error
// after `timeout`.
Completed run_to_completion(const std::vector<std::string>& argv, const SpawnOptions& options = {},
                            Clock::duration timeout = std::chrono::seconds(60));

// "jitterctl --json status" and friends as one string, for failure messages.
std::string command_line(const std::vector<std::string>& argv);

// jitterctl's stdout as JSON (e.g. `--json subscribe` lines); throws std::runtime_error with the
// text when it is not JSON.
Json parse_json(const std::string& text);

// The built binaries (target_compile_definitions in CMakeLists.txt).
std::string jitterd_binary();
std::string jitterctl_binary();

// Reads `jitterctl --json subscribe` (one compact event per line) with deadlines; keeps every event
// it read, for the assertions and for failure messages.
class EventStream {
 public:
  explicit EventStream(Process subscriber) : process_(std::move(subscriber)) {}

  // The next event within `timeout`; nullopt on timeout or when the subscriber ended.
  std::optional<Json> next(Clock::duration timeout);
  // Reads until an event named `type` arrives (others are kept too); nullopt after `timeout`.
  std::optional<Json> wait_for(const std::string& type, Clock::duration timeout);
  // Reads what arrives within `quiet` (no waiting beyond it) and returns every event so far.
  const std::vector<Json>& drain(Clock::duration quiet);
  const std::vector<Json>& seen() const { return seen_; }
  // Every event read, one per line, and what the subscriber said on stderr.
  std::string describe() const;
  // Events of `type` read so far.
  std::vector<Json> of_type(const std::string& type) const;

 private:
  Process process_;
  std::vector<Json> seen_;
};

// A jitterd with its config, profiles, socket, ledger and logs in `dir`, run in a network
// namespace. The config allows the test interfaces jta/jtb and nothing else; its socket group is
// `socket_group` ("": jitterd's own group).
class Daemon {
 public:
  // `metrics_listen`: the config's metrics.listen ("": the HTTP listener stays off).
  Daemon(std::string netns, const TempDir& dir, std::string socket_group,
         const std::string& metrics_listen = "");
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  // Stops a running jitterd with SIGTERM (SIGKILL after 10 s).
  ~Daemon();

  // Starts jitterd and returns when it answers `jitterctl version` with its own pid; throws
  // std::runtime_error with its log when it ends or does not answer within 30 s.
  void start();
  // kill -9: the process dies without cleaning up. Returns when it is reaped.
  void kill_hard();
  // SIGTERM; returns its exit code (nullopt: still running after `timeout`).
  std::optional<int> stop(Clock::duration timeout = std::chrono::seconds(20));
  bool running();
  pid_t pid() const;

  const std::string& socket() const { return socket_; }
  const std::string& config_path() const { return config_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& netns() const { return netns_; }
  std::string ledger_path() const { return state_dir_ + "/state.json"; }
  // The log (stderr) of the current or last run, and of every run so far.
  std::string log() const;
  std::string all_logs() const;

 private:
  std::string netns_;
  std::string config_;
  std::string socket_;
  std::string state_dir_;
  std::string log_dir_;
  std::optional<Process> process_;
  int runs_ = 0;
};

// The two-phase profile of the end-to-end tests: "low" 5 ms and "high" 50 ms of delay (nothing
// else), a schedule low 2 s, high 2 s, looping. Default "reorder": true, i.e. no netem rate: a
// probe sent after a change to the lower delay leaves at its own time instead of queueing behind
// the probes still held at the higher one (with a rate, netem releases in order, and a high-to-low
// change would show in the RTT series as a 45 ms ramp instead of a step).
inline constexpr const char* kProfileName = "two";
inline constexpr std::chrono::milliseconds kLowDelay{5};
inline constexpr std::chrono::milliseconds kHighDelay{50};
inline constexpr std::chrono::seconds kStepDuration{2};
// That profile as a JSON text (profiles/two.json of every bed's jitterd).
std::string two_phase_profile();

struct BedOptions {
  std::string socket_group;  // the config's socket.group; "": jitterd's own group
  // false: the test starts jitterd itself (daemon.start()), e.g. after preparing its state folder.
  bool start = true;
  std::string metrics_listen;  // the config's metrics.listen; "": off, as by default
};

// One end-to-end test's world: a fresh veth pair (jta in namespace a, jtb in b), a private folder
// with jitterd's config, profile, socket and ledger, and a running jitterd in namespace a (unless
// BedOptions::start is false). Members
// are built in this order and destroyed in reverse: jitterd stops before its network goes away.
class Bed {
 public:
  explicit Bed(const BedOptions& options = {});

  // jitterctl --socket <ours> ARGS... (as `as`, when given).
  Completed ctl(const std::vector<std::string>& args,
                const std::optional<Credentials>& as = std::nullopt);
  // jitterctl --json ARGS... that must succeed: its stdout parsed. Throws std::runtime_error with
  // jitterctl's stderr when it fails.
  Json ctl_json(const std::vector<std::string>& args);
  // jitterctl --json subscribe --interface jta, returned once jitterd counts its connection (see
  // wait_for_connections), so that events published after this returns reach it.
  EventStream subscribe();
  // Polls `jitterctl metrics` until jitterd_connections (which counts the asking connection too) is
  // at least `count`; throws after 10 s.
  void wait_for_connections(int count);

  // The root qdisc of jta as `tc -j qdisc show` (run in namespace a) reports it: {"kind", "handle",
  // ...}; iproute2 is the independent reader.
  Json root_qdisc_by_tc() const;
  // jitterd's ledger (<state_dir>/state.json) parsed.
  Json ledger() const;
  // Runs a command in namespace a (`ip netns exec`): tc and ip acting behind jitterd's back.
  std::string in_ns_a(const std::string& command) const;

  jitterd_test::VethPair net;
  TempDir dir;
  Daemon daemon;
};

// The fixture of every end-to-end test: skips (with the reason) where no netem kernel is reachable,
// builds a Bed, and prints jitterd's logs when the test failed (always with JITTERD_E2E_LOGS=1).
class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  virtual BedOptions bed_options() const { return {}; }
  Bed& bed() { return *bed_; }

 private:
  std::unique_ptr<Bed> bed_;
};

// realtime_ns / monotonic_ns of a protocol time ({"monotonic_ns": ..., "realtime_ns": ...}).
std::int64_t realtime_ns(const Json& time);
std::int64_t monotonic_ns(const Json& time);
// The same as a point of this process's steady clock (the guest's CLOCK_MONOTONIC, as jitterd's).
Clock::time_point monotonic_point(const Json& time);

}  // namespace jitterd_e2e
