// Targets beyond jitterd's own namespace, `--via host-veth` (docs/operations.md, "Containers and
// namespaces"): a network namespace of its own (as a container's is) whose eth0 is one end of a
// veth pair, the other end (jtc) in jitterd's namespace a. jitterctl names the interface as the
// target sees it (`--netns C`, eth0 by default); jitterd shapes jtc, reversing the direction (the
// target's egress arrives on jtc: its ingress, an IFB of namespace a). ping from namespace a
// through the pair, iproute2 and the ledger are the witnesses: the delay lands on the direction
// asked for, a switch and a clear take effect, a deleted namespace ends the session with
// `target-gone` and leaves no IFB, and a jitterd killed with -9 leaves nothing after its restart.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Json;

namespace {

constexpr auto kEventTimeout = 10s;
constexpr const char* kHostSide = "jtc";
constexpr const char* kHostAddr = "198.19.0.1";
constexpr const char* kTargetAddr = "198.19.0.2";

// Namespace C: eth0 inside, its peer jtc in namespace a, 198.19.0.0/24 between them. Deleted (with
// the pair) at the end unless the test deleted it.
class TargetNamespace {
 public:
  explicit TargetNamespace(const std::string& ns_a) : ns_a_(ns_a), name_(ns_a + "c") {
    jitterd_test::run("ip netns add " + name_);
    jitterd_test::run("ip -n " + ns_a_ + " link add " + std::string(kHostSide) +
                      " type veth peer name eth0 netns " + name_);
    jitterd_test::run("ip -n " + ns_a_ + " addr add " + std::string(kHostAddr) + "/24 dev " +
                      kHostSide);
    jitterd_test::run("ip -n " + ns_a_ + " link set " + std::string(kHostSide) + " up");
    jitterd_test::run("ip -n " + name_ + " addr add " + std::string(kTargetAddr) + "/24 dev eth0");
    jitterd_test::run("ip -n " + name_ + " link set eth0 up");
    jitterd_test::run("ip -n " + name_ + " link set lo up");
  }
  TargetNamespace(const TargetNamespace&) = delete;
  TargetNamespace& operator=(const TargetNamespace&) = delete;
  ~TargetNamespace() {
    if (deleted_) return;
    try {
      jitterd_test::run("ip netns del " + name_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deleting %s: %s\n", name_.c_str(), e.what());
    }
  }
  const std::string& name() const { return name_; }
  void remove() {
    jitterd_test::run("ip netns del " + name_);
    deleted_ = true;
  }

 private:
  std::string ns_a_;
  std::string name_;
  bool deleted_ = false;
};

class E2eTarget : public jitterd_e2e::E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped()) return;
    target_ = std::make_unique<TargetNamespace>(bed().net.ns_a());
  }
  void TearDown() override {
    E2eTest::TearDown();
    target_.reset();
  }

  // The smallest RTT of `count` pings from namespace a to the target, in ms.
  double min_rtt_ms(int count = 10) {
    const std::string out =
        bed().in_ns_a("ping -n -q -c " + std::to_string(count) + " -i 0.05 -W 2 " + kTargetAddr);
    std::smatch m;
    const std::regex summary(R"(= ([0-9.]+)/)");
    if (!std::regex_search(out, m, summary)) throw std::runtime_error("no ping summary: " + out);
    return std::stod(m[1]);
  }

  // The devices of namespace a whose names start with jitterd's IFB prefix.
  std::string ifbs() {
    std::string found;
    for (const auto& link : jitterd_e2e::parse_json(bed().in_ns_a("ip -j link show"))) {
      const std::string name = link.value("ifname", "");
      if (name.starts_with("jdifb")) found += name + " ";
    }
    return found;
  }

  // The root qdisc of jtc (namespace a) as tc reports it.
  std::string host_root_kind() {
    for (const auto& q :
         jitterd_e2e::parse_json(bed().in_ns_a("tc -j qdisc show dev " + std::string(kHostSide)))) {
      if (q.value("root", false)) return q.value("kind", "");
    }
    return "";
  }

  jitterd_e2e::Completed ctl(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--netns", target_->name()});
    return bed().ctl(args);
  }

  std::unique_ptr<TargetNamespace> target_;
};

TEST_F(E2eTarget, ShapesTheTargetsEgressAndIngressOnItsHostSideVeth) {
  ASSERT_LT(min_rtt_ms(), 5.0) << "the pair is slow before anything is shaped";

  // The target's egress: the replies leave eth0, so they are delayed.
  auto applied = ctl({"apply", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err << bed().daemon.log();
  const Json status = bed().ctl_json({"status"}).at("sessions");
  ASSERT_EQ(status.size(), 1u) << status.dump();
  EXPECT_EQ(status[0].at("interface"), kHostSide);
  EXPECT_EQ(status[0].at("direction"), "ingress");
  const Json& target = status[0].at("target");
  EXPECT_EQ(target.at("kind"), "netns");
  EXPECT_EQ(target.at("name"), target_->name());
  EXPECT_EQ(target.at("interface"), "eth0");
  EXPECT_EQ(target.at("direction"), "egress");
  EXPECT_EQ(target.at("via"), "host-veth");
  EXPECT_TRUE(target.at("namespace").get<std::string>().starts_with("net:[")) << target.dump();
  EXPECT_FALSE(ifbs().empty()) << "the target's egress is the host side's ingress: an IFB";
  const double high = min_rtt_ms();
  EXPECT_GE(high, 50.0);
  EXPECT_LT(high, 90.0);

  // Both directions: the request is delayed on its way in too.
  applied = ctl({"apply", "--direction", "both", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(host_root_kind(), "netem");
  EXPECT_GE(min_rtt_ms(), 100.0);

  // A switch names the target too, and narrows to one direction as the target sees it.
  const auto switched = ctl({"switch", "--direction", "ingress", "low"});
  ASSERT_EQ(switched.exit_code, 0) << switched.err;
  const double mixed = min_rtt_ms();
  EXPECT_GE(mixed, 55.0);
  EXPECT_LT(mixed, 95.0);
  const Json lanes = bed().ctl_json({"status", "--netns", target_->name()}).at("sessions");
  ASSERT_EQ(lanes.size(), 2u) << lanes.dump();
  for (const auto& lane : lanes) {
    const bool inside_ingress = lane.at("target").at("direction") == "ingress";
    EXPECT_EQ(lane.at("direction"), inside_ingress ? "egress" : "ingress") << lane.dump();
    EXPECT_EQ(lane.at("phase"), inside_ingress ? "low" : "high") << lane.dump();
  }

  const auto cleared = ctl({"clear"});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_LT(min_rtt_ms(), 5.0);
  EXPECT_EQ(ifbs(), "");
  EXPECT_NE(host_root_kind(), "netem");
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
}

TEST_F(E2eTarget, ADeletedNamespaceEndsItsSessionWithTargetGoneAndLeavesNothing) {
  jitterd_e2e::EventStream events(jitterd_e2e::Process::spawn(
      {jitterd_e2e::jitterctl_binary(), "--socket", bed().daemon.socket(), "--json", "subscribe"}));
  bed().wait_for_connections(2);
  const auto applied = ctl({"apply", "--direction", "both", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
  ASSERT_FALSE(ifbs().empty());

  const std::string name = target_->name();
  target_->remove();
  const auto gone = events.wait_for("target-gone", kEventTimeout);
  ASSERT_TRUE(gone) << events.describe() << bed().daemon.log();
  EXPECT_EQ(gone->at("interface"), kHostSide);
  EXPECT_EQ(gone->at("target").at("name"), name);
  EXPECT_TRUE(events.of_type("interface-gone").empty()) << events.describe();

  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_EQ(ifbs(), "");
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
  events.drain(500ms);
  EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
  EXPECT_TRUE(bed().daemon.running());
}

TEST_F(E2eTarget, AJitterdKilledHardLeavesNothingOnTheHostSideAfterItsRestart) {
  const auto applied =
      ctl({"apply", "--direction", "both", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_FALSE(ifbs().empty());
  ASSERT_GE(min_rtt_ms(), 100.0);

  bed().daemon.kill_hard();
  EXPECT_FALSE(ifbs().empty()) << "kill -9 cleans nothing up: the restart has to";
  bed().daemon.start();
  EXPECT_EQ(ifbs(), "");
  EXPECT_NE(host_root_kind(), "netem");
  EXPECT_LT(min_rtt_ms(), 5.0);
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
}

TEST_F(E2eTarget, RefusalsNameTheTargetAndSayWhatToDo) {
  // No such namespace.
  auto r = bed().ctl({"apply", "--netns", "nosuch-jitterd", jitterd_e2e::kProfileName});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("nosuch-jitterd"), std::string::npos) << r.err;
  // A device that is not a veth has no host side.
  r = ctl({"apply", "lo", jitterd_e2e::kProfileName});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("not a veth"), std::string::npos) << r.err;
  // No such device in the target.
  r = ctl({"apply", "eth7", jitterd_e2e::kProfileName});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("eth7"), std::string::npos) << r.err;
  // Containers are not in this config's target allow-list.
  r = bed().ctl({"apply", "--container", "redis0", jitterd_e2e::kProfileName});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("targets.allow"), std::string::npos) << r.err;
  // Nothing was shaped by any of them.
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_EQ(ifbs(), "");
}

}  // namespace
