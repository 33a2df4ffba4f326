// jitterctl fleet against fake jitterds (tests/ctl/fake_jitterd): the inventory reader's
// diagnostics, the NTP-style clock arithmetic, and the two-phase protocol as the client drives it:
// a refusal anywhere aborts every staged token and commits nothing; when all are ready, one commit
// per host at one deadline, and the skew from the hosts' transition records. The daemon's side of
// stage/commit/abort is tests/daemon/protocol_test.cpp's; real hosts over ssh are
// tests/e2e/fleet_test.cpp's.
#include "fleet.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "../support/temp_dir.hpp"
#include "cli.hpp"
#include "event_merge.hpp"
#include "fake_jitterd.hpp"
#include "fleet_rollback.hpp"
#include "inventory.hpp"
#include "shaper/profile.hpp"

using namespace std::chrono_literals;

namespace jitterctl {
namespace {

using Json = nlohmann::json;
using testing::FakeJitterd;

// ---- The inventory ---------------------------------------------------------------------------

shaper::Diagnostics problems_of(const std::string& text) {
  shaper::Diagnostics d;
  read_inventory(text, d);
  return d;
}

TEST(Inventory, ReadsHostsOverSshAndLocalSockets) {
  shaper::Diagnostics d;
  const Inventory inv = read_inventory(R"({"version": 1, "hosts": [
      {"name": "a", "host": "ssh://root@198.18.0.1:2222/run/j.sock", "interface": "eth0",
       "profile": "wan"},
      {"socket": "/run/jitterd/jitterd.sock", "interface": "veth0",
       "target": {"netns": "blue", "via": "host-veth"}},
      {"host": "ssh://h3", "interface": "eth1", "target": {"pid": 42}}]})",
                                       d);
  ASSERT_TRUE(d.empty()) << d.front().to_string();
  ASSERT_EQ(inv.hosts.size(), 3u);
  EXPECT_EQ(inv.hosts[0].name, "a");
  ASSERT_TRUE(inv.hosts[0].remote);
  EXPECT_EQ(inv.hosts[0].remote->user, "root");
  EXPECT_EQ(inv.hosts[0].remote->port, 2222);
  EXPECT_EQ(inv.hosts[0].remote->socket_path, "/run/j.sock");
  EXPECT_EQ(inv.hosts[0].profile, "wan");
  EXPECT_EQ(inv.hosts[1].name, "/run/jitterd/jitterd.sock") << "named by its address by default";
  EXPECT_FALSE(inv.hosts[1].remote);
  ASSERT_TRUE(inv.hosts[1].target);
  EXPECT_EQ(inv.hosts[1].target->to_json(), (Json{{"netns", "blue"}, {"via", "host-veth"}}));
  EXPECT_EQ(inv.hosts[2].target->to_json(), (Json{{"pid", 42}}));
}

TEST(Inventory, ReadsKubernetesNodesLikeSshHosts) {
  shaper::Diagnostics d;
  const Inventory inv = read_inventory(R"({"version": 1, "hosts": [
      {"host": "k8s://node-a", "interface": "eth0"},
      {"name": "b", "host": "k8s://node-b/run/j.sock", "interface": "eth1",
       "target": {"pod": "default/redis-0"}}]})",
                                       d);
  ASSERT_TRUE(d.empty()) << d.front().to_string();
  ASSERT_EQ(inv.hosts.size(), 2u);
  ASSERT_TRUE(inv.hosts[0].remote);
  EXPECT_EQ(inv.hosts[0].remote->transport, Transport::kKubernetes);
  EXPECT_EQ(inv.hosts[0].name, "k8s://node-a");
  EXPECT_EQ(inv.hosts[0].probe_address, "node-a") << "the node's name, as the ssh host is";
  EXPECT_EQ(inv.hosts[1].remote->socket_path, "/run/j.sock");
  const auto bad =
      problems_of(R"({"version": 1, "hosts": [{"host": "k8s://Node_A", "interface": "eth0"}]})");
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad.front().where, "/hosts/0/host");
  EXPECT_NE(bad.front().message.find("not a Kubernetes node name"), std::string::npos);
}

TEST(Inventory, EachProblemNamesItsPointer) {
  const struct {
    const char* text;
    const char* where;
  } cases[] = {
      {R"({"hosts": [{"socket": "/s", "interface": "e"}]})", "/version"},
      {R"({"version": 1, "hosts": []})", "/hosts"},
      {R"({"version": 1, "hosts": [{"socket": "/s"}]})", "/hosts/0/interface"},
      {R"({"version": 1, "hosts": [{"interface": "e"}]})", "/hosts/0"},
      {R"({"version": 1, "hosts": [{"socket": "/s", "host": "ssh://x", "interface": "e"}]})",
       "/hosts/0"},
      {R"({"version": 1, "hosts": [{"host": "http://x", "interface": "e"}]})", "/hosts/0/host"},
      {R"({"version": 1, "hosts": [{"socket": "/s", "interface": "e", "target": {}}]})",
       "/hosts/0/target"},
      {R"({"version": 1, "hosts": [{"socket": "/s", "interface": "e", "colour": 1}]})",
       "/hosts/0/colour"},
      {R"({"version": 1, "hosts": [{"socket": "/s", "interface": "e"},
                                   {"socket": "/s", "interface": "f"}]})",
       "/hosts/1"},
      {R"({"version": 1, "hosts": [)", "1:26"},
  };
  for (const auto& c : cases) {
    const auto d = problems_of(c.text);
    ASSERT_FALSE(d.empty()) << c.text;
    EXPECT_EQ(d.front().where, c.where) << c.text << ": " << d.front().to_string();
    EXPECT_FALSE(d.front().message.empty());
  }
}

TEST(Inventory, TheProbeAddressDefaultsToTheSshHostAndALocalSocketHasNone) {
  shaper::Diagnostics d;
  const Inventory inv = read_inventory(R"({"version": 1, "hosts": [
      {"host": "ssh://root@198.18.0.1:2222/run/j.sock", "interface": "eth0"},
      {"host": "ssh://redis-b.example", "interface": "eth0", "probe_address": "10.0.0.12"},
      {"socket": "/run/jitterd/jitterd.sock", "interface": "veth0"},
      {"socket": "/run/j2.sock", "interface": "veth1", "probe_address": "198.18.3.1"}]})",
                                       d);
  ASSERT_TRUE(d.empty()) << d.front().to_string();
  EXPECT_EQ(inv.hosts[0].probe_address, "198.18.0.1");
  EXPECT_EQ(inv.hosts[1].probe_address, "10.0.0.12") << "given, it wins over the ssh host";
  EXPECT_EQ(inv.hosts[2].probe_address, "") << "fleet validate asks for one";
  EXPECT_EQ(inv.hosts[3].probe_address, "198.18.3.1");
  const auto wrong = problems_of(
      R"({"version": 1, "hosts": [{"socket": "/s", "interface": "e", "probe_address": 7}]})");
  ASSERT_FALSE(wrong.empty());
  EXPECT_EQ(wrong.front().where, "/hosts/0/probe_address");
}

// ---- The clock arithmetic ----------------------------------------------------------------------

TEST(FleetClock, FourTimestampsGiveTheOffsetAndTheRoundTrip) {
  // The host's clock 5 ms ahead; 1 ms each way; the host takes 200 µs.
  const Nanoseconds t0 = 1000s;
  const Nanoseconds t1 = t0 + 1ms + 5ms;
  const Nanoseconds t2 = t1 + 200us;
  const Nanoseconds t3 = t0 + 1ms + 200us + 1ms;
  const ClockSample s = clock_sample(t0, t1, t2, t3);
  EXPECT_EQ(s.offset, 5ms);
  EXPECT_EQ(s.round_trip, 2ms);
  // 3 ms out and 1 ms back: the estimate is off by half the difference, within half the trip.
  const ClockSample lopsided = clock_sample(t0, t0 + 3ms + 5ms, t0 + 3ms + 5ms, t0 + 4ms);
  EXPECT_EQ(lopsided.offset, 6ms);
  EXPECT_EQ(lopsided.round_trip, 4ms);
  const auto best = best_clock_sample({lopsided, s});
  ASSERT_TRUE(best);
  EXPECT_EQ(best->offset, 5ms);
  EXPECT_FALSE(best_clock_sample({}));
  EXPECT_EQ(skew_of({3ms, 1ms, 2ms}), 2ms);
  EXPECT_EQ(skew_of({7ms}), 0ms);
  EXPECT_FALSE(skew_of({}));
}

// ---- The two phases, against fakes -------------------------------------------------------------

// Hosts whose requests of one method are answered only once all of them have received theirs.
struct Barrier {
  explicit Barrier(int hosts) : expected(hosts) {}
  const int expected;
  std::mutex mutex;
  std::condition_variable arrived_all;
  int arrived = 0;
};

// A fake jitterd that plays one fleet host: its clock, its stage answer, and after a commit at a
// deadline, a transition record acknowledged `late` after it.
class FakeHost {
 public:
  FakeHost(std::string token, std::optional<std::string> refusal, Nanoseconds late)
      : token_(std::move(token)),
        refusal_(std::move(refusal)),
        late_(late),
        server_([this](const Json& r) { return answer(r); }) {}
  // The connection closes when the commit arrives, unanswered: a host that died after staging.
  void die_at_commit() { die_at_commit_ = true; }
  // Its k-th request of `method` is answered once every host of `barrier` has received k of
  // them, or after 5 s: a fleet that waits for one host's reply before it sends the next host's
  // request gets there only by the 5 s.
  void hold(std::string method, std::shared_ptr<Barrier> barrier) {
    held_method_ = std::move(method);
    barrier_ = std::move(barrier);
  }
  // How many of its requests of the held method were answered by the barrier (not by the 5 s).
  int released_by_all() const {
    const std::lock_guard lock(mutex_);
    return released_by_all_;
  }
  // Its clock `ahead` of this process's (replies to `clock`).
  void clock_ahead(Nanoseconds ahead) { ahead_ = ahead; }
  // A subscription gets one phase-changed event per time in `at` (by this host's clock), each
  // after `pause`; none is a quiet host.
  void events(std::vector<Nanoseconds> at, std::chrono::milliseconds pause) {
    event_times_ = std::move(at);
    event_pause_ = pause;
  }
  // A stage after the first (a rollback's) is refused.
  void refuse_restore() { refuse_restore_ = true; }
  // Its status never shows a transition at the commit's deadline: a kernel that did not take it.
  void never_acknowledge() { never_acknowledge_ = true; }
  // When each request of `method` arrived, by this process's CLOCK_REALTIME.
  std::vector<Nanoseconds> arrival_times(const std::string& method) const {
    const std::lock_guard lock(mutex_);
    std::vector<Nanoseconds> out;
    for (const auto& [m, at] : arrivals_)
      if (m == method) out.push_back(at);
    return out;
  }

  std::vector<std::string> methods() const {
    std::vector<std::string> out;
    for (const auto& r : server_.requests()) out.push_back(r.value("method", ""));
    return out;
  }
  std::vector<Json> requests_of(const std::string& method) const {
    std::vector<Json> out;
    for (const auto& r : server_.requests())
      if (r.value("method", "") == method) out.push_back(r);
    return out;
  }
  const std::string& socket() const { return server_.socket_path(); }

 private:
  static Json stamp(Nanoseconds realtime) {
    // One clock for both: the fake has no monotonic clock of its own to keep apart.
    return {{"monotonic_ns", realtime.count()}, {"realtime_ns", realtime.count()}};
  }
  FakeJitterd::Response answer(const Json& r) {
    const std::string method = r.value("method", "");
    const Json& params = r["params"];
    {
      const std::lock_guard lock(mutex_);
      arrivals_.emplace_back(method, std::chrono::system_clock::now().time_since_epoch());
    }
    if (barrier_ && method == held_method_) {
      std::unique_lock lock(barrier_->mutex);
      const int round = ++held_;
      ++barrier_->arrived;
      barrier_->arrived_all.notify_all();
      const bool all = barrier_->arrived_all.wait_for(
          lock, 5s, [&] { return barrier_->arrived >= barrier_->expected * round; });
      const std::lock_guard record(mutex_);
      released_by_all_ += all ? 1 : 0;
    }
    if (method == "clock") {
      const Nanoseconds now = std::chrono::system_clock::now().time_since_epoch() + ahead_;
      return FakeJitterd::reply(r, {{"received", stamp(now)}, {"replied", stamp(now)}});
    }
    if (method == "stage" && refusal_)
      return {
          {FakeJitterd::error_line(r, "permission-denied", *refusal_, "/params/params/interface")}};
    if (method == "stage" && refuse_restore_ && ++stages_ > 1)
      return {{FakeJitterd::error_line(r, "not-found", "no profile named two", "/params/params")}};
    if (method == "stage")
      return FakeJitterd::reply(
          r, {{"token", token_}, {"method", params["method"]}, {"expires", stamp(0s)}});
    if (method == "abort") return FakeJitterd::reply(r, {{"token", params["token"]}});
    if (method == "subscribe" && event_times_) {
      FakeJitterd::Response events{{FakeJitterd::ok_line(r, {{"subscribed", true}})}, event_pause_};
      for (std::size_t i = 0; i < event_times_->size(); ++i) {
        events.chunks.push_back(Json{{"event", "phase-changed"},
                                     {"seq", i + 1},
                                     {"interface", "veth0"},
                                     {"phase", "high"},
                                     {"at", stamp((*event_times_)[i])}}
                                    .dump() +
                                "\n");
      }
      return events;
    }
    if (method == "subscribe") {
      FakeJitterd::Response events{{FakeJitterd::ok_line(r, {{"subscribed", true}})}};
      for (int seq = 1; seq <= 2; ++seq) {
        events.chunks.push_back(Json{{"event", "phase-changed"},
                                     {"seq", seq},
                                     {"interface", "veth0"},
                                     {"phase", "high"},
                                     {"at", stamp(1s * seq)}}
                                    .dump() +
                                "\n");
      }
      return events;
    }
    if (method == "commit" && die_at_commit_) return {{}, 0ms, true};
    if (method == "commit") {
      // A rollback's commit is "now": it keeps the change's deadline for the records below.
      if (params["at"] != "now")
        deadline_ = *shaper::parse_utc_timestamp(params["at"].get<std::string>());
      return FakeJitterd::reply(r, {{"token", params["token"]},
                                    {"method", "switch"},
                                    {"at", stamp(deadline_)},
                                    {"sessions", Json::array()},
                                    {"cleared", Json::array()}});
    }
    // status: an older transition, then the one at the deadline.
    Json recent = {{{"phase", "low"},
                    {"deadline", stamp(deadline_ - 10s)},
                    {"applied", stamp(deadline_ - 9s)}}};
    if (!never_acknowledge_)
      recent.push_back({{"phase", "high"},
                        {"deadline", stamp(deadline_)},
                        {"applied", stamp(deadline_ + late_)}});
    // Before any commit: the phase it held, "low".
    return FakeJitterd::reply(r, {{"sessions",
                                   {{{"interface", "veth0"},
                                     {"state", "active"},
                                     {"profile", "two"},
                                     {"phase", deadline_ == 0s ? "low" : "high"},
                                     {"transitions", {{"count", 2}, {"recent", recent}}}}}}});
  }

  std::string token_;
  std::optional<std::string> refusal_;
  Nanoseconds late_;
  Nanoseconds deadline_{0};
  bool die_at_commit_ = false;
  bool refuse_restore_ = false;
  bool never_acknowledge_ = false;
  Nanoseconds ahead_{0};
  std::optional<std::vector<Nanoseconds>> event_times_;
  std::chrono::milliseconds event_pause_{0};
  int stages_ = 0;
  std::string held_method_;
  std::shared_ptr<Barrier> barrier_;
  int held_ = 0;
  mutable std::mutex mutex_;  // arrivals_, released_by_all_: the server writes, the test reads
  std::vector<std::pair<std::string, Nanoseconds>> arrivals_;
  int released_by_all_ = 0;
  FakeJitterd server_;
};

struct FleetRun {
  int code;
  std::string out;
  std::string err;
};

FleetRun run_fleet(const std::vector<std::unique_ptr<FakeHost>>& hosts,
                   std::vector<std::string> args) {
  test_support::TempDir dir("jitterctl-fleet-");
  Json inventory = {{"version", 1}, {"hosts", Json::array()}};
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    inventory["hosts"].push_back({{"name", "h" + std::to_string(i)},
                                  {"socket", hosts[i]->socket()},
                                  {"interface", "veth0"}});
  }
  const std::string path = dir.path() + "/inventory.json";
  std::ofstream(path) << inventory.dump();
  args.insert(args.begin(), {"fleet", "--inventory", path});
  std::ostringstream out, err;
  const int code = run_jitterctl(args, "/nonexistent/default.sock", out, err);
  return {code, out.str(), err.str()};
}

TEST(Fleet, ARefusalAnywhereAbortsEveryStagedChangeAndCommitsNone) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  hosts.push_back(std::make_unique<FakeHost>("t0", std::nullopt, 0ms));
  hosts.push_back(std::make_unique<FakeHost>("t1", std::nullopt, 0ms));
  hosts.push_back(std::make_unique<FakeHost>("t2", "veth0 is not in the interface allowlist", 0ms));
  hosts.push_back(std::make_unique<FakeHost>("t3", std::nullopt, 0ms));
  const FleetRun r = run_fleet(hosts, {"switch", "high"});
  EXPECT_EQ(r.code, 5) << r.out << r.err;  // permission-denied's exit code
  EXPECT_NE(r.out.find("no host changed: 3 of 4 were ready"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("h2: veth0 is not in the interface allowlist"), std::string::npos) << r.err;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    EXPECT_TRUE(hosts[i]->requests_of("commit").empty()) << "h" << i;
    const auto stage = hosts[i]->requests_of("stage");
    ASSERT_EQ(stage.size(), 1u) << "h" << i;
    EXPECT_EQ(stage[0]["params"], (Json{{"method", "switch"},
                                        {"params", {{"interface", "veth0"}, {"phase", "high"}}}}));
    const auto aborts = hosts[i]->requests_of("abort");
    if (i == 2) {
      EXPECT_TRUE(aborts.empty()) << "nothing staged there";
    } else {
      ASSERT_EQ(aborts.size(), 1u) << "h" << i;
      EXPECT_EQ(aborts[0]["params"]["token"], "t" + std::to_string(i));
    }
  }
}

TEST(Fleet, WhenEveryHostIsReadyEachCommitsAtOneDeadlineAndTheSkewIsReported) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  const Nanoseconds late[] = {100us, 300us, 250us, 120us};
  for (int i = 0; i < 4; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, late[i]));
  const FleetRun r = run_fleet(hosts, {"--json", "switch", "high", "--lead", "300ms"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_EQ(report["skew_ns"], Nanoseconds(200us).count());
  std::set<std::string> deadlines;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const auto commits = hosts[i]->requests_of("commit");
    ASSERT_EQ(commits.size(), 1u);
    EXPECT_EQ(commits[0]["params"]["token"], "t" + std::to_string(i));
    deadlines.insert(commits[0]["params"]["at"].get<std::string>());
    EXPECT_TRUE(hosts[i]->requests_of("abort").empty());
    // clock first (five exchanges), then stage, commit, and status after the deadline.
    const auto methods = hosts[i]->methods();
    ASSERT_GE(methods.size(), 8u);
    EXPECT_EQ(std::count(methods.begin(), methods.end(), "clock"), 5);
    const Json& h = report["hosts"][i];
    EXPECT_EQ(h["late_ns"], late[i].count());
    EXPECT_TRUE(h.contains("offset_ns"));
    // The fake's clock is this process's: the offset is within the round trip.
    EXPECT_LE(std::abs(h["offset_ns"].get<std::int64_t>()),
              h["round_trip_ns"].get<std::int64_t>() + 1);
  }
  EXPECT_EQ(deadlines.size(), 1u) << "one deadline for every host";
}

// A request per host, one after another, makes a fleet's step cost the sum of the hosts' round
// trips, and the last host's commit later than the first's by all the others' (over a slow control
// path, past the lead): each step's requests are sent to every host before any reply is read.
TEST(Fleet, EachStepsRequestsAreInFlightTogetherNotOneRoundTripAfterAnother) {
  for (const std::string method : {"clock", "status", "stage", "commit"}) {
    SCOPED_TRACE(method);
    std::vector<std::unique_ptr<FakeHost>> hosts;
    const auto barrier = std::make_shared<Barrier>(4);
    for (int i = 0; i < 4; ++i) {
      hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
      hosts.back()->hold(method, barrier);
    }
    const FleetRun r = run_fleet(hosts, {"--json", "switch", "high", "--lead", "2s"});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const auto requests = hosts[i]->requests_of(method).size();
      EXPECT_GE(requests, 1u) << "h" << i;
      EXPECT_EQ(hosts[i]->released_by_all(), static_cast<int>(requests))
          << "h" << i << " answered a " << method << " before every host had its own";
    }
    // Five clock exchanges each, sent together, still give offsets within their round trips.
    const Json report = Json::parse(r.out);
    for (const Json& h : report["hosts"]) {
      EXPECT_LE(std::abs(h["offset_ns"].get<std::int64_t>()),
                h["round_trip_ns"].get<std::int64_t>() + 1);
    }
  }
}

TEST(Fleet, StatusAsksEveryHostAtOnceAndReportsEachHostsSessions) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  const auto barrier = std::make_shared<Barrier>(3);
  for (int i = 0; i < 3; ++i) {
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 0ms));
    hosts.back()->hold("status", barrier);
  }
  const FleetRun r = run_fleet(hosts, {"--json", "status"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Json report = Json::parse(r.out);
  ASSERT_EQ(report["hosts"].size(), 3u);
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    EXPECT_EQ(hosts[i]->released_by_all(), 1) << "h" << i;
    EXPECT_EQ(report["hosts"][i]["name"], "h" + std::to_string(i));
    EXPECT_EQ(report["hosts"][i]["sessions"][0]["phase"], "low") << report.dump();
  }
}

TEST(Fleet, ApplyNeedsAProfileFromTheCommandLineOrTheInventoryBeforeAnyHostIsAsked) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  hosts.push_back(std::make_unique<FakeHost>("t0", std::nullopt, 0ms));
  const FleetRun r = run_fleet(hosts, {"apply"});
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("h0: no profile"), std::string::npos) << r.err;
  EXPECT_TRUE(hosts[0]->methods().empty());
}

TEST(Fleet, SubscribeMergesEveryHostsEventsTaggedWithTheHost) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 0ms));
  const FleetRun r = run_fleet(hosts, {"--json", "subscribe", "--count", "6"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::multiset<std::string> seen;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const Json e = Json::parse(line);
    EXPECT_EQ(e["event"], "phase-changed") << line;
    seen.insert(e["host"].get<std::string>() + "/" + std::to_string(e["seq"].get<int>()));
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"h0/1", "h0/2", "h1/1", "h1/2", "h2/1", "h2/2"}));
  for (const auto& h : hosts) {
    const auto subscribed = h->requests_of("subscribe");
    ASSERT_EQ(subscribed.size(), 1u);
    EXPECT_EQ(subscribed[0]["params"], (Json{{"interfaces", {"veth0"}}}));
  }
}

TEST(Fleet, AHostLostAtCommitHasEveryHostThatCommittedRolledBackAfterTheDeadline) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
  hosts[1]->die_at_commit();
  const FleetRun r = run_fleet(hosts, {"--json", "switch", "high", "--lead", "300ms"});
  EXPECT_EQ(r.code, 4) << r.out << r.err;  // the lost host's failure; the fleet is whole again
  EXPECT_NE(r.err.find("jitterctl fleet: h1: "), std::string::npos) << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_EQ(report["rolled_back"], true) << report.dump();
  const Nanoseconds deadline(report["deadline_realtime_ns"].get<std::int64_t>());
  for (const std::size_t i : {0u, 2u}) {
    const Json& h = report["hosts"][i];
    EXPECT_TRUE(h.contains("accepted_realtime_ns")) << h.dump();
    EXPECT_EQ(h["rollback"], "done") << h.dump();
    // The change, then its undo: the phase each held before, staged and committed "now".
    const auto stages = hosts[i]->requests_of("stage");
    ASSERT_EQ(stages.size(), 2u) << "h" << i;
    EXPECT_EQ(stages[1]["params"], (Json{{"method", "switch"},
                                         {"params",
                                          {{"interface", "veth0"},
                                           {"direction", "egress"},
                                           {"set", nullptr},
                                           {"phase", "low"}}}}))
        << stages[1].dump();
    const auto commits = hosts[i]->requests_of("commit");
    ASSERT_EQ(commits.size(), 2u) << "h" << i;
    EXPECT_EQ(commits[1]["params"]["at"], "now");
    // After the change's deadline, so it lands after the change.
    const auto times = hosts[i]->arrival_times("commit");
    ASSERT_EQ(times.size(), 2u);
    EXPECT_GE(times[1], deadline) << "h" << i;
  }
  const Json& lost = report["hosts"][1];
  EXPECT_FALSE(lost.contains("accepted_realtime_ns")) << lost.dump();
  EXPECT_TRUE(lost.contains("failure")) << lost.dump();
  EXPECT_FALSE(lost.contains("rollback")) << "it never committed: nothing to put back";
  EXPECT_EQ(hosts[1]->requests_of("stage").size(), 1u);
  // The skew is of the hosts that took the change.
  EXPECT_EQ(report["skew_ns"], 0);
  for (const auto& h : hosts) EXPECT_TRUE(h->requests_of("abort").empty());
}

// Every daemon has its own work due at the deadline (its timer, or its kernel's gate and then its
// timer), so the fleet's first look for the acknowledgements comes 20 ms after it, not at it.
TEST(Fleet, NoHostIsAskedForItsStatusAtTheDeadlineItselfButSoonAfter) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
  const FleetRun r = run_fleet(hosts, {"--json", "switch", "high", "--lead", "300ms"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Nanoseconds deadline(Json::parse(r.out)["deadline_realtime_ns"].get<std::int64_t>());
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const auto commits = hosts[i]->arrival_times("commit");
    ASSERT_EQ(commits.size(), 1u);
    std::vector<Nanoseconds> after_commit;
    for (const Nanoseconds at : hosts[i]->arrival_times("status"))
      if (at > commits[0]) after_commit.push_back(at);
    ASSERT_FALSE(after_commit.empty()) << "h" << i << ": never asked for its acknowledgement";
    EXPECT_GE(after_commit.front(), deadline + 20ms) << "h" << i;
    // One look found it (the fake records the transition at the deadline).
    EXPECT_EQ(after_commit.size(), 1u) << "h" << i;
    EXPECT_LT(after_commit.front(), deadline + 20ms + 1s) << "h" << i;
  }
}

TEST(Fleet, AHostThatNeverReportsTheTransitionIsNamedWithWhatWasAwaitedAndAllAreRolledBack) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
  hosts[1]->never_acknowledge();
  const auto started = std::chrono::steady_clock::now();
  const FleetRun r =
      run_fleet(hosts, {"--json", "switch", "high", "--lead", "200ms", "--ack-wait", "300ms"});
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "--ack-wait, not the 10 s default";
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  const std::string said =
      "jitterctl fleet: h1: its commit was answered, but within 300 ms of the "
      "deadline ";
  EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("status --interface veth0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--ack-wait"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("jitterctl fleet: h0"), std::string::npos) << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_EQ(report["rolled_back"], true) << report.dump();
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    // It committed, so it is put back as well: it may have changed without saying so.
    EXPECT_EQ(report["hosts"][i]["rollback"], "done") << report["hosts"][i].dump();
    EXPECT_EQ(hosts[i]->requests_of("commit").size(), 2u) << "h" << i;
  }
  EXPECT_FALSE(report["hosts"][1].contains("accepted_realtime_ns"));
  EXPECT_TRUE(report["hosts"][0].contains("accepted_realtime_ns"));
}

TEST(Fleet, AHostThatCannotBeRolledBackIsNamedAndTheRunExits7) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
  hosts[0]->die_at_commit();
  hosts[2]->refuse_restore();
  const FleetRun r = run_fleet(hosts, {"switch", "high", "--lead", "300ms"});
  EXPECT_EQ(r.code, 7) << r.out << r.err;
  EXPECT_NE(r.out.find("h1    veth0      rolled back"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h2    veth0      ROLLBACK FAILED, keeps the change: stage: no profile "
                       "named two"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not every host took the change: 1 host(s) rolled back to what they held "
                       "before, 1 could not be"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("jitterctl fleet: h2: rollback failed, it keeps the change: stage: no "
                       "profile named two"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(hosts[2]->requests_of("commit").size(), 1u) << "the refused restore is not committed";
}

// Three hosts whose events arrive in another order than they happened: h0's clock is 5 s ahead
// and its event (at 1 s on the client's clock) comes last; h1's (2 s) first, h2's (3 s) second.
std::vector<std::unique_ptr<FakeHost>> hosts_out_of_order() {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 0ms));
  hosts[0]->clock_ahead(5s);
  hosts[0]->events({6s}, 400ms);
  hosts[1]->events({2s}, 0ms);
  hosts[2]->events({3s}, 200ms);
  return hosts;
}

std::vector<Json> lines_of(const std::string& out) {
  std::vector<Json> events;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) events.push_back(Json::parse(line));
  return events;
}

TEST(Fleet, SubscribeOrdersTheHostsEventsByTheirTimeOnTheClientsClock) {
  const auto hosts = hosts_out_of_order();
  const FleetRun r =
      run_fleet(hosts, {"--json", "subscribe", "--count", "3", "--reorder-window", "5s"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto events = lines_of(r.out);
  ASSERT_EQ(events.size(), 3u) << r.out;
  const char* expected[] = {"h0", "h1", "h2"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i]["host"], expected[i]) << r.out;
    // Its time on the client's clock: h0's 6 s less its 5 s offset (the fakes answer `clock` at
    // once, so the estimate is off by well under a millisecond; 50 ms leaves room for a stall).
    EXPECT_NEAR(events[i]["at_client_ns"].get<double>(), 1e9 * static_cast<double>(i + 1), 5e7)
        << events[i].dump();
    EXPECT_FALSE(events[i].contains("late")) << events[i].dump();
  }
}

TEST(Fleet, SubscribeWithoutAReorderWindowPrintsAsTheyArriveAndMarksTheLateOne) {
  const auto hosts = hosts_out_of_order();
  const FleetRun r =
      run_fleet(hosts, {"--json", "subscribe", "--count", "3", "--reorder-window", "0s"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto events = lines_of(r.out);
  ASSERT_EQ(events.size(), 3u) << r.out;
  EXPECT_EQ(events[0]["host"], "h1") << r.out;
  EXPECT_EQ(events[1]["host"], "h2") << r.out;
  EXPECT_EQ(events[2]["host"], "h0") << r.out;
  EXPECT_EQ(events[2]["late"], true) << r.out;
}

TEST(Fleet, AQuietHostHoldsTheOthersEventsForTheReorderWindowOnly) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 2; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 0ms));
  hosts[0]->events({}, 0ms);
  hosts[1]->events({2s}, 0ms);
  // Without the window the event would wait for h0 forever (and the test time out).
  const FleetRun r =
      run_fleet(hosts, {"--json", "subscribe", "--count", "1", "--reorder-window", "200ms"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto events = lines_of(r.out);
  ASSERT_EQ(events.size(), 1u) << r.out;
  EXPECT_EQ(events[0]["host"], "h1");
}

// ---- The merge itself, on a clock of the test's ------------------------------------------------

std::vector<std::string> drain(EventMerge& merge, Nanoseconds now) {
  std::vector<std::string> out;
  while (auto e = merge.pop_due(now))
    out.push_back(e->event.get<std::string>() + (e->late ? " late" : ""));
  return out;
}

TEST(EventMerge, AnEventGoesOutOnceEveryStreamingHostHasPassedItsTime) {
  EventMerge merge(3, 1s);
  merge.push(1, 20ms, 0ms, "b");
  merge.push(2, 30ms, 1ms, "c");
  EXPECT_TRUE(drain(merge, 2ms).empty()) << "host 0 has said nothing yet";
  merge.push(0, 10ms, 3ms, "a");
  // Every host has passed 10 ms; host 0 has not passed b's 20 ms.
  EXPECT_EQ(drain(merge, 3ms), (std::vector<std::string>{"a"}));
  merge.end(0);
  // An ended host holds nothing back; c waits for host 1 to pass 30 ms, or its window.
  EXPECT_EQ(drain(merge, 4ms), (std::vector<std::string>{"b"}));
  EXPECT_TRUE(drain(merge, 1000ms).empty());
  EXPECT_EQ(drain(merge, 1001ms), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(merge.empty());
}

TEST(EventMerge, TheWindowLetsAnEventAndEveryEarlierOneOutAndALateOneIsMarked) {
  EventMerge merge(2, 100ms);
  merge.push(0, 50ms, 0ms, "late-arriving");
  merge.push(0, 60ms, 80ms, "x");
  merge.push(0, 40ms, 90ms, "y");  // earlier than the first, arriving later
  EXPECT_TRUE(drain(merge, 99ms).empty());
  ASSERT_EQ(merge.next_due(), 100ms);
  EXPECT_EQ(drain(merge, 100ms), (std::vector<std::string>{"y", "late-arriving"}))
      << "the first event's window let it and the earlier y out; x's has 80 ms to go";
  EXPECT_EQ(drain(merge, 180ms), (std::vector<std::string>{"x"}));
  merge.push(0, 10ms, 200ms, "z");
  EXPECT_EQ(drain(merge, 300ms), (std::vector<std::string>{"z late"}));
}

// ---- The restore plan ------------------------------------------------------------------------

SessionStatus lane(Direction direction, std::string set, std::string phase, bool running) {
  SessionStatus s;
  s.interface = "veth0";
  s.direction = direction;
  s.set = std::move(set);
  s.state = "active";
  s.profile = "two";
  s.phase = std::move(phase);
  if (running) s.schedule = SessionStatus::Schedule{"running", 1, 2, true, 0};
  return s;
}

TEST(FleetRestorePlan, ASwitchIsUndoneLaneByLaneAndARunningScheduleIsResumed) {
  const Json params = {{"interface", "veth0"}, {"phase", "high"}};
  const RestorePlan plan = restore_plan(
      "switch", params,
      {lane(Direction::kEgress, "", "low", true), lane(Direction::kIngress, "", "mid", false)});
  ASSERT_EQ(plan.impossible, "");
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].method, "switch");
  EXPECT_EQ(
      plan.steps[0].params,
      (Json{{"interface", "veth0"}, {"direction", "egress"}, {"set", nullptr}, {"phase", "low"}}));
  EXPECT_EQ(plan.steps[1].params["direction"], "ingress");
  EXPECT_EQ(plan.steps[1].params["phase"], "mid");
  ASSERT_EQ(plan.resume.size(), 1u);
  EXPECT_EQ(plan.resume[0]["direction"], "egress");
}

TEST(FleetRestorePlan, AnApplyIsUndoneByAClearOnAnUnshapedLaneAndByTheOldProfileOtherwise) {
  const Json params = {{"interface", "eth0"}, {"profile", "wan"}, {"target", {{"netns", "blue"}}}};
  const RestorePlan unshaped = restore_plan("apply", params, {});
  ASSERT_EQ(unshaped.steps.size(), 1u);
  EXPECT_EQ(unshaped.steps[0].method, "clear");
  EXPECT_EQ(unshaped.steps[0].params, (Json{{"interface", "eth0"},
                                            {"direction", "egress"},
                                            {"set", nullptr},
                                            {"target", {{"netns", "blue"}}}}));
  // Only the egress whole-direction lane: the fleet's apply did not touch the ingress one.
  SessionStatus held = lane(Direction::kEgress, "", "low", false);
  held.lease = SessionStatus::Lease{std::chrono::seconds(30), {}, std::chrono::seconds(12)};
  const RestorePlan shaped =
      restore_plan("apply", params, {held, lane(Direction::kIngress, "", "mid", true)});
  ASSERT_EQ(shaped.steps.size(), 1u);
  EXPECT_EQ(shaped.steps[0].method, "apply");
  EXPECT_EQ(shaped.steps[0].params, (Json{{"interface", "eth0"},
                                          {"direction", "egress"},
                                          {"target", {{"netns", "blue"}}},
                                          {"profile", "two"},
                                          {"phase", "low"},
                                          {"lease", 30'000'000'000}}));
  // Through a host-veth, status gives the host side's direction; the request takes the target's.
  SessionStatus host_side = lane(Direction::kIngress, "", "low", true);
  jitterd::protocol::TargetInfo blue;
  blue.kind = "netns";
  blue.name = "blue";
  blue.interface = "eth0";
  blue.direction = Direction::kEgress;
  host_side.target = blue;
  const RestorePlan through = restore_plan("apply", params, {host_side});
  ASSERT_EQ(through.steps.size(), 1u);
  EXPECT_EQ(through.steps[0].params["direction"], "egress");
  EXPECT_EQ(through.steps[0].params["schedule"], true);
}

TEST(FleetRestorePlan, WhatARequestCannotRecreateIsRefusedWithTheReason) {
  const Json params = {{"interface", "veth0"}};
  const RestorePlan rules =
      restore_plan("clear", params, {lane(Direction::kEgress, "redis", "low", false)});
  EXPECT_TRUE(rules.steps.empty());
  EXPECT_NE(rules.impossible.find("rule set redis"), std::string::npos) << rules.impossible;
  SessionStatus pending = lane(Direction::kEgress, "", "", false);
  pending.state = "pending";
  EXPECT_NE(restore_plan("switch", params, {pending}).impossible.find("was pending"),
            std::string::npos);
  const RestorePlan cleared =
      restore_plan("clear", params, {lane(Direction::kEgress, "", "low", false)});
  ASSERT_EQ(cleared.steps.size(), 1u);
  EXPECT_EQ(cleared.steps[0].method, "apply");
}

}  // namespace
}  // namespace jitterctl
