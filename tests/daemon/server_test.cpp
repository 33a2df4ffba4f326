// ControlServer on a real Unix socket in a temporary folder, and AccessPolicy. The server's
// io_context runs on the test thread (DaemonRig::run_until), in between the test's plain
// blocking-socket clients, which read without blocking (MSG_DONTWAIT) while the server runs: no
// second thread, so the peer-credential tests may fork() a child that drops to another uid.
//
// Time in these tests is only ever a limit that must pass before something may happen (an idle
// timeout) or a patience after which the test gives up; never a speed.
#include "server.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "control_rig.hpp"
#include "protocol.hpp"
#include "shaper/errors.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace jitterd::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a test waits for something that should happen at once.
constexpr auto kPatience = kControlPatience;

// A listening socket at `path` owned by the test ("another jitterd").
int listen_at(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const test_support::UnixAddress a = test_support::unix_address(path);
  if (::bind(fd, a.get(), a.length) != 0 || ::listen(fd, 4) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

const json kVersion = {{"method", "version"}};

// The send buffer an accepted socket starts with (net.core.wmem_default).
std::size_t default_send_buffer() {
  const std::string text = read_file("/proc/sys/net/core/wmem_default");
  return text.empty() ? 212992 : std::stoul(text);
}

// ---------------------------------------------------------------------------------------------
// AccessPolicy

TEST(AccessPolicy, RootTheDaemonsUserAndTheGroupsMembersArePermitted) {
  const AccessPolicy policy{990, 991};
  EXPECT_TRUE(policy.permits(Peer{0, 0, 1, ""}, {})) << "root";
  EXPECT_TRUE(policy.permits(Peer{990, 990, 1, ""}, {})) << "jitterd's own user";
  EXPECT_TRUE(policy.permits(Peer{1000, 991, 1, ""}, {})) << "primary group";
  EXPECT_TRUE(policy.permits(Peer{1000, 1000, 1, ""}, {1000, 27, 991})) << "supplementary group";
  EXPECT_FALSE(policy.permits(Peer{1000, 1000, 1, ""}, {1000, 27})) << "not a member";
  EXPECT_FALSE(policy.permits(Peer{65534, 65534, 1, ""}, {})) << "nobody";
}

TEST(AccessPolicy, WithoutAGroupOnlyRootAndTheDaemonsUser) {
  const AccessPolicy policy{990, std::nullopt};
  EXPECT_TRUE(policy.permits(Peer{0, 0, 1, ""}, {}));
  EXPECT_TRUE(policy.permits(Peer{990, 5, 1, ""}, {}));
  EXPECT_FALSE(policy.permits(Peer{1000, 990, 1, ""}, {990}));
}

// ---------------------------------------------------------------------------------------------
// The socket file

TEST(ConnectionSlots, OneSlotIsKeptForTheAdministrator) {
  ConnectionSlots slots(4);
  for (std::uint32_t uid : {1001u, 1002u, 1003u}) {
    ASSERT_FALSE(slots.refusal(uid, false)) << uid;
    slots.take(uid);
  }
  const auto kept = slots.refusal(1004, false);
  ASSERT_TRUE(kept);
  EXPECT_NE(kept->find("kept for root"), std::string::npos) << *kept;
  EXPECT_FALSE(slots.refusal(0, true));
  slots.take(0);
  EXPECT_TRUE(slots.refusal(0, true)) << "the administrator, too, stops at max_connections";
  slots.release(1002);
  EXPECT_TRUE(slots.refusal(1004, false)) << "3 of 4 held: the last one is still kept";
  slots.release(0);
  EXPECT_FALSE(slots.refusal(1004, false));
}

TEST(ConnectionSlots, AUserHoldsAtMostAQuarter) {
  ConnectionSlots slots(64);
  EXPECT_EQ(slots.per_user(), 16u);
  for (int i = 0; i < 16; ++i) slots.take(1000);
  const auto why = slots.refusal(1000, false);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->rfind("uid 1000 has 16 connections open", 0), 0u) << *why;
  EXPECT_FALSE(slots.refusal(1001, false)) << "another user is not held up";
  EXPECT_FALSE(slots.refusal(0, true)) << "root is not one of the users the quarter limits";
  slots.release(1000);
  EXPECT_FALSE(slots.refusal(1000, false));
  // Small limits: at least one slot per user, and nothing kept when there is a single slot.
  EXPECT_EQ(ConnectionSlots(2).per_user(), 1u);
  EXPECT_EQ(ConnectionSlots(1).kept_for_admin(), 0u);
  EXPECT_FALSE(ConnectionSlots(1).refusal(1000, false));
}

TEST(ControlServer, TheSocketGetsItsModeAndGroup) {
  ServerRig s;
  s.listen(0660, 100);
  struct stat st {};
  ASSERT_EQ(::lstat(s.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, 100u);
  EXPECT_EQ(s.server.path(), s.path);
}

TEST(ControlServer, AStaleSocketFileIsReplaced) {
  ServerRig s;
  {
    const int fd = listen_at(s.path);
    ASSERT_GE(fd, 0);
    ::close(fd);  // the file stays, nobody listens: what a killed jitterd leaves
  }
  ASSERT_EQ(connect_to(s.path), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  s.listen();
  ControlClient c(s.path);
  c.request(kVersion);
  EXPECT_EQ(c.reply(s.rig)["ok"], true);
}

TEST(ControlServer, ALiveSocketIsNotTakenOver) {
  ServerRig s;
  const int other = listen_at(s.path);
  ASSERT_GE(other, 0);
  try {
    s.server.bind(s.path, 0660, std::nullopt);
    FAIL() << "bound over a live socket";
  } catch (const shaper::SystemError& e) {
    EXPECT_EQ(e.error_number(), EADDRINUSE);
    EXPECT_NE(std::string(e.what()).find("another jitterd is listening there"), std::string::npos)
        << e.what();
  }
  // The other listener still has its socket.
  const int fd = connect_to(s.path);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  ::close(other);
}

TEST(ControlServer, AFileThatIsNotASocketIsLeftAlone) {
  ServerRig s;
  s.sockets.write("jitterd.sock", "precious");
  try {
    s.server.bind(s.path, 0660, std::nullopt);
    FAIL() << "bound over a regular file";
  } catch (const shaper::SystemError& e) {
    EXPECT_EQ(e.error_number(), EEXIST);
  }
  EXPECT_EQ(read_file(s.path), "precious");
}

TEST(ControlServer, StopClosesEveryConnectionAndRemovesTheSocket) {
  ServerRig s;
  s.listen();
  ControlClient c(s.path);
  c.request(kVersion);
  c.reply(s.rig);
  s.server.stop();
  EXPECT_TRUE(c.closed_by_daemon(s.rig));
  struct stat st {};
  EXPECT_NE(::lstat(s.path.c_str(), &st), 0) << "the socket file is gone";
  EXPECT_EQ(s.stats.connections_open, 0u);
}

// ---------------------------------------------------------------------------------------------
// Requests and replies

TEST(ControlServer, PipelinedRequestsAreAnsweredInOrder) {
  ServerRig s;
  s.listen();
  ControlClient c(s.path);
  c.send(R"({"id": 1, "method": "version"})"
         "\n"
         R"({"id": 2, "method": "status", "params": {"interface": "veth9"}})"
         "\n"
         "\n"  // a blank line is skipped
         R"({"id": "three", "method": "list-commands"})"
         "\r\n"
         R"(not json)"
         "\n");
  const json r1 = c.reply(s.rig);
  const json r2 = c.reply(s.rig);
  const json r3 = c.reply(s.rig);
  const json r4 = c.reply(s.rig);
  EXPECT_EQ(r1["id"], 1);
  EXPECT_EQ(r1["ok"], true);
  EXPECT_EQ(r2["id"], 2);
  EXPECT_EQ(r2["error"]["code"], "not-found");
  EXPECT_EQ(r3["id"], "three");
  EXPECT_EQ(r3["ok"], true);
  EXPECT_EQ(r4["error"]["code"], "parse-error");
  EXPECT_EQ(s.stats.requests_total, 4u);
}

// Lines longer than 16 KiB are read as JSON on the server's helper thread; their replies keep their
// place among the connection's others, and other connections are served meanwhile.
TEST(ControlServer, LongLinesReadOnTheHelperThreadAreAnsweredInTurn) {
  ServerRig s;
  s.listen();
  ControlClient a(s.path), b(s.path);
  const std::string long_id(40 * 1024, 'i');
  a.send(R"({"id": 1, "method": "version"})"
         "\n"
         R"({"id": ")" +
         long_id + R"(", "method": "version"})" + "\n" + R"({"id": 3, "x": )" +
         std::string(20000, '[') + std::string(20000, ']') + "}\n" + std::string(20000, '[') +
         "\n" + R"({"id": 5, "method": "version"})" + "\n");
  b.request(kVersion);
  EXPECT_EQ(b.reply(s.rig)["ok"], true);
  const json r1 = a.reply(s.rig);
  const json r2 = a.reply(s.rig);
  const json r3 = a.reply(s.rig);
  const json r4 = a.reply(s.rig);
  const json r5 = a.reply(s.rig);
  EXPECT_EQ(r1["id"], 1);
  EXPECT_EQ(r2["id"], long_id);
  EXPECT_EQ(r2["ok"], true);
  EXPECT_EQ(r3["id"], 3);
  EXPECT_EQ(r3["error"]["code"], "invalid-request");  // nested deeper than 64 levels
  EXPECT_FALSE(r4.contains("id"));
  EXPECT_EQ(r4["error"]["code"], "parse-error");
  EXPECT_EQ(r5["id"], 5);
  EXPECT_EQ(r5["ok"], true);
  EXPECT_EQ(s.stats.requests_total, 6u);
}

// `echo '{...}' | socat - UNIX-CONNECT:...`: the client half-closes right after its requests.
TEST(ControlServer, AClientThatHalfClosesGetsEveryReplyThenTheConnectionCloses) {
  ServerRig s;
  s.listen();
  ControlClient c(s.path);
  std::string requests;
  for (int i = 0; i < 20; ++i) requests += json{{"id", i}, {"method", "version"}}.dump() + "\n";
  c.send(requests);
  c.half_close();
  for (int i = 0; i < 20; ++i) {
    const json r = c.reply(s.rig);
    ASSERT_EQ(r["id"], i) << "reply " << i << " lost";
  }
  EXPECT_TRUE(c.closed_by_daemon(s.rig));
  EXPECT_TRUE(s.rig.run_until([&] { return s.stats.connections_open == 0; }, kPatience));
}

TEST(ControlServer, ASubscriberThatHalfClosesKeepsReceivingEvents) {
  ServerRig s;
  s.listen();
  ControlClient sub(s.path), control(s.path);
  sub.request({{"method", "subscribe"}});
  sub.half_close();
  EXPECT_EQ(sub.reply(s.rig)["result"], json::parse(R"({"subscribed": true})"));
  control.request(
      {{"method", "apply"},
       {"params", {{"interface", "veth0"}, {"profile", json::parse(profile_json("held"))}}}});
  ASSERT_EQ(control.reply(s.rig)["ok"], true);
  const json event = sub.reply(s.rig);
  EXPECT_EQ(event["event"], "applied") << event.dump();
  EXPECT_FALSE(sub.eof());
}

TEST(ControlServer, ARequestInPiecesIsReassembled) {
  ServerRig s;
  s.listen();
  ControlClient c(s.path);
  c.send(R"({"id": 9, "meth)");
  s.rig.run_for(20ms);
  c.send(R"(od": "version"})");
  s.rig.run_for(20ms);
  c.send("\n");
  EXPECT_EQ(c.reply(s.rig)["id"], 9);
}

TEST(ControlServer, ALineUpToTheLimitIsReadALongerOneIsTooLargeAndCloses) {
  ServerRig s([](Config& c) { c.limits.max_request_bytes = 4096; });
  s.listen();
  // Exactly 4096 bytes before the newline: accepted.
  std::string request = R"({"id": 1, "method": "version"})";
  request += std::string(4096 - request.size(), ' ');
  ControlClient ok(s.path);
  ok.send(request + "\n");
  EXPECT_EQ(ok.reply(s.rig)["ok"], true);

  // 4097 bytes: refused, then closed.
  ControlClient big(s.path);
  big.send(request + " \n");
  const json reply = big.reply(s.rig);
  EXPECT_EQ(reply["ok"], false);
  EXPECT_EQ(reply["error"]["code"], "too-large");
  EXPECT_EQ(reply["error"]["message"], "the request line is longer than 4096 bytes");
  EXPECT_FALSE(reply.contains("id"));
  EXPECT_TRUE(big.closed_by_daemon(s.rig));
  // The other connection is unaffected.
  ok.request(kVersion);
  EXPECT_EQ(ok.reply(s.rig)["ok"], true);
}

TEST(ControlServer, ConnectionsBeyondTheLimitGetBusyAndAreClosed) {
  ServerRig s([](Config& c) { c.limits.max_connections = 2; });
  s.listen();
  ControlClient a(s.path), b(s.path);
  a.request(kVersion);
  b.request(kVersion);
  ASSERT_EQ(a.reply(s.rig)["ok"], true);
  ASSERT_EQ(b.reply(s.rig)["ok"], true);

  ControlClient c(s.path);
  const json busy = c.reply(s.rig);
  EXPECT_EQ(busy["error"]["code"], "busy");
  EXPECT_FALSE(busy.contains("id"));
  EXPECT_TRUE(c.closed_by_daemon(s.rig));
  EXPECT_EQ(s.stats.connections_refused, 1u);

  // A freed slot is taken by the next client.
  a.close();
  ASSERT_TRUE(s.rig.run_until([&] { return s.stats.connections_open == 1; }, kPatience));
  ControlClient d(s.path);
  d.request(kVersion);
  EXPECT_EQ(d.reply(s.rig)["ok"], true);
  b.request(kVersion);
  EXPECT_EQ(b.reply(s.rig)["ok"], true);
}

// Issue 21 §2: `profiles` read every file of the folders on the loop's only thread, so a large
// folder (or a FIFO, which held it for good: ProfileStore.AFifoIsReportedAndNeverOpenedForReading)
// stopped every schedule and lease until it was done. The folder here takes the time it takes to
// read on this machine (measured first, `scan`); a schedule steps ten times in that time. While the
// request is in flight the steps go on, each late by far less than the read (half of it: the old
// code made the first step after the read late by nearly all of it, and none stepped during it).
TEST(ControlServer, ProfilesIsReadOffTheLoopWhileSchedulesStepOnTime) {
  ServerRig s;
  s.listen();
  // Files of JSON that takes long to parse (numbers: ~0.1 s per MiB in release builds, several
  // times that in the debug build the tests use), each an array, so each is listed as invalid.
  constexpr int kFiles = 2;
  std::string text = "[";
  while (text.size() < 512 * 1024) text += "0,";
  text += "0]";
  for (int i = 0; i < kFiles; ++i) s.profiles.write("big" + std::to_string(i) + ".json", text);
  const auto read_start = Clock::now();
  ASSERT_EQ(s.store.scan().invalid.size(), static_cast<std::size_t>(kFiles));
  const auto scan =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - read_start);
  const auto step = std::max(scan / 10, std::chrono::milliseconds(5));

  ControlClient control(s.path), lister(s.path);
  const std::string d = std::to_string(step.count()) + "ms";
  control.request({{"method", "apply"},
                   {"params",
                    {{"interface", "veth0"},
                     {"profile", json::parse(profile_json("sched", {{"a", d}, {"b", d}}))}}}});
  ASSERT_EQ(control.reply(s.rig)["ok"], true);
  ASSERT_TRUE(
      s.rig.run_until([&] { return s.rig.count(EventType::kPhaseChanged) >= 2; }, kPatience));

  const std::size_t before = s.rig.events.size();
  lister.request({{"method", "profiles"}});
  const auto line = lister.line(s.rig, kPatience + 4 * scan);
  ASSERT_TRUE(line) << "no reply to profiles (the folder takes " << scan.count() << " ms to read)";
  const json listed = json::parse(*line);
  ASSERT_EQ(listed["ok"], true) << listed.dump();
  EXPECT_EQ(listed["result"]["invalid"].size(), static_cast<std::size_t>(kFiles))
      << "the folder was read";

  std::vector<Nanoseconds> lateness;
  for (std::size_t i = before; i < s.rig.events.size(); ++i) {
    const Event& e = s.rig.events[i];
    if (e.type == EventType::kPhaseChanged && e.lateness) lateness.push_back(*e.lateness);
  }
  EXPECT_GE(lateness.size(), 2u) << "steps while the folder was read (read: " << scan.count()
                                 << " ms, step " << step.count() << " ms)";
  for (const auto l : lateness) {
    EXPECT_LT(l, scan / 2) << "a step late by " << l.count() << " ns; reading the folder took "
                           << scan.count() << " ms";
  }
}

// `apply` by name reads its one file on the file thread too, and gets what the folder holds.
TEST(ControlServer, ApplyByNameReadsTheFolderAndRefusesAFifoUnopened) {
  ServerRig s;
  s.listen();
  s.profiles.write("wifi.json", profile_json("wifi"));
  ASSERT_EQ(::mkfifo(s.profiles.file("x.json").c_str(), 0644), 0);
  ControlClient c(s.path);
  c.request({{"method", "apply"}, {"params", {{"interface", "veth0"}, {"profile", "wifi"}}}});
  const json applied = c.reply(s.rig);
  EXPECT_EQ(applied["ok"], true) << applied.dump();
  EXPECT_EQ(applied["result"]["profile"], "wifi");
  c.request({{"method", "apply"}, {"params", {{"interface", "veth1"}, {"profile", "x"}}}});
  const json refused = c.reply(s.rig);
  EXPECT_EQ(refused["error"]["code"], "invalid-params") << refused.dump();
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("is a FIFO, not a regular file"),
            std::string::npos)
      << refused.dump();
  c.request({{"method", "apply"}, {"params", {{"interface", "veth1"}, {"profile", "absent"}}}});
  EXPECT_EQ(c.reply(s.rig)["error"]["code"], "not-found");
}

TEST(ControlServer, AClientThatHangsUpMidRequestIsForgotten) {
  ServerRig s;
  s.listen();
  {
    ControlClient c(s.path);
    c.send(R"({"method": "vers)");
    s.rig.run_for(20ms);
  }
  ASSERT_TRUE(s.rig.run_until([&] { return s.stats.connections_open == 0; }, kPatience));
  EXPECT_EQ(s.stats.requests_total, 0u);
  ControlClient d(s.path);
  d.request(kVersion);
  EXPECT_EQ(d.reply(s.rig)["ok"], true);
}

// ---------------------------------------------------------------------------------------------
// Idle connections

TEST(ControlServer, ASilentClientIsClosedAfterTheIdleTimeoutButASubscriberIsNot) {
  ServerRig s([](Config& c) { c.limits.idle_timeout = 200ms; });
  s.listen();
  const auto connected = Clock::now();
  ControlClient silent(s.path);
  ControlClient subscriber(s.path);
  subscriber.request({{"method", "subscribe"}});
  ASSERT_EQ(subscriber.reply(s.rig)["result"]["subscribed"], true);

  ASSERT_TRUE(silent.closed_by_daemon(s.rig));
  EXPECT_GE(Clock::now() - connected, 200ms) << "closed before its idle timeout";

  // Three idle timeouts later the subscriber is still served.
  s.rig.run_for(600ms);
  subscriber.request(kVersion);
  const auto reply = subscriber.line(s.rig);
  ASSERT_TRUE(reply) << "the subscriber was disconnected";
  EXPECT_EQ(json::parse(*reply)["ok"], true);
}

TEST(ControlServer, AClientThatKeepsTalkingIsNotIdle) {
  ServerRig s([](Config& c) { c.limits.idle_timeout = 200ms; });
  s.listen();
  ControlClient c(s.path);
  for (int i = 0; i < 6; ++i) {  // 6 x 100 ms: three idle timeouts, never 200 ms of silence
    s.rig.run_for(100ms);
    c.request(kVersion);
    ASSERT_EQ(c.reply(s.rig)["ok"], true) << "request " << i;
  }
}

TEST(ControlServer, BytesOfALineThatNeverEndsAreNotActivity) {
  // Only complete lines keep a connection alive: a client trickling the bytes of one request is
  // closed at its idle timeout, long before it would have sent them all.
  ServerRig s([](Config& c) { c.limits.idle_timeout = 200ms; });
  s.listen();
  const auto connected = Clock::now();
  ControlClient c(s.path);
  const std::string partial = R"({"id": 1, "method": "version"})";  // 30 bytes x 50 ms = 1.5 s
  bool closed = false;
  for (std::size_t i = 0; i < partial.size() && !closed; ++i) {
    c.send(partial.substr(i, 1));
    closed = c.closed_by_daemon(s.rig, 50ms);
  }
  EXPECT_TRUE(closed) << "a byte without a line end counted as activity";
  EXPECT_GE(Clock::now() - connected, 200ms) << "closed before its idle timeout";
  EXPECT_EQ(s.stats.requests_total, 0u);
}

TEST(ControlServer, AnIdleSubscriberCostsTheDaemonNothing) {
  // Once a subscriber has been silent past the idle timeout, the daemon has nothing to do for it
  // until an event comes. Counting the handlers the io_context runs (not time): a quiet daemon runs
  // a handful at most; a timer re-armed in the past runs without end.
  ServerRig s([](Config& c) { c.limits.idle_timeout = 100ms; });
  s.listen();
  ControlClient subscriber(s.path);
  subscriber.request({{"method", "subscribe"}});
  ASSERT_EQ(subscriber.reply(s.rig)["ok"], true);
  s.rig.run_for(150ms);  // past the idle timeout
  const std::size_t handlers = s.rig.run_for(300ms);
  EXPECT_LT(handlers, 100u) << "the io_context is busy while nothing happens";
}

// ---------------------------------------------------------------------------------------------
// Subscribers

TEST(ControlServer, SubscribersReceiveTheEventsTheirFilterSelects) {
  ServerRig s;
  s.listen();
  ControlClient filtered(s.path), everything(s.path), control(s.path);
  filtered.request(
      {{"method", "subscribe"},
       {"params", {{"interfaces", {"veth0"}}, {"events", {"phase-changed", "cleared"}}}}});
  everything.request({{"id", "sub"}, {"method", "subscribe"}});
  EXPECT_EQ(filtered.reply(s.rig)["result"], json::parse(R"({"subscribed": true})"));
  EXPECT_EQ(everything.reply(s.rig)["id"], "sub");

  const json profile = json::parse(profile_json("held"));
  for (const json& request :
       {json{{"method", "apply"}, {"params", {{"interface", "veth0"}, {"profile", profile}}}},
        json{{"method", "switch"}, {"params", {{"interface", "veth0"}, {"phase", "b"}}}},
        json{{"method", "apply"}, {"params", {{"interface", "veth1"}, {"profile", profile}}}},
        json{{"method", "switch"}, {"params", {{"interface", "veth1"}, {"phase", "c"}}}},
        json{{"method", "clear"}, {"params", {{"all", true}}}}}) {
    control.request(request);
    const json reply = control.reply(s.rig);
    ASSERT_EQ(reply["ok"], true) << reply.dump();
    EXPECT_FALSE(reply.contains("event")) << "the requester did not subscribe";
  }

  std::vector<json> all;
  for (int i = 0; i < 6; ++i) {
    const auto l = everything.line(s.rig);
    ASSERT_TRUE(l) << "event " << i;
    all.push_back(json::parse(*l));
  }
  std::vector<std::string> seen;
  for (const auto& e : all) {
    EXPECT_FALSE(e.contains("ok")) << e.dump();
    seen.push_back(e["event"].get<std::string>() + " " + e["interface"].get<std::string>());
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"applied veth0", "phase-changed veth0", "applied veth1",
                                      "phase-changed veth1", "cleared veth0", "cleared veth1"}));
  for (std::size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i]["seq"], all[i - 1]["seq"]);

  const auto f1 = filtered.line(s.rig);
  const auto f2 = filtered.line(s.rig);
  ASSERT_TRUE(f1 && f2);
  EXPECT_EQ(json::parse(*f1)["event"], "phase-changed");
  EXPECT_EQ(json::parse(*f1)["phase"], "b");
  EXPECT_EQ(json::parse(*f2)["event"], "cleared");
  EXPECT_EQ(json::parse(*f2)["interface"], "veth0");
  EXPECT_FALSE(filtered.line(s.rig, 50ms)) << "nothing else matches the filter";

  // A subscriber may still send requests; replies and events share the line stream.
  everything.request({{"id", 5}, {"method", "version"}});
  EXPECT_EQ(everything.reply(s.rig)["id"], 5);

  // Subscribers that hang up are unsubscribed (the rig's own recorder stays).
  EXPECT_EQ(s.rig.bus.subscribers(), 3u);
  filtered.close();
  everything.close();
  EXPECT_TRUE(s.rig.run_until([&] { return s.rig.bus.subscribers() == 1; }, kPatience));
}

TEST(ControlServer, AnEventIsSerialisedOnceForAllItsSubscribersAndNotWhileItIsPublished) {
  // The publisher (a schedule's transition, with others due at the same instant) only queues it;
  // the connections' writers build its line, once.
  ServerRig s;
  s.listen();
  std::vector<std::unique_ptr<ControlClient>> subscribers;
  for (int i = 0; i < 3; ++i) {
    subscribers.push_back(std::make_unique<ControlClient>(s.path));
    subscribers.back()->request({{"method", "subscribe"}});
    ASSERT_EQ(subscribers.back()->reply(s.rig)["ok"], true);
  }
  Event e;
  e.type = EventType::kError;
  e.interface = "veth0";
  e.message = "the kernel said no";
  s.rig.bus.publish(e);
  EXPECT_EQ(s.stats.events_written, 0u) << "serialised while it was published";
  std::set<std::uint64_t> seqs;
  for (auto& c : subscribers) {
    const json event = c->reply(s.rig);
    EXPECT_EQ(event["event"], "error");
    EXPECT_EQ(event["message"], "the kernel said no");
    seqs.insert(event["seq"].get<std::uint64_t>());
  }
  EXPECT_EQ(seqs.size(), 1u);
  EXPECT_EQ(s.stats.events_written, 1u) << "serialised once for each subscriber";
}

TEST(ControlServer, ASubscriberThatNeverReadsIsDroppedAndOthersAreServedMeanwhile) {
  // max_queued_events 16; each event a quarter of the kernel's default socket send buffer (at least
  // 64 KiB), so that the buffer fills after a few and the rest queue in the daemon.
  const std::size_t event_bytes = std::max<std::size_t>(64 * 1024, default_send_buffer() / 4);
  ServerRig s([](Config& c) { c.limits.max_queued_events = 16; });
  s.listen();
  ControlClient stuck(s.path), other(s.path);
  stuck.request({{"method", "subscribe"}});
  other.request(kVersion);
  ASSERT_EQ(other.reply(s.rig)["ok"], true);
  ASSERT_TRUE(s.rig.run_until([&] { return s.rig.bus.subscribers() == 2; },
                              kPatience));  // the rig's + stuck's

  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      Event e;
      e.type = EventType::kError;
      e.interface = "veth0";
      e.message = std::string(event_bytes, 'x');
      s.rig.bus.publish(e);
      s.rig.run_for(2ms);
    }
  };
  publish(10);  // the buffer is full, some queue, not yet too many
  EXPECT_EQ(s.stats.subscribers_dropped, 0u);
  // The daemon answers others while `stuck` blocks its own writes.
  other.request({{"id", "meanwhile"}, {"method", "status"}});
  EXPECT_EQ(other.reply(s.rig)["id"], "meanwhile");

  publish(30);
  EXPECT_EQ(s.stats.subscribers_dropped, 1u);
  EXPECT_EQ(s.rig.bus.subscribers(), 1u) << "the dropped subscriber is unsubscribed";
  ASSERT_TRUE(stuck.closed_by_daemon(s.rig));
  stuck.drain();
  EXPECT_LT(stuck.lines_buffered(), 40u) << "it got what fit, then was cut off";
  other.request(kVersion);
  EXPECT_EQ(other.reply(s.rig)["ok"], true);
}

// ---------------------------------------------------------------------------------------------
// Peer credentials, with a real peer of another uid

struct ChildResult {
  std::string output;  // the reply line, or what went wrong
  int status = -1;
};

// Forks a child that takes `uid`, `gid` and supplementary `groups`, connects, sends `request` and
// returns the line it got back. The server runs on this thread meanwhile.
ChildResult ask_as(ServerRig& s, uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                   const std::string& request) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {"pipe failed", -1};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    std::string result;
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
        ::setuid(uid) != 0) {
      result =
          std::string("cannot become uid ") + std::to_string(uid) + ": " + std::strerror(errno);
    } else {
      const int fd = connect_to(s.path);
      if (fd < 0) {
        result = std::string("connect: ") + std::strerror(errno);
      } else {
        const std::string line = request + "\n";
        const timeval five_seconds{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof five_seconds);
        // A refused peer may be answered and closed before its request is sent: the send fails
        // (MSG_NOSIGNAL: EPIPE, not a SIGPIPE that kills the child), and the answer is there to
        // read, as jitterctl reads it.
        (void)::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
        char c;
        while (result.find('\n') == std::string::npos && ::read(fd, &c, 1) == 1) result += c;
      }
    }
    const long ignored = ::write(out[1], result.data(), result.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(out[1]);
  ChildResult r;
  s.rig.run_until([&] { return ::waitpid(pid, &r.status, WNOHANG) == pid; }, 10000ms);
  char buffer[4096];
  long n;
  while ((n = ::read(out[0], buffer, sizeof buffer)) > 0)
    r.output.append(buffer, static_cast<std::size_t>(n));
  ::close(out[0]);
  while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
  return r;
}

constexpr uid_t kNobody = 65534;
constexpr gid_t kNoGroup = 65534;
constexpr gid_t kUsers = 100;  // the socket's group in these tests

class PeerCredentials : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root, to fork a client that drops to uid 65534";
  }
};

TEST_F(PeerCredentials, TheSocketModeKeepsOthersOut) {
  ServerRig s({}, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0660, kUsers);
  const ChildResult r = ask_as(s, kNobody, kNoGroup, {}, kVersion.dump());
  EXPECT_EQ(r.output, "connect: Permission denied");
}

TEST_F(PeerCredentials, AnOutsiderReachingTheSocketIsRefusedEveryMethod) {
  // A socket wider than intended (as a misconfigured jitterd.socket might hand over): the daemon's
  // own check still refuses whoever is not root, jitterd's user or in the group.
  ServerRig s({}, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0666, kUsers);
  const ChildResult r = ask_as(s, kNobody, kNoGroup, {}, R"({"id": 1, "method": "status"})");
  ASSERT_EQ(r.output.rfind("{", 0), 0u) << r.output;
  const json reply = json::parse(r.output);
  // Answered as it connects, before its request is read: the reply has no id.
  EXPECT_FALSE(reply.contains("id")) << reply.dump();
  EXPECT_EQ(reply["error"]["code"], "permission-denied");
  EXPECT_EQ(reply["error"]["message"].get<std::string>().rfind("uid 65534 (pid ", 0), 0u)
      << reply.dump();
  EXPECT_NE(s.rig.log_text().find("refused a control connection from uid 65534"), std::string::npos)
      << s.rig.log_text();
  EXPECT_GE(s.stats.connections_refused, 1u);
}

TEST_F(PeerCredentials, AMemberOfTheGroupIsServedThroughItsPrimaryGroup) {
  ServerRig s({}, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0660, kUsers);
  const ChildResult r = ask_as(s, kNobody, kUsers, {}, R"({"id": 2, "method": "version"})");
  ASSERT_EQ(r.output.rfind("{", 0), 0u) << r.output;
  EXPECT_EQ(json::parse(r.output)["ok"], true) << r.output;
}

TEST_F(PeerCredentials, AMemberOfTheGroupIsServedThroughASupplementaryGroup) {
  ServerRig s({}, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0660, kUsers);
  const ChildResult r = ask_as(s, kNobody, kNoGroup, {kUsers}, R"({"id": 3, "method": "version"})");
  ASSERT_EQ(r.output.rfind("{", 0), 0u) << r.output;
  EXPECT_EQ(json::parse(r.output)["ok"], true) << r.output;
}

// A child process of another uid that runs `body` while this thread runs the server. The body's
// result comes back as one line through a pipe; the child then holds whatever the body left open
// until release() or finish().
class ChildAs {
 public:
  using Body = std::function<std::string()>;

  ChildAs(uid_t uid, gid_t gid, std::vector<gid_t> groups, const Body& body) {
    int out[2], release[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(release, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(out[0]);
      ::close(release[1]);
      std::string result;
      if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
          ::setuid(uid) != 0) {
        result =
            std::string("cannot become uid ") + std::to_string(uid) + ": " + std::strerror(errno);
      } else {
        result = body();
      }
      result += '\n';
      const long ignored = ::write(out[1], result.data(), result.size());
      (void)ignored;
      char c;
      while (::read(release[0], &c, 1) > 0) {
      }
      ::_exit(0);
    }
    ::close(out[1]);
    ::close(release[0]);
    out_ = out[0];
    release_ = release[1];
    ::fcntl(out_, F_SETFL, O_NONBLOCK);
  }
  ChildAs(const ChildAs&) = delete;
  ChildAs& operator=(const ChildAs&) = delete;
  ~ChildAs() {
    release();
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    ::close(out_);
  }

  // The body's line, running the server until it comes (the child may still hold its connections).
  std::string report(DaemonRig& rig) {
    rig.run_until(
        [&] {
          char buffer[4096];
          long n;
          while ((n = ::read(out_, buffer, sizeof buffer)) > 0)
            text_.append(buffer, static_cast<std::size_t>(n));
          return text_.find('\n') != std::string::npos;
        },
        15000ms);
    return text_.substr(0, text_.find('\n'));
  }
  // Lets the body return; the server runs until the child has exited.
  void finish(DaemonRig& rig) {
    release();
    int status = 0;
    rig.run_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 15000ms);
    pid_ = -1;
  }

 private:
  void release() {
    if (release_ >= 0) ::close(release_);
    release_ = -1;
  }
  pid_t pid_ = -1;
  int out_ = -1;
  int release_ = -1;
  std::string text_;
};

// In the child: what `fd` receives until the daemon closes it or a second passes: the lines it
// read, then "|closed" if the daemon closed the connection ("|open" if it was still open).
std::string read_until_closed(int fd) {
  const timeval one_second{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof one_second);
  std::string text;
  char buffer[4096];
  for (;;) {
    const long n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    // A connection closed with the request unread reports ECONNRESET after the reply.
    const bool closed = n == 0 || errno == ECONNRESET;
    return text + (closed ? "|closed" : "|open");
  }
}

// In the child: the error code of the first line of `text` ("ok" for a reply that is not an error).
std::string code_of(const std::string& text) {
  const json j = json::parse(text.substr(0, text.find('\n')), nullptr, false);
  if (!j.is_object()) return "no reply";
  if (j.value("ok", false)) return "ok";
  return j.contains("error") ? j["error"].value("code", "?") : "?";
}

// Issue 21 §5: with the socket left world-writable, 64 connections of a user outside the group each
// got permission-denied but stayed open, and root was then told `busy`.
TEST_F(PeerCredentials, RefusedPeersAreClosedAtOnceAndHoldNoSlot) {
  ServerRig s([](Config& c) { c.limits.max_connections = 4; }, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0666, kUsers);
  constexpr int kOutsiders = 12;  // three times the slots
  const std::string path = s.path;
  ChildAs outsider(kNobody, kNoGroup, {}, [&] {
    std::vector<int> fds;
    for (int i = 0; i < kOutsiders; ++i) fds.push_back(connect_to(path));
    std::string summary;
    for (const int fd : fds) {
      if (fd < 0) return std::string("connect failed");
      const std::string request = kVersion.dump() + "\n";
      (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      const std::string got = read_until_closed(fd);
      summary += code_of(got) + got.substr(got.rfind('|')) + " ";
    }
    return summary;  // the sockets stay open on this side until finish()
  });
  std::string expected;
  for (int i = 0; i < kOutsiders; ++i) expected += "permission-denied|closed ";
  EXPECT_EQ(outsider.report(s.rig), expected);
  EXPECT_EQ(s.stats.connections_open, 0u);
  EXPECT_EQ(s.stats.connections_refused, static_cast<std::uint64_t>(kOutsiders));

  // Root, and as many group members as there are slots, get in while the outsider still holds its
  // end of every refused connection.
  ControlClient root(s.path);
  root.request(kVersion);
  EXPECT_EQ(root.reply(s.rig)["ok"], true);
  outsider.finish(s.rig);
}

TEST_F(PeerCredentials, OneUserCannotTakeEverySlot) {
  // 8 slots: a user may hold 2 (a quarter), and one is kept for root.
  ServerRig s([](Config& c) { c.limits.max_connections = 8; }, AccessPolicy{0, kUsers});
  ASSERT_EQ(::chmod(s.sockets.path().c_str(), 0755), 0);
  s.listen(0660, kUsers);
  const std::string path = s.path;
  ChildAs greedy(kNobody, kUsers, {}, [&] {
    std::vector<int> fds;
    std::string summary;
    for (int i = 0; i < 3; ++i) {
      fds.push_back(connect_to(path));
      const std::string request = kVersion.dump() + "\n";
      (void)::send(fds.back(), request.data(), request.size(), MSG_NOSIGNAL);
      if (i < 2) {
        // Served connections stay open: read the one reply only.
        const timeval one_second{1, 0};
        ::setsockopt(fds.back(), SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof one_second);
        char buffer[4096];
        const long n = ::read(fds.back(), buffer, sizeof buffer);
        summary += code_of(n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "") + " ";
      } else {
        const std::string got = read_until_closed(fds.back());
        summary += code_of(got) + got.substr(got.rfind('|'));
      }
    }
    return summary;  // the two served connections stay open until finish()
  });
  EXPECT_EQ(greedy.report(s.rig), "ok ok busy|closed");
  EXPECT_EQ(s.stats.connections_open, 2u);

  // Another member of the group is served meanwhile.
  const ChildResult other = ask_as(s, kNobody - 1, kUsers, {}, kVersion.dump());
  ASSERT_EQ(other.output.rfind("{", 0), 0u) << other.output;
  EXPECT_EQ(json::parse(other.output)["ok"], true) << other.output;
  greedy.finish(s.rig);
}

}  // namespace
}  // namespace jitterd::testing

// ---------------------------------------------------------------------------------------------
// probe: run off the loop

namespace jitterd::testing {
namespace {

// Whether this process may open an ICMP datagram socket (its gid inside ping_group_range).
bool ping_sockets_allowed() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Where ping sockets are allowed, a probe of the loopback answers every probe, and another
// connection is served while it runs; where they are not (the kernel's default "1 0", as in a
// fresh network namespace), the error names the sysctl that allows them. The kernel e2e
// (tests/e2e/fleet_test.cpp) probes between namespaces with the sysctl set.
TEST(ControlServer, AProbeRunsOffTheLoopOrSaysWhichSysctlItNeeds) {
  ServerRig s;
  s.listen();
  ControlClient prober(s.path);
  prober.send(
      R"({"id": 1, "method": "probe", "params": {"addresses": ["127.0.0.1"], "count": 20, "interval": "20ms", "wait": "1s"}})"
      "\n"
      R"({"id": 2, "method": "version"})"
      "\n");
  if (!ping_sockets_allowed()) {
    const json r = prober.reply(s.rig);
    EXPECT_EQ(r["id"], 1);
    EXPECT_EQ(r["ok"], false) << r.dump();
    EXPECT_EQ(r["error"]["code"], "system-error") << r.dump();
    EXPECT_NE(r["error"]["hint"].get<std::string>().find("net.ipv4.ping_group_range"),
              std::string::npos)
        << r.dump();
    EXPECT_EQ(prober.reply(s.rig)["id"], 2);  // answered after the probe, in order
    return;
  }
  // The probes take 0.4 s; another client is answered meanwhile.
  ControlClient other(s.path);
  const auto asked = Clock::now();
  other.request({{"id", 7}, {"method", "version"}});
  EXPECT_EQ(other.reply(s.rig)["id"], 7);
  EXPECT_LT(Clock::now() - asked, 300ms) << "the loop was held by the probe";
  const json r = prober.reply(s.rig);
  ASSERT_EQ(r["ok"], true) << r.dump();
  EXPECT_EQ(r["id"], 1);
  const json& t = r["result"]["targets"][0];
  EXPECT_EQ(t["address"], "127.0.0.1");
  EXPECT_EQ(t["sent"], 20);
  EXPECT_EQ(t["received"], 20);
  for (const auto& rtt : t["rtt_ns"]) {
    ASSERT_TRUE(rtt.is_number_integer()) << t.dump();
    EXPECT_GT(rtt.get<std::int64_t>(), 0);
    EXPECT_LT(rtt.get<std::int64_t>(), 100'000'000) << "a loopback echo within 100 ms";
  }
  EXPECT_EQ(prober.reply(s.rig)["id"], 2);
}

}  // namespace
}  // namespace jitterd::testing
