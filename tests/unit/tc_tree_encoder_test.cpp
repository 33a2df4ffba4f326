// The tc tree's and the ingress plumbing's messages, walked attribute by attribute with a TLV
// reader written here (independent of libnl's parser), against byte strings written out by hand
// from the kernel's struct layouts (include/uapi/linux/pkt_sched.h, pkt_cls.h, tc_act/tc_mirred.h,
// on x86-64 little-endian) and the layout drawn in tc_tree.cpp.
#include <gtest/gtest.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "shaper/ifb.hpp"
#include "shaper/tc_tree.hpp"

using namespace shaper;

namespace {

using Bytes = std::vector<std::uint8_t>;

struct Tlv {
  std::uint16_t type;  // with flag bits
  Bytes payload;
};

// Walks netlink attributes in [begin, end): each is u16 len, u16 type, payload, padded to 4.
std::vector<Tlv> walk(const std::uint8_t* begin, const std::uint8_t* end) {
  std::vector<Tlv> out;
  while (begin + 4 <= end) {
    std::uint16_t len, type;
    std::memcpy(&len, begin, 2);
    std::memcpy(&type, begin + 2, 2);
    EXPECT_GE(len, 4);
    EXPECT_LE(begin + len, end);
    if (len < 4 || begin + len > end) break;
    out.push_back({type, Bytes(begin + 4, begin + len)});
    begin += (len + 3u) & ~3u;
  }
  EXPECT_EQ(begin, end) << "trailing bytes after the last attribute";
  return out;
}

std::vector<Tlv> walk(const Bytes& payload) {
  return walk(payload.data(), payload.data() + payload.size());
}

template <typename Header>
struct Message {
  nlmsghdr nlh;
  Header header;
  std::vector<Tlv> top;
};

template <typename Header>
Message<Header> parse(const NlMsgPtr& msg) {
  const nlmsghdr* nlh = nlmsg_hdr(msg.get());
  Message<Header> out{};
  out.nlh = *nlh;
  const auto* base = reinterpret_cast<const std::uint8_t*>(nlh);
  std::memcpy(&out.header, base + NLMSG_HDRLEN, sizeof(Header));
  out.top = walk(base + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(Header)), base + nlh->nlmsg_len);
  return out;
}

std::string as_string(const Tlv& tlv) {
  EXPECT_FALSE(tlv.payload.empty());
  EXPECT_EQ(tlv.payload.back(), 0) << "strings are NUL-terminated";
  return std::string(tlv.payload.begin(), tlv.payload.end() - 1);
}

// A 32-bit little-endian value as bytes.
Bytes le32(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
          static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

constexpr std::uint16_t kNested = NLA_F_NESTED;

}  // namespace

TEST(TcTreeHandles, LeafHandlesNeverCollideWithTheRootIngressOrKernelHandles) {
  std::set<std::uint32_t> majors;
  for (std::uint32_t minor = 1; minor <= kMaxLeafMinor; ++minor) {
    majors.insert(tree_leaf_handle(static_cast<std::uint16_t>(minor)) >> 16);
  }
  majors.insert(tree_leaf_handle(kDefaultClassMinor) >> 16);
  EXPECT_EQ(majors.size(), kMaxLeafMinor + 1u);
  EXPECT_EQ(*majors.begin(), 0x2001u);
  EXPECT_EQ(*majors.rbegin(), 0x3000u);
  EXPECT_FALSE(majors.count(kJitterdHandleMajor));
  EXPECT_LT(*majors.rbegin(), 0x8000u) << "the kernel's automatic handles start at 8000:";
  EXPECT_EQ(tree_class_id(5), 0x1a7e0005u);
  EXPECT_EQ(tree_leaf_handle(5), 0x20050000u);
  EXPECT_GT(kDefaultClassMinor, kMaxLeafMinor);
}

TEST(TcTreeEncoder, HtbRootCarriesVersion3InitAndDefaultClass) {
  NlMsgPtr msg = build_htb_root_message(7, kDefaultClassMinor, NLM_F_CREATE | NLM_F_EXCL);
  auto m = parse<tcmsg>(msg);
  EXPECT_EQ(m.nlh.nlmsg_type, RTM_NEWQDISC);
  EXPECT_EQ(m.nlh.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE),
            NLM_F_CREATE | NLM_F_EXCL);
  EXPECT_EQ(m.header.tcm_ifindex, 7);
  EXPECT_EQ(m.header.tcm_handle, 0x1a7e0000u);
  EXPECT_EQ(m.header.tcm_parent, TC_H_ROOT);
  ASSERT_EQ(m.top.size(), 2u);
  EXPECT_EQ(m.top[0].type, TCA_KIND);
  EXPECT_EQ(as_string(m.top[0]), "htb");
  EXPECT_EQ(m.top[1].type & NLA_TYPE_MASK, TCA_OPTIONS);
  auto options = walk(m.top[1].payload);
  ASSERT_EQ(options.size(), 2u);
  // TCA_HTB_INIT (2): struct tc_htb_glob {u32 version, rate2quantum, defcls, debug, direct_pkts}.
  EXPECT_EQ(options[0].type, 2);
  EXPECT_EQ(options[0].payload, cat({le32(3), le32(10), le32(0x1000), le32(0), le32(0)}));
  // TCA_HTB_DIRECT_QLEN (5): u32 packets.
  EXPECT_EQ(options[1].type, 5);
  EXPECT_EQ(options[1].payload, le32(1000));
}

TEST(TcTreeEncoder, HtbRootWithoutUnmatchedClassDefaultsToMinorZero) {
  auto m = parse<tcmsg>(build_htb_root_message(7, 0, NLM_F_CREATE | NLM_F_REPLACE));
  EXPECT_EQ(m.nlh.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE),
            NLM_F_CREATE | NLM_F_REPLACE);
  auto options = walk(m.top.at(1).payload);
  EXPECT_EQ(options.at(0).payload, cat({le32(3), le32(10), le32(0), le32(0), le32(0)}));
}

TEST(TcTreeEncoder, HtbClassIsUnthrottledWithEthernetLinklayerAndNoRateTable) {
  auto m = parse<tcmsg>(build_htb_class_message(7, tree_class_id(3), NLM_F_CREATE | NLM_F_EXCL));
  EXPECT_EQ(m.nlh.nlmsg_type, RTM_NEWTCLASS);
  EXPECT_EQ(m.header.tcm_handle, 0x1a7e0003u);
  EXPECT_EQ(m.header.tcm_parent, 0x1a7e0000u);
  ASSERT_EQ(m.top.size(), 2u);
  EXPECT_EQ(as_string(m.top[0]), "htb");
  auto options = walk(m.top[1].payload);
  ASSERT_EQ(options.size(), 3u) << "PARMS, RATE64, CEIL64 and no RTAB/CTAB";
  // struct tc_ratespec (12 B): u8 cell_log, u8 linklayer (1 = ETHERNET), u16 overhead, s16
  // cell_align, u16 mpu, u32 rate (~0U: the kernel takes RATE64).
  const Bytes ratespec = {0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  // buffer = cbuffer = 100 ms in 64 ns ticks = 1562500 = 0x0017d784; quantum 200000 = 0x00030d40.
  EXPECT_EQ(options[0].type, TCA_HTB_PARMS);
  EXPECT_EQ(options[0].payload, cat({ratespec, ratespec, le32(1562500), le32(1562500), le32(200000),
                                     le32(0), le32(0)}));
  // 1e12 B/s = 0xe8_d4a5_1000.
  const Bytes rate64 = {0x00, 0x10, 0xa5, 0xd4, 0xe8, 0, 0, 0};
  EXPECT_EQ(options[1].type, TCA_HTB_RATE64);
  EXPECT_EQ(options[1].payload, rate64);
  EXPECT_EQ(options[2].type, TCA_HTB_CEIL64);
  EXPECT_EQ(options[2].payload, rate64);
}

TEST(TcTreeEncoder, U32FilterWithClassidHasTerminalSelectorAndKeysInOrder) {
  // IPv4 dst 198.18.0.2/32 (offset 16) and UDP dport 5201 (offset 20, low half).
  U32Selector selector{0x0800,
                       {U32Key{htonl(0xffffffff), htonl(0xc6120002), 16},
                        U32Key{htonl(0x0000ffff), htonl(5201), 20}}};
  auto m = parse<tcmsg>(build_u32_filter_message(7, kJitterdRootHandle, 3, selector,
                                                 U32Target{tree_class_id(5), {}}));
  EXPECT_EQ(m.nlh.nlmsg_type, RTM_NEWTFILTER);
  EXPECT_EQ(m.nlh.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL), NLM_F_CREATE | NLM_F_EXCL);
  EXPECT_EQ(m.header.tcm_parent, 0x1a7e0000u);
  EXPECT_EQ(m.header.tcm_handle, 0u) << "the kernel picks 800::N";
  EXPECT_EQ(m.header.tcm_info, 0x00030008u) << "prio 3 << 16 | htons(ETH_P_IP)";
  ASSERT_EQ(m.top.size(), 2u);
  EXPECT_EQ(as_string(m.top[0]), "u32");
  auto options = walk(m.top[1].payload);
  ASSERT_EQ(options.size(), 2u);
  // TCA_U32_SEL (5): tc_u32_sel {u8 flags = TERMINAL, u8 offshift, u8 nkeys = 2, pad, be16 offmask,
  // u16 off, s16 offoff, s16 hoff, be32 hmask} then tc_u32_key {be32 mask, be32 val, s32 off, s32
  // offmask}.
  EXPECT_EQ(options[0].type, 5);
  const Bytes expected_sel = {
      0x01, 0x00, 0x02, 0x00, 0,    0,    0,    0,
      0,    0,    0,    0,    0,    0,    0,    0,  // selector
      0xff, 0xff, 0xff, 0xff, 0xc6, 0x12, 0x00, 0x02,
      0x10, 0,    0,    0,    0,    0,    0,    0,  // dst == 198.18.0.2
      0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x14, 0x51,
      0x14, 0,    0,    0,    0,    0,    0,    0,  // dport == 5201
  };
  EXPECT_EQ(options[0].payload, expected_sel);
  EXPECT_EQ(options[1].type, 1) << "TCA_U32_CLASSID";
  EXPECT_EQ(options[1].payload, le32(0x1a7e0005));
}

TEST(TcTreeEncoder, U32SelectorWithoutKeysGetsOneMatchAllKey) {
  auto m = parse<tcmsg>(build_u32_filter_message(7, kJitterdRootHandle, 1, U32Selector{0x86dd, {}},
                                                 U32Target{kJitterdRootHandle, {}}));
  EXPECT_EQ(m.header.tcm_info, 0x0001dd86u) << "prio 1 << 16 | htons(ETH_P_IPV6)";
  auto options = walk(m.top.at(1).payload);
  ASSERT_EQ(options.size(), 2u);
  Bytes expected(32, 0);
  expected[0] = 0x01;  // TERMINAL
  expected[2] = 0x01;  // nkeys
  EXPECT_EQ(options[0].payload, expected);
  EXPECT_EQ(options[1].payload, le32(0x1a7e0000)) << "bypass: the HTB qdisc itself, sent directly";
}

TEST(TcTreeEncoder, MirredRedirectNestIsLaidOutAsTheKernelReadsIt) {
  auto m = parse<tcmsg>(build_u32_filter_message(7, kIngressQdiscHandle, kIngressPrioIpv4,
                                                 U32Selector{0x0800, {}}, U32Target{{}, 42}));
  EXPECT_EQ(m.header.tcm_parent, 0xffff0000u);
  EXPECT_EQ(m.header.tcm_info, (0x1a7eu << 16) | 0x0008u);
  auto options = walk(m.top.at(1).payload);
  ASSERT_EQ(options.size(), 2u) << "SEL and ACT, no CLASSID";
  EXPECT_EQ(options[0].type, 5);
  EXPECT_EQ(options[1].type & NLA_TYPE_MASK, 7) << "TCA_U32_ACT";
  auto actions = walk(options[1].payload);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].type & NLA_TYPE_MASK, 1) << "action order 1";
  auto action = walk(actions[0].payload);
  ASSERT_EQ(action.size(), 2u);
  EXPECT_EQ(action[0].type, 1) << "TCA_ACT_KIND";
  EXPECT_EQ(as_string(action[0]), "mirred");
  EXPECT_EQ(action[1].type, 2 | kNested) << "TCA_ACT_OPTIONS, flagged nested as tc sends it";
  auto mirred = walk(action[1].payload);
  ASSERT_EQ(mirred.size(), 1u);
  EXPECT_EQ(mirred[0].type, 2) << "TCA_MIRRED_PARMS";
  // struct tc_mirred: tc_gen {u32 index, u32 capab, s32 action = TC_ACT_STOLEN (4), s32 refcnt,
  // s32 bindcnt}, s32 eaction = TCA_EGRESS_REDIR (1), u32 ifindex.
  EXPECT_EQ(mirred[0].payload,
            cat({le32(0), le32(0), le32(4), le32(0), le32(0), le32(1), le32(42)}));
}

TEST(TcTreeEncoder, NeighbourDiscoverySelectorsCoverIcmpv6Types133To137Only) {
  auto selectors = neighbour_discovery_selectors();
  std::set<int> covered;
  for (const auto& s : selectors) {
    EXPECT_EQ(s.eth_protocol, 0x86dd);
    ASSERT_EQ(s.keys.size(), 2u);
    EXPECT_EQ(s.keys[0], (U32Key{htonl(0x0000ff00), htonl(0x00003a00), 4})) << "next header 58";
    EXPECT_EQ(s.keys[1].offset, 40);
    for (int type = 0; type < 256; ++type) {
      if ((htonl(static_cast<std::uint32_t>(type) << 24) & s.keys[1].mask_be) ==
          s.keys[1].value_be) {
        covered.insert(type);
      }
    }
  }
  EXPECT_EQ(covered, (std::set<int>{133, 134, 135, 136, 137}));
}

TEST(IfbEncoder, CreateMessageMakesAnIfbThatIsUp) {
  EXPECT_EQ(ifb_name_for(Interface{7, "eth0"}), "jdifb7");
  EXPECT_LE(ifb_name_for(Interface{2147483647, "x"}).size(), 15u) << "IFNAMSIZ - 1";
  auto m = parse<ifinfomsg>(build_ifb_create_message("jdifb7"));
  EXPECT_EQ(m.nlh.nlmsg_type, RTM_NEWLINK);
  EXPECT_EQ(m.nlh.nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL), NLM_F_CREATE | NLM_F_EXCL);
  EXPECT_EQ(m.header.ifi_index, 0);
  EXPECT_EQ(m.header.ifi_flags, static_cast<unsigned>(IFF_UP));
  EXPECT_EQ(m.header.ifi_change, static_cast<unsigned>(IFF_UP));
  ASSERT_EQ(m.top.size(), 2u);
  EXPECT_EQ(m.top[0].type, IFLA_IFNAME);
  EXPECT_EQ(as_string(m.top[0]), "jdifb7");
  EXPECT_EQ(m.top[1].type & NLA_TYPE_MASK, IFLA_LINKINFO);
  auto info = walk(m.top[1].payload);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].type, IFLA_INFO_KIND);
  EXPECT_EQ(as_string(info[0]), "ifb");
}

TEST(IfbEncoder, IngressQdiscAndLinkDelete) {
  auto q = parse<tcmsg>(build_ingress_qdisc_message(9));
  EXPECT_EQ(q.header.tcm_ifindex, 9);
  EXPECT_EQ(q.header.tcm_parent, 0xfffffff1u) << "TC_H_INGRESS";
  EXPECT_EQ(q.header.tcm_handle, 0xffff0000u);
  ASSERT_EQ(q.top.size(), 1u) << "kind only, no options";
  EXPECT_EQ(as_string(q.top[0]), "ingress");
  auto d = parse<ifinfomsg>(build_link_delete_message(12));
  EXPECT_EQ(d.nlh.nlmsg_type, RTM_DELLINK);
  EXPECT_EQ(d.header.ifi_index, 12);
  EXPECT_TRUE(d.top.empty());
}

// --- update planning ----------------------------------------------------------------------------

namespace {

NetemSpec delay_ms(int ms) {
  NetemSpec spec;
  spec.delay.latency = std::chrono::milliseconds(ms);
  return spec;
}

// IPv4 destinations as abstract packets: a selector matches a destination when every key does.
U32Selector dst_is(std::uint32_t value, std::uint32_t mask = 0xffffffffu) {
  return U32Selector{0x0800, {U32Key{mask, value & mask, 16}}};
}

bool matches(const U32Selector& selector, std::uint32_t dst) {
  for (const auto& key : selector.keys) {
    if ((dst & key.mask_be) != key.value_be) return false;
  }
  return true;
}

// The class a packet ends up in, as HTB would pick it: first matching filter by prio, else the
// default class if it exists, else direct (1a7e:0).
std::uint32_t classify(const TreeState& state, std::uint32_t dst) {
  const TreeFilter* first = nullptr;
  for (const auto& filter : state.filters) {
    if (matches(filter.selector, dst) && (!first || filter.prio < first->prio)) first = &filter;
  }
  if (first) return first->classid;
  return state.leaves.count(kDefaultClassMinor) ? tree_class_id(kDefaultClassMinor)
                                                : kJitterdRootHandle;
}

// Applies one step to a model of the kernel, failing the test where the kernel would refuse or
// where the step would break "every filter points at an existing class".
void apply_step(TreeState& state, const TreeStep& step) {
  auto points_at = [&](std::uint16_t minor) {
    return std::any_of(state.filters.begin(), state.filters.end(),
                       [&](const TreeFilter& f) { return f.classid == tree_class_id(minor); });
  };
  switch (step.kind) {
    case TreeStep::Kind::kAddLeaf:
      ASSERT_FALSE(state.leaves.count(step.minor)) << "class exists: EEXIST";
      state.leaves[step.minor] = step.spec;
      break;
    case TreeStep::Kind::kChangeLeaf:
      ASSERT_TRUE(state.leaves.count(step.minor));
      state.leaves[step.minor] = step.spec;
      break;
    case TreeStep::Kind::kAddFilter: {
      for (const auto& f : state.filters) ASSERT_NE(f.prio, step.filter.prio) << "prio in use";
      const std::uint32_t classid = step.filter.classid;
      ASSERT_TRUE(classid == kJitterdRootHandle ||
                  state.leaves.count(static_cast<std::uint16_t>(classid & 0xffff)))
          << "filter added before its class";
      state.filters.push_back(step.filter);
      std::sort(state.filters.begin(), state.filters.end(),
                [](const TreeFilter& a, const TreeFilter& b) { return a.prio < b.prio; });
      break;
    }
    case TreeStep::Kind::kDeleteFilter: {
      auto it = std::find(state.filters.begin(), state.filters.end(), step.filter);
      ASSERT_NE(it, state.filters.end()) << "deleting a filter that is not there";
      state.filters.erase(it);
      break;
    }
    case TreeStep::Kind::kDeleteLeaf:
      ASSERT_TRUE(state.leaves.count(step.minor));
      ASSERT_FALSE(points_at(step.minor)) << "class deleted while a filter points at it: EBUSY";
      state.leaves.erase(step.minor);
      break;
  }
}

std::vector<std::uint32_t> probe_packets() {
  // Destinations chosen so that the selectors below overlap in every way: /32s, a /24 and a /16.
  return {0x0a000001, 0x0a000002, 0x0a000003, 0x0a000104, 0x0a010005, 0x0b000006};
}

// The classid sequence of the filters by prio, runs collapsed: the lane order the kernel sees.
std::vector<std::uint32_t> lane_order(const TreeState& state) {
  std::vector<std::uint32_t> out;
  for (const auto& f : state.filters) {
    if (out.empty() || out.back() != f.classid) out.push_back(f.classid);
  }
  return out;
}

std::vector<std::uint32_t> expected_lane_order(const TreeSpec& spec) {
  std::vector<std::uint32_t> out;
  if (!spec.bypass.empty()) out.push_back(kJitterdRootHandle);
  for (const auto& leaf : spec.leaves) {
    if (!leaf.selectors.empty()) out.push_back(tree_class_id(leaf.minor));
  }
  return out;
}

// Plans current -> wanted, applies it step by step to the model, checks that every probe packet
// is classified as by the old or by the new tree after every step, and returns the new state.
TreeState update_model(const TreeState& current, const TreeSpec& wanted,
                       std::vector<TreeStep>* steps_out = nullptr) {
  const std::vector<TreeStep> steps = plan_tree_update(current, wanted);
  if (steps_out) *steps_out = steps;
  TreeState final_state = current;
  for (const auto& step : steps) apply_step(final_state, step);
  TreeState state = current;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    apply_step(state, steps[i]);
    for (std::uint32_t dst : probe_packets()) {
      const std::uint32_t now = classify(state, dst);
      EXPECT_TRUE(now == classify(current, dst) || now == classify(final_state, dst))
          << "after step " << i << " packet " << std::hex << dst << " goes to " << now
          << ", neither the old lane " << classify(current, dst) << " nor the new "
          << classify(final_state, dst);
    }
  }
  EXPECT_EQ(lane_order(final_state), expected_lane_order(wanted));
  std::set<std::uint16_t> wanted_minors;
  for (const auto& leaf : wanted.leaves) wanted_minors.insert(leaf.minor);
  if (wanted.unmatched) wanted_minors.insert(kDefaultClassMinor);
  std::set<std::uint16_t> got;
  for (const auto& [minor, spec] : final_state.leaves) got.insert(minor);
  EXPECT_EQ(got, wanted_minors);
  return final_state;
}

std::vector<TreeStep::Kind> kinds(const std::vector<TreeStep>& steps) {
  std::vector<TreeStep::Kind> out;
  for (const auto& s : steps) out.push_back(s.kind);
  return out;
}

using K = TreeStep::Kind;

}  // namespace

TEST(TreeUpdatePlan, FreshTreeBuildsLeavesFirstThenFiltersInSlackSpacedGroups) {
  TreeSpec spec;
  spec.bypass = {dst_is(0x0a000003)};
  spec.leaves.push_back(TreeLeaf{5, delay_ms(10), {dst_is(0x0a000001), dst_is(0x0a000002)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000000, 0xffffff00)}});
  spec.unmatched = delay_ms(30);
  std::vector<TreeStep> steps;
  update_model(TreeState{}, spec, &steps);
  // Leaves in spec order, their filters, then the default class (between the filter phases).
  ASSERT_EQ(kinds(steps), (std::vector<K>{K::kAddLeaf, K::kAddLeaf, K::kAddFilter, K::kAddFilter,
                                          K::kAddFilter, K::kAddFilter, K::kAddLeaf}));
  EXPECT_EQ(steps[0].minor, 5);
  EXPECT_EQ(steps[0].spec, delay_ms(10));
  EXPECT_EQ(steps[1].minor, 2);
  EXPECT_EQ(steps[6].minor, kDefaultClassMinor);
  EXPECT_EQ(steps[6].spec, delay_ms(30));
  // kFilterPrioSlack (255) free prios before each group: 0x100, 0x200-0x201, 0x301.
  EXPECT_EQ(steps[2].filter, (TreeFilter{0x100, kJitterdRootHandle, dst_is(0x0a000003)}));
  EXPECT_EQ(steps[3].filter, (TreeFilter{0x200, tree_class_id(5), dst_is(0x0a000001)}));
  EXPECT_EQ(steps[4].filter, (TreeFilter{0x201, tree_class_id(5), dst_is(0x0a000002)}));
  EXPECT_EQ(steps[5].filter, (TreeFilter{0x301, tree_class_id(2), dst_is(0x0a000000, 0xffffff00)}));
}

TEST(TreeUpdatePlan, UnchangedTreeNeedsNoRequest) {
  TreeSpec spec;
  spec.bypass = {dst_is(0x0a000003)};
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  const TreeState state = update_model(TreeState{}, spec);
  EXPECT_TRUE(plan_tree_update(state, spec).empty());
}

TEST(TreeUpdatePlan, AddedLeafGetsItsClassBeforeItsFilterAndOthersStayPut) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000002)}});
  const TreeState before = update_model(TreeState{}, spec);
  spec.leaves.insert(spec.leaves.begin() + 1, TreeLeaf{9, delay_ms(30), {dst_is(0x0a000003)}});
  std::vector<TreeStep> steps;
  const TreeState after = update_model(before, spec, &steps);
  ASSERT_EQ(kinds(steps), (std::vector<K>{K::kAddLeaf, K::kAddFilter}));
  EXPECT_EQ(steps[0].minor, 9);
  EXPECT_EQ(steps[1].filter.classid, tree_class_id(9));
  EXPECT_GT(steps[1].filter.prio, before.filters[0].prio);
  EXPECT_LT(steps[1].filter.prio, before.filters[1].prio);
  // The untouched leaves' filters are the very same (prio, selector, class).
  EXPECT_EQ(after.filters[0], before.filters[0]);
  EXPECT_EQ(after.filters[2], before.filters[1]);
}

TEST(TreeUpdatePlan, RemovedLeafLosesItsFiltersBeforeItsClass) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000002), dst_is(0x0a000003)}});
  const TreeState before = update_model(TreeState{}, spec);
  spec.leaves.pop_back();
  std::vector<TreeStep> steps;
  update_model(before, spec, &steps);
  ASSERT_EQ(kinds(steps), (std::vector<K>{K::kDeleteFilter, K::kDeleteFilter, K::kDeleteLeaf}));
  EXPECT_GT(steps[0].filter.prio, steps[1].filter.prio) << "deleted by descending prio";
  EXPECT_EQ(steps[2].minor, 2);
}

TEST(TreeUpdatePlan, NewBypassIsAddedBeforeTheOldIsRemovedAndStaysAheadOfTheLeaves) {
  TreeSpec spec;
  spec.bypass = {dst_is(0x0a000003)};
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000000, 0xffff0000)}});
  const TreeState before = update_model(TreeState{}, spec);
  spec.bypass = {dst_is(0x0a000002), dst_is(0x0a000003)};
  std::vector<TreeStep> steps;
  const TreeState after = update_model(before, spec, &steps);
  ASSERT_EQ(kinds(steps), (std::vector<K>{K::kAddFilter, K::kAddFilter, K::kDeleteFilter}));
  EXPECT_EQ(steps[2].filter, before.filters[0]);
  for (int i : {0, 1}) {
    EXPECT_EQ(steps[i].filter.classid, kJitterdRootHandle);
    EXPECT_LT(steps[i].filter.prio, before.filters[1].prio) << "bypass after a leaf";
  }
  EXPECT_EQ(after.filters.back(), before.filters.back()) << "the leaf's filter was kept";
}

TEST(TreeUpdatePlan, UnmatchedClassIsAddedChangedAndRemovedAsALeaf) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  TreeState state = update_model(TreeState{}, spec);
  spec.unmatched = delay_ms(20);
  std::vector<TreeStep> steps;
  state = update_model(state, spec, &steps);
  ASSERT_EQ(kinds(steps), std::vector<K>{K::kAddLeaf});
  EXPECT_EQ(steps[0].minor, kDefaultClassMinor);
  spec.unmatched = delay_ms(25);
  state = update_model(state, spec, &steps);
  ASSERT_EQ(kinds(steps), std::vector<K>{K::kChangeLeaf});
  EXPECT_EQ(steps[0].spec, delay_ms(25));
  spec.unmatched.reset();
  state = update_model(state, spec, &steps);
  ASSERT_EQ(kinds(steps), std::vector<K>{K::kDeleteLeaf});
  EXPECT_EQ(steps[0].minor, kDefaultClassMinor);
}

TEST(TreeUpdatePlan, SpecChangeAloneIsAnInPlaceChangeAndSelectorChangeReplacesOnlyThatLeaf) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000002)}});
  TreeState state = update_model(TreeState{}, spec);
  spec.leaves[0].spec = delay_ms(15);
  std::vector<TreeStep> steps;
  state = update_model(state, spec, &steps);
  ASSERT_EQ(kinds(steps), std::vector<K>{K::kChangeLeaf});
  EXPECT_EQ(steps[0].minor, 1);
  spec.leaves[1].selectors = {dst_is(0x0a000003)};
  const TreeState before = state;
  state = update_model(state, spec, &steps);
  ASSERT_EQ(kinds(steps), (std::vector<K>{K::kAddFilter, K::kDeleteFilter}));
  EXPECT_EQ(steps[0].filter.classid, tree_class_id(2));
  EXPECT_EQ(steps[1].filter, before.filters[1]);
  EXPECT_EQ(state.filters[0], before.filters[0]);
}

TEST(TreeUpdatePlan, SwappedLeavesMoveOneGroupAndKeepTheOther) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000000, 0xffffff00)}});
  const TreeState before = update_model(TreeState{}, spec);
  std::swap(spec.leaves[0], spec.leaves[1]);
  std::vector<TreeStep> steps;
  update_model(before, spec, &steps);  // checks order and old-or-new classification
  EXPECT_EQ(kinds(steps), (std::vector<K>{K::kAddFilter, K::kDeleteFilter}));
}

TEST(TreeUpdatePlan, FullGapFallsBackToPlacingEveryGroupAtFreshPrios) {
  // A tree whose filters sit at adjacent prios 1 and 2 (no room between them).
  TreeState dense;
  dense.leaves = {{1, delay_ms(10)}, {2, delay_ms(20)}};
  dense.filters = {TreeFilter{1, tree_class_id(1), dst_is(0x0a000001)},
                   TreeFilter{2, tree_class_id(2), dst_is(0x0a000000, 0xffffff00)}};
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay_ms(10), {dst_is(0x0a000001)}});
  spec.leaves.push_back(TreeLeaf{3, delay_ms(30), {dst_is(0x0a000002)}});
  spec.leaves.push_back(TreeLeaf{2, delay_ms(20), {dst_is(0x0a000000, 0xffffff00)}});
  std::vector<TreeStep> steps;
  const TreeState after = update_model(dense, spec, &steps);
  EXPECT_EQ(kinds(steps), (std::vector<K>{K::kAddLeaf, K::kAddFilter, K::kAddFilter, K::kAddFilter,
                                          K::kDeleteFilter, K::kDeleteFilter}));
  for (const auto& f : after.filters) EXPECT_GT(f.prio, 2) << "a fresh prio, not a reused one";
}

TEST(TreeUpdatePlan, RandomUpdateSequencesKeepEveryInvariant) {
  // A fixed-seed walk through 300 trees built from a small pool of overlapping selectors, minors
  // and delays; update_model checks every step of every plan (class before filter, no EBUSY, free
  // prios, old-or-new classification, final lane order).
  std::mt19937 random(20240611);
  const std::vector<U32Selector> pool = {dst_is(0x0a000001),
                                         dst_is(0x0a000002),
                                         dst_is(0x0a000003),
                                         dst_is(0x0a000000, 0xffffff00),
                                         dst_is(0x0a000000, 0xffff0000),
                                         U32Selector{0x0800, {}}};
  auto pick = [&](int n) { return static_cast<int>(random() % static_cast<unsigned>(n)); };
  TreeState state;
  for (int round = 0; round < 300; ++round) {
    TreeSpec spec;
    std::vector<std::uint16_t> minors = {1, 2, 3, 4, 5, 6};
    std::shuffle(minors.begin(), minors.end(), random);
    const int leaves = pick(5);
    for (int i = 0; i < leaves; ++i) {
      TreeLeaf leaf{minors[static_cast<std::size_t>(i)], delay_ms(10 * (1 + pick(3))), {}};
      for (int s = pick(3); s > 0; --s)
        leaf.selectors.push_back(pool[static_cast<std::size_t>(pick(6))]);
      spec.leaves.push_back(leaf);
    }
    for (int s = pick(3); s > 0; --s)
      spec.bypass.push_back(pool[static_cast<std::size_t>(pick(5))]);
    if (pick(2)) spec.unmatched = delay_ms(40);
    SCOPED_TRACE("round " + std::to_string(round));
    state = update_model(state, spec);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

TEST(TreeUpdatePlan, RefusesInvalidSpecsBeforePlanningAnything) {
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{0, delay_ms(10), {dst_is(1)}});
  EXPECT_THROW(plan_tree_update(TreeState{}, spec), std::invalid_argument);
  spec.leaves = {TreeLeaf{1, delay_ms(10), {}}, TreeLeaf{1, delay_ms(10), {}}};
  EXPECT_THROW(plan_tree_update(TreeState{}, spec), std::invalid_argument);
  spec.leaves = {TreeLeaf{1, delay_ms(10), {U32Selector{0, {}}}}};
  EXPECT_THROW(plan_tree_update(TreeState{}, spec), std::invalid_argument);
  spec.leaves = {TreeLeaf{1, delay_ms(-5), {}}};
  EXPECT_THROW(plan_tree_update(TreeState{}, spec), std::invalid_argument);
}
