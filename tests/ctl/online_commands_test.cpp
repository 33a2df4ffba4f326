// The online commands, run in-process against a fake jitterd: each sends exactly the request that
// docs/protocol.md describes, renders the replies as tables, and maps error replies and broken
// connections to messages and exit codes.
#include "online_commands.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <pthread.h>
#include <signal.h>

#include <sys/wait.h>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "fake_jitterd.hpp"

namespace jitterctl {
namespace {

using testing::FakeJitterd;
using Json = nlohmann::json;
using namespace std::chrono_literals;

// Results shaped like the examples in docs/protocol.md (the status is that page's example with its
// <time> placeholders filled in: 2026-11-30T20:00:00Z = 1796068800 s since the epoch).
const Json kTime = {{"monotonic_ns", 123456789}, {"realtime_ns", 1796068800123456789}};

Json status_entry(const std::string& interface) {
  return {{"interface", interface},
          {"index", 5},
          {"state", "active"},
          {"profile", "wifi"},
          {"digest", "sha256:3f1a9c0b7d2e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"},
          {"phase", "high"},
          {"phase_since", kTime},
          {"time_in_phase_ns", 812000000},
          {"schedule",
           {{"state", "running"}, {"step", 1}, {"steps", 2}, {"loop", true}, {"iteration", 1}}},
          {"next_transition",
           {{"phase", "low"}, {"step", 0}, {"deadline", kTime}, {"in_ns", 1188000000}}},
          {"lease", {{"expires", kTime}, {"remaining_ns", 29000000000}}},
          {"counters",
           {{"packets", 1520},
            {"bytes", 140000},
            {"drops", 3},
            {"backlog_bytes", 0},
            {"backlog_packets", 0}}},
          {"transitions",
           {{"count", 4},
            {"missed", 0},
            {"late_max_ns", 210000},
            {"recent",
             {{{"phase", "high"},
               {"deadline", kTime},
               {"applied", kTime},
               {"lateness_ns", 90000},
               {"apply_ns", 310000}}}}}},
          {"client", {{"uid", 1000}, {"pid", 4242}}}};
}

// A held phase without lease or transitions, the other shape a status can take.
Json held_entry(const std::string& interface) {
  Json s = status_entry(interface);
  s["profile"] = "lte";
  s["phase"] = "good";
  s["time_in_phase_ns"] = 95000;
  s["schedule"] = nullptr;
  s["next_transition"] = nullptr;
  s["lease"] = nullptr;
  s["counters"]["packets"] = 7;
  s["counters"]["drops"] = 0;
  s["transitions"] = {{"count", 0}, {"missed", 0}, {"late_max_ns", 0}, {"recent", Json::array()}};
  return s;
}

// A canned result for every method, so that any command renders.
Json canned_result(const std::string& method) {
  if (method == "list-commands") {
    return {{"commands",
             {{{"name", "apply"}, {"summary", "start shaping an interface"}, {"mutating", true}},
              {{"name", "status"}, {"summary", "sessions"}, {"mutating", false}}}}};
  }
  if (method == "version") {
    return {{"version", "0.1.0"},
            {"protocol", 1},
            {"pid", 1234},
            {"kernel", "6.1.0-27-amd64"},
            {"started", kTime}};
  }
  if (method == "interfaces") {
    return {{"interfaces",
             {{{"name", "veth0"},
               {"index", 5},
               {"allowed", true},
               {"session", true},
               {"root", {{"kind", "netem"}, {"handle", "1a7e:"}, {"owner", "jitterd"}}}},
              {{"name", "eth0"},
               {"index", 2},
               {"allowed", false},
               {"session", false},
               {"root", {{"kind", "fq_codel"}, {"handle", "0:"}, {"owner", "kernel"}}}}}}};
  }
  if (method == "profiles") {
    return {
        {"profiles",
         {{{"name", "wifi"},
           {"file", "/etc/jitterd/profiles/wifi.json"},
           {"digest", "sha256:3f1a9c0b7d2e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"},
           {"description", "office wifi"},
           {"phases", {"high", "low"}},
           {"schedule", {{"steps", 2}, {"loop", true}, {"duration_ns", 4000000000}}}},
          {{"name", "lte"},
           {"file", "/etc/jitterd/profiles/lte.json"},
           {"digest", "sha256:9b0c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f80"},
           {"description", ""},
           {"phases", {"good"}},
           {"schedule", nullptr}}}},
        {"invalid",
         {{{"file", "/etc/jitterd/profiles/bad.json"},
           {"errors", {"/phases/x/loss/p: 1.7 is not a probability", "/name: missing"}}}}}};
  }
  if (method == "status") return {{"sessions", {status_entry("veth0"), held_entry("veth1")}}};
  if (method == "clear") return {{"cleared", {"veth0"}}};
  if (method == "subscribe") return {{"subscribed", true}};
  if (method == "metrics")
    return {{"text", "# HELP jitterd_sessions Sessions.\njitterd_sessions 1\n"}};
  // apply, switch, pause, resume, skip, renew: the session's status.
  return status_entry("veth0");
}

FakeJitterd::Response canned_reply(const Json& request) {
  return FakeJitterd::reply(request, canned_result(request.value("method", "")));
}

struct CommandRun {
  int code;
  std::string out;
  std::string err;
};

CommandRun run(const FakeJitterd& server, std::vector<std::string> args) {
  args.insert(args.begin(), {"--socket", server.socket_path()});
  std::ostringstream out, err;
  // The default socket must not be used when --socket is given.
  const int code = run_jitterctl(args, "/nonexistent/default.sock", out, err);
  return {code, out.str(), err.str()};
}

// Times print in the local zone; UTC makes them fixed.
class OnlineCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
};

// ---- Requests ----------------------------------------------------------------------------------

struct RequestCase {
  std::vector<std::string> args;
  const char* request;  // the one request line expected, as JSON
};

TEST_F(OnlineCommands, EachCommandSendsExactlyItsRequest) {
  const RequestCase cases[] = {
      {{"list-commands"}, R"({"id":1,"method":"list-commands","params":{}})"},
      {{"version"}, R"({"id":1,"method":"version","params":{}})"},
      {{"interfaces"}, R"({"id":1,"method":"interfaces","params":{}})"},
      {{"profiles"}, R"({"id":1,"method":"profiles","params":{}})"},
      {{"metrics"}, R"({"id":1,"method":"metrics","params":{}})"},
      {{"apply", "veth0", "wifi"},
       R"({"id":1,"method":"apply","params":{"interface":"veth0","profile":"wifi"}})"},
      {{"apply", "veth0", "wifi", "--phase", "high", "--no-schedule", "--start", "+2s", "--lease",
        "30s", "--force"},
       R"({"id":1,"method":"apply","params":{"interface":"veth0","profile":"wifi","phase":"high","schedule":false,
           "start":"+2s","lease":"30s","force":true}})"},
      {{"apply", "--start", "2026-11-30T20:00:00.250Z", "veth0", "wifi", "--schedule",
        "--direction", "egress"},
       R"({"id":1,"method":"apply","params":{"interface":"veth0","profile":"wifi","schedule":true,
           "start":"2026-11-30T20:00:00.250Z","direction":"egress"}})"},
      {{"apply", "veth0", "wifi", "--start", "now"},
       R"({"id":1,"method":"apply","params":{"interface":"veth0","profile":"wifi","start":"now"}})"},
      {{"switch", "veth0", "high"},
       R"({"id":1,"method":"switch","params":{"interface":"veth0","phase":"high"}})"},
      {{"switch", "veth0", "high", "--at", "+1s"},
       R"({"id":1,"method":"switch","params":{"interface":"veth0","phase":"high","at":"+1s"}})"},
      {{"pause", "veth0"}, R"({"id":1,"method":"pause","params":{"interface":"veth0"}})"},
      {{"resume", "veth0"}, R"({"id":1,"method":"resume","params":{"interface":"veth0"}})"},
      {{"skip", "veth0", "--phase", "low"},
       R"({"id":1,"method":"skip","params":{"interface":"veth0","phase":"low"}})"},
      {{"skip", "veth0", "--step", "3"},
       R"({"id":1,"method":"skip","params":{"interface":"veth0","step":3}})"},
      {{"status"}, R"({"id":1,"method":"status","params":{}})"},
      {{"status", "veth0"}, R"({"id":1,"method":"status","params":{"interface":"veth0"}})"},
      {{"clear", "veth0"}, R"({"id":1,"method":"clear","params":{"interface":"veth0"}})"},
      {{"clear", "--all"}, R"({"id":1,"method":"clear","params":{"all":true}})"},
      {{"renew", "veth0"}, R"({"id":1,"method":"renew","params":{"interface":"veth0"}})"},
      {{"renew", "veth0", "--lease", "1.5m"},
       R"({"id":1,"method":"renew","params":{"interface":"veth0","lease":"1.5m"}})"},
      {{"subscribe", "--count", "0"}, R"({"id":1,"method":"subscribe","params":{}})"},
      {{"subscribe", "--interface", "veth0", "--interface", "veth1", "--event", "phase-changed",
        "--count", "0"},
       R"({"id":1,"method":"subscribe","params":{"interfaces":["veth0","veth1"],"events":["phase-changed"]}})"},
      {{"events", "--event", "applied", "--count", "0"},
       R"({"id":1,"method":"subscribe","params":{"events":["applied"]}})"},
      // Global options may follow the command.
      {{"status", "--json", "--timeout", "2s"}, R"({"id":1,"method":"status","params":{}})"},
      // A pod: eth0 of its sandbox unless named; --follow; every interface-taking command.
      {{"apply", "--pod", "default/redis-0", "--follow", "wifi"},
       R"({"id":1,"method":"apply","params":{"interface":"eth0","profile":"wifi","target":{"pod":"default/redis-0","follow":true}}})"},
      {{"switch", "eth1", "low", "--pod", "default/redis-0", "--via", "host-veth"},
       R"({"id":1,"method":"switch","params":{"interface":"eth1","phase":"low","target":{"pod":"default/redis-0","via":"host-veth"}}})"},
      {{"clear", "--pod", "default/redis-0"},
       R"({"id":1,"method":"clear","params":{"interface":"eth0","target":{"pod":"default/redis-0"}}})"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    FakeJitterd server(canned_reply);
    const CommandRun r = run(server, c.args);
    EXPECT_EQ(r.code, kExitOk) << r.err;
    EXPECT_EQ(r.err, "");
    const auto requests = server.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0], Json::parse(c.request));
  }
}

TEST_F(OnlineCommands, ApplyFileSendsTheProfileInline) {
  FakeJitterd server(canned_reply);
  const std::string path = server.directory() + "/inline.json";
  const Json profile = {
      {"version", 1},
      {"name", "inline"},
      {"phases", {{"high", {{"delay", {{"latency", "80ms"}, {"jitter", "20ms"}}}}}}}};
  std::ofstream(path) << profile.dump(2);
  const CommandRun r = run(server, {"apply", "veth0", "--file", path, "--lease", "60s"});
  ::unlink(path.c_str());
  EXPECT_EQ(r.code, kExitOk) << r.err;
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0],
            Json({{"id", 1},
                  {"method", "apply"},
                  {"params", {{"interface", "veth0"}, {"profile", profile}, {"lease", "60s"}}}}));
}

TEST_F(OnlineCommands, ApplyFileThatIsNotJsonIsBadInputAndSendsNothing) {
  FakeJitterd server(canned_reply);
  const std::string path = server.directory() + "/broken.json";
  std::ofstream(path) << "{\"name\": \"x\",\n  oops}";
  const CommandRun r = run(server, {"apply", "veth0", "--file", path});
  ::unlink(path.c_str());
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(
      r.err.rfind(
          "jitterctl apply: " + path + ":2:3: not JSON: syntax error while parsing object key", 0),
      0u)
      << r.err;
  EXPECT_TRUE(server.requests().empty());
}

// Issue 21: a profile nested 100 000 deep (295 KB) crashed `jitterctl apply --file` with SIGSEGV.
TEST_F(OnlineCommands, ApplyFileNestedTooDeepIsBadInputAndSendsNothing) {
  FakeJitterd server(canned_reply);
  const std::string path = server.directory() + "/deep.json";
  std::ofstream(path) << "{\"name\": \"x\", \"phases\": " << std::string(100000, '[')
                      << std::string(100000, ']') << "}";
  const CommandRun r = run(server, {"apply", "veth0", "--file", path});
  ::unlink(path.c_str());
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err.rfind("jitterctl apply: " + path + ": /phases/0/0/", 0), 0u)
      << r.err.substr(0, 300);
  EXPECT_NE(r.err.find(": nests deeper than 64 levels; it was not read"), std::string::npos)
      << r.err.substr(0, 300);
  EXPECT_LT(r.err.size(), 400u);
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(OnlineCommands, ApplyFileWithARepeatedKeyIsBadInputAndSendsNothing) {
  FakeJitterd server(canned_reply);
  const std::string path = server.directory() + "/twice.json";
  std::ofstream(path) << R"({"name": "x", "name": "y"})";
  const CommandRun r = run(server, {"apply", "veth0", "--file", path});
  ::unlink(path.c_str());
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err.rfind("jitterctl apply: " + path + ": /name: the key \"name\" appears twice", 0),
            0u)
      << r.err;
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(OnlineCommands, ApplyFileThatCannotBeOpenedIsEnvironment) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"apply", "veth0", "--file", "/nonexistent/p.json"});
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_EQ(r.err, "jitterctl: apply: open (/nonexistent/p.json): No such file or directory\n");
}

struct UsageCase {
  std::vector<std::string> args;
  const char* message;  // the first line of stderr
};

TEST_F(OnlineCommands, BadCommandLinesAreUsageErrorsAndSendNothing) {
  const UsageCase cases[] = {
      {{"apply"}, "jitterctl apply: which interface?"},
      {{"apply", "veth0"},
       "jitterctl apply: which profile? (a name from `jitterctl profiles`, or --file "
       "PROFILE.json)"},
      {{"apply", "veth0", "wifi", "--file", "x.json"},
       "jitterctl apply: give a profile name or --file, not both"},
      {{"apply", "veth0", "wifi", "--start", "tomorrow"},
       "jitterctl apply: --start: \"tomorrow\" is not a start time: now, +DURATION (+2s) or a UTC "
       "time "
       "(2026-11-30T20:00:00Z)"},
      {{"apply", "veth0", "wifi", "--lease", "30"},
       "jitterctl apply: --lease: \"30\" is not a duration such as 30s, 500ms, 1.5m, 1h"},
      {{"apply", "veth0", "wifi", "--lease"}, "jitterctl apply: --lease needs a value"},
      {{"apply", "veth0", "wifi", "--bogus"}, "jitterctl apply: unknown option --bogus"},
      {{"switch", "veth0"}, "jitterctl switch: needs an interface and a phase"},
      {{"skip", "veth0"}, "jitterctl skip: give one of --phase P or --step N"},
      {{"skip", "veth0", "--phase", "a", "--step", "1"},
       "jitterctl skip: give one of --phase P or --step N"},
      {{"skip", "veth0", "--step", "-1"},
       "jitterctl skip: --step: \"-1\" is not a step number (0, 1, 2 ...)"},
      {{"clear"}, "jitterctl clear: give an interface or --all"},
      {{"clear", "veth0", "--all"}, "jitterctl clear: give an interface or --all"},
      {{"status", "veth0", "veth1"}, "jitterctl status: unexpected argument \"veth1\""},
      {{"version", "now"}, "jitterctl version: unexpected argument \"now\""},
      {{"pause"}, "jitterctl pause: which interface?"},
      {{"subscribe", "veth0"},
       "jitterctl subscribe: unexpected argument \"veth0\" (interfaces are given with "
       "--interface)"},
      {{"watch", "--interval", "0s"},
       "jitterctl watch: --interval: \"0s\" is not a positive duration such as 10s"},
      {{"status", "--timeout", "soon"},
       "jitterctl status: --timeout: \"soon\" is not a positive duration such as 10s"},
      {{"status", "--socket"}, "jitterctl status: --socket needs a value"},
      {{"frobnicate"}, "jitterctl: unknown command \"frobnicate\" (jitterctl --help lists them)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    FakeJitterd server(canned_reply);
    const CommandRun r = run(server, c.args);
    EXPECT_EQ(r.code, kExitUsage);
    EXPECT_EQ(r.err.substr(0, r.err.find('\n')), c.message);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(server.requests().empty());
  }
}

TEST_F(OnlineCommands, UsageErrorsShowTheCommandsUsage) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"skip", "veth0"});
  EXPECT_EQ(r.err,
            "jitterctl skip: give one of --phase P or --step N\nusage: jitterctl skip INTERFACE "
            "--phase P|--step N [--direction egress|ingress] [--egress] [--ingress] [--set NAME]"
            " [--netns NAME] [--netns-path PATH] [--pid PID] [--container NAME] [--pod "
            "NAMESPACE/NAME] [--via inside|host-veth]\n");
}

TEST_F(OnlineCommands, HelpAfterACommandPrintsItsUsage) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"switch", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(
      r.out,
      "usage: jitterctl switch INTERFACE PHASE [--at now|+1s|RFC3339] [--direction egress|ingress] "
      "[--egress] [--ingress] [--set NAME] [--netns NAME] [--netns-path PATH] [--pid PID] "
      "[--container NAME] [--pod NAMESPACE/NAME] [--via inside|host-veth]\n"
      "  hold PHASE on every lane of the interface at once (or one lane); pauses schedules\n"
      "options:\n"
      "  --at now|+1s|RFC3339      switch then (default now)\n"
      "  --direction egress|ingress\n"
      "                            one direction of the interface\n"
      "  --egress                  short for --direction egress\n"
      "  --ingress                 short for --direction ingress\n"
      "  --set NAME                one rule set (apply --set NAME --match ...)\n"
      "  --netns NAME              the interface is in `ip netns` namespace NAME (default eth0)\n"
      "  --netns-path PATH         ... in the namespace of file PATH (/proc/PID/ns/net, a bind "
      "mount)\n"
      "  --pid PID                 ... in the namespace of process PID\n"
      "  --container NAME          ... in Docker or Podman container NAME (or ID)\n"
      "  --pod NAMESPACE/NAME      ... in Kubernetes pod NAMESPACE/NAME's sandbox (through the CRI "
      "socket)\n"
      "  --via inside|host-veth    how a target is shaped: in its namespace or on its veth's host "
      "side\n"
      "global options:\n"
      "  --socket PATH             jitterd's socket (default: $JITTERD_SOCKET, else "
      "/run/jitterd/jitterd.sock)\n"
      "  --host ssh://[USER@]HOST[:PORT][/SOCKET]|k8s://NODE[/SOCKET]\n"
      "                            jitterd on another host, through ssh and `jitterctl proxy` "
      "there, or through `kubectl exec` into the jitterd pod of Kubernetes node NODE "
      "($JITTERD_KUBECTL, $JITTERD_K8S_NAMESPACE) (default: $JITTERD_HOST)\n"
      "  --json                    print the reply's result as JSON (subscribe: one compact event "
      "per line)\n"
      "  --timeout DURATION        how long to wait for jitterd (default 10s)\n");
  EXPECT_TRUE(server.requests().empty());
}

// ---- Output ------------------------------------------------------------------------------------

TEST_F(OnlineCommands, StatusTable) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"status"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(
      r.out,
      "INTERFACE  STATE   PROFILE  PHASE  IN-PHASE  NEXT           LEASE  SENT  DROPS  LATE-MAX\n"
      "veth0      active  wifi     high     812 ms  low in 1.19 s   29 s  1520      3    210 µs\n"
      "veth1      active  lte      good      95 µs  held               -     7      0         -\n");
}

TEST_F(OnlineCommands, StatusWithoutSessions) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::reply(r, {{"sessions", Json::array()}});
  });
  EXPECT_EQ(run(server, {"status"}).out, "no sessions\n");
}

TEST_F(OnlineCommands, MutatingCommandsPrintTheSessionsStatus) {
  for (const char* command : {"pause", "resume", "renew"}) {
    FakeJitterd server(canned_reply);
    const CommandRun r = run(server, {command, "veth0"});
    EXPECT_EQ(
        r.out,
        "INTERFACE  STATE   PROFILE  PHASE  IN-PHASE  NEXT           LEASE  SENT  DROPS  LATE-MAX\n"
        "veth0      active  wifi     high     812 ms  low in 1.19 s   29 s  1520      3    210 "
        "µs\n");
  }
}

// `apply --direction both` makes two sessions and jitterd answers {"sessions": [egress, ingress]}
// (docs/protocol.md, apply). The table once read that object as one status and printed a blank row.
TEST_F(OnlineCommands, ApplyBothDirectionsShowsBothLanes) {
  FakeJitterd server([](const Json& r) {
    Json ingress = held_entry("veth0");
    ingress["direction"] = "ingress";
    Json egress = status_entry("veth0");
    egress["direction"] = "egress";
    return FakeJitterd::reply(r, {{"sessions", {egress, ingress}}});
  });
  const CommandRun r = run(server, {"apply", "veth0", "wifi", "--direction", "both"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "INTERFACE      STATE   PROFILE  PHASE  IN-PHASE  NEXT           LEASE  SENT  DROPS  "
            "LATE-MAX\n"
            "veth0          active  wifi     high     812 ms  low in 1.19 s   29 s  1520      3    "
            "210 µs\n"
            "veth0 ingress  active  lte      good      95 µs  held               -     7      0    "
            "     -\n");
  const CommandRun j = run(server, {"--json", "apply", "veth0", "wifi", "--direction", "both"});
  EXPECT_EQ(Json::parse(j.out)["sessions"].size(), 2u);
}

// A target's lane is named as the target sees it, with where jitterd shapes it.
TEST_F(OnlineCommands, ATargetsLaneSaysWhereItIsShaped) {
  // An ingress lane on `interface` for the target `kind` `name`, whose own direction is `seen`.
  const auto lane = [](const std::string& interface, const std::string& kind,
                       const std::string& name, const std::string& seen, const std::string& via) {
    Json s = held_entry(interface);
    s["direction"] = "ingress";
    s["target"] = {{"kind", kind},
                   {"name", name},
                   {"interface", "eth0"},
                   {"direction", seen},
                   {"namespace", "net:[4026532281]"},
                   {"via", via}};
    return s;
  };
  FakeJitterd server([&](const Json& r) {
    return FakeJitterd::reply(r, {{"sessions",
                                   {lane("eth0", "netns", "blue", "ingress", "inside"),
                                    lane("vethT", "container", "redis0", "egress", "host-veth")}}});
  });
  const CommandRun r = run(server, {"status"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("netns blue eth0 ingress (inside) "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("container redis0 eth0 (on vethT ingress) "), std::string::npos) << r.out;
}

TEST_F(OnlineCommands, InterfacesTable) {
  FakeJitterd server(canned_reply);
  EXPECT_EQ(run(server, {"interfaces"}).out,
            "NAME   INDEX  ROOT         OWNER    ALLOWED  SESSION\n"
            "veth0      5  netem 1a7e:  jitterd  yes      yes\n"
            "eth0       2  fq_codel 0:  kernel   no       no\n");
}

TEST_F(OnlineCommands, ProfilesTableThenInvalidFiles) {
  FakeJitterd server(canned_reply);
  EXPECT_EQ(run(server, {"profiles"}).out,
            "NAME  PHASES    SCHEDULE            DIGEST        FILE\n"
            "wifi  high,low  2 steps, 4 s, loop  3f1a9c0b7d2e  /etc/jitterd/profiles/wifi.json\n"
            "lte   good      -                   9b0c1d2e3f40  /etc/jitterd/profiles/lte.json\n"
            "\n"
            "invalid profile files:\n"
            "  /etc/jitterd/profiles/bad.json\n"
            "    /phases/x/loss/p: 1.7 is not a probability\n"
            "    /name: missing\n");
}

TEST_F(OnlineCommands, VersionListsBothSides) {
  FakeJitterd server(canned_reply);
  EXPECT_EQ(run(server, {"version"}).out,
            "jitterd    0.1.0, protocol 1\n"
            "pid        1234\n"
            "kernel     6.1.0-27-amd64\n"
            "started    2026-11-30 20:00:00\n"
            "jitterctl  " JITTERCTL_TEST_VERSION ", protocol 1\n");
}

TEST_F(OnlineCommands, VersionNotesAnotherProtocol) {
  FakeJitterd server([](const Json& r) {
    Json v = canned_result("version");
    v["protocol"] = 2;
    return FakeJitterd::reply(r, v);
  });
  const std::string out = run(server, {"version"}).out;
  EXPECT_NE(
      out.find(
          "note: jitterd speaks protocol 2 and jitterctl protocol 1; some commands may fail\n"),
      std::string::npos)
      << out;
}

TEST_F(OnlineCommands, ListCommandsClearAndMetrics) {
  FakeJitterd server(canned_reply);
  EXPECT_EQ(run(server, {"list-commands"}).out,
            "COMMAND  MUTATING  SUMMARY\n"
            "apply    yes       start shaping an interface\n"
            "status   no        sessions\n");
  EXPECT_EQ(run(server, {"clear", "--all"}).out, "cleared veth0\n");
  EXPECT_EQ(run(server, {"metrics"}).out,
            "# HELP jitterd_sessions Sessions.\njitterd_sessions 1\n");
}

TEST_F(OnlineCommands, ClearWithNothingToClear) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::reply(r, {{"cleared", Json::array()}});
  });
  EXPECT_EQ(run(server, {"clear", "--all"}).out, "nothing to clear\n");
}

TEST_F(OnlineCommands, JsonPrintsTheResult) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"--json", "interfaces"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(Json::parse(r.out), canned_result("interfaces"));
}

TEST_F(OnlineCommands, EventsBeforeTheReplyDoNotReachTheOutput) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{
        {R"({"event":"phase-changed","seq":8,"interface":"veth0","phase":"low"})"
         "\n",
         FakeJitterd::ok_line(r, {{"cleared", {"veth0"}}})}};
  });
  const CommandRun r = run(server, {"clear", "veth0"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "cleared veth0\n");
}

TEST_F(OnlineCommands, AReplyOfTheWrongShapeNamesTheMember) {
  FakeJitterd server([](const Json& r) {
    Json result = canned_result("status");
    result["sessions"][1]["time_in_phase_ns"] = "95us";
    return FakeJitterd::reply(r, result);
  });
  const CommandRun r = run(server, {"status"});
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_EQ(r.err,
            "jitterctl: status: unexpected reply from jitterd: "
            "/result/sessions/1/time_in_phase_ns: expected an "
            "integer, found \"95us\"\n");
}

// ---- Errors ------------------------------------------------------------------------------------

TEST_F(OnlineCommands, ErrorReplyPrintsMessageWhereAndHint) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{
        {FakeJitterd::error_line(r, "invalid-params", R"(phase "hgih" is not in profile "wifi")",
                                 "/params/phase", "phases: high, low")}};
  });
  const CommandRun r = run(server, {"switch", "veth0", "hgih"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "jitterctl: switch: phase \"hgih\" is not in profile \"wifi\"\n"
            "  at /params/phase\n"
            "  hint: phases: high, low\n");
}

TEST_F(OnlineCommands, ErrorCodesMapToExitCodes) {
  const std::map<std::string, int> expected = {
      {"parse-error", kExitBadInput},         {"invalid-request", kExitBadInput},
      {"unknown-method", kExitBadInput},      {"invalid-params", kExitBadInput},
      {"not-found", kExitBadInput},           {"too-large", kExitBadInput},
      {"permission-denied", kExitPermission}, {"conflict", kExitConflict},
      {"kernel-error", kExitEnvironment},     {"busy", kExitEnvironment},
      {"internal-error", kExitEnvironment},   {"a-code-from-the-future", kExitEnvironment},
  };
  for (const auto& [code, exit_code] : expected) {
    SCOPED_TRACE(code);
    FakeJitterd server([code = code](const Json& r) {
      return FakeJitterd::Response{{FakeJitterd::error_line(r, code, "it went wrong")}};
    });
    const CommandRun r = run(server, {"apply", "veth0", "wifi"});
    EXPECT_EQ(r.code, exit_code);
    EXPECT_EQ(r.err, "jitterctl: apply: it went wrong\n");
    EXPECT_EQ(exit_code_for_error(code), exit_code);
  }
}

TEST_F(OnlineCommands, ConflictKeepsTheHint) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{{FakeJitterd::error_line(
        r, "conflict", "root qdisc of veth0 is htb 1:, installed by someone else", "",
        "pass --force if the config allows it (allow_force)")}};
  });
  const CommandRun r = run(server, {"apply", "veth0", "wifi"});
  EXPECT_EQ(r.code, kExitConflict);
  EXPECT_EQ(r.err,
            "jitterctl: apply: root qdisc of veth0 is htb 1:, installed by someone else\n"
            "  hint: pass --force if the config allows it (allow_force)\n");
}

TEST_F(OnlineCommands, CannotConnectUsesTheDefaultSocketAndSaysWhatToDo) {
  std::ostringstream out, err;
  const int code = run_jitterctl({"status"}, "/tmp/jitterctl-test-missing/jitterd.sock", out, err);
  EXPECT_EQ(code, kExitEnvironment);
  EXPECT_EQ(err.str(),
            "jitterctl: cannot connect to jitterd at /tmp/jitterctl-test-missing/jitterd.sock: No "
            "such file or "
            "directory — is jitterd running? (systemctl start jitterd, or --socket PATH)\n");
}

TEST_F(OnlineCommands, ConnectionClosedMidReplyIsEnvironment) {
  FakeJitterd server([](const Json&) {
    return FakeJitterd::Response{{R"({"id":1,"ok":tr)"}, 0ms, true};
  });
  const CommandRun r = run(server, {"status"});
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_EQ(r.err,
            "jitterctl: status: jitterd closed the connection in the middle of its reply to status "
            "(15 bytes of an "
            "unfinished line: {\"id\":1,\"ok\":tr)\n");
}

TEST_F(OnlineCommands, TimeoutIsEnvironment) {
  FakeJitterd server([](const Json&) { return FakeJitterd::Response{}; });
  const CommandRun r = run(server, {"--timeout", "100ms", "status"});
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_EQ(
      r.err,
      "jitterctl: status: no reply from jitterd to status within 100ms; try a longer --timeout\n");
}

TEST(DefaultSocketPath, EnvironmentOverridesTheDefault) {
  EXPECT_EQ(default_socket_path(nullptr), "/run/jitterd/jitterd.sock");
  EXPECT_EQ(default_socket_path(""), "/run/jitterd/jitterd.sock");
  EXPECT_EQ(default_socket_path("/tmp/j.sock"), "/tmp/j.sock");
}

// ---- subscribe and watch -----------------------------------------------------------------------

// Two events after the subscribe reply, as jitterd writes them (docs/protocol.md, "subscribe").
FakeJitterd::Response subscribe_with_events(const Json& request) {
  Json changed = {{"event", "phase-changed"},
                  {"seq", 12},
                  {"interface", "veth0"},
                  {"profile", "wifi"},
                  {"digest", "sha256:3f1a"},
                  {"phase", "high"},
                  {"previous", "low"},
                  {"step", 1},
                  {"at", kTime},
                  {"deadline", kTime},
                  {"lateness_ns", 95000},
                  {"apply_ns", 301000}};
  Json cleared = {{"event", "cleared"},
                  {"seq", 13},
                  {"interface", "veth0"},
                  {"reason", "request"},
                  {"at", kTime}};
  return {{FakeJitterd::ok_line(request, {{"subscribed", true}}), changed.dump() + "\n",
           cleared.dump() + "\n"}};
}

TEST_F(OnlineCommands, SubscribePrintsOneHumanLinePerEvent) {
  FakeJitterd server(subscribe_with_events);
  const CommandRun r = run(server, {"subscribe", "--count", "2"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "2026-11-30 20:00:00.123456  veth0     phase-changed    high  late 95 µs  apply 301 µs "
            " from low  step 1\n"
            "2026-11-30 20:00:00.123456  veth0     cleared          reason request\n");
}

TEST_F(OnlineCommands, SubscribeJsonPrintsCompactEvents) {
  FakeJitterd server(subscribe_with_events);
  const CommandRun r = run(server, {"events", "--json", "--count", "2"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<Json> events;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.find(' '), std::string::npos) << "not compact: " << line;
    events.push_back(Json::parse(line));
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["seq"], 12);
  EXPECT_EQ(events[1]["reason"], "request");
}

TEST_F(OnlineCommands, SubscribeEndsWithAnErrorWhenJitterdCloses) {
  FakeJitterd server([](const Json& r) {
    FakeJitterd::Response response = subscribe_with_events(r);
    response.close_after = true;
    return response;
  });
  const CommandRun r = run(server, {"subscribe"});
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_EQ(r.err, "jitterctl: subscribe: jitterd closed the connection\n");
}

TEST_F(OnlineCommands, SubscribeRefusedPrintsTheError) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{{FakeJitterd::error_line(
        r, "invalid-params", "unknown event \"phase-change\"", "/params/events/0",
        "events: applied, phase-changed, deadline-missed, cleared, lease-expired, "
        "interface-gone, external-change, error")}};
  });
  const CommandRun r = run(server, {"subscribe", "--event", "phase-change"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err.substr(0, r.err.find('\n')),
            "jitterctl: subscribe: unknown event \"phase-change\"");
}

TEST_F(OnlineCommands, WatchOncePrintsOneFrameFromTwoConnections) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"watch", "--once"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  // The header carries the wall-clock time; the rest is fixed.
  const std::string header = "jitterd 0.1.0 at " + server.socket_path() + ", ";
  ASSERT_EQ(r.out.substr(0, header.size()), header);
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "--once must not clear the screen";
  EXPECT_EQ(r.out.substr(r.out.find("\n\n") + 2),
            "INTERFACE  STATE   PROFILE  PHASE  IN-PHASE  NEXT           SENT    BYTES  DROPS  "
            "BACKLOG  SWITCHES  "
            "LATE-LAST  LATE-MAX  MISSED\n"
            "veth0      active  wifi     high     812 ms  low in 1.19 s  1520  137 KiB      3      "
            "  0         4      "
            "90 µs    210 µs       0\n"
            "veth1      active  lte      good      95 µs  held              7  137 KiB      0      "
            "  0         0          "
            "-         -       0\n");
  std::vector<std::string> methods;
  for (const auto& request : server.requests()) methods.push_back(request["method"]);
  EXPECT_EQ(methods, (std::vector<std::string>{"subscribe", "version", "status"}));
}

TEST_F(OnlineCommands, WatchFiltersByInterface) {
  FakeJitterd server(canned_reply);
  const CommandRun r = run(server, {"watch", "veth1", "--once"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out.find("veth0"), std::string::npos);
  EXPECT_NE(r.out.find("\nveth1 "), std::string::npos);
  EXPECT_EQ(server.requests().front(),
            Json::parse(R"({"id":1,"method":"subscribe","params":{"interfaces":["veth1"]}})"));
}

TEST_F(OnlineCommands, WatchRedrawsUntilSigint) {
  FakeJitterd server([](const Json& r) {
    FakeJitterd::Response response = canned_reply(r);
    if (r["method"] == "subscribe") response = subscribe_with_events(r);
    return response;
  });
  CommandRun result{};
  std::thread watch([&] { result = run(server, {"watch", "--interval", "50ms"}); });
  // Three status requests: watch blocked SIGINT (before connecting), drew, and is polling.
  auto status_requests = [&] {
    const auto requests = server.requests();
    return std::count_if(requests.begin(), requests.end(),
                         [](const Json& r) { return r["method"] == "status"; });
  };
  for (int i = 0; i < 500 && status_requests() < 3; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(status_requests(), 3) << "watch did not poll";
  // To the watch thread only: the other threads have SIGINT unblocked and would die of it.
  ASSERT_EQ(::pthread_kill(watch.native_handle(), SIGINT), 0);
  watch.join();
  EXPECT_EQ(result.code, kExitOk) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(result.out.rfind("\x1b[H\x1b[2Jjitterd 0.1.0 at ", 0), 0u);
  std::size_t frames = 0;
  for (auto p = result.out.find("\x1b[H\x1b[2J"); p != std::string::npos;
       p = result.out.find("\x1b[H\x1b[2J", p + 1))
    ++frames;
  // The third status request may be the one SIGINT interrupted, before its frame.
  EXPECT_GE(frames, 2u);
  // Both events show under the table (time of day only), and the output ends on a fresh line.
  EXPECT_NE(
      result.out.find("recent events:\n"
                      "  20:00:00.123456  veth0     phase-changed    high  late 95 µs  apply 301 "
                      "µs  from low  step 1\n"
                      "  20:00:00.123456  veth0     cleared          reason request\n"),
      std::string::npos)
      << result.out;
  EXPECT_EQ(result.out.back(), '\n');
}

// ---- Rendering without a server ----------------------------------------------------------------

TEST_F(OnlineCommands, EventLinesForEveryKind) {
  Event lease;
  lease.event = "lease-expired";
  lease.interface = "veth0";
  lease.lease = std::chrono::seconds(30);
  EXPECT_EQ(format_event_line(lease),
            "-                           veth0     lease-expired    lease 30 s");
  Event external;
  external.event = "external-change";
  external.interface = "eth1";
  external.what = "root qdisc replaced by htb 1:";
  external.ended = true;
  EXPECT_EQ(format_event_line(external),
            "-                           eth1      external-change  root qdisc replaced by htb 1:  "
            "session ended");
  Event error;
  error.event = "error";
  error.interface = "veth0";
  error.phase = "high";
  error.message = "netem change (dev veth0 handle 1a7e:): No such device";
  EXPECT_EQ(format_event_line(error),
            "-                           veth0     error            high  netem change (dev veth0 "
            "handle 1a7e:): No "
            "such device");
}

// ---- The binary --------------------------------------------------------------------------------

TEST_F(OnlineCommands, BinarySmokeTest) {
  // One run of the real executable: main() reaches the same code, and the exit status is the code.
  FakeJitterd server(canned_reply);
  const std::string command =
      std::string(JITTERCTL_BINARY) + " --socket " + server.socket_path() + " clear --all 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_TRUE(pipe);
  std::string output;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = ::pclose(pipe);
  EXPECT_EQ(output, "cleared veth0\n");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitOk);

  FILE* missing = ::popen((std::string("JITTERD_SOCKET=/tmp/jitterctl-test-missing.sock ") +
                           JITTERCTL_BINARY + " status 2>/dev/null")
                              .c_str(),
                          "r");
  ASSERT_TRUE(missing);
  const int missing_status = ::pclose(missing);
  ASSERT_TRUE(WIFEXITED(missing_status));
  EXPECT_EQ(WEXITSTATUS(missing_status), kExitEnvironment);
}

}  // namespace
}  // namespace jitterctl
