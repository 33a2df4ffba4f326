// ControlClient against a fake jitterd: the envelope, events interleaved with replies, lines that
// arrive in pieces or not at all, and the messages a user sees when jitterd cannot be reached.
#include "control_client.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/temp_dir.hpp"
#include "fake_jitterd.hpp"

namespace jitterctl {
namespace {

using testing::FakeJitterd;
using Json = nlohmann::json;
using namespace std::chrono_literals;

ClientOptions options_for(const FakeJitterd& server, shaper::Nanoseconds timeout = 5s) {
  ClientOptions options;
  options.socket_path = server.socket_path();
  options.timeout = timeout;
  return options;
}

FakeJitterd::Response event_then_reply(const Json& request) {
  return {{R"({"event":"phase-changed","seq":1,"interface":"veth0","phase":"high"})"
           "\n",
           R"({"event":"phase-changed","seq":2,"interface":"veth0","phase":"low"})"
           "\n",
           FakeJitterd::ok_line(request, {{"version", "0.1.0"}})}};
}

TEST(ControlClient, SendsOneRequestLineWithIdMethodAndParams) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::reply(r, {{"sessions", Json::array()}});
  });
  ControlClient client = ControlClient::connect(options_for(server));
  const Reply first = client.call("status", {{"interface", "veth0"}});
  const Reply second = client.call("status", Json::object());
  ASSERT_TRUE(first.ok);
  EXPECT_EQ(first.result, Json({{"sessions", Json::array()}}));
  EXPECT_TRUE(second.ok);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0],
            Json::parse(R"({"id":1,"method":"status","params":{"interface":"veth0"}})"));
  EXPECT_EQ(requests[1], Json::parse(R"({"id":2,"method":"status","params":{}})"));
}

TEST(ControlClient, ErrorReplyKeepsCodeMessageWhereAndHint) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{
        {FakeJitterd::error_line(r, "invalid-params", R"(phase "hgih" is not in profile "wifi")",
                                 "/params/phase", "phases: high, low")}};
  });
  ControlClient client = ControlClient::connect(options_for(server));
  const Reply reply = client.call("switch", {{"interface", "veth0"}, {"phase", "hgih"}});
  ASSERT_FALSE(reply.ok);
  EXPECT_EQ(reply.error.code, "invalid-params");
  EXPECT_EQ(reply.error.message, R"(phase "hgih" is not in profile "wifi")");
  EXPECT_EQ(reply.error.where, "/params/phase");
  EXPECT_EQ(reply.error.hint, "phases: high, low");
}

TEST(ControlClient, EventsBeforeTheReplyAreSkippedAndKeptForNextEvent) {
  FakeJitterd server(event_then_reply);
  ControlClient client = ControlClient::connect(options_for(server));
  const Reply reply = client.call("version", Json::object());
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.result, Json({{"version", "0.1.0"}}));
  // The two events come back in order, without reading the socket again.
  const auto deadline = ControlClient::Clock::now();
  const auto first = client.next_event(deadline);
  const auto second = client.next_event(deadline);
  ASSERT_TRUE(first && second);
  EXPECT_EQ((*first)["seq"], 1);
  EXPECT_EQ((*second)["phase"], "low");
  EXPECT_FALSE(client.next_event(deadline));
}

TEST(ControlClient, AReplyInSmallPiecesIsReassembled) {
  FakeJitterd server([](const Json& r) {
    const std::string line = FakeJitterd::ok_line(r, {{"text", std::string(300, 'm')}});
    FakeJitterd::Response response;
    // 7-byte pieces, 2 ms apart: every read() returns part of a line.
    for (std::size_t i = 0; i < line.size(); i += 7) response.chunks.push_back(line.substr(i, 7));
    response.pause = 2ms;
    return response;
  });
  ControlClient client = ControlClient::connect(options_for(server));
  const Reply reply = client.call("metrics", Json::object());
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.result["text"], std::string(300, 'm'));
}

TEST(ControlClient, TwoRepliesInOneReadAreSplitAtTheNewline) {
  // Both replies arrive with the first request's answer; the second call must find its reply in the
  // buffer, not wait for the socket.
  int calls = 0;
  FakeJitterd server([&calls](const Json& r) {
    if (calls++ > 0) return FakeJitterd::Response{};
    Json second = r;
    second["id"] = 2;
    return FakeJitterd::Response{
        {FakeJitterd::ok_line(r, {{"n", 1}}) + FakeJitterd::ok_line(second, {{"n", 2}})}};
  });
  ControlClient client = ControlClient::connect(options_for(server, 500ms));
  EXPECT_EQ(client.call("version", Json::object()).result["n"], 1);
  EXPECT_EQ(client.call("version", Json::object()).result["n"], 2);
}

TEST(ControlClient, LinesUpToSixteenMebibytesAreRead) {
  // A reply of just under 16 MiB (the "text" value plus the envelope) is accepted.
  const std::size_t text_bytes = kMaxLineBytes - 200;
  FakeJitterd server([&](const Json& r) {
    return FakeJitterd::reply(r, {{"text", std::string(text_bytes, 'x')}});
  });
  // A minute: the limit is what is tested, not the time; under TSan at -O0 (scripts/test) building,
  // sending and parsing 16 MiB of JSON takes several seconds.
  ControlClient client = ControlClient::connect(options_for(server, 60s));
  const Reply reply = client.call("metrics", Json::object());
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.result["text"].get_ref<const std::string&>().size(), text_bytes);
}

TEST(ControlClient, ALineLongerThanSixteenMebibytesIsAnError) {
  FakeJitterd server(
      [](const Json&) { return FakeJitterd::Response{{std::string(kMaxLineBytes + 1, 'x')}}; });
  ControlClient client = ControlClient::connect(options_for(server));
  try {
    client.call("metrics", Json::object());
    FAIL() << "a 16 MiB + 1 byte line was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_STREQ(e.what(), "jitterd sent a line longer than 16 MiB");
  }
}

TEST(ControlClient, ConnectionClosedMidReplyIsAClearError) {
  FakeJitterd server([](const Json&) {
    return FakeJitterd::Response{{R"({"id":1,"ok":true,"result":{"sess)"}, 0ms, true};
  });
  ControlClient client = ControlClient::connect(options_for(server));
  try {
    client.call("status", Json::object());
    FAIL() << "half a reply was accepted";
  } catch (const ConnectionClosed& e) {
    EXPECT_TRUE(e.mid_line());
    EXPECT_EQ(
        std::string(e.what()),
        R"(jitterd closed the connection in the middle of its reply to status (33 bytes of an unfinished line: {"id":1,"ok":true,"result":{"sess))");
  }
}

TEST(ControlClient, ConnectionClosedWithoutReplyIsAClearError) {
  FakeJitterd server([](const Json&) { return FakeJitterd::Response{{}, 0ms, true}; });
  ControlClient client = ControlClient::connect(options_for(server));
  try {
    client.call("status", Json::object());
    FAIL() << "a closed connection gave a reply";
  } catch (const ConnectionClosed& e) {
    EXPECT_FALSE(e.mid_line());
    EXPECT_STREQ(e.what(), "jitterd closed the connection without replying to status");
  }
}

TEST(ControlClient, NoReplyWithinTheTimeoutIsATimeoutError) {
  FakeJitterd server([](const Json&) { return FakeJitterd::Response{}; });
  ControlClient client = ControlClient::connect(options_for(server, 150ms));
  const auto start = ControlClient::Clock::now();
  try {
    client.call("status", Json::object());
    FAIL() << "no reply, yet call returned";
  } catch (const TimeoutError& e) {
    EXPECT_STREQ(e.what(), "no reply from jitterd to status within 150ms; try a longer --timeout");
  }
  // It waited for the timeout, not less (no upper bound: timing assertions belong in benchmarks).
  EXPECT_GE(ControlClient::Clock::now() - start, 150ms);
}

TEST(ControlClient, BusyGreetingBeforeTheRequestIsTheReply) {
  // jitterd at its connection limit answers once, without an id, and closes without reading.
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, Json::object()); });
  server.set_greeting(
      {{R"j({"ok":false,"error":{"code":"busy","message":"too many connections (64)"}})j"
        "\n"},
       0ms,
       true});
  ControlClient client = ControlClient::connect(options_for(server));
  const Reply reply = client.call("status", Json::object());
  ASSERT_FALSE(reply.ok);
  EXPECT_EQ(reply.error.code, "busy");
  EXPECT_EQ(reply.error.message, "too many connections (64)");
}

TEST(ControlClient, AReplyToAnotherRequestIsAProtocolError) {
  FakeJitterd server([](const Json&) {
    return FakeJitterd::Response{{R"({"id":99,"ok":true,"result":{}})"
                                  "\n"}};
  });
  ControlClient client = ControlClient::connect(options_for(server));
  try {
    client.call("status", Json::object());
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_STREQ(e.what(), "jitterd replied to request 99 while jitterctl waited for request 1");
  }
}

TEST(ControlClient, ALineThatIsNotJsonIsAProtocolError) {
  FakeJitterd server([](const Json&) { return FakeJitterd::Response{{"hello\n"}}; });
  ControlClient client = ControlClient::connect(options_for(server));
  try {
    client.call("status", Json::object());
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_STREQ(e.what(), "jitterd sent a line that is not JSON: hello");
  }
}

TEST(ControlClient, ALineWithoutOkOrEventIsAProtocolError) {
  FakeJitterd server([](const Json&) { return FakeJitterd::Response{{"{\"id\":1}\n"}}; });
  ControlClient client = ControlClient::connect(options_for(server));
  EXPECT_THROW(client.call("status", Json::object()), ProtocolError);
}

TEST(ControlClient, NextEventReadsTheStreamAndReportsItsEnd) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{
        {FakeJitterd::ok_line(r, {{"subscribed", true}}),
         R"({"event":"cleared","seq":3,"interface":"veth0","reason":"shutdown"})"
         "\n"},
        0ms,
        true};
  });
  ControlClient client = ControlClient::connect(options_for(server));
  ASSERT_TRUE(client.call("subscribe", Json::object()).ok);
  const auto event = client.next_event(std::nullopt);
  ASSERT_TRUE(event);
  EXPECT_EQ((*event)["reason"], "shutdown");
  try {
    client.next_event(std::nullopt);
    FAIL() << "the stream went on after the connection closed";
  } catch (const ConnectionClosed& e) {
    EXPECT_FALSE(e.mid_line());
  }
}

TEST(ControlClient, InterruptFdEndsAWait) {
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, {{"subscribed", true}}); });
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  ClientOptions options = options_for(server);
  options.interrupt_fd = read_end.get();
  ControlClient client = ControlClient::connect(options);
  ASSERT_TRUE(client.call("subscribe", Json::object()).ok);
  ASSERT_EQ(::write(write_end.get(), "x", 1), 1);
  EXPECT_THROW(client.next_event(std::nullopt), Interrupted);
}

TEST(ControlClient, InterruptSignalsTurnsSigintIntoAReadableFd) {
  const InterruptSignals signals;
  ASSERT_EQ(::raise(SIGINT), 0);  // blocked, so it waits in the signalfd instead of ending the test
  pollfd pfd{signals.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 1000), 1);
}

TEST(ControlClient, MissingSocketSaysIsJitterdRunning) {
  ClientOptions options;
  options.socket_path = "/tmp/jitterctl-test-no-such-dir/jitterd.sock";
  try {
    ControlClient::connect(options);
    FAIL();
  } catch (const ConnectError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_STREQ(e.what(),
                 "cannot connect to jitterd at /tmp/jitterctl-test-no-such-dir/jitterd.sock: No "
                 "such file or "
                 "directory — is jitterd running? (systemctl start jitterd, or --socket PATH)");
  }
}

TEST(ControlClient, StaleSocketSaysIsJitterdRunning) {
  // A socket file nobody listens on any more (jitterd was killed): connection refused.
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, Json::object()); });
  const std::string stale = server.directory() + "/stale.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  const test_support::UnixAddress address = test_support::unix_address(stale);
  ASSERT_EQ(::bind(fd, address.get(), address.length), 0);
  ::close(fd);
  ClientOptions options;
  options.socket_path = stale;
  try {
    ControlClient::connect(options);
    FAIL();
  } catch (const ConnectError& e) {
    EXPECT_EQ(e.error_number(), ECONNREFUSED);
    EXPECT_EQ(std::string(e.what()),
              "cannot connect to jitterd at " + stale +
                  ": Connection refused — is jitterd running? (systemctl start jitterd, or "
                  "--socket PATH)");
  }
  ::unlink(stale.c_str());
}

TEST(ControlClient, PermissionDeniedPointsAtTheSocketGroup) {
  // A listening socket of mode 0000: only root may connect. Run as root, the test forks a child
  // that becomes "nobody" to try; otherwise this process tries itself. No server thread runs here,
  // so the child may allocate after fork().
  const test_support::TempDir dir("jitterctl-test-", 0755);
  const std::string path = dir.file("jitterd.sock");
  const UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  const test_support::UnixAddress address = test_support::unix_address(path);
  ASSERT_EQ(::bind(listener.get(), address.get(), address.length), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  ClientOptions options;
  options.socket_path = path;
  auto permission_message = [&]() -> std::string {
    try {
      ControlClient::connect(options);
      return "connected";
    } catch (const ConnectError& e) {
      return e.what();
    }
  };
  const std::string expected_start =
      "cannot connect to jitterd at " + path +
      ": Permission denied — add yourself to the group that owns the socket (";
  if (::geteuid() != 0) {
    EXPECT_EQ(permission_message().substr(0, expected_start.size()), expected_start);
  } else {
    const pid_t child = ::fork();
    ASSERT_NE(child, -1);
    if (child == 0) {
      constexpr uid_t kNobody = 65534;
      if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(2);
      ::_exit(permission_message().starts_with(expected_start) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "exit 1: wrong message, exit 2: could not become nobody";
  }
}

}  // namespace
}  // namespace jitterctl
