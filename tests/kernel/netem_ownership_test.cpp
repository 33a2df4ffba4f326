// Ownership: remove restores the kernel default; a foreign root qdisc is refused and left untouched
// (unless forced); a qdisc someone else put in place of ours is never changed or removed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shaper/errors.hpp"
#include "shaper/netem_engine.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;
using json = nlohmann::json;

namespace {

json root_by_tc(const VethPair& net) {
  for (const auto& q : json::parse(jitterd_test::tc_json(net))) {
    if (q.value("root", false)) return q;
  }
  return {};
}

void tc_in_a(const VethPair& net, const std::string& args) {
  jitterd_test::run("ip netns exec " + net.ns_a() + " tc " + args);
}

}  // namespace

TEST(NetemOwnership, RemoveRestoresTheDefaultQdisc) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  const auto before = engine.root_qdisc(dev);
  ASSERT_TRUE(before);
  EXPECT_TRUE(before->is_default());
  {
    NetemQdisc qdisc = engine.install(dev, NetemSpec{});
    EXPECT_EQ(root_by_tc(net).at("kind"), "netem");
    qdisc.remove();
    EXPECT_FALSE(qdisc.owns());
  }
  const auto after = engine.root_qdisc(dev);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->kind, before->kind);
  EXPECT_EQ(after->handle, 0u);
  EXPECT_EQ(root_by_tc(net).at("kind"), before->kind);
}

TEST(NetemOwnership, DestroyingTheOwnerRemovesTheQdiscAndReleaseKeepsIt) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  { NetemQdisc scoped = engine.install(dev, NetemSpec{}); }
  EXPECT_TRUE(engine.root_qdisc(dev)->is_default());
  {
    NetemQdisc released = engine.install(dev, NetemSpec{});
    released.release();
  }
  EXPECT_TRUE(engine.root_qdisc(dev)->is_jitterd());
  // A later process finds it and adopts it, with its settings read back from the kernel.
  NetemSpec spec;
  spec.delay.latency = 7ms;
  auto adopted = engine.adopt(dev);
  ASSERT_TRUE(adopted);
  adopted->change(spec);
  EXPECT_EQ(engine.root_qdisc(dev)->netem->spec.delay.latency, 7ms);
  EXPECT_TRUE(engine.remove_if_ours(dev));
  adopted->release();
  EXPECT_FALSE(engine.remove_if_ours(dev));
  EXPECT_TRUE(engine.root_qdisc(dev)->is_default());
}

TEST(NetemOwnership, ForeignRootIsRefusedAndLeftUntouched) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  VethPair net;
  jitterd_test::NetnsGuard in_a(net.ns_a());
  tc_in_a(net, "qdisc add dev jta root handle 1: htb default 10");
  RouteSocket socket;
  NetemEngine engine(socket);
  const Interface dev = engine.resolve(std::string(VethPair::kDevA));
  try {
    engine.install(dev, NetemSpec{});
    FAIL() << "installed over someone else's htb";
  } catch (const OwnershipError& e) {
    EXPECT_STREQ(
        e.what(),
        "netem install (dev jta handle 1a7e:): the root qdisc is htb 1:, installed by someone "
        "else; jitterd leaves it alone. Remove it yourself, or force the install to replace it "
        "(its queue is dropped)");
  }
  const json root = root_by_tc(net);
  EXPECT_EQ(root.at("kind"), "htb");
  EXPECT_EQ(root.at("handle"), "1:");
  EXPECT_FALSE(engine.remove_if_ours(dev));
  EXPECT_EQ(root_by_tc(net).at("kind"), "htb");

  // Forced: replaced in one step; removing ours then gives the kernel default, not the htb.
  NetemQdisc forced = engine.install(dev, NetemSpec{}, InstallOptions{.force = true});
  EXPECT_EQ(root_by_tc(net).at("handle"), "1a7e:");
  forced.remove();
  EXPECT_TRUE(engine.root_qdisc(dev)->is_default());
}

TEST(NetemOwnership, AQdiscPutInPlaceOfOursIsNeverChangedOrRemoved) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Interface& dev = bed.dev;
  NetemQdisc ours = engine.install(dev, NetemSpec{});
  // Someone replaces the root behind our back.
  tc_in_a(net, "qdisc replace dev jta root handle 2: netem delay 3ms");
  NetemSpec spec;
  spec.delay.latency = 50ms;
  try {
    ours.change(spec);
    FAIL() << "changed a qdisc that is not ours";
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.operation(), "netem change");
    EXPECT_EQ(e.object(), "dev jta handle 1a7e:");
  }
  EXPECT_THROW(ours.remove(), NetlinkError);
  const json root = root_by_tc(net);
  EXPECT_EQ(root.at("handle"), "2:");
  EXPECT_NEAR(root.at("options").at("delay").at("delay").get<double>(), 0.003, 1e-9);
}

TEST(NetemOwnership, KernelRefusalsCarryTheKernelsText) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& engine = bed.engine;
  try {
    engine.resolve(std::string("nosuchdev0"));
    FAIL();
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.error_number(), ENODEV);
    EXPECT_NE(std::string(e.what()).find("resolve interface (dev nosuchdev0)"), std::string::npos)
        << e.what();
  }
  // A change on an interface with no jitterd qdisc: the kernel refuses, naming what is missing.
  const Interface dev = engine.resolve(std::string(VethPair::kDevA));
  NetemQdisc ours = engine.install(dev, NetemSpec{});
  ours.remove();
  auto stale = engine.install(dev, NetemSpec{});
  stale.remove();
  try {
    // Owners are gone; talk to the kernel directly through a fresh adopt attempt.
    EXPECT_FALSE(engine.adopt(dev));
    NetemSpec spec;
    NlMsgPtr msg = build_netem_message(dev.index, kJitterdRootHandle, 0xffffffff, 0, spec, {});
    bed.socket.request(msg.get(), "netem change", "dev jta handle 1a7e:");
    FAIL() << "the kernel changed a qdisc that does not exist";
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.error_number(), ENOENT) << e.what();
    EXPECT_FALSE(e.kernel_message().empty()) << "no extended ACK text: " << e.what();
  }
}
