// jitterctl fleet over real SSH (issue 24 part 2): four "hosts", each a network namespace with its
// own Debian sshd and its own jitterd, and the client in a fifth namespace, joined to host i by a
// veth pair on 198.18.0.0/15: jta (198.18.i.1/24) in host i, the interface its jitterd shapes, and
// jfc<i> (198.18.i.2/24) in the client's. The fleet runs `jitterctl fleet` in the client's
// namespace with one key pair, through `ssh root@198.18.i.1 jitterctl proxy` to each host
// (ssh_server.hpp, shared with remote_ssh_test.cpp). tc in each host's namespace is the independent
// reader.
//
// All four jitterds share the UML guest's one kernel and clock: the offsets the fleet estimates are
// of one clock against itself (within the round trip), and the skew is what the four schedulers
// and the one CPU make of one deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "control_client.hpp"
#include "e2e_support.hpp"
#include "one_way_probes.hpp"
#include "ssh_server.hpp"

using jitterd_e2e::Completed;
using jitterd_e2e::Json;
using namespace std::chrono_literals;

namespace {

constexpr int kHosts = 4;
constexpr int kPort = 2222;  // not 22: never mistaken for a real sshd
// Each host changes within this of the deadline (by its own clock). Not a performance claim (the
// bed's one CPU serves four jitterds and ssh): a bound that catches a host changing at the commit
// instead of at the deadline (2 s early) or a second late.
constexpr auto kLateBound = 500ms;

std::string host_address(int i) {
  return "198.18." + std::to_string(i) + ".1";
}

// The namespaces and veths (iproute2, as VethPair); deleted with everything in them.
class FleetNet {
 public:
  explicit FleetNet(int hosts) {
    const std::string prefix = "jf" + std::to_string(::getpid()) + "n";
    client_ = prefix + "c";
    jitterd_test::run("ip netns add " + client_ + " && ip -n " + client_ + " link set lo up");
    for (int i = 0; i < hosts; ++i) {
      const std::string ns = prefix + "h" + std::to_string(i);
      const std::string peer = "jfc" + std::to_string(i);
      const std::string net = "198.18." + std::to_string(i) + ".";
      hosts_.push_back(ns);
      jitterd_test::run("ip netns add " + ns + " && ip -n " + ns + " link set lo up && ip -n " +
                        ns + " link add jta type veth peer name " + peer + " netns " + client_ +
                        " && ip -n " + ns + " addr add " + net + "1/24 dev jta && ip -n " + ns +
                        " link set jta up && ip -n " + client_ + " addr add " + net + "2/24 dev " +
                        peer + " && ip -n " + client_ + " link set " + peer + " up");
    }
  }
  ~FleetNet() {
    for (const auto& ns : hosts_) ::system(("ip netns del " + ns + " 2>/dev/null").c_str());
    ::system(("ip netns del " + client_ + " 2>/dev/null").c_str());
  }
  FleetNet(const FleetNet&) = delete;
  FleetNet& operator=(const FleetNet&) = delete;

  const std::string& client() const { return client_; }
  const std::string& host(int i) const { return hosts_.at(static_cast<std::size_t>(i)); }

 private:
  std::string client_;
  std::vector<std::string> hosts_;
};

// One host: its folder, its jitterd (allowing jta unless `deny`; with kernel-timed switches when
// `gate`), its sshd. Built in this order, destroyed in reverse.
struct Host {
  Host(const std::string& netns, int index, const jitterd_e2e::SshKey& client, bool deny, bool gate)
      : daemon(netns, dir, ""), sshd(dir.path(), netns, host_address(index), kPort, client) {
    dir.write(std::string("profiles/") + jitterd_e2e::kProfileName + ".json",
              jitterd_e2e::two_phase_profile());
    if (deny || gate) {
      Json config = jitterd_e2e::parse_json(jitterd_e2e::read_file(daemon.config_path()));
      // The refusing host: its config lets jitterd shape jtb only (there is none here).
      if (deny) config["interfaces"]["allow"] = {"jtb"};
      if (gate) config["switch_gate"] = "kernel";
      dir.write("config.json", config.dump(2) + "\n");
    }
    daemon.start();
    sshd.start();
  }
  // The root qdisc of jta as `tc -j qdisc show` in the host's namespace reports it.
  Json root_qdisc_by_tc() const {
    const Json all = jitterd_e2e::parse_json(
        jitterd_test::run("ip netns exec " + daemon.netns() + " tc -j qdisc show dev jta"));
    for (const auto& q : all) {
      if (q.value("root", false)) return q;
    }
    return Json();
  }
  // `jitterctl --json status jta` from the host's socket directly (what a fleet reads over ssh),
  // parsed; throws std::runtime_error when it fails.
  Json status_by_jitterctl() const {
    const Completed done = jitterd_e2e::run_to_completion(
        {jitterd_e2e::jitterctl_binary(), "--socket", daemon.socket(), "--json", "status", "jta"});
    if (done.exit_code != 0)
      throw std::runtime_error("jitterctl status in " + daemon.netns() + ": " + done.err);
    return jitterd_e2e::parse_json(done.out);
  }
  // The same status read in this process, by jitterctl's own client over the socket: nothing is
  // started, where a process started in the UML guest holds its one CPU for milliseconds in the
  // kernel (a new address space is a host process there), past any real-time priority.
  Json status_by_socket() const {
    jitterctl::ClientOptions options;
    options.socket_path = daemon.socket();
    jitterctl::ControlClient client = jitterctl::ControlClient::connect(options);
    const jitterctl::Reply reply = client.call("status", {{"interface", "jta"}});
    if (!reply.ok) throw std::runtime_error("status of jta: " + reply.error.message);
    return reply.result;
  }
  // The netem delay tc reads on jta, in seconds; -1 without a netem root.
  double netem_delay_by_tc() const {
    const Json root = root_qdisc_by_tc();
    if (root.value("kind", "") != "netem") return -1;
    return root.at("options").at("delay").at("delay").get<double>();
  }

  jitterd_e2e::TempDir dir;
  jitterd_e2e::Daemon daemon;
  jitterd_e2e::SshServer sshd;
};

class E2eFleet : public ::testing::Test {
 protected:
  void SetUp() override {
    JITTERD_REQUIRE_NETEM_KERNEL();
    if (auto reason = jitterd_e2e::ssh_unavailable_reason()) GTEST_SKIP() << *reason;
    net_ = std::make_unique<FleetNet>(host_count());
    client_key_ = std::make_unique<jitterd_e2e::SshKey>(client_dir_.path(), "client_key");
    Json inventory = {{"version", 1}, {"hosts", Json::array()}};
    for (int i = 0; i < host_count(); ++i) {
      hosts_.push_back(std::make_unique<Host>(net_->host(i), i, *client_key_, denies(i), gated()));
      inventory["hosts"].push_back(
          {{"name", "h" + std::to_string(i)},
           {"host", hosts_.back()->sshd.url("root", hosts_.back()->daemon.socket())},
           {"interface", "jta"}});
    }
    inventory_ = client_dir_.write("inventory.json", inventory.dump(2));
  }
  void TearDown() override {
    if (HasFailure() || std::getenv("JITTERD_E2E_LOGS")) {
      for (const auto& h : hosts_) {
        std::cerr << "--- " << h->daemon.netns() << " jitterd\n"
                  << h->daemon.all_logs() << "--- sshd\n"
                  << h->sshd.log() << '\n';
      }
    }
    hosts_.clear();
    net_.reset();
  }
  virtual bool denies(int) const { return false; }
  virtual bool gated() const { return false; }
  virtual int host_count() const { return kHosts; }

  // jitterctl fleet --inventory ... ARGS in the client's namespace, over ssh (`ssh_prefix` in
  // front of the ssh command: a wrapper given it as its arguments).
  std::vector<std::string> fleet_argv(const std::vector<std::string>& args,
                                      const std::string& ssh_prefix = "") {
    std::vector<std::string> argv{
        "env",
        "JITTERD_SSH=" + ssh_prefix +
            jitterd_e2e::ssh_command(*client_key_, client_dir_.path() + "/known_hosts"),
        jitterd_e2e::jitterctl_binary(), "fleet", "--inventory", inventory_,
        // Four ssh logins in the UML guest, more beside a build: the default 10 s is tight.
        "--timeout", "60s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  jitterd_e2e::SpawnOptions in_client() const {
    jitterd_e2e::SpawnOptions options;
    options.netns = net_->client();
    return options;
  }
  // jitterctl fleet --inventory ... ARGS in the client's namespace, over ssh.
  Completed fleet(const std::vector<std::string>& args) {
    return jitterd_e2e::run_to_completion(fleet_argv(args), in_client(), 240s);
  }
  // Polls each host's `jitterctl metrics` (through its socket) until it counts `count` control
  // connections (the asking one included); fails after 60 s (ssh logins in the guest take seconds).
  void wait_for_connections(int count) {
    for (const auto& h : hosts_) {
      const auto deadline = jitterd_e2e::Clock::now() + 60s;
      for (;;) {
        const std::string metrics =
            jitterd_e2e::run_to_completion(
                {jitterd_e2e::jitterctl_binary(), "--socket", h->daemon.socket(), "metrics"})
                .out;
        const std::string gauge = "\njitterd_connections ";
        const auto at = metrics.find(gauge);
        if (at != std::string::npos && std::stoi(metrics.substr(at + gauge.size())) >= count) break;
        ASSERT_LT(jitterd_e2e::Clock::now(), deadline) << h->daemon.netns() << ": " << metrics;
        std::this_thread::sleep_for(200ms);
      }
    }
  }

  jitterd_e2e::TempDir client_dir_;
  std::unique_ptr<FleetNet> net_;
  std::unique_ptr<jitterd_e2e::SshKey> client_key_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::string inventory_;
};

TEST_F(E2eFleet, ASwitchLandsOnEveryHostAtOneDeadlineAndReportsSkewAndClockOffsets) {
  const Completed applied = fleet({"--json", "apply", jitterd_e2e::kProfileName, "--phase", "low"});
  ASSERT_EQ(applied.exit_code, 0) << applied.out << applied.err;
  for (int i = 0; i < kHosts; ++i)
    EXPECT_NEAR(hosts_[i]->netem_delay_by_tc(), 0.005, 1e-6) << "h" << i;

  const Completed switched = fleet({"--json", "switch", "high"});
  ASSERT_EQ(switched.exit_code, 0) << switched.out << switched.err;
  const Json report = jitterd_e2e::parse_json(switched.out);
  std::cout << "fleet switch: " << switched.out << '\n';
  ASSERT_EQ(report["hosts"].size(), static_cast<std::size_t>(kHosts)) << report.dump();
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (int i = 0; i < kHosts; ++i) {
    const Json& h = report["hosts"][i];
    EXPECT_EQ(h["name"], "h" + std::to_string(i));
    EXPECT_NEAR(hosts_[i]->netem_delay_by_tc(), 0.050, 1e-6) << "h" << i;
    ASSERT_TRUE(h.contains("accepted_realtime_ns")) << h.dump();
    const auto accepted = h["accepted_realtime_ns"].get<std::int64_t>();
    first = std::min(first, accepted);
    last = std::max(last, accepted);
    // At the deadline, by the host's own clock: not before it, and not long after.
    // The host's realtime of the deadline is its estimate from the monotonic timer (both clocks
    // read back to back: in UML, syscalls trapped by ptrace, up to ~0.5 ms apart under load).
    EXPECT_NEAR(h["deadline_realtime_ns"].get<double>(),
                report["deadline_realtime_ns"].get<double>(), 5e6)
        << h.dump();
    EXPECT_GE(h["late_ns"].get<std::int64_t>(), 0) << h.dump();
    EXPECT_LT(h["late_ns"].get<std::int64_t>(), std::chrono::nanoseconds(kLateBound).count())
        << h.dump();
    // One clock (the guest's) seen over ssh: the offset estimate is within half the round trip.
    ASSERT_TRUE(h.contains("offset_ns")) << h.dump();
    EXPECT_LE(std::abs(h["offset_ns"].get<std::int64_t>()),
              h["round_trip_ns"].get<std::int64_t>() / 2 + 1)
        << h.dump();
  }
  EXPECT_EQ(report["skew_ns"], last - first) << report.dump();

  // One stream of every host's events, tagged with the host, through four ssh connections.
  jitterd_e2e::EventStream merged(jitterd_e2e::Process::spawn(
      fleet_argv({"--json", "subscribe", "--count", std::to_string(kHosts)}), in_client()));
  wait_for_connections(2);
  std::this_thread::sleep_for(500ms);  // each subscribe request, a round trip behind the connect

  // For people: the table, each host "changed", and the skew line.
  const Completed back = fleet({"switch", "low"});
  EXPECT_EQ(back.exit_code, 0) << back.out << back.err;
  std::cout << "fleet switch low:\n" << back.out;
  EXPECT_EQ(std::count(back.out.begin(), back.out.end(), '\n'), kHosts + 2) << back.out;
  EXPECT_NE(back.out.find(", skew "), std::string::npos) << back.out;
  for (int i = 0; i < kHosts; ++i) {
    EXPECT_NE(back.out.find("h" + std::to_string(i) + "    jta        changed"), std::string::npos)
        << back.out;
    EXPECT_NEAR(hosts_[i]->netem_delay_by_tc(), 0.005, 1e-6) << "h" << i;
  }
  std::set<std::string> tagged;
  // In the order of their time on the client's clock (each host's `at` less its estimated
  // offset), none late. Whether that is the order the kernels took them, by the one clock they
  // share, is printed, not asserted: each offset is off by up to half its round trip (milliseconds
  // over ssh here), more than the kernels' changes lie apart in the bed (about 0.5 ms).
  std::int64_t previous = INT64_MIN;
  std::vector<std::int64_t> kernel_times;
  std::string order;
  for (int i = 0; i < kHosts; ++i) {
    const auto event = merged.next(60s);
    ASSERT_TRUE(event) << merged.describe();
    EXPECT_EQ(event->value("event", ""), "phase-changed") << event->dump();
    EXPECT_EQ(event->value("phase", ""), "low") << event->dump();
    EXPECT_FALSE(event->contains("late")) << event->dump();
    const auto client_time = event->value("at_client_ns", std::int64_t{0});
    EXPECT_GE(client_time, previous) << merged.describe();
    previous = client_time;
    kernel_times.push_back(event->at("at").at("realtime_ns").get<std::int64_t>());
    order += " " + event->value("host", "");
    tagged.insert(event->value("host", ""));
  }
  EXPECT_EQ(tagged, (std::set<std::string>{"h0", "h1", "h2", "h3"})) << merged.describe();
  std::cout << "fleet subscribe order:" << order << "; the kernels' own order "
            << (std::is_sorted(kernel_times.begin(), kernel_times.end()) ? "is the same"
                                                                         : "differs")
            << " (kernel times, ns after the first:";
  for (const auto t : kernel_times) std::cout << ' ' << t - kernel_times.front();
  std::cout << ")\n";
  ASSERT_EQ(fleet({"switch", "high"}).exit_code, 0);

  const Completed status = fleet({"--json", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const Json statuses = jitterd_e2e::parse_json(status.out);
  for (int i = 0; i < kHosts; ++i) {
    const Json& sessions = statuses["hosts"][i]["sessions"];
    ASSERT_EQ(sessions.size(), 1u) << statuses.dump();
    EXPECT_EQ(sessions[0]["phase"], "high") << "h" << i;
    EXPECT_EQ(sessions[0]["profile"], jitterd_e2e::kProfileName) << "h" << i;
  }

  const Completed cleared = fleet({"clear"});
  EXPECT_EQ(cleared.exit_code, 0) << cleared.out << cleared.err;
  for (int i = 0; i < kHosts; ++i)
    EXPECT_EQ(hosts_[i]->root_qdisc_by_tc().value("handle", ""), "0:") << "h" << i;
}

class E2eFleetRefusal : public E2eFleet {
 protected:
  bool denies(int i) const override { return i == 2; }
};

TEST_F(E2eFleetRefusal, OneHostsConfigDenyingTheInterfaceLeavesEveryHostUnchanged) {
  const Completed applied = fleet({"apply", jitterd_e2e::kProfileName, "--phase", "low"});
  EXPECT_EQ(applied.exit_code, 5) << applied.out << applied.err;  // permission-denied
  EXPECT_NE(applied.err.find("h2: jta is not in the interface allowlist"), std::string::npos)
      << applied.err;
  EXPECT_NE(applied.out.find("no host changed: 3 of 4 were ready"), std::string::npos)
      << applied.out;
  for (int i = 0; i < kHosts; ++i) {
    EXPECT_EQ(hosts_[i]->root_qdisc_by_tc().value("handle", ""), "0:") << "h" << i;
    // Nothing pending either: the staged changes were aborted, none committed.
    EXPECT_EQ(hosts_[i]->daemon.log().find("apply two"), std::string::npos)
        << "h" << i << hosts_[i]->daemon.log();
  }
  // And after the refusal's wait for nothing, still nothing: no commit is coming.
  std::this_thread::sleep_for(2500ms);
  for (int i = 0; i < kHosts; ++i)
    EXPECT_EQ(hosts_[i]->root_qdisc_by_tc().value("handle", ""), "0:") << "h" << i;
}

// A stand-in for ssh that runs ssh, and for the victim host (its address in the arguments) passes
// the requests through a loop that, when the commit comes, kills that host's jitterd (SIGKILL)
// instead of sending it on, then ends its side of the stream: a host that died between its stage
// and its commit. Arguments: the victim's address, its jitterd's pid, the ssh command. ssh's
// stdout is a pipe to cat, not the stream itself: ssh makes its stdio non-blocking, and on the
// stream (one socket for both directions) that would make the loop's reads fail.
constexpr const char* kKillAtCommit = R"(#!/bin/sh
victim=$1 pid=$2
shift 2
case " $* " in
  *" $victim "*) ;;
  *) exec "$@" ;;
esac
while IFS= read -r line; do
  case $line in
    *'"method":"commit"'*) kill -9 "$pid"; exit 0 ;;
  esac
  printf '%s\n' "$line"
done | "$@" | cat
)";

TEST_F(E2eFleet, AHostWhoseJitterdDiesBeforeItsCommitHasEveryOtherHostRolledBack) {
  const auto started = jitterd_e2e::Clock::now();
  ASSERT_EQ(fleet({"apply", jitterd_e2e::kProfileName, "--phase", "low"}).exit_code, 0);
  const std::string wrapper = client_dir_.write("kill-at-commit.sh", kKillAtCommit);
  const std::string prefix = "/bin/sh " + wrapper + " " + host_address(1) + " " +
                             std::to_string(hosts_[1]->daemon.pid()) + " ";
  const auto switching = jitterd_e2e::Clock::now();
  const Completed switched = jitterd_e2e::run_to_completion(
      fleet_argv({"--json", "switch", "high"}, prefix), in_client(), 240s);
  std::cout << "apply took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(switching - started).count()
            << " ms, the switch with its rollback "
            << std::chrono::duration_cast<std::chrono::milliseconds>(jitterd_e2e::Clock::now() -
                                                                     switching)
                   .count()
            << " ms\n";
  std::cout << "fleet switch with h1's jitterd killed at its commit: " << switched.out
            << switched.err << '\n';
  EXPECT_EQ(switched.exit_code, 4) << switched.out << switched.err;  // h1 lost; the rest whole
  EXPECT_NE(switched.err.find("jitterctl fleet: h1: "), std::string::npos) << switched.err;
  const Json report = jitterd_e2e::parse_json(switched.out);
  EXPECT_EQ(report["rolled_back"], true) << report.dump();
  for (int i = 0; i < kHosts; ++i) {
    const Json& h = report["hosts"][i];
    if (i == 1) {
      EXPECT_TRUE(h.contains("failure")) << h.dump();
      EXPECT_FALSE(h.contains("rollback")) << h.dump();
    } else {
      // It took the change at the deadline (its kernel's acknowledgement), then was put back.
      EXPECT_TRUE(h.contains("accepted_realtime_ns")) << h.dump();
      EXPECT_EQ(h["rollback"], "done") << h.dump();
      // Restored after the deadline, by the client's clock (the deadline is the client's).
      EXPECT_GT(h.value("restored_realtime_ns", std::int64_t{0}),
                report["deadline_realtime_ns"].get<std::int64_t>())
          << h.dump();
    }
    // Every host holds "low" (5 ms) again; h1's netem is what its killed jitterd left: the
    // staged change died with it and its commit never arrived.
    EXPECT_NEAR(hosts_[i]->netem_delay_by_tc(), 0.005, 1e-6) << "h" << i;
  }
  EXPECT_FALSE(hosts_[1]->daemon.running());
  std::cout << "rollback test body: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(jitterd_e2e::Clock::now() -
                                                                     started)
                   .count()
            << " ms\n";
}

// ---- fleet validate: probes between the hosts, judged per pair (issue 24 part 3)
// -----------------

// A phase to judge: 10 ms +- 3 ms (normal) and 1 % random loss on each host's egress, so a pair
// sees the two lanes' convolution: about 20 ms +- 4.2 ms and 2 % loss; and the calibration phase,
// the judged phase's mean as a constant delay (docs/validation.md, "Fleets": a stall then meets
// calibration probes as often as it meets the judged ones). Random loss, not a Gilbert chain: a
// lane's chain steps for every packet leaving the host (each host probes three others and answers
// three), so a pair sees it thinned, with shorter bursts than the chain's own.
std::string judged_profile(int latency_ms) {
  const Json profile = {
      {"version", 1},
      {"name", "jit"},
      {"phases",
       {{"p",
         {{"delay",
           {{"latency", std::to_string(latency_ms) + "ms"},
            {"jitter", "3ms"},
            {"distribution", "normal"}}},
          {"loss", {{"model", "random"}, {"probability", 0.01}}}}},
        {"c", {{"delay", {{"latency", "10ms"}}}}}}},
  };
  return profile.dump(2) + "\n";
}

class E2eFleetValidate : public E2eFleet {
 protected:
  void SetUp() override {
    E2eFleet::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // The hosts reach each other through the client's namespace; root may open ping sockets in
    // each host's (a fresh namespace's ping_group_range is "1 0": nobody).
    jitterd_test::run("ip netns exec " + net_->client() + " sysctl -qw net.ipv4.ip_forward=1");
    for (int i = 0; i < kHosts; ++i) {
      jitterd_test::run("ip -n " + net_->host(i) + " route add 198.18.0.0/16 via 198.18." +
                        std::to_string(i) + ".2");
      if (allows_ping(i)) {
        jitterd_test::run("ip netns exec " + net_->host(i) +
                          " sysctl -qw net.ipv4.ping_group_range='0 2147483647'");
      }
      hosts_[i]->dir.write("profiles/jit.json", judged_profile(10));
    }
    client_dir_.write("good/jit.json", judged_profile(10));
    // What a profile 10 % off looks like to the judge: 11 ms where the hosts give 10 ms.
    client_dir_.write("wrong/jit.json", judged_profile(11));
  }
  virtual bool allows_ping(int) const { return true; }

  // 1000 probes a pair, 20 ms apart, every host at once.
  std::vector<std::string> validate_args(const std::string& profiles,
                                         const std::string& count = "1000") {
    return {"validate", "--profiles", client_dir_.path() + "/" + profiles, "--count", count};
  }
};

TEST_F(E2eFleetValidate, ACorrectFleetPassesEveryPairAndAProfileTenPercentOffFailsNamingThePairs) {
  ASSERT_EQ(fleet({"apply", "jit", "--phase", "p"}).exit_code, 0);
  for (int i = 0; i < kHosts; ++i)
    EXPECT_NEAR(hosts_[i]->netem_delay_by_tc(), 0.010, 1e-6) << "h" << i;

  // Calibrated in four blocks of 250 probes through phase c, each before a block of 250 through
  // p; the probes saved, to be judged again below.
  const std::string saved = client_dir_.path() + "/probes.json";
  std::vector<std::string> good = validate_args("good");
  good.insert(good.end(), {"--calibration-phase", "c", "--save", saved, "--json"});
  jitterd_e2e::Process judged = jitterd_e2e::Process::spawn(fleet_argv(good), in_client());
  // While the hosts probe, their jitterds answer others: the probes run off the loop.
  wait_for_connections(2);
  std::this_thread::sleep_for(5s);
  for (const auto& h : hosts_) {
    const auto asked = jitterd_e2e::Clock::now();
    const Completed status = jitterd_e2e::run_to_completion(
        {jitterd_e2e::jitterctl_binary(), "--socket", h->daemon.socket(), "status"});
    EXPECT_EQ(status.exit_code, 0) << status.err;
    EXPECT_LT(jitterd_e2e::Clock::now() - asked, 2s) << h->daemon.netns();
  }
  const auto code = judged.wait(240s);
  ASSERT_TRUE(code);
  // JITTERD_E2E_KEEP=DIR keeps the run's probes (DIR/probes-<realtime s>.json), to judge them
  // again by hand with `fleet validate --probes` (docs/validation.md, "Fleets").
  if (const char* keep = std::getenv("JITTERD_E2E_KEEP"); keep && *keep) {
    const auto stamp = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now().time_since_epoch());
    std::filesystem::copy_file(
        saved, std::string(keep) + "/probes-" + std::to_string(stamp.count()) + ".json");
  }
  const std::string out = judged.take_stdout();
  EXPECT_EQ(*code, 0) << out << judged.err_text();
  const Json report = jitterd_e2e::parse_json(out);
  ASSERT_TRUE(report.contains("pairs")) << out << judged.err_text();
  EXPECT_EQ(report["verdict"], "pass");
  EXPECT_EQ(report["calibrated"], true);
  EXPECT_DOUBLE_EQ(report["pair_level"].get<double>(), 0.05 / 12);
  ASSERT_EQ(report["pairs"].size(), static_cast<std::size_t>(kHosts * (kHosts - 1)));
  for (const auto& pair : report["pairs"]) {
    const Json& c = pair.at("comparison");
    const Json& seen = pair.at("seen");
    std::cout << "pair " << pair.at("from").get<std::string>() << " -> "
              << pair.at("to").get<std::string>() << ": KS " << c.at("ks") << " (limit "
              << c.at("ks_limit") << "), loss " << seen.at("loss_rate") << " (expected "
              << pair.at("expected").at("loss_rate") << "), p50 " << seen.at("p50_ms")
              << " ms (expected " << pair.at("judged_expected").at("p50_ms") << "), p99 "
              << seen.at("p99_ms") << " ms (expected " << pair.at("judged_expected").at("p99_ms")
              << "): " << pair.at("verdict") << '\n';
    EXPECT_EQ(pair["verdict"], "pass") << pair.dump();
  }
  // Every host is back in the phase it held.
  const Json statuses = jitterd_e2e::parse_json(fleet({"--json", "status"}).out);
  for (int i = 0; i < kHosts; ++i)
    EXPECT_EQ(statuses["hosts"][i]["sessions"][0]["phase"], "p") << statuses.dump();

  // The saved probes: 1000 a pair through each phase, the calibration's never faster than the
  // two 10 ms constants (the kernel's receive stamp, not jitterd's).
  const Json run = jitterd_e2e::parse_json(jitterd_e2e::read_file(saved));
  ASSERT_TRUE(run.contains("calibration")) << run.dump().substr(0, 500);
  EXPECT_EQ(run["calibration_phase"], "c");
  ASSERT_EQ(run["calibration"].size(), static_cast<std::size_t>(kHosts * (kHosts - 1)));
  for (const auto& pair : run["calibration"]) {
    ASSERT_EQ(pair["rtt_ns"].size(), 1000u) << pair["from"] << " -> " << pair["to"];
    std::size_t replies = 0;
    for (const auto& r : pair["rtt_ns"]) {
      if (r.is_null()) continue;
      ++replies;
      EXPECT_GE(r.get<std::int64_t>(), 20'000'000) << pair["from"] << " -> " << pair["to"];
    }
    EXPECT_GE(replies, 990u) << "no loss in the calibration phase";
  }
  for (const auto& pair : run["pairs"]) EXPECT_EQ(pair["rtt_ns"].size(), 1000u);

  // The same probes judged against profiles 10 % off: every pair's delay is 2 ms short.
  std::vector<std::string> wrong = validate_args("wrong");
  wrong.insert(wrong.end(), {"--probes", saved});
  const Completed failed = fleet(wrong);
  std::cout << "against 10 % more delay:\n" << failed.out << failed.err;
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  // Every pair has its row; the ones that fail say so with the figure. Not every pair need fail:
  // 2 ms on a pair's 20 ms +- 4.2 ms, beside the bed's noise, is found by KS in most pairs of a run
  // (docs/validation.md, "Fleets", has the counts), and the run fails when one does.
  int failing = 0;
  for (int from = 0; from < kHosts; ++from) {
    for (int to = 0; to < kHosts; ++to) {
      if (from == to) continue;
      const std::string pair = "h" + std::to_string(from) + " -> h" + std::to_string(to);
      const auto at = failed.out.find(pair);
      ASSERT_NE(at, std::string::npos) << pair << '\n' << failed.out;
      const std::string row = failed.out.substr(at, failed.out.find('\n', at) - at);
      if (row.find("FAIL: ") != std::string::npos) ++failing;
    }
  }
  EXPECT_GE(failing, 1) << failed.out;
  std::cout << failing << " of 12 pairs failed against 10 % more delay\n";
}

class E2eFleetValidateNoPing : public E2eFleetValidate {
 protected:
  bool allows_ping(int i) const override { return i != 1; }
};

TEST_F(E2eFleetValidateNoPing, AHostWhoseKernelRefusesPingSocketsIsNamedWithTheSysctl) {
  std::vector<std::string> args = validate_args("good", "10");
  args.insert(args.end(), {"--interval", "10ms"});
  const Completed run = fleet(args);
  EXPECT_EQ(run.exit_code, 4) << run.out << run.err;
  EXPECT_NE(run.err.find("h1: "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("net.ipv4.ping_group_range"), std::string::npos) << run.err;
}

}  // namespace

// Kernel-timed switches (config switch_gate "kernel"): every host's jitterd stages the committed
// apply (its gated root installed at the commit, passing packets on unchanged) and arms each
// committed switch in its kernel ahead of the deadline, and the kernel moves the traffic then,
// the apply's as the switches'. Judged packet
// by packet: one thread sends datagrams out of every host's shaped jta (a socket made in each
// host's namespace) to the client's namespace while the fleet switches; all share the guest's one
// kernel, whose CLOCK_MONOTONIC the gates compare with, so when each datagram was classified is
// bounded from both sides (tests/kernel/one_way_probes.hpp). Near each deadline the prober sends
// to every host in io_uring batches, each datagram stamped by the kernel as it enters the qdisc.
// JITTERD_E2E_GATED_HOSTS sets the number of hosts (4 by default; docs/benchmarks.md has a run
// with 16).
class E2eFleetGated : public E2eFleet {
 protected:
  bool gated() const override { return true; }
  int host_count() const override {
    const char* hosts = std::getenv("JITTERD_E2E_GATED_HOSTS");
    return hosts ? std::max(1, std::atoi(hosts)) : kHosts;
  }
};

TEST_F(E2eFleetGated, EveryHostsKernelSwitchesAtTheDeadlineDatagramByDatagram) {
  if (auto reason = jitterd_test::gate_unavailable_reason()) GTEST_SKIP() << *reason;
  const int hosts = host_count();
  // JITTERD_E2E_GATED_SWITCHES: more landings for a benchmark's p99 (a switch of 16 hosts takes
  // about a minute in the bed).
  const char* switches_asked = std::getenv("JITTERD_E2E_GATED_SWITCHES");
  const int switches = switches_asked ? std::max(2, std::atoi(switches_asked)) : 4;
  // Phases 5 and 200 ms apart: a low datagram is judged high only when the guest stalled 195 ms (a
  // stall of 50 to 130 ms was seen with four guests on two CPUs, against the shared profile's 50).
  // The limit holds the prober's batches near a deadline, 200 ms long.
  constexpr auto kGateLow = std::chrono::milliseconds(5),
                 kGateHigh = std::chrono::milliseconds(200);
  for (const auto& h : hosts_) {
    h->dir.write("profiles/gate.json", R"({"version": 1, "name": "gate", "description": "gated e2e",
      "phases": {"low": {"delay": {"latency": "5ms"}, "limit": 20000},
                 "high": {"delay": {"latency": "200ms"}, "limit": 20000}}})");
  }
  std::vector<jitterd_test::OneWayPath> paths;
  for (int i = 0; i < hosts; ++i)
    paths.push_back({net_->host(i), "198.18." + std::to_string(i) + ".2"});
  jitterd_test::ProbeControl control;
  jitterd_test::OneWayRun probes;
  std::exception_ptr probe_failure;
  std::thread prober([&] {
    try {
      // A round per 2 ms (0.5 ms per host past four) away from the deadlines, back to back near
      // them: the prober runs at a real-time priority, and the ssh logins, jitterds and fleet need
      // most of the guest's one CPU (with a round per 1 ms, a fleet's clock exchange once got no
      // reply in 60 s in CI's kernel suite; a round of 16 hosts per 2 ms is the whole CPU).
      const auto interval = std::max(2000us, hosts * 500us);
      probes = jitterd_test::probe_one_way(
          paths, net_->client(), 7432, jitterd_test::ProbeClock::now() + 900s, interval, &control);
    } catch (...) {
      probe_failure = std::current_exception();
    }
  });
  // The deadline is the fleet's choice, known to the hosts at the commit (the lead, 2 s, before
  // it): read from h0's status over its socket (status_by_socket: no process started), it tells
  // the prober where to send back to back. Not read again until the prober is past it.
  std::thread watcher([&] {
    bool said_none = false;
    while (!control.stop) {
      auto next_look = jitterd_test::ProbeClock::now() + 50ms;
      try {
        const Json sessions = hosts_[0]->status_by_socket().at("sessions");
        const Json next =
            sessions.empty() ? Json() : sessions.at(0).value("next_transition", Json());
        if (next.is_object()) {
          const auto focus = next["deadline"]["monotonic_ns"].get<std::int64_t>();
          control.focus_ns = focus;
          next_look = std::max(
              next_look, jitterd_test::ProbeClock::time_point(std::chrono::nanoseconds(focus)) +
                             jitterd_test::kProbeFocus + 5ms);
        }
      } catch (const std::exception& e) {
        // A status that did not come (a starved guest) only leaves the prober unfocused. Before
        // the apply h0 has no session: said once.
        const bool none = std::string(e.what()).find("no jitterd session") != std::string::npos;
        if (!none || !said_none) std::cerr << "status of h0: " << e.what() << '\n';
        said_none = said_none || none;
      }
      while (!control.stop && jitterd_test::ProbeClock::now() < next_look)
        std::this_thread::sleep_for(10ms);
    }
  });
  // An assertion that ends the test early stops and joins the prober too.
  struct Joiner {
    jitterd_test::ProbeControl& control;
    std::thread& prober;
    std::thread& watcher;
    ~Joiner() {
      control.stop = true;
      if (prober.joinable()) prober.join();
      if (watcher.joinable()) watcher.join();
    }
  } joiner{control, prober, watcher};
  // The apply of "high" (staged in each host's kernel at the commit, passing packets on unchanged
  // until the deadline), then switches alternating low and high; each host's deadline as its own
  // kernel got it (CLOCK_MONOTONIC, from its status), and the fleet's deadline on the wall clock.
  // Unshaped, a datagram takes well under the low phase's 5 ms: the judge's "low" before the first
  // deadline.
  std::vector<std::vector<jitterd_test::ProbeClock::time_point>> deadlines(hosts);
  std::vector<std::int64_t> fleet_deadlines;
  std::vector<std::int64_t> conversion_ns;  // host's monotonic deadline less the fleet's, converted
  // From here every datagram went through a host's gated root (counted against its counters).
  std::optional<jitterd_test::ProbeClock::time_point> staged;
  for (int k = 0; k <= switches; ++k) {
    const char* phase = k % 2 == 0 ? "high" : "low";
    // The apply's commit installs each host's gated root (a prio root, two netems, the bpf
    // program, a ledger write), all hosts at once on the guest's one CPU: 16 hosts alone took up
    // to 3 s, and 4 hosts beside CI's other guests 2.3 s, past the default lead of 2 s (the hosts
    // then report the landing late, at their arm's write).
    const std::string lead = std::to_string(std::max(6, hosts)) + "s";
    const Completed switched =
        k == 0 ? fleet({"--json", "apply", "gate", "--phase", "high", "--lead", lead})
               : fleet({"--json", "switch", phase});
    if (k == 0) {
      staged = jitterd_test::ProbeClock::now();
      for (int i = 0; i < hosts; ++i) {
        const Json root = hosts_[i]->root_qdisc_by_tc();
        EXPECT_EQ(root.value("kind", ""), "prio") << "h" << i << ": " << root.dump();
        EXPECT_EQ(root.value("handle", ""), "1a7e:") << "h" << i;
      }
    }
    ASSERT_EQ(switched.exit_code, 0) << switched.out << switched.err;
    const Json report = jitterd_e2e::parse_json(switched.out);
    const auto fleet_deadline = report.at("deadline_realtime_ns").get<std::int64_t>();
    fleet_deadlines.push_back(fleet_deadline);
    // This process's realtime-to-monotonic offset.
    const std::int64_t offset = jitterd_test::realtime_offset().count();
    for (int i = 0; i < hosts; ++i) {
      const Json& h = report.at("hosts").at(i);
      EXPECT_EQ(h.value("gated", false), true) << h.dump();
      EXPECT_EQ(h.value("late_ns", std::int64_t{-1}), 0) << h.dump();
    }
    for (int i = 0; i < hosts; ++i) {
      const Json statuses = hosts_[i]->status_by_jitterctl();
      const Json& recent = statuses.at("sessions").at(0).at("transitions").at("recent");
      ASSERT_FALSE(recent.empty()) << statuses.dump();
      const Json& last = recent.back();
      EXPECT_EQ(last.value("phase", ""), phase) << last.dump();
      EXPECT_EQ(last.value("gated", false), true) << last.dump();
      const auto mono = last.at("deadline").at("monotonic_ns").get<std::int64_t>();
      deadlines[i].push_back(jitterd_test::ProbeClock::time_point(std::chrono::nanoseconds(mono)));
      conversion_ns.push_back(mono - (fleet_deadline - offset));
    }
  }
  std::this_thread::sleep_for(300ms);  // the last high datagrams' 200 ms
  control.stop = true;
  if (prober.joinable()) prober.join();
  if (watcher.joinable()) watcher.join();
  if (probe_failure) std::rethrow_exception(probe_failure);

  // A gated lane's counters are both bands': every datagram went through one or the other (half
  // of them through each here), and what jitterd reports is at most what tc reads just after.
  for (int i = 0; i < hosts; ++i) {
    const auto sent = static_cast<std::uint64_t>(std::count_if(
        probes.probes.begin(), probes.probes.end(), [&](const jitterd_test::OneWayProbe& p) {
          return p.path == static_cast<std::size_t>(i) && p.before >= *staged;
        }));
    const auto reported = hosts_[i]
                              ->status_by_jitterctl()
                              .at("sessions")
                              .at(0)
                              .at("counters")
                              .at("packets")
                              .get<std::uint64_t>();
    std::uint64_t by_tc = 0;
    for (const auto& q : jitterd_e2e::parse_json(jitterd_test::run(
             "ip netns exec " + net_->host(i) + " tc -s -j qdisc show dev jta"))) {
      if (q.value("kind", "") == "netem") by_tc += q.at("packets").get<std::uint64_t>();
    }
    EXPECT_GE(reported, sent) << "h" << i << ": the lane's packets against the datagrams sent";
    EXPECT_LE(reported, by_tc) << "h" << i << ": the lane's packets against both bands by tc";
  }

  // Each landing is shown to lie between the datagrams that met the old phase and those that met
  // the new one (judge_switches); `bounds_ms` is the farther of the two bounds plus the host's
  // deadline's distance from the fleet's: how far from the fleet's deadline the change is shown to
  // have landed.
  std::vector<double> bounds_ms;
  for (int i = 0; i < hosts; ++i) {
    const auto verdict = jitterd_test::judge_switches(probes, static_cast<std::size_t>(i),
                                                      deadlines[i], {kGateLow, kGateHigh});
    EXPECT_EQ(verdict.wrong, 0) << "h" << i << ": " << verdict.first_wrong;
    EXPECT_LE(verdict.lost, verdict.judged / 50) << "h" << i;
    // The batches near each deadline asked for the kernel's queue stamps, and got them.
    EXPECT_GT(verdict.stamped, switches * 10) << "h" << i;
    std::cout << "h" << i << ": " << verdict.judged << " datagrams judged (" << verdict.stamped
              << " with the queue stamp), " << verdict.lost
              << " lost; landing shown within (-before, +after] of each deadline (ms):";
    for (std::size_t k = 0; k < deadlines[i].size(); ++k) {
      std::cout << ' ' << verdict.before_ms[k] << '/' << verdict.after_ms[k];
      const double conversion_ms =
          std::abs(static_cast<double>(
              conversion_ns[k * static_cast<std::size_t>(hosts) + static_cast<std::size_t>(i)])) /
          1e6;
      bounds_ms.push_back(std::max(verdict.before_ms[k], verdict.after_ms[k]) + conversion_ms);
      // The instant was approached from both sides. The bound catches a prober that stalled
      // across a deadline (its pace is the guest's, and the host deschedules the guest at times).
      EXPECT_LT(verdict.before_ms[k] + verdict.after_ms[k], 50.0) << "h" << i << " deadline " << k;
    }
    std::cout << '\n';
  }
  // Where the hosts' deadlines lie against the fleet's: each host's wall-to-monotonic conversion
  // (one clock here, so this is the conversion alone: jitterd's now_stamp). Well within 1 ms.
  for (const auto c : conversion_ns) EXPECT_LT(std::abs(c), 200'000) << "ns";
  std::sort(conversion_ns.begin(), conversion_ns.end());
  std::cout << "hosts' deadlines against the fleet's, µs: min " << conversion_ns.front() / 1000.0
            << ", max " << conversion_ns.back() / 1000.0 << '\n';
  std::sort(bounds_ms.begin(), bounds_ms.end());
  const auto at = [&](double q) {  // nearest rank
    const auto rank =
        static_cast<std::size_t>(std::ceil(q * static_cast<double>(bounds_ms.size())));
    return bounds_ms[std::max<std::size_t>(rank, 1) - 1];
  };
  std::cout << bounds_ms.size() << " landings shown within (ms) of the fleet's deadline: median "
            << at(0.5) << ", p90 " << at(0.9) << ", p99 " << at(0.99) << ", max "
            << bounds_ms.back() << "; within 1 ms: "
            << std::count_if(bounds_ms.begin(), bounds_ms.end(), [](double b) { return b <= 1.0; })
            << '\n';
}
