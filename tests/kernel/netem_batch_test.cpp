// Changes of several netem qdiscs sent as one batch (NetemEngine::change,
// RouteSocket::request_batch), the way the daemon sends coincident transitions: every message goes
// out before any answer is read, then each ACK is matched to its message. Judged by `tc -s qdisc
// show` (an independent reader): each qdisc got its own change, and a refused message costs only
// its own change, with the kernel's text, while the messages after it are applied.
#include <gtest/gtest.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>

#include <cerrno>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shaper/netem_encoder.hpp"
#include "shaper/netem_engine.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;
using json = nlohmann::json;

namespace {

// Devices jtq0.. (veth, peers jtr0..) in namespace a next to jta, up, each with jitterd's netem
// (10 ms, limit 1000) installed through `engine`.
std::vector<NetemQdisc> install_on_veths(jitterd_test::NetemBed& bed, int count) {
  std::vector<NetemQdisc> out;
  NetemSpec spec;
  spec.delay.latency = 10ms;
  for (int i = 0; i < count; ++i) {
    const std::string dev = "jtq" + std::to_string(i);
    jitterd_test::run("ip -n " + bed.net.ns_a() + " link add " + dev + " type veth peer name jtr" +
                      std::to_string(i) + " && ip -n " + bed.net.ns_a() + " link set " + dev +
                      " up");
    out.push_back(bed.engine.install(bed.engine.resolve(dev), spec));
  }
  return out;
}

// The root qdisc of every device in namespace a, by device name, as tc reports it.
std::map<std::string, json> roots_by_tc(const VethPair& net) {
  std::map<std::string, json> out;
  for (const auto& q :
       json::parse(jitterd_test::run("ip netns exec " + net.ns_a() + " tc -j -s qdisc show"))) {
    if (q.value("root", false)) out[q.at("dev").get<std::string>()] = q;
  }
  return out;
}

double tc_delay_seconds(const json& qdisc) {
  return qdisc.at("options").at("delay").at("delay").get<double>();
}

}  // namespace

TEST(NetemBatch, EachQdiscGetsItsOwnChangeAndARefusedOneCostsOnlyItself) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  constexpr int kQdiscs = 6;
  constexpr int kRefused = 2;  // in the middle: the changes after it must still be applied
  auto qdiscs = install_on_veths(bed, kQdiscs);
  // Someone else deletes jitterd's qdisc on jtq2: a change naming its handle is refused by the
  // kernel.
  jitterd_test::run("ip netns exec " + bed.net.ns_a() + " tc qdisc del dev jtq" +
                    std::to_string(kRefused) + " root");

  std::vector<PreparedChange> batch;
  for (int i = 0; i < kQdiscs; ++i) {
    NetemSpec spec;
    spec.delay.latency =
        std::chrono::milliseconds(20 + i);  // a different delay and limit per qdisc
    spec.limit = 2000 + static_cast<std::uint32_t>(i);
    batch.push_back(qdiscs[static_cast<std::size_t>(i)].prepare_change(spec));
  }
  const auto results = bed.engine.change(batch);

  ASSERT_EQ(results.size(), static_cast<std::size_t>(kQdiscs));
  const auto tc = roots_by_tc(bed.net);
  for (int i = 0; i < kQdiscs; ++i) {
    const std::string dev = "jtq" + std::to_string(i);
    SCOPED_TRACE(dev);
    const NetemQdisc& q = qdiscs[static_cast<std::size_t>(i)];
    const auto& result = results[static_cast<std::size_t>(i)];
    if (i == kRefused) {
      ASSERT_TRUE(result.has_value()) << "the kernel took a change of a qdisc that is gone";
      const NetlinkError& e = *result;
      EXPECT_EQ(e.error_number(), ENOENT) << e.what();
      EXPECT_NE(std::string(e.what()).find("netem change (dev jtq2 handle 1a7e:)"),
                std::string::npos)
          << e.what();
      EXPECT_NE(e.kernel_message().find("Qdisc not found"), std::string::npos)
          << "the kernel's extended-ACK text is kept: " << e.what();
      EXPECT_EQ(q.spec().delay.latency, 10ms)
          << "a refused change leaves the owner's spec as it was";
      ASSERT_TRUE(tc.count(dev));
      EXPECT_NE(tc.at(dev).at("kind"), "netem") << "nothing was installed in its place";
      continue;
    }
    EXPECT_FALSE(result.has_value()) << result->what();
    EXPECT_EQ(q.spec().delay.latency, std::chrono::milliseconds(20 + i));
    ASSERT_TRUE(tc.count(dev));
    const json& root = tc.at(dev);
    EXPECT_EQ(root.at("kind"), "netem");
    EXPECT_EQ(root.at("handle"), "1a7e:");
    EXPECT_NEAR(tc_delay_seconds(root), (20 + i) / 1000.0, 1e-6);
    EXPECT_EQ(root.at("options").at("limit"), 2000 + i);
  }
  // The socket is in step after the refusal: the next change, alone, is answered as its own.
  NetemSpec again;
  again.delay.latency = 40ms;
  qdiscs[0].change(again);
  EXPECT_NEAR(tc_delay_seconds(roots_by_tc(bed.net).at("jtq0")), 0.040, 1e-6);
  qdiscs[static_cast<std::size_t>(kRefused)].release();  // nothing of ours is left there to remove
}

TEST(NetemBatch, MoreRequestsThanFitInFlightAreAnsweredInOrder) {
  // 70 requests: more than go out in one send (32 in flight at most), so the answers of three sends
  // are matched to their requests. The 50th names another handle than the root's (without
  // NLM_F_REPLACE the kernel refuses to put a new qdisc there); the kernel refuses it alone, and
  // the last request, applied after it, is what tc sees.
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  NetemSpec spec;
  spec.delay.latency = 10ms;
  NetemQdisc qdisc = bed.engine.install(bed.dev, spec);
  constexpr int kRequests = 70;
  constexpr int kBad = 49;
  std::vector<NlMsgPtr> messages;
  std::vector<NetlinkRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    NetemSpec step;
    step.delay.latency = std::chrono::milliseconds(11 + i);
    const std::uint32_t handle =
        i == kBad ? kJitterdRootHandle + 0x10000 : kJitterdRootHandle;  // 1a7f:
    messages.push_back(
        build_netem_message(bed.dev.index, handle, TC_H_ROOT, 0, step, NetemEncodePlan{}));
    requests.push_back(
        NetlinkRequest{messages.back().get(), "netem change", "request " + std::to_string(i)});
  }
  const auto replies = bed.socket.request_batch(requests);
  ASSERT_EQ(replies.size(), static_cast<std::size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) {
    const NetlinkReply& reply = replies[static_cast<std::size_t>(i)];
    if (i != kBad) {
      EXPECT_TRUE(reply.ok()) << i << ": " << reply.error->what();
      continue;
    }
    ASSERT_FALSE(reply.ok()) << "the kernel took a change naming a handle that is not the root's";
    EXPECT_EQ(reply.error->error_number(), EEXIST) << reply.error->what();
    EXPECT_NE(std::string(reply.error->what()).find("netem change (request 49)"), std::string::npos)
        << reply.error->what();
    EXPECT_FALSE(reply.error->kernel_message().empty())
        << "no extended ACK text: " << reply.error->what();
  }
  const json root = roots_by_tc(bed.net).at(VethPair::kDevA);
  EXPECT_NEAR(tc_delay_seconds(root), (11 + kRequests - 1) / 1000.0, 1e-6)
      << "the last request was applied last";
}
