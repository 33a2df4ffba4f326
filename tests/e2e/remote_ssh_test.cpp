// jitterctl --host ssh://root@198.18.0.1:2222 against Debian's real sshd (openssh-server) in
// namespace a, where jitterd runs: the client runs in namespace b with its own key pair, made here,
// and drives apply, switch, status, subscribe and clear through `ssh ... jitterctl proxy`, the
// shaping checked with tc on jta. The remote socket's checks apply to the ssh user: a user outside
// the socket's group is refused by jitterd itself (its own permission-denied reply). sshd and its
// set-up (the passwd copy, the remote PATH): ssh_server.hpp.
#include <gtest/gtest.h>

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "e2e_support.hpp"
#include "ssh_server.hpp"

using jitterd_e2e::Clock;
using jitterd_e2e::Completed;
using jitterd_e2e::Json;
using jitterd_e2e::Process;
using namespace std::chrono_literals;

namespace {

constexpr const char* kGroup = "users";  // as permission_test.cpp: gid 100 on Debian
// Not 22: the test's sshd should never be mistaken for a real one.
constexpr int kPort = 2222;

class E2eRemoteSsh : public jitterd_e2e::E2eTest {
 protected:
  void SetUp() override {
    if (auto reason = jitterd_e2e::ssh_unavailable_reason()) GTEST_SKIP() << *reason;
    if (!::getgrnam(kGroup)) GTEST_SKIP() << "no group \"" << kGroup << "\" to own the socket";
    jitterd_e2e::E2eTest::SetUp();
    if (IsSkipped()) return;
    client_key_ = std::make_unique<jitterd_e2e::SshKey>(dir(), "client_key");
    sshd_ = std::make_unique<jitterd_e2e::SshServer>(
        dir(), bed().net.ns_a(), jitterd_test::VethPair::kAddrA, kPort, *client_key_);
    sshd_->start();
  }
  void TearDown() override {
    if (sshd_ && (HasFailure() || std::getenv("JITTERD_E2E_LOGS")))
      std::cerr << "--- sshd log\n" << sshd_->log() << '\n';
    sshd_.reset();
    jitterd_e2e::E2eTest::TearDown();
  }
  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.socket_group = kGroup;
    return options;
  }

  std::string dir() { return bed().dir.path(); }

  // The bed's jitterd has its socket in the test's folder: the URL's path names it.
  std::string url(const std::string& user) { return sshd_->url(user, bed().daemon.socket()); }

  // jitterctl --host ssh://USER@198.18.0.1:2222 ARGS..., run in namespace b with our key.
  std::vector<std::string> remote_argv(const std::string& user,
                                       const std::vector<std::string>& args) {
    std::vector<std::string> argv{"env", "JITTERD_SSH=" + ssh_command(),
                                  jitterd_e2e::jitterctl_binary(), "--host", url(user),
                                  // An ssh handshake in the UML guest takes seconds, more beside
                                  // a build; the default 10 s covers it and the reply.
                                  "--timeout", "60s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  std::string ssh_command() {
    return jitterd_e2e::ssh_command(*client_key_, dir() + "/known_hosts");
  }
  Completed remote(const std::vector<std::string>& args, const std::string& user = "root") {
    jitterd_e2e::SpawnOptions options;
    options.netns = bed().net.ns_b();
    return jitterd_e2e::run_to_completion(remote_argv(user, args), options, 120s);
  }
  Json remote_json(const std::vector<std::string>& args) {
    std::vector<std::string> with_json{"--json"};
    with_json.insert(with_json.end(), args.begin(), args.end());
    const Completed r = remote(with_json);
    if (r.exit_code != 0) ADD_FAILURE() << jitterd_e2e::command_line(with_json) << ": " << r.err;
    return r.exit_code == 0 ? jitterd_e2e::parse_json(r.out) : Json();
  }

  std::unique_ptr<jitterd_e2e::SshKey> client_key_;
  std::unique_ptr<jitterd_e2e::SshServer> sshd_;
};

TEST_F(E2eRemoteSsh, ApplySwitchStatusSubscribeClearThroughRealSsh) {
  const Completed applied = remote({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"});
  ASSERT_EQ(applied.exit_code, 0) << applied.out << applied.err;
  EXPECT_NE(applied.out.find("jta"), std::string::npos) << applied.out;
  const Json root = bed().root_qdisc_by_tc();
  EXPECT_EQ(root.value("kind", ""), "netem") << root.dump();
  EXPECT_EQ(root.value("handle", ""), "1a7e:") << root.dump();

  // A subscriber through its own ssh connection, then a switch through another.
  jitterd_e2e::SpawnOptions in_b;
  in_b.netns = bed().net.ns_b();
  jitterd_e2e::EventStream events(Process::spawn(
      remote_argv("root", {"--json", "subscribe", "--interface", "jta", "--count", "1"}), in_b));
  // The subscriber's proxy is connected (2: with the asking one) and its subscribe was read.
  // Polled for up to 60 s, not Bed's 10 s: an ssh handshake in the UML guest beside a build takes
  // seconds.
  const auto deadline = Clock::now() + 60s;
  for (;;) {
    const std::string metrics = bed().ctl({"metrics"}).out;
    const std::string gauge = "\njitterd_connections ";
    const auto at = metrics.find(gauge);
    if (at != std::string::npos && std::stoi(metrics.substr(at + gauge.size())) >= 2) break;
    ASSERT_LT(Clock::now(), deadline) << metrics << events.describe();
    std::this_thread::sleep_for(200ms);
  }
  std::this_thread::sleep_for(500ms);  // its subscribe request, a round trip behind the connect
  const Completed switched = remote({"switch", "jta", "high"});
  ASSERT_EQ(switched.exit_code, 0) << switched.err;
  const auto event = events.wait_for("phase-changed", 60s);
  ASSERT_TRUE(event) << events.describe();
  EXPECT_EQ(event->value("phase", ""), "high");

  const Json status = remote_json({"status", "jta"});
  ASSERT_TRUE(status.contains("sessions")) << status.dump();
  ASSERT_EQ(status.at("sessions").size(), 1u) << status.dump();
  EXPECT_EQ(status.at("sessions")[0].value("phase", ""), "high");

  const Completed cleared = remote({"clear", "jta"});
  EXPECT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_EQ(cleared.out, "cleared jta\n");
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "0:");
  // The ssh user is the peer jitterd saw and logged.
  EXPECT_NE(bed().daemon.log().find("uid 0"), std::string::npos) << bed().daemon.log();
}

TEST_F(E2eRemoteSsh, TheRemoteSocketsChecksApplyToTheSshUser) {
  // The socket (0660, group users) keeps jtremote out at connect: the remote proxy says so.
  const Completed by_file = remote({"status"}, "jtremote");
  EXPECT_EQ(by_file.exit_code, 4) << by_file.out << by_file.err;
  EXPECT_NE(by_file.err.find("the remote jitterctl proxy could not reach jitterd"),
            std::string::npos)
      << by_file.err;
  EXPECT_NE(by_file.err.find("Permission denied"), std::string::npos) << by_file.err;

  // Opened to everyone by hand: jitterd's own check refuses, with its own error, exit 5.
  ASSERT_EQ(::chmod(bed().daemon.socket().c_str(), 0666), 0);
  const Completed refused =
      remote({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"}, "jtremote");
  EXPECT_EQ(refused.exit_code, 5) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("may not use jitterd"), std::string::npos) << refused.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "0:");
  EXPECT_NE(bed().daemon.log().find("refused a control connection from uid 65534"),
            std::string::npos)
      << bed().daemon.log();
}

TEST_F(E2eRemoteSsh, AKeyTheServerDoesNotKnowIsAnAuthenticationFailure) {
  sshd_->authorize("");
  const Completed r = remote({"status"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot reach jitterd on " + url("root") + ": ssh failed: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("authentication failed"), std::string::npos) << r.err;
}

}  // namespace
