// Targets beyond jitterd's own namespace (docs/operations.md, "Containers and namespaces"): a
// network namespace of its own (as a container's is) whose eth0 is one end of a veth pair, the
// other end (jtc) in jitterd's namespace a. jitterctl names the interface as the target sees it
// (`--netns C`, eth0 by default). ping from namespace a through the pair, iproute2 (in either
// namespace) and the ledger are the witnesses.
//  - E2eTarget, `--via host-veth`: jitterd shapes jtc, reversing the direction (the target's egress
//    arrives on jtc: its ingress, an IFB of namespace a). The delay lands on the direction asked
//    for, a switch and a clear take effect, a deleted namespace ends the session with `target-gone`
//    and leaves no IFB, and a jitterd killed with -9 leaves nothing after its restart.
//  - E2eTargetInside, `--via inside`: jitterd shapes eth0 in namespace C through sockets created
//    there, its IFB in C too, nothing in namespace a; the same witnesses, plus recovery after
//    kill -9 that finds C by its device and inode (and leaves alone a new namespace of the same
//    name).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>

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
  // A namespace called `name` with nothing in it (a container restarted: same name, new namespace).
  static void add_bare(const std::string& name) { jitterd_test::run("ip netns add " + name); }
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

  // How the fixture's requests reach the target.
  virtual const char* via() const { return "host-veth"; }

  // The smallest RTT of `count` pings from namespace a to the target, in ms.
  double min_rtt_ms(int count = 10) {
    const std::string out =
        bed().in_ns_a("ping -n -q -c " + std::to_string(count) + " -i 0.05 -W 2 " + kTargetAddr);
    std::smatch m;
    const std::regex summary(R"(= ([0-9.]+)/)");
    if (!std::regex_search(out, m, summary)) throw std::runtime_error("no ping summary: " + out);
    return std::stod(m[1]);
  }

  // A device's name in `ip -j link show`. find, not value(): GCC 12 at -O1 sees a null dereference
  // inside value() in these loops (-Wnull-dereference, an error in CI's build).
  static std::string ifname_of(const jitterd_e2e::Json& link) {
    const auto name = link.find("ifname");
    return name != link.end() && name->is_string() ? name->get<std::string>() : std::string();
  }

  // The devices of namespace `ns` whose names start with jitterd's IFB prefix.
  static std::string ifbs(const std::string& ns) {
    std::string found;
    const auto links = jitterd_e2e::parse_json(jitterd_test::run("ip -n " + ns + " -j link show"));
    for (const auto& link : links) {
      const std::string name = ifname_of(link);
      if (name.starts_with("jdifb")) found += name + " ";
    }
    return found;
  }
  std::string ifbs() { return ifbs(bed().net.ns_a()); }

  // The root qdisc of `device` in namespace `ns` as tc reports it: "kind handle".
  static std::string root_of(const std::string& ns, const std::string& device) {
    const auto qdiscs =
        jitterd_e2e::parse_json(jitterd_test::run("tc -n " + ns + " -j qdisc show dev " + device));
    for (const auto& q : qdiscs) {
      // find, not value(), as in ifname_of.
      const auto root = q.find("root"), kind = q.find("kind"), handle = q.find("handle");
      if (root == q.end() || *root != true || kind == q.end() || handle == q.end()) continue;
      return kind->get<std::string>() + " " + handle->get<std::string>();
    }
    return "";
  }
  // The root qdisc's kind of jtc (namespace a).
  std::string host_root_kind() {
    const std::string root = root_of(bed().net.ns_a(), kHostSide);
    return root.substr(0, root.find(' '));
  }

  // A subscriber to every event, counted by jitterd before this returns (so it hears what follows).
  jitterd_e2e::EventStream subscribe_all() {
    jitterd_e2e::EventStream events(
        jitterd_e2e::Process::spawn({jitterd_e2e::jitterctl_binary(), "--socket",
                                     bed().daemon.socket(), "--json", "subscribe"}));
    bed().wait_for_connections(2);
    return events;
  }
  // Applies the test profile to both directions of the target and waits for `applied`.
  void apply_both(jitterd_e2e::EventStream& events) {
    const auto applied = ctl({"apply", "--direction", "both", jitterd_e2e::kProfileName});
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
  }
  // Deletes the target's namespace (`ip netns del`); the first `target-gone` that follows.
  std::optional<Json> remove_target(jitterd_e2e::EventStream& events) {
    target_->remove();
    return events.wait_for("target-gone", kEventTimeout);
  }

  // Both directions at "high" (the request is delayed on its way in too: RTT >= 100 ms), then a
  // switch naming the target and one direction as the target sees it: its ingress to "low"
  // (55-95 ms). Returns the target's sessions as `status --netns` lists them then.
  Json both_then_ingress_low() {
    const auto applied =
        ctl({"apply", "--direction", "both", "--phase", "high", jitterd_e2e::kProfileName});
    EXPECT_EQ(applied.exit_code, 0) << applied.err;
    EXPECT_GE(min_rtt_ms(), 100.0);
    const auto switched = ctl({"switch", "--direction", "ingress", "low"});
    EXPECT_EQ(switched.exit_code, 0) << switched.err;
    const double mixed = min_rtt_ms();
    EXPECT_GE(mixed, 55.0);
    EXPECT_LT(mixed, 95.0);
    return bed().ctl_json({"status", "--netns", target_->name()}).at("sessions");
  }

  // Whether jtc (the host side of the target's veth) is still in namespace a.
  bool host_side_exists() {
    const auto links =
        jitterd_e2e::parse_json(jitterd_test::run("ip -n " + bed().net.ns_a() + " -j link show"));
    for (const auto& link : links) {
      if (ifname_of(link) == kHostSide) return true;
    }
    return false;
  }
  // Polls until the veth pair has gone with its namespace (the kernel frees a namespace, and its
  // devices, asynchronously once nothing holds it).
  bool host_side_gone_within(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (host_side_exists()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(50ms);
    }
    return true;
  }

  // The target's root qdisc on the side that shapes it, as tc reports it ("netem 1a7e:").
  virtual std::string shaping_root() { return root_of(bed().net.ns_a(), kHostSide); }

  // `apply --follow`, then the namespace deleted and added again under its name with a new veth
  // (a container restarted): the session waits with nothing installed, then is applied again by
  // itself, and ping proves the delay is back.
  void follow_across_a_recreated_namespace() {
    auto events = subscribe_all();
    const auto applied = ctl(
        {"apply", "--follow", "--direction", "both", "--phase", "high", jitterd_e2e::kProfileName});
    ASSERT_EQ(applied.exit_code, 0) << applied.err << bed().daemon.log();
    ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
    ASSERT_GE(min_rtt_ms(), 100.0);
    const Json before = bed().ctl_json({"status"}).at("sessions");
    ASSERT_EQ(before.size(), 2u) << before.dump();
    EXPECT_EQ(before[0].at("target").at("follow"), true) << before.dump();
    const std::string old_ns = before[0].at("target").at("namespace");

    const auto gone = remove_target(events);
    ASSERT_TRUE(gone) << events.describe() << bed().daemon.log();
    EXPECT_EQ(gone->at("following"), true) << gone->dump();
    ASSERT_TRUE(host_side_gone_within(10s)) << bed().daemon.log();
    // Gone: nothing of it is left anywhere, and the follow waits.
    EXPECT_EQ(ifbs(), "");
    EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
    const Json waiting = bed().ctl_json({"status"}).at("sessions");
    ASSERT_EQ(waiting.size(), 1u) << waiting.dump();
    EXPECT_EQ(waiting[0].at("state"), "waiting");
    const auto shown = bed().ctl({"status"});
    EXPECT_NE(shown.out.find("waiting"), std::string::npos) << shown.out;

    // Back under the same name, with a new veth pair: no new apply.
    std::this_thread::sleep_for(1500ms);  // a few refused polls first
    target_ = std::make_unique<TargetNamespace>(bed().net.ns_a());
    const auto followed = events.wait_for("target-followed", kEventTimeout);
    ASSERT_TRUE(followed) << events.describe() << bed().daemon.log();
    EXPECT_EQ(followed->at("previous_namespace"), old_ns) << followed->dump();
    EXPECT_TRUE(followed->at("target").at("namespace").get<std::string>().starts_with("net:["));
    EXPECT_EQ(shaping_root(), "netem 1a7e:");
    EXPECT_GE(min_rtt_ms(), 100.0) << "the delay is back in both directions";
    const Json after = bed().ctl_json({"status"}).at("sessions");
    ASSERT_EQ(after.size(), 2u) << after.dump();
    for (const auto& lane : after) {
      EXPECT_EQ(lane.at("state"), "active") << lane.dump();
      EXPECT_EQ(lane.at("phase"), "high") << lane.dump();
    }

    const auto cleared = ctl({"clear"});
    ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
    EXPECT_LT(min_rtt_ms(), 5.0);
    EXPECT_EQ(ifbs(), "");
    EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
    events.drain(500ms);
    EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
  }

  // `apply --follow`, the target gone, then a clear while the follow waits: it ends, nothing to
  // remove; the target back later is not shaped.
  void clear_while_a_follow_waits() {
    auto events = subscribe_all();
    const auto applied = ctl({"apply", "--follow", "--phase", "high", jitterd_e2e::kProfileName});
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    ASSERT_TRUE(remove_target(events)) << events.describe();
    ASSERT_TRUE(host_side_gone_within(10s));
    const auto cleared = ctl({"clear"});
    ASSERT_EQ(cleared.exit_code, 0) << cleared.err << cleared.out;
    EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
    target_ = std::make_unique<TargetNamespace>(bed().net.ns_a());
    std::this_thread::sleep_for(2500ms);
    EXPECT_TRUE(events.of_type("target-followed").empty()) << events.describe();
    EXPECT_LT(min_rtt_ms(), 5.0);
    EXPECT_NE(shaping_root(), "netem 1a7e:");
  }

  jitterd_e2e::Completed ctl(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--netns", target_->name(), "--via", via()});
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

  const Json lanes = both_then_ingress_low();
  EXPECT_EQ(host_root_kind(), "netem");
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
  auto events = subscribe_all();
  ASSERT_NO_FATAL_FAILURE(apply_both(events));
  ASSERT_FALSE(ifbs().empty());

  const std::string name = target_->name();
  const auto gone = remove_target(events);
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

TEST_F(E2eTarget, FollowAppliesAgainWhenTheNamespaceIsAddedAgainUnderItsName) {
  follow_across_a_recreated_namespace();
}

TEST_F(E2eTarget, AClearWhileAFollowWaitsEndsIt) {
  clear_while_a_follow_waits();
}

TEST_F(E2eTarget, FollowNeedsANameThatSurvivesARestart) {
  const auto r = bed().ctl(
      {"apply", "--netns-path", "/proc/1/ns/net", "--follow", "eth0", jitterd_e2e::kProfileName});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--follow needs --container, --pod or --netns"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// --via inside

class E2eTargetInside : public E2eTarget {
 protected:
  const char* via() const override { return "inside"; }

  std::string inside_root() { return root_of(target_->name(), "eth0"); }
  std::string shaping_root() override { return inside_root(); }
  std::string inside_ifbs() { return ifbs(target_->name()); }

  // The target ledgers in jitterd's state folder (<state_dir>/target-<device>-<inode>.json).
  std::vector<std::string> target_ledgers() {
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(bed().daemon.state_dir())) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("target-")) found.push_back(entry.path().string());
    }
    return found;
  }

  // Whether jitterd has a file descriptor of namespace `ns` ("net:[INODE]") open. By inode: the
  // link of a descriptor opened through /run/netns/NAME reads as that path, not as "net:[...]".
  bool holds(const std::string& ns) {
    const std::string folder = "/proc/" + std::to_string(bed().daemon.pid()) + "/fd";
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      struct stat status {};
      if (::stat(entry.path().c_str(), &status) != 0) continue;
      if ("net:[" + std::to_string(status.st_ino) + "]" == ns) return true;
    }
    return false;
  }
};

TEST_F(E2eTargetInside, ShapesTheTargetsOwnEgressAndIngressFromInsideItsNamespace) {
  ASSERT_LT(min_rtt_ms(), 5.0) << "the pair is slow before anything is shaped";

  // The target's egress: the replies leave eth0 (in namespace C), so they are delayed.
  auto applied = ctl({"apply", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err << bed().daemon.log();
  const Json status = bed().ctl_json({"status"}).at("sessions");
  ASSERT_EQ(status.size(), 1u) << status.dump();
  EXPECT_EQ(status[0].at("interface"), "eth0");
  EXPECT_EQ(status[0].at("direction"), "egress");
  const Json& target = status[0].at("target");
  EXPECT_EQ(target.at("name"), target_->name());
  EXPECT_EQ(target.at("direction"), "egress");
  EXPECT_EQ(target.at("via"), "inside");
  EXPECT_EQ(inside_root(), "netem 1a7e:");
  EXPECT_NE(host_root_kind(), "netem") << "nothing is installed on the host side";
  EXPECT_EQ(ifbs(), "");
  const double high = min_rtt_ms();
  EXPECT_GE(high, 50.0);
  EXPECT_LT(high, 90.0);
  // The ledger of the target names its namespace by device and inode; jitterd's own names nothing.
  const auto files = target_ledgers();
  ASSERT_EQ(files.size(), 1u);
  const Json ledger = jitterd_e2e::parse_json(jitterd_test::run("cat " + files[0]));
  EXPECT_EQ(ledger.at("target").at("name"), target_->name());
  EXPECT_EQ("net:[" + std::to_string(ledger.at("target").at("inode").get<std::uint64_t>()) + "]",
            target.at("namespace"));
  EXPECT_EQ(ledger.at("interfaces").size(), 1u) << ledger.dump();
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();

  // Both directions, the target's ingress on an IFB inside C.
  const Json lanes = both_then_ingress_low();
  EXPECT_FALSE(inside_ifbs().empty());
  EXPECT_EQ(ifbs(), "");
  ASSERT_EQ(lanes.size(), 2u) << lanes.dump();
  for (const auto& lane : lanes) {
    EXPECT_EQ(lane.at("direction"), lane.at("target").at("direction")) << lane.dump();
    EXPECT_EQ(lane.at("phase"), lane.at("direction") == "ingress" ? "low" : "high") << lane.dump();
  }

  const auto cleared = ctl({"clear"});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_LT(min_rtt_ms(), 5.0);
  EXPECT_EQ(inside_ifbs(), "");
  EXPECT_NE(inside_root(), "netem 1a7e:");
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_TRUE(target_ledgers().empty()) << "a target with nothing shaped keeps no ledger";
}

TEST_F(E2eTargetInside, IsTheDefaultWhereJitterdCanEnterTheNamespace) {
  // jitterd runs as root here (CAP_SYS_ADMIN): a request naming no via is shaped from inside.
  const auto applied = bed().ctl(
      {"apply", "--netns", target_->name(), "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  const Json status = bed().ctl_json({"status"}).at("sessions");
  ASSERT_EQ(status.size(), 1u) << status.dump();
  EXPECT_EQ(status[0].at("target").at("via"), "inside");
  EXPECT_EQ(inside_root(), "netem 1a7e:");
}

TEST_F(E2eTargetInside, ADeletedNamespaceEndsItsSessionWithTargetGoneAndIsLetGo) {
  auto events = subscribe_all();
  ASSERT_NO_FATAL_FAILURE(apply_both(events));
  ASSERT_FALSE(inside_ifbs().empty());

  // jitterd's sockets hold the namespace; its name going is the end of the target.
  const std::string name = target_->name();
  const auto gone = remove_target(events);
  ASSERT_TRUE(gone) << events.describe() << bed().daemon.log();
  EXPECT_EQ(gone->at("interface"), "eth0");
  EXPECT_EQ(gone->at("target").at("name"), name);
  EXPECT_EQ(gone->at("target").at("via"), "inside");
  // Once jitterd lets go, nothing holds the namespace: it is freed, and its veth pair with it.
  EXPECT_TRUE(host_side_gone_within(10s)) << bed().daemon.log();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_TRUE(target_ledgers().empty());
  events.drain(500ms);
  EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
  EXPECT_EQ(events.of_type("target-gone").size(), 2u) << events.describe();
  EXPECT_TRUE(bed().daemon.running());
}

TEST_F(E2eTargetInside, ALeaseThatRunsOutLetsGoOfTheNamespace) {
  auto events = subscribe_all();
  const auto applied = ctl({"apply", "--lease", "3s", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  const std::string ns =
      bed().ctl_json({"status"}).at("sessions").at(0).at("target").at("namespace");
  ASSERT_TRUE(holds(ns)) << "jitterd holds the namespace it shapes";
  ASSERT_TRUE(events.wait_for("lease-expired", kEventTimeout)) << events.describe();
  EXPECT_NE(inside_root(), "netem 1a7e:");
  // No request follows: the session's end alone lets the namespace go.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (holds(ns) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(holds(ns)) << bed().daemon.log();
  // What the target's sessions counted outlives them: the counters never fall.
  const auto metrics = bed().ctl({"metrics"});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.err;
  EXPECT_NE(metrics.out.find("\njitterd_lease_expirations_total 1\n"), std::string::npos)
      << metrics.out;
  std::smatch transitions;
  ASSERT_TRUE(std::regex_search(metrics.out, transitions,
                                std::regex("\njitterd_transitions_total ([0-9]+)\n")))
      << metrics.out;
  EXPECT_GE(std::stoi(transitions[1]), 1) << "the apply's transition, inside the target";
}

TEST_F(E2eTargetInside, AJitterdKilledHardIsCleanedUpInsideTheSameNamespaceAfterItsRestart) {
  const auto applied =
      ctl({"apply", "--direction", "both", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_GE(min_rtt_ms(), 100.0);

  bed().daemon.kill_hard();
  ASSERT_EQ(inside_root(), "netem 1a7e:") << "kill -9 cleans nothing up: the restart has to";
  ASSERT_FALSE(inside_ifbs().empty());
  ASSERT_EQ(target_ledgers().size(), 1u);
  bed().daemon.start();
  EXPECT_NE(inside_root(), "netem 1a7e:");
  EXPECT_EQ(inside_ifbs(), "");
  EXPECT_LT(min_rtt_ms(), 5.0);
  EXPECT_TRUE(target_ledgers().empty());
  EXPECT_NE(bed().daemon.log().find("is still there"), std::string::npos) << bed().daemon.log();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
}

TEST_F(E2eTargetInside, ARestartAfterTheTargetWentSaysSoAndLeavesANewNamespaceOfTheSameNameAlone) {
  const auto applied = ctl({"apply", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  bed().daemon.kill_hard();
  // The namespace goes (nothing holds it now), and another takes its name; a qdisc with jitterd's
  // handle in the new one stands for shaping the earlier jitterd never did there.
  const std::string name = target_->name();
  target_->remove();
  ASSERT_TRUE(host_side_gone_within(10s));
  TargetNamespace::add_bare(name);
  jitterd_test::run("ip -n " + name + " link set lo up");
  jitterd_test::run("tc -n " + name + " qdisc add dev lo root handle 1a7e: netem delay 1ms");

  bed().daemon.start();
  EXPECT_NE(bed().daemon.log().find("is gone"), std::string::npos) << bed().daemon.log();
  EXPECT_TRUE(target_ledgers().empty());
  EXPECT_EQ(root_of(name, "lo"), "netem 1a7e:") << "another namespace's qdisc was touched";
  jitterd_test::run("ip netns del " + name);
}

TEST_F(E2eTargetInside, FollowAppliesAgainInTheNewNamespaceOfTheSameName) {
  follow_across_a_recreated_namespace();
  EXPECT_TRUE(target_ledgers().empty());
}

TEST_F(E2eTargetInside, AClearWhileAFollowWaitsEndsIt) {
  clear_while_a_follow_waits();
}

TEST_F(E2eTargetInside, AJitterdKilledHardWhileAFollowWaitsHasNothingToCleanAfterItsRestart) {
  auto events = subscribe_all();
  const auto applied = ctl({"apply", "--follow", "--phase", "high", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(remove_target(events)) << events.describe();
  ASSERT_TRUE(host_side_gone_within(10s));
  EXPECT_TRUE(target_ledgers().empty()) << "a waiting follow has nothing installed";
  bed().daemon.kill_hard();
  bed().daemon.start();
  EXPECT_TRUE(target_ledgers().empty());
  EXPECT_EQ(ifbs(), "");
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty()) << "follows are not kept";
  EXPECT_EQ(bed().daemon.log().find("is still there"), std::string::npos) << bed().daemon.log();
}

}  // namespace
