// jitterctl --host ssh://...: the URL and the ssh command line it becomes; `jitterctl proxy`
// bridging a fake jitterd's socket; and ControlClient over an ssh transport whose "ssh" is a shell
// script (a protocol test: the script runs the remote command with sh as sshd would, or fails the
// way ssh does). The real sshd is the end-to-end test's (tests/e2e/remote_ssh_test.cpp).
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "child_transport.hpp"
#include "control_client.hpp"
#include "fake_jitterd.hpp"
#include "host_url_error.hpp"
#include "options.hpp"
#include "proxy.hpp"
#include "remote_host.hpp"

namespace jitterctl {
namespace {

using testing::FakeJitterd;
using Json = nlohmann::json;
using namespace std::chrono_literals;

// ---- URLs ---------------------------------------------------------------------------------------

TEST(HostUrl, ReadsUserHostPortAndSocket) {
  const RemoteHost r = parse_host_url("ssh://ops@lab-7.example:2222/run/jitterd/other.sock");
  EXPECT_EQ(r.user, "ops");
  EXPECT_EQ(r.host, "lab-7.example");
  EXPECT_EQ(r.port, 2222);
  EXPECT_EQ(r.socket_path, "/run/jitterd/other.sock");
  EXPECT_EQ(r.url(), "ssh://ops@lab-7.example:2222/run/jitterd/other.sock");

  const RemoteHost bare = parse_host_url("ssh://lab");
  EXPECT_EQ(bare.user, "");
  EXPECT_EQ(bare.host, "lab");
  EXPECT_FALSE(bare.port);
  EXPECT_EQ(bare.socket_path, "");

  const RemoteHost v6 = parse_host_url("ssh://root@[2001:db8::1]:22");
  EXPECT_EQ(v6.host, "2001:db8::1");
  EXPECT_EQ(v6.port, 22);
  EXPECT_EQ(v6.url(), "ssh://root@[2001:db8::1]:22");
}

TEST(HostUrl, RefusesBadUrlsSayingWhy) {
  EXPECT_EQ(testing::host_url_error("tcp://lab:2375"),
            "--host \"tcp://lab:2375\": unsupported scheme \"tcp\"; give "
            "ssh://[user@]host[:port][/socket/path] or k8s://NODE[/socket/path]");
  EXPECT_NE(testing::host_url_error("lab").find("not a URL"), std::string::npos);
  EXPECT_EQ(testing::host_url_error("ssh://lab:0"),
            "--host \"ssh://lab:0\": port \"0\" is not a port number (1 to 65535)");
  EXPECT_NE(testing::host_url_error("ssh://lab:65536").find("not a port number"),
            std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://lab:22x").find("not a port number"), std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://lab:").find("not a port number"), std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://").find("which host?"), std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://@lab").find("empty user"), std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://2001:db8::1").find("in brackets"), std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://[2001:db8::1").find("without ']'"), std::string::npos);
  // Words ssh would take for options.
  EXPECT_NE(testing::host_url_error("ssh://-oProxyCommand=x").find("may not start with '-'"),
            std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://-l@lab").find("may not start with '-'"),
            std::string::npos);
  EXPECT_NE(testing::host_url_error("ssh://lab/x.sock?a=b").find("no query"), std::string::npos);
}

TEST(HostUrl, SshArgvHasNoShellOnThisSideAndQuotesTheRemoteSocket) {
  const auto argv = ssh_argv(parse_host_url("ssh://ops@lab:2222/tmp/it's.sock"),
                             ssh_command_words("ssh  -F /etc/j.conf"));
  EXPECT_EQ(argv, (std::vector<std::string>{"ssh", "-F", "/etc/j.conf", "-T", "-o", "BatchMode=yes",
                                            "-p", "2222", "-l", "ops", "--", "lab",
                                            "jitterctl proxy --socket '/tmp/it'\\''s.sock'"}));
  EXPECT_EQ(ssh_argv(parse_host_url("ssh://lab"), ssh_command_words(nullptr)),
            (std::vector<std::string>{"ssh", "-T", "-o", "BatchMode=yes", "--", "lab",
                                      "jitterctl proxy"}));
  EXPECT_EQ(ssh_command_words(" \t"), std::vector<std::string>{"ssh"});
}

// ---- jitterctl proxy ----------------------------------------------------------------------------

// Both ends of a socket pair, as the proxy's stdin/stdout and the test's side.
struct Pipe {
  shaper::UniqueFd ours, theirs;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    ours = shaper::UniqueFd(fds[0]);
    theirs = shaper::UniqueFd(fds[1]);
  }
};

std::string read_until_eof(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  return text;
}

TEST(Proxy, CopiesBytesBothWaysUnchangedAndEndsWithZeroAtStdinsEnd) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{{R"({"event":"phase-changed","seq":1})"
                                  "\n",
                                  FakeJitterd::ok_line(r, {{"echo", r.at("params")}})}};
  });
  Pipe in, out;
  std::ostringstream err;
  auto proxy = std::async(std::launch::async, [&] {
    return run_proxy(server.socket_path(), 5s, in.theirs.get(), out.theirs.get(), err);
  });
  // Two requests in one write, the second split: the proxy does not look at lines.
  const std::string requests = R"({"id":1,"method":"status","params":{"x":"é"}})"
                               "\n"
                               R"({"id":2,"method":"version","params":{}})"
                               "\n";
  ASSERT_EQ(::write(in.ours.get(), requests.data(), requests.size()),
            static_cast<ssize_t>(requests.size()));
  in.ours = shaper::UniqueFd();  // stdin's end: a half close towards jitterd
  ASSERT_EQ(proxy.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(proxy.get(), 0) << err.str();
  out.theirs = shaper::UniqueFd();
  const std::string replies = read_until_eof(out.ours.get());
  const std::string expected =
      std::string(R"({"event":"phase-changed","seq":1})") + "\n" +
      FakeJitterd::ok_line(Json::parse(requests.substr(0, requests.find('\n'))),
                           {{"echo", {{"x", "é"}}}}) +
      R"({"event":"phase-changed","seq":1})" + "\n" +
      FakeJitterd::ok_line(Json::parse(requests.substr(requests.find('\n') + 1)),
                           {{"echo", Json::object()}});
  EXPECT_EQ(replies, expected);
  ASSERT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[1].at("method"), "version");
}

TEST(Proxy, EndsWithZeroWhenJitterdClosesTheConnection) {
  FakeJitterd server([](const Json& r) {
    return FakeJitterd::Response{{FakeJitterd::ok_line(r, Json::object())}, 0ms, true};
  });
  Pipe in, out;
  std::ostringstream err;
  auto proxy = std::async(std::launch::async, [&] {
    return run_proxy(server.socket_path(), 5s, in.theirs.get(), out.theirs.get(), err);
  });
  const std::string request = R"({"id":7,"method":"status","params":{}})"
                              "\n";
  ASSERT_EQ(::write(in.ours.get(), request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  ASSERT_EQ(proxy.wait_for(10s), std::future_status::ready) << "stdin still open, socket closed";
  EXPECT_EQ(proxy.get(), 0);
  out.theirs = shaper::UniqueFd();
  EXPECT_EQ(read_until_eof(out.ours.get()),
            FakeJitterd::ok_line(Json::parse(request), Json::object()));
}

TEST(Proxy, EndsWhenStdoutsReaderLeavesThoughStdinAndJitterdStayOpen) {
  // A subscriber whose ssh went away: nothing more comes on stdin or from jitterd, and the proxy
  // must not wait for the next event to notice.
  FakeJitterd server([](const Json& r) { return FakeJitterd::reply(r, Json::object()); });
  Pipe in, out;
  std::ostringstream err;
  auto proxy = std::async(std::launch::async, [&] {
    return run_proxy(server.socket_path(), 5s, in.theirs.get(), out.theirs.get(), err);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(proxy.wait_for(0s), std::future_status::timeout) << "ended before its reader left";
  out.ours = shaper::UniqueFd();
  ASSERT_EQ(proxy.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(proxy.get(), 0) << err.str();
}

TEST(Proxy, MissingSocketIsExitFourWithTheUsualHint) {
  const test_support::TempDir dir("jitterctl-proxy-");
  Pipe in, out;
  std::ostringstream err;
  EXPECT_EQ(run_proxy(dir.path() + "/none.sock", 5s, in.theirs.get(), out.theirs.get(), err), 4);
  EXPECT_EQ(err.str(), "jitterctl proxy: cannot connect to jitterd at " + dir.path() +
                           "/none.sock: No such file or directory — is jitterd running? "
                           "(systemctl start jitterd, or --socket PATH)\n");
}

// ---- ControlClient over a fake ssh --------------------------------------------------------------

// A script standing in for ssh: it records its arguments, then either runs the remote command with
// sh (jitterctl found through PATH, as on a remote host) or says `stderr` and exits `code`, as ssh
// does for its own failures.
class FakeSsh {
 public:
  explicit FakeSsh(const std::string& body) {
    const std::string ctl_dir =
        std::string(JITTERCTL_BINARY).substr(0, std::string(JITTERCTL_BINARY).rfind('/'));
    std::ofstream script(path());
    script << "#!/bin/sh\nprintf '%s\\n' \"$@\" > " << dir_.path() << "/args\n"
           << "for last; do :; done\nPATH=" << ctl_dir << ":$PATH\n"
           << body << '\n';
    script.close();
    ::chmod(path().c_str(), 0755);
  }
  std::string path() const { return dir_.path() + "/ssh"; }
  ClientOptions options(const std::string& url) const {
    ClientOptions options;
    options.remote = parse_host_url(url);
    options.commands.ssh = {path()};
    options.timeout = 5s;
    return options;
  }
  std::string args() const {
    // Through a stringstream, not istreambuf_iterator: GCC 12 at -O1 sees a null dereference in
    // the iterator's inlined sbumpc (-Wnull-dereference, an error in CI's build).
    std::ifstream in(dir_.path() + "/args");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  test_support::TempDir dir_{"jitterctl-fake-ssh-"};
};

// The remote command runs through sh, as sshd runs it through the user's shell.
constexpr const char* kRunRemoteCommand = "exec sh -c \"$last\"";

TEST(SshTransport, EveryCallAndEventGoesThroughTheRemoteProxy) {
  FakeJitterd server([](const Json& r) {
    if (r.at("method") == "subscribe") {
      return FakeJitterd::Response{
          {FakeJitterd::ok_line(r, {{"subscribed", true}}),
           R"({"event":"phase-changed","seq":1,"interface":"veth0","phase":"high"})"
           "\n"}};
    }
    return FakeJitterd::reply(r, {{"sessions", Json::array()}});
  });
  const FakeSsh ssh(kRunRemoteCommand);
  ControlClient client =
      ControlClient::connect(ssh.options("ssh://ops@lab:2222" + server.socket_path()));
  EXPECT_EQ(client.endpoint(), "ssh://ops@lab:2222" + server.socket_path());
  const Reply status = client.call("status", Json::object());
  ASSERT_TRUE(status.ok);
  EXPECT_EQ(status.result, Json({{"sessions", Json::array()}}));
  ASSERT_TRUE(client.call("subscribe", Json::object()).ok);
  const auto event = client.next_event(ControlClient::Clock::now() + 5s);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->at("phase"), "high");
  EXPECT_EQ(ssh.args(),
            "-T\n-o\nBatchMode=yes\n-p\n2222\n-l\nops\n--\nlab\njitterctl proxy "
            "--socket '" +
                server.socket_path() + "'\n");
  ASSERT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[0], Json::parse(R"({"id":1,"method":"status","params":{}})"));
}

std::string connect_failure(const FakeSsh& ssh, const std::string& url) {
  try {
    ControlClient client = ControlClient::connect(ssh.options(url));
    client.call("status", Json::object());
  } catch (const ConnectError& e) {
    return e.what();
  }
  return "(no ConnectError)";
}

TEST(SshTransport, SshsOwnFailuresNameTheHostTheLastLineAndTheFix) {
  const FakeSsh auth(
      "echo 'Warning: Permanently added lab' >&2; "
      "echo 'root@lab: Permission denied (publickey).' >&2; exit 255");
  EXPECT_EQ(connect_failure(auth, "ssh://root@lab:2222"),
            "cannot reach jitterd on ssh://root@lab:2222: ssh failed: root@lab: Permission denied "
            "(publickey). — authentication failed: jitterctl runs ssh with BatchMode=yes, so a key "
            "must log in without a prompt (ssh-add, or IdentityFile in ~/.ssh/config); check with: "
            "ssh -o BatchMode=yes -p 2222 -l root lab jitterctl proxy </dev/null");

  const FakeSsh refused(
      "echo 'ssh: connect to host lab port 2222: Connection refused' >&2; exit 255");
  EXPECT_NE(connect_failure(refused, "ssh://lab:2222")
                .find("Connection refused — is sshd running on lab and reachable on port 2222?"),
            std::string::npos);
}

TEST(SshTransport, RemoteJitterctlMissingAndRemoteSocketMissingSaySo) {
  const FakeSsh missing("echo 'bash: line 1: jitterctl: command not found' >&2; exit 127");
  EXPECT_EQ(connect_failure(missing, "ssh://lab"),
            "cannot reach jitterd on ssh://lab: jitterctl was not found there: bash: line 1: "
            "jitterctl: command not found — install jitterctl on lab in the PATH that ssh "
            "sessions get (e.g. /usr/bin or /usr/local/bin)");

  const test_support::TempDir dir("jitterctl-remote-");
  const FakeSsh runs(kRunRemoteCommand);
  EXPECT_EQ(connect_failure(runs, "ssh://lab" + dir.path() + "/none.sock"),
            "cannot reach jitterd on ssh://lab" + dir.path() +
                "/none.sock: the remote jitterctl proxy could not reach jitterd: jitterctl proxy: "
                "cannot connect to jitterd at " +
                dir.path() +
                "/none.sock: No such file or directory — is jitterd running? (systemctl start "
                "jitterd, or --socket PATH)");
}

TEST(SshTransport, SshThatCannotRunIsAConnectError) {
  ClientOptions options;
  options.remote = parse_host_url("ssh://lab");
  options.commands.ssh = {"/nonexistent/ssh"};
  try {
    ControlClient::connect(options);
    FAIL() << "connected";
  } catch (const ConnectError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot reach jitterd on ssh://lab: cannot run \"/nonexistent/ssh\": No such file "
                 "or directory — install openssh-client, or name the ssh program in $JITTERD_SSH");
  }
}

TEST(SshTransport, DestroyingTheClientEndsAHungSsh) {
  // An ssh that never ends by itself (ignores its stdin's end): the client's destructor must not
  // wait forever; it terminates it after the grace periods (0.5 s, then SIGTERM).
  const FakeSsh hung("trap '' HUP; exec sleep 600");
  const auto start = std::chrono::steady_clock::now();
  { ControlClient client = ControlClient::connect(hung.options("ssh://lab")); }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
}  // namespace jitterctl
