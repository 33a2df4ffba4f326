// Every message builder of the kernel layer, byte for byte against golden data: the netem qdisc
// (add, change, replace; every option, both tables, each loss model and the empty LOSS nest), the
// tc tree's HTB root and class, its u32 filters (classid, no keys, mirred redirect), the IFB link
// and the ingress qdisc. The golden file (tests/fixtures/netlink/messages.hex) was written by this
// test from the builders of f609062, before they shared one message builder; the builders must go
// on sending exactly these bytes. JITTERD_WRITE_NETLINK_GOLDEN=<file> writes it again.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "shaper/ifb.hpp"
#include "shaper/netem_encoder.hpp"
#include "shaper/tc_tree.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

std::string hex_of(const NlMsgPtr& msg) {
  const nlmsghdr* hdr = nlmsg_hdr(msg.get());
  const auto* bytes = reinterpret_cast<const unsigned char*>(hdr);
  std::string out;
  char two[3];
  for (std::uint32_t i = 0; i < hdr->nlmsg_len; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    out += two;
  }
  return out;
}

DistributionTable ramp(int entries, int step) {
  DistributionTable table;
  for (int i = 0; i < entries; ++i) table.push_back(static_cast<std::int16_t>(-32768 + i * step));
  return table;
}

// Every option set, both tables, random loss with correlation.
NetemSpec full_spec() {
  NetemSpec spec;
  spec.delay.latency = 120007936ns;
  spec.delay.jitter = 25001984ns;
  spec.delay.correlation = Probability::checked(0.25);
  spec.delay.distribution = ramp(33, 2047);
  spec.loss = RandomLoss{Probability::checked(0.015), Probability::checked(0.3)};
  spec.duplicate = {Probability::checked(0.02), Probability::checked(0.5)};
  spec.corrupt = {Probability::checked(0.003), Probability::checked(0.1)};
  spec.reorder = {Probability::checked(0.2), Probability::checked(0.05), 4};
  spec.rate = {BytesPerSecond{12'500'000'000ull}, -4, 48, 5};
  spec.slot = SlotSpec{1ms, 3ms, SlotDistribution{2ms, 500us, ramp(7, 9000)}, 12, 30000};
  spec.limit = 20000;
  spec.ecn = true;
  spec.prng_seed = 0x1122334455667788ull;
  return spec;
}

NetemSpec gilbert_elliott_spec() {
  NetemSpec spec;
  spec.delay.latency = 40ms;
  spec.delay.jitter = 3ms;
  spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3),
                                 Probability::checked(0.9), Probability::checked(0.001)};
  spec.rate = {BytesPerSecond{1'250'000}, 0, 0, 0};
  spec.slot = SlotSpec{2ms, 2ms, std::nullopt, 0, 0};
  return spec;
}

NetemSpec four_state_spec() {
  NetemSpec spec;
  spec.delay.latency = 10ms;
  spec.loss = FourStateLoss{Probability::checked(0.05), Probability::checked(0.6),
                            Probability::checked(0.2), Probability::checked(0.3),
                            Probability::checked(0.01)};
  return spec;
}

using Builder = std::function<NlMsgPtr()>;

// Name -> builder, in the golden file's order.
std::vector<std::pair<std::string, Builder>> cases() {
  const NetemEncodePlan all{};
  const NetemEncodePlan no_tables{false, false, LossEncoding::kFull};
  const NetemEncodePlan keep_chain{false, false, LossEncoding::kKeepRunning};
  U32Selector two_keys{
      0x0800, {U32Key{0xffffffffu, 0x020012c6u, 16}, U32Key{0xffff0000u, 0x51140000u, 20}}};
  return {
      {"netem-add-full",
       [=] {
         return build_netem_message(7, 0x1a7e0000, 0xffffffff, NLM_F_CREATE | NLM_F_EXCL,
                                    full_spec(), all);
       }},
      {"netem-change-full-no-tables",
       [=] { return build_netem_message(7, 0x1a7e0000, 0xffffffff, 0, full_spec(), no_tables); }},
      {"netem-replace-default",
       [=] {
         return build_netem_message(3, 0x1a7e0000, 0xffffffff, NLM_F_CREATE | NLM_F_REPLACE,
                                    NetemSpec{}, all);
       }},
      {"netem-leaf-gilbert-elliott",
       [=] {
         return build_netem_message(9, 0x20010000, 0x1a7e0001, NLM_F_CREATE | NLM_F_EXCL,
                                    gilbert_elliott_spec(), all);
       }},
      {"netem-change-gilbert-elliott-keep-chain",
       [=] {
         return build_netem_message(9, 0x20010000, 0x1a7e0001, 0, gilbert_elliott_spec(),
                                    keep_chain);
       }},
      {"netem-add-four-state",
       [=] {
         return build_netem_message(2, 0x1a7e0000, 0xffffffff, NLM_F_CREATE | NLM_F_EXCL,
                                    four_state_spec(), all);
       }},
      {"htb-root-add", [] { return build_htb_root_message(7, 0x1000, NLM_F_CREATE | NLM_F_EXCL); }},
      {"htb-root-change", [] { return build_htb_root_message(7, 5, 0); }},
      {"htb-class-add",
       [] { return build_htb_class_message(7, tree_class_id(3), NLM_F_CREATE | NLM_F_EXCL); }},
      {"u32-filter-classid",
       [=] {
         return build_u32_filter_message(7, kJitterdRootHandle, 3, two_keys,
                                         U32Target{tree_class_id(5), {}});
       }},
      {"u32-filter-no-keys",
       [] {
         return build_u32_filter_message(7, kJitterdRootHandle, 1, U32Selector{0x86dd, {}},
                                         U32Target{kJitterdRootHandle, {}});
       }},
      {"u32-filter-mirred",
       [] {
         return build_u32_filter_message(7, kIngressQdiscHandle, kIngressPrioIpv4,
                                         U32Selector{0x0800, {}}, U32Target{{}, 42});
       }},
      {"ifb-create", [] { return build_ifb_create_message("jdifb7"); }},
      {"link-delete", [] { return build_link_delete_message(12); }},
      {"ingress-qdisc-add", [] { return build_ingress_qdisc_message(9); }},
  };
}

std::map<std::string, std::string> read_golden(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, hex;
    fields >> name >> hex;
    out[name] = hex;
  }
  return out;
}

}  // namespace

TEST(NetlinkBytes, EveryBuilderSendsTheGoldenBytes) {
  const char* write_to = std::getenv("JITTERD_WRITE_NETLINK_GOLDEN");
  if (write_to) {
    std::ofstream out(write_to);
    out << "# Netlink messages as the kernel layer's builders make them (hex, one per line).\n"
           "# Written by tests/unit/netlink_bytes_test.cpp (JITTERD_WRITE_NETLINK_GOLDEN) from "
           "the\n"
           "# builders of f609062, before they shared one message builder.\n";
    for (const auto& [name, build] : cases()) out << name << ' ' << hex_of(build()) << '\n';
    GTEST_SKIP() << "golden data written to " << write_to;
  }
  const auto golden = read_golden(JITTERD_NETLINK_GOLDEN);
  const auto all = cases();
  ASSERT_EQ(golden.size(), all.size()) << JITTERD_NETLINK_GOLDEN;
  for (const auto& [name, build] : all) {
    const auto it = golden.find(name);
    ASSERT_NE(it, golden.end()) << name << " missing from " << JITTERD_NETLINK_GOLDEN;
    EXPECT_EQ(hex_of(build()), it->second) << name;
  }
}
