// jitterctl fleet against fake jitterds (tests/ctl/fake_jitterd): the inventory reader's
// diagnostics, the NTP-style clock arithmetic, and the two-phase protocol as the client drives it:
// a refusal anywhere aborts every staged token and commits nothing; when all are ready, one commit
// per host at one deadline, and the skew from the hosts' transition records. The daemon's side of
// stage/commit/abort is tests/daemon/protocol_test.cpp's; real hosts over ssh are
// tests/e2e/fleet_test.cpp's.
#include "fleet.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "../support/temp_dir.hpp"
#include "cli.hpp"
#include "fake_jitterd.hpp"
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
    if (method == "clock") {
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      return FakeJitterd::reply(r, {{"received", stamp(now)}, {"replied", stamp(now)}});
    }
    if (method == "stage" && refusal_)
      return {
          {FakeJitterd::error_line(r, "permission-denied", *refusal_, "/params/params/interface")}};
    if (method == "stage")
      return FakeJitterd::reply(
          r, {{"token", token_}, {"method", params["method"]}, {"expires", stamp(0s)}});
    if (method == "abort") return FakeJitterd::reply(r, {{"token", params["token"]}});
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
      deadline_ = *shaper::parse_utc_timestamp(params["at"].get<std::string>());
      return FakeJitterd::reply(r, {{"token", params["token"]},
                                    {"method", "switch"},
                                    {"at", stamp(deadline_)},
                                    {"sessions", Json::array()},
                                    {"cleared", Json::array()}});
    }
    // status: an older transition, then the one at the deadline.
    const Json recent = {
        {{"phase", "low"},
         {"deadline", stamp(deadline_ - 10s)},
         {"applied", stamp(deadline_ - 9s)}},
        {{"phase", "high"}, {"deadline", stamp(deadline_)}, {"applied", stamp(deadline_ + late_)}}};
    return FakeJitterd::reply(r, {{"sessions",
                                   {{{"interface", "veth0"},
                                     {"phase", "high"},
                                     {"transitions", {{"count", 2}, {"recent", recent}}}}}}});
  }

  std::string token_;
  std::optional<std::string> refusal_;
  Nanoseconds late_;
  Nanoseconds deadline_{0};
  bool die_at_commit_ = false;
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

TEST(Fleet, AHostLostAtCommitIsReportedAndTheOthersKeepTheirChange) {
  std::vector<std::unique_ptr<FakeHost>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<FakeHost>("t" + std::to_string(i), std::nullopt, 100us));
  hosts[1]->die_at_commit();
  const FleetRun r = run_fleet(hosts, {"--json", "switch", "high", "--lead", "300ms"});
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("jitterctl fleet: h1: "), std::string::npos) << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_TRUE(report["hosts"][0].contains("accepted_realtime_ns")) << report.dump();
  EXPECT_FALSE(report["hosts"][1].contains("accepted_realtime_ns")) << report.dump();
  EXPECT_TRUE(report["hosts"][1].contains("failure")) << report.dump();
  EXPECT_TRUE(report["hosts"][2].contains("accepted_realtime_ns")) << report.dump();
  // The skew is of the hosts that took the change.
  EXPECT_EQ(report["skew_ns"], 0);
  for (const auto& h : hosts) EXPECT_TRUE(h->requests_of("abort").empty());
}

}  // namespace
}  // namespace jitterctl
