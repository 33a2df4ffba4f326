#include "shaper/tc_tree.hpp"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/tc_act/tc_mirred.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "shaper/errors.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netlink_message.hpp"

namespace shaper {

// clang-format off
// The messages, as the kernel parses them (sch_htb.c htb_init/htb_change_class, cls_u32.c
// u32_change, act_mirred.c tcf_mirred_init):
//
//   RTM_NEWQDISC  tcmsg{handle 1a7e:, parent ROOT}  TCA_KIND "htb"
//   └ TCA_OPTIONS (2, nest)
//     ├ TCA_HTB_INIT (2)         struct tc_htb_glob (20 B)
//     │                          {version 3, rate2quantum 10, defcls, 0, 0}
//     └ TCA_HTB_DIRECT_QLEN (5)  u32: the direct queue in packets
//
//   RTM_NEWTCLASS tcmsg{handle 1a7e:N, parent 1a7e:}  TCA_KIND "htb"
//   └ TCA_OPTIONS (2, nest)
//     ├ TCA_HTB_PARMS (1)   struct tc_htb_opt (44 B) {rate, ceil: tc_ratespec{linklayer ETHERNET,
//     │                     rate ~0U}, buffer, cbuffer (64 ns ticks), quantum, level 0, prio 0}
//     ├ TCA_HTB_RATE64 (6)  u64 B/s: the kernel takes max(rate, rate64)
//     └ TCA_HTB_CEIL64 (7)  u64 B/s
//   A linklayer other than UNAWARE makes the kernel skip the 1 KiB rate table (no
//   TCA_HTB_RTAB/CTAB).
//
//   RTM_NEWTFILTER tcmsg{handle 0 (kernel picks 800::N), parent, info prio<<16 | htons(proto)}
//                  TCA_KIND "u32"
//   └ TCA_OPTIONS (2, nest)
//     ├ TCA_U32_SEL (5)      struct tc_u32_sel (16 B) {flags TERMINAL, nkeys n}
//     │                      + n × struct tc_u32_key (16 B)
//     ├ TCA_U32_CLASSID (1)  u32, optional
//     └ TCA_U32_ACT (7, nest), optional
//       └ 1 (nest): the action's order
//         ├ TCA_ACT_KIND (1)  "mirred"
//         └ TCA_ACT_OPTIONS (2, nest|NLA_F_NESTED)
//           └ TCA_MIRRED_PARMS (2)  struct tc_mirred (28 B) {index 0, capab 0, action STOLEN,
//                                   refcnt 0, bindcnt 0, eaction EGRESS_REDIR, ifindex}
// clang-format on

namespace {

constexpr std::uint32_t kHtbVersion = 3;  // tc's HTB_VER >> 16: htb_init refuses others
constexpr std::uint32_t kHtbRate2Quantum =
    10;  // tc's default; unused since the quantum is explicit

std::uint32_t filter_info(std::uint16_t prio, std::uint16_t protocol) {
  return (std::uint32_t{prio} << 16) | htons(protocol);
}

std::string describe_tree(const Interface& interface) {
  return "dev " + interface.name + " handle " + format_handle(kJitterdRootHandle);
}

std::string describe_leaf(const Interface& interface, std::uint16_t minor) {
  return "dev " + interface.name + " handle " + format_handle(tree_leaf_handle(minor)) +
         " parent " + format_handle(tree_class_id(minor));
}

// CVE-2025-38553's fix (check_netem_in_tree) refuses a duplicating netem next to any other netem on
// the same device; the kernel's text alone does not say what to do about it.
NetlinkError with_duplication_hint(const NetlinkError& e) {
  if (e.hint().empty() &&
      e.kernel_message().find("cannot mix duplicating netems") != std::string::npos) {
    return NetlinkError(
        e.operation(), e.object(), e.error_number(), e.kernel_message(),
        "This kernel refuses a netem with duplication on a device that has another netem (a rule "
        "added with the fix for CVE-2025-38553; it applies per device, and an IFB counts as a "
        "device "
        "of its own). On this kernel, use no duplication in a tree with several profiles, or shape "
        "the whole interface with a single profile");
  }
  return e;
}

[[noreturn]] void rethrow_with_hint(const NetlinkError& e) {
  throw with_duplication_hint(e);
}

void check_selector(const U32Selector& selector, const std::string& where) {
  if (selector.eth_protocol == 0) {
    throw std::invalid_argument(where + ": a u32 selector needs an ethernet protocol");
  }
  if (selector.keys.size() > 128) {  // u32's nkeys is a u8; far beyond any rule we compile
    throw std::invalid_argument(where + ": more than 128 u32 keys");
  }
  for (const auto& key : selector.keys) {
    if (key.offset < 0 || key.offset % 4 != 0) {
      throw std::invalid_argument(where + ": u32 key offset " + std::to_string(key.offset) +
                                  " is not a non-negative multiple of 4");
    }
  }
}

void check_spec(const NetemSpec& spec, const std::string& where) {
  auto diagnostics = validate(spec);
  if (!diagnostics.empty()) throw std::invalid_argument(where + ": " + to_string(diagnostics));
}

// Everything the kernel would refuse halfway through an install or update.
void check_tree_spec(const TreeSpec& spec) {
  std::set<std::uint16_t> minors;
  for (const auto& leaf : spec.leaves) {
    const std::string where = "tree leaf " + std::to_string(leaf.minor);
    if (leaf.minor < 1 || leaf.minor > kMaxLeafMinor) {
      throw std::invalid_argument(where + ": leaf minors are 1 to 4095");
    }
    if (!minors.insert(leaf.minor).second)
      throw std::invalid_argument(where + ": minor used twice");
    check_spec(leaf.spec, where);
    for (const auto& selector : leaf.selectors) check_selector(selector, where);
  }
  for (const auto& selector : spec.bypass) check_selector(selector, "tree bypass");
  if (spec.unmatched) check_spec(*spec.unmatched, "tree unmatched");
}

// The filters of one lane (the bypass or one leaf), which must have consecutive free prios and sit
// between the groups before and after it in spec order.
struct FilterGroup {
  std::uint32_t classid = 0;
  std::vector<U32Selector> selectors;
};

std::vector<FilterGroup> wanted_groups(const TreeSpec& spec) {
  std::vector<FilterGroup> out;
  // Classid 1a7e:0 is the HTB qdisc itself: HTB sends such packets directly, unshaped.
  if (!spec.bypass.empty()) out.push_back(FilterGroup{kJitterdRootHandle, spec.bypass});
  for (const auto& leaf : spec.leaves) {
    if (!leaf.selectors.empty()) {
      out.push_back(FilterGroup{tree_class_id(leaf.minor), leaf.selectors});
    }
  }
  return out;
}

// A current group that can stay where it is: its filters are adjacent in prio order (nothing of
// another lane between them, as after an interrupted update) and carry these selectors.
struct CurrentGroup {
  std::uint16_t first_prio = 0;
  std::uint16_t last_prio = 0;
  std::vector<U32Selector> selectors;
  bool contiguous = true;
};

std::map<std::uint32_t, CurrentGroup> current_groups(const std::vector<TreeFilter>& filters) {
  std::map<std::uint32_t, CurrentGroup> out;
  std::uint32_t previous_classid = 0;
  for (const auto& filter : filters) {
    auto [it, fresh] = out.try_emplace(filter.classid);
    CurrentGroup& group = it->second;
    if (fresh) {
      group.first_prio = filter.prio;
    } else if (previous_classid != filter.classid) {
      group.contiguous = false;  // another lane's filter sits between two of this one's
    }
    group.last_prio = filter.prio;
    group.selectors.push_back(filter.selector);
    previous_classid = filter.classid;
  }
  return out;
}

// Indices (into `keys`) of a longest strictly increasing subsequence. O(n^2): n <= 4096 groups.
std::vector<std::size_t> longest_increasing(const std::vector<std::uint16_t>& keys) {
  const std::size_t n = keys.size();
  std::vector<std::size_t> length(n, 1);
  std::vector<std::size_t> previous(n, n);
  std::size_t best = n;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (keys[j] < keys[i] && length[j] + 1 > length[i]) {
        length[i] = length[j] + 1;
        previous[i] = j;
      }
    }
    if (best == n || length[i] > length[best]) best = i;
  }
  std::vector<std::size_t> out;
  for (std::size_t i = best; i != n; i = previous[i]) out.push_back(i);
  std::reverse(out.begin(), out.end());
  return out;
}

// Places the groups `run` at free prios strictly between `low` and `high`, in order, with up to
// kFilterPrioSlack free prios before each. Returns false (and places nothing) if they do not fit.
bool place_run(const std::vector<const FilterGroup*>& run, std::uint32_t low, std::uint32_t high,
               const std::set<std::uint16_t>& used, std::vector<TreeFilter>& placed) {
  if (run.empty()) return true;
  std::vector<std::uint16_t> free;
  for (std::uint32_t prio = low + 1; prio < high; ++prio) {
    if (!used.count(static_cast<std::uint16_t>(prio)))
      free.push_back(static_cast<std::uint16_t>(prio));
  }
  std::size_t needed = 0;
  for (const auto* group : run) needed += group->selectors.size();
  if (needed > free.size()) return false;
  const std::size_t slack =
      std::min<std::size_t>(kFilterPrioSlack, (free.size() - needed) / (run.size() + 1));
  std::size_t next = 0;
  for (const auto* group : run) {
    next += slack;
    for (const auto& selector : group->selectors) {
      placed.push_back(TreeFilter{free[next++], group->classid, selector});
    }
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Message builders

NlMsgPtr build_htb_root_message(int ifindex, std::uint16_t default_minor, int flags) {
  NetlinkMessage msg(RTM_NEWQDISC, flags, "htb qdisc");
  msg.append_tcmsg(ifindex, kJitterdRootHandle, TC_H_ROOT);
  msg.put_string(TCA_KIND, "htb");
  const NetlinkMessage::Nest options = msg.begin_nest(TCA_OPTIONS);
  tc_htb_glob glob{};
  glob.version = kHtbVersion;
  glob.rate2quantum = kHtbRate2Quantum;
  glob.defcls = default_minor;
  msg.put_value(TCA_HTB_INIT, glob);
  msg.put_value(TCA_HTB_DIRECT_QLEN, kHtbDirectQueue);
  msg.end_nest(options);
  return std::move(msg).release();
}

NlMsgPtr build_htb_class_message(int ifindex, std::uint32_t classid, int flags) {
  NetlinkMessage msg(RTM_NEWTCLASS, flags, "htb class");
  msg.append_tcmsg(ifindex, classid, kJitterdRootHandle);
  msg.put_string(TCA_KIND, "htb");
  const NetlinkMessage::Nest options = msg.begin_nest(TCA_OPTIONS);
  tc_htb_opt opt{};
  opt.rate.linklayer = TC_LINKLAYER_ETHERNET;
  opt.rate.rate = kernel_units::rate32(kUnthrottledRate);
  opt.ceil = opt.rate;
  opt.buffer = kernel_units::psched_ticks(kHtbBuffer);
  opt.cbuffer = opt.buffer;
  opt.quantum = kHtbQuantum;
  msg.put_value(TCA_HTB_PARMS, opt);
  if (kernel_units::needs_rate64(kUnthrottledRate)) {
    const std::uint64_t rate64 = kUnthrottledRate.value;
    msg.put_value(TCA_HTB_RATE64, rate64);
    msg.put_value(TCA_HTB_CEIL64, rate64);
  }
  msg.end_nest(options);
  return std::move(msg).release();
}

namespace {

// TCA_U32_SEL's payload: the selector, then its keys.
std::vector<std::byte> u32_selector_bytes(const U32Selector& selector) {
  // A selector without keys matches every packet of its protocol; u32 wants at least one key, and
  // {mask 0, value 0, offset 0} always matches (tc's `match u32 0 0`).
  std::vector<U32Key> keys = selector.keys;
  if (keys.empty()) keys.push_back(U32Key{});
  std::vector<std::byte> sel_bytes(sizeof(tc_u32_sel) + keys.size() * sizeof(tc_u32_key));
  // Zeroed with memset, not `{}`: the struct ends in a zero-length array (keys[0]) whose aggregate
  // initialisation clang reports as an extension (-Wzero-length-array, an error in the fuzz build).
  tc_u32_sel sel;
  std::memset(&sel, 0, sizeof sel);
  // TERMINAL: a match ends classification here; without it u32 would go on and could fall through.
  sel.flags = TC_U32_TERMINAL;
  sel.nkeys = static_cast<unsigned char>(keys.size());
  if (sel_bytes.data() == nullptr)
    std::abort();  // never: it holds the selector at least (tells GCC so)
  std::memcpy(sel_bytes.data(), &sel, sizeof sel);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    tc_u32_key key{};
    key.mask = keys[i].mask_be;
    key.val = keys[i].value_be & keys[i].mask_be;  // u32 compares (packet ^ val) & mask
    key.off = keys[i].offset;
    std::memcpy(sel_bytes.data() + sizeof sel + i * sizeof key, &key, sizeof key);
  }
  return sel_bytes;
}

// TCA_U32_ACT: one mirred action that redirects to `ifindex`'s egress.
void put_mirred_redirect(NetlinkMessage& msg, int ifindex) {
  const NetlinkMessage::Nest actions = msg.begin_nest(TCA_U32_ACT);
  const NetlinkMessage::Nest first =
      msg.begin_nest(1);  // actions run in the order of these numbers
  msg.put_string(TCA_ACT_KIND, "mirred");
  const NetlinkMessage::Nest act_options = msg.begin_nest(TCA_ACT_OPTIONS | NLA_F_NESTED);
  tc_mirred mirred{};
  // STOLEN: the packet now belongs to the IFB; it comes back into the stack after netem.
  mirred.action = TC_ACT_STOLEN;
  mirred.eaction = TCA_EGRESS_REDIR;
  mirred.ifindex = static_cast<std::uint32_t>(ifindex);
  msg.put_value(TCA_MIRRED_PARMS, mirred);
  msg.end_nest(act_options);
  msg.end_nest(first);
  msg.end_nest(actions);
}

}  // namespace

NlMsgPtr build_u32_filter_message(int ifindex, std::uint32_t parent, std::uint16_t prio,
                                  const U32Selector& selector, const U32Target& target) {
  NetlinkMessage msg(RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_EXCL, "u32 filter");
  msg.append_tcmsg(ifindex, 0, parent, filter_info(prio, selector.eth_protocol));
  msg.put_string(TCA_KIND, "u32");
  const NetlinkMessage::Nest options = msg.begin_nest(TCA_OPTIONS);
  const std::vector<std::byte> sel_bytes = u32_selector_bytes(selector);
  msg.put(TCA_U32_SEL, sel_bytes.data(), sel_bytes.size());
  if (target.classid) msg.put_value(TCA_U32_CLASSID, *target.classid);
  if (target.redirect_to_ifindex) put_mirred_redirect(msg, *target.redirect_to_ifindex);
  msg.end_nest(options);
  return std::move(msg).release();
}

// ---------------------------------------------------------------------------------------------
// Filters

std::vector<FilterInfo> dump_filters(RouteSocket& socket, const Interface& interface,
                                     std::uint32_t parent) {
  NetlinkMessage msg(RTM_GETTFILTER, 0, "filter dump");
  msg.append_tcmsg(interface.index, 0, parent);
  const std::string object = "dev " + interface.name + " parent " + format_handle(parent);
  std::vector<FilterInfo> out;
  socket.dump_parsed(msg.get(), "filter dump", object, RTM_NEWTFILTER, sizeof(tcmsg), TCA_MAX,
                     [&](const nlmsghdr& hdr, nlattr* const* tb) {
                       const auto* t = static_cast<const tcmsg*>(nlmsg_data(&hdr));
                       FilterInfo info;
                       info.parent = t->tcm_parent;
                       info.prio = static_cast<std::uint16_t>(TC_H_MAJ(t->tcm_info) >> 16);
                       info.protocol = ntohs(static_cast<std::uint16_t>(TC_H_MIN(t->tcm_info)));
                       info.handle = t->tcm_handle;
                       if (tb[TCA_KIND]) info.kind = nla_get_string(tb[TCA_KIND]);
                       out.push_back(std::move(info));
                     });
  return out;
}

void delete_filters(RouteSocket& socket, const Interface& interface, std::uint32_t parent,
                    std::uint16_t prio, std::uint16_t protocol) {
  NetlinkMessage msg(RTM_DELTFILTER, 0, "filter delete");
  msg.append_tcmsg(interface.index, 0, parent, filter_info(prio, protocol));
  // Naming the kind makes the kernel refuse if someone else's filter now holds that priority.
  msg.put_string(TCA_KIND, "u32");
  char object[96];
  std::snprintf(object, sizeof object, " parent %s prio %u protocol 0x%04x",
                format_handle(parent).c_str(), prio, protocol);
  socket.request(msg.get(), "filter remove", "dev " + interface.name + object);
}

// ---------------------------------------------------------------------------------------------
// Update planning

std::vector<TreeStep> plan_tree_update(const TreeState& current, const TreeSpec& wanted) {
  check_tree_spec(wanted);
  std::vector<TreeFilter> current_filters = current.filters;
  std::sort(current_filters.begin(), current_filters.end(),
            [](const TreeFilter& a, const TreeFilter& b) { return a.prio < b.prio; });
  std::set<std::uint16_t> used;
  for (const auto& filter : current_filters) used.insert(filter.prio);

  // Which groups stay at their prios: unchanged, contiguous, and in the wanted order.
  const std::vector<FilterGroup> groups = wanted_groups(wanted);
  const auto existing = current_groups(current_filters);
  std::vector<std::size_t> candidates;  // indices into groups
  std::vector<std::uint16_t> candidate_prios;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    auto it = existing.find(groups[i].classid);
    if (it != existing.end() && it->second.contiguous &&
        it->second.selectors == groups[i].selectors) {
      candidates.push_back(i);
      candidate_prios.push_back(it->second.first_prio);
    }
  }
  std::vector<bool> stays(groups.size(), false);
  for (std::size_t k : longest_increasing(candidate_prios)) stays[candidates[k]] = true;

  // Everything else goes into the gaps between the groups that stay, or, if a gap is too small,
  // every group is placed afresh at prios no current filter uses.
  std::vector<TreeFilter> added;
  bool fits = true;
  std::vector<const FilterGroup*> run;
  std::uint32_t low = 0;
  for (std::size_t i = 0; i <= groups.size() && fits; ++i) {
    if (i < groups.size() && !stays[i]) {
      run.push_back(&groups[i]);
      continue;
    }
    const std::uint32_t high =
        i < groups.size() ? existing.at(groups[i].classid).first_prio : 0x10000u;
    fits = place_run(run, low, high, used, added);
    run.clear();
    if (i < groups.size()) low = existing.at(groups[i].classid).last_prio;
  }
  if (!fits) {
    added.clear();
    std::fill(stays.begin(), stays.end(), false);
    for (const auto& group : groups) run.push_back(&group);
    if (!place_run(run, 0, 0x10000u, used, added)) {
      std::size_t needed = 0;
      for (const auto& group : groups) needed += group.selectors.size();
      throw std::invalid_argument("tree update: " + std::to_string(needed) +
                                  " filters do not fit next to the " + std::to_string(used.size()) +
                                  " installed ones (65535 prios, one filter each)");
    }
  }
  std::set<std::uint32_t> staying_classids;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (stays[i]) staying_classids.insert(groups[i].classid);
  }

  std::vector<TreeStep> steps;
  std::vector<std::pair<std::uint16_t, const NetemSpec*>> wanted_leaves;
  for (const auto& leaf : wanted.leaves) wanted_leaves.emplace_back(leaf.minor, &leaf.spec);
  if (wanted.unmatched) wanted_leaves.emplace_back(kDefaultClassMinor, &*wanted.unmatched);
  for (const auto& [minor, spec] : wanted_leaves) {
    if (!current.leaves.count(minor) && minor != kDefaultClassMinor) {
      steps.push_back(TreeStep{TreeStep::Kind::kAddLeaf, minor, *spec, {}});
    }
  }
  for (const auto& [minor, spec] : wanted_leaves) {
    auto it = current.leaves.find(minor);
    if (it != current.leaves.end() && it->second != *spec) {
      steps.push_back(TreeStep{TreeStep::Kind::kChangeLeaf, minor, *spec, {}});
    }
  }
  std::sort(added.begin(), added.end(),
            [](const TreeFilter& a, const TreeFilter& b) { return a.prio < b.prio; });
  for (const auto& filter : added) {
    steps.push_back(TreeStep{TreeStep::Kind::kAddFilter, 0, {}, filter});
  }
  // The default class takes what no filter matches, so it comes and goes between the two filter
  // phases, when exactly the packets that match neither the old nor the new filters fall to it:
  // earlier or later, a packet whose old (or new) filter is missing would land in it.
  const bool default_before = current.leaves.count(kDefaultClassMinor) != 0;
  if (wanted.unmatched && !default_before) {
    steps.push_back(TreeStep{TreeStep::Kind::kAddLeaf, kDefaultClassMinor, *wanted.unmatched, {}});
  }
  if (!wanted.unmatched && default_before) {
    steps.push_back(TreeStep{TreeStep::Kind::kDeleteLeaf, kDefaultClassMinor, {}, {}});
  }
  for (auto it = current_filters.rbegin(); it != current_filters.rend(); ++it) {
    if (!staying_classids.count(it->classid)) {
      steps.push_back(TreeStep{TreeStep::Kind::kDeleteFilter, 0, {}, *it});
    }
  }
  std::set<std::uint16_t> wanted_minors;
  for (const auto& entry : wanted_leaves) wanted_minors.insert(entry.first);
  for (const auto& [minor, spec] : current.leaves) {
    if (!wanted_minors.count(minor) && minor != kDefaultClassMinor) {
      steps.push_back(TreeStep{TreeStep::Kind::kDeleteLeaf, minor, {}, {}});
    }
  }
  return steps;
}

// ---------------------------------------------------------------------------------------------
// NetemTree

NetemTree::NetemTree(NetemEngine& engine, Interface interface)
    : engine_(&engine), interface_(std::move(interface)) {}

NetemTree::NetemTree(NetemTree&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      interface_(std::move(other.interface_)),
      state_(std::move(other.state_)) {}

NetemTree& NetemTree::operator=(NetemTree&& other) noexcept {
  if (this != &other) {
    remove_quietly();
    engine_ = std::exchange(other.engine_, nullptr);
    interface_ = std::move(other.interface_);
    state_ = std::move(other.state_);
  }
  return *this;
}

NetemTree::~NetemTree() {
  remove_quietly();
}

void NetemTree::remove_quietly() noexcept {
  if (!engine_) return;
  try {
    remove();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitterd: cleanup: %s\n", e.what());
  }
}

const NetemSpec* NetemTree::spec_of(std::uint16_t minor) const {
  auto it = state_.leaves.find(minor);
  return it == state_.leaves.end() ? nullptr : &it->second;
}

NetemTree NetemTree::install(NetemEngine& engine, const Interface& interface, const TreeSpec& spec,
                             const InstallOptions& options) {
  // Everything the kernel would refuse halfway is checked first (the plan validates).
  const std::vector<TreeStep> steps = plan_tree_update(TreeState{}, spec);

  const int flags = engine.root_install_flags(interface, options,
                                              "tree install (" + describe_tree(interface) + ")");

  // The default minor is always kDefaultClassMinor (see the header): while that class does not
  // exist, HTB sends unclassified packets directly, unshaped.
  NlMsgPtr root = build_htb_root_message(interface.index, kDefaultClassMinor, flags);
  try {
    engine.socket().request(root.get(), "tree install", describe_tree(interface));
  } catch (const NetlinkError& e) {
    throw with_missing_part_hint(e, "the HTB qdisc, the root of a tree of rule sets", "sch_htb");
  }
  // From here on the tree exists; the owner removes it if a later step fails. Classes and leaves
  // come before the filters, so no packet is classified to a class whose leaf is not there yet.
  NetemTree tree(engine, interface);
  tree.apply(steps);
  return tree;
}

void NetemTree::update(const TreeSpec& wanted) {
  if (!engine_) throw OwnershipError("tree update (" + describe_tree(interface_) + "): not owned");
  apply(plan_tree_update(state_, wanted));
}

void NetemTree::apply(const std::vector<TreeStep>& steps) {
  RouteSocket& socket = engine_->socket();
  const int ifindex = interface_.index;
  auto class_object = [&](std::uint16_t minor) {
    return "dev " + interface_.name + " classid " + format_handle(tree_class_id(minor));
  };
  auto filter_object = [&](const TreeFilter& filter) {
    return "dev " + interface_.name + " parent " + format_handle(kJitterdRootHandle) + " prio " +
           std::to_string(filter.prio) + " flowid " + format_handle(filter.classid);
  };
  auto delete_class = [&](std::uint16_t minor) {
    NetlinkMessage msg(RTM_DELTCLASS, 0, "class delete");
    msg.append_tcmsg(ifindex, tree_class_id(minor), kJitterdRootHandle);
    socket.request(msg.get(), "tree class remove", class_object(minor));
  };
  auto by_prio = [](const TreeFilter& a, const TreeFilter& b) { return a.prio < b.prio; };

  for (const auto& step : steps) {
    switch (step.kind) {
      case TreeStep::Kind::kAddLeaf: {
        NlMsgPtr cls =
            build_htb_class_message(ifindex, tree_class_id(step.minor), NLM_F_CREATE | NLM_F_EXCL);
        socket.request(cls.get(), "tree class install", class_object(step.minor));
        NlMsgPtr leaf =
            build_netem_message(ifindex, tree_leaf_handle(step.minor), tree_class_id(step.minor),
                                NLM_F_CREATE | NLM_F_EXCL, step.spec, NetemEncodePlan{});
        try {
          socket.request(leaf.get(), "netem install", describe_leaf(interface_, step.minor));
        } catch (const NetlinkError& e) {
          // No filter points at the class yet; take it away so the state stays "class = leaf".
          try {
            delete_class(step.minor);
          } catch (const std::exception& cleanup) {
            std::fprintf(stderr, "jitterd: cleanup: %s\n", cleanup.what());
          }
          rethrow_with_hint(e);
        }
        state_.leaves[step.minor] = step.spec;
        break;
      }
      case TreeStep::Kind::kChangeLeaf: {
        std::vector<PreparedChange> one;
        one.push_back(prepare_change(step.minor, step.spec));
        if (auto error = engine_->change(one).front()) throw *error;
        break;
      }
      case TreeStep::Kind::kAddFilter: {
        const TreeFilter& filter = step.filter;
        NlMsgPtr msg =
            build_u32_filter_message(ifindex, kJitterdRootHandle, filter.prio, filter.selector,
                                     U32Target{filter.classid, std::nullopt});
        try {
          socket.request(msg.get(), "tree filter install", filter_object(filter));
        } catch (const NetlinkError& e) {
          throw with_missing_part_hint(e, "the u32 classifier, which sorts packets into rule sets",
                                       "cls_u32");
        }
        auto& filters = state_.filters;
        filters.insert(std::upper_bound(filters.begin(), filters.end(), filter, by_prio), filter);
        break;
      }
      case TreeStep::Kind::kDeleteFilter: {
        delete_filters(socket, interface_, kJitterdRootHandle, step.filter.prio,
                       step.filter.selector.eth_protocol);
        auto& filters = state_.filters;
        filters.erase(std::remove(filters.begin(), filters.end(), step.filter), filters.end());
        break;
      }
      case TreeStep::Kind::kDeleteLeaf:
        delete_class(step.minor);
        state_.leaves.erase(step.minor);
        break;
    }
  }
}

void NetemTree::change(const std::map<std::uint16_t, NetemSpec>& leaves) {
  if (!engine_) throw OwnershipError("tree change (" + describe_tree(interface_) + "): not owned");
  std::vector<PreparedChange> batch;
  for (const auto& [minor, spec] : leaves) batch.push_back(prepare_change(minor, spec));
  for (auto& error : engine_->change(batch)) {
    if (error) throw *error;
  }
}

PreparedChange NetemTree::prepare_change(std::uint16_t minor, const NetemSpec& spec) {
  if (!engine_) throw OwnershipError("tree change (" + describe_tree(interface_) + "): not owned");
  auto leaf = state_.leaves.find(minor);
  if (leaf == state_.leaves.end()) {
    throw std::invalid_argument("tree change (" + describe_tree(interface_) + "): no leaf " +
                                std::to_string(minor));
  }
  check_spec(spec, "tree leaf " + std::to_string(minor));
  ChangePlan plan = plan_change(leaf->second, spec, /*tables_known=*/true);
  PreparedChange prepared;
  // Flags 0: change in place; the kernel refuses (ENOENT) if the leaf handle is gone.
  prepared.message = build_netem_message(interface_.index, tree_leaf_handle(minor),
                                         tree_class_id(minor), 0, plan.to_send, plan.encode);
  prepared.object = describe_leaf(interface_, minor);
  prepared.applied = [this, minor, sent = std::move(plan.to_send)]() mutable {
    state_.leaves.at(minor) = std::move(sent);
  };
  prepared.explain = with_duplication_hint;
  return prepared;
}

void NetemTree::remove() {
  if (!engine_) return;
  NetemEngine* engine = std::exchange(engine_, nullptr);
  NetlinkMessage msg(RTM_DELQDISC, 0, "tree remove");
  // Naming our handle: the kernel refuses if the root is no longer ours. Deleting the root destroys
  // its classes, their leaves and every filter attached to it.
  msg.append_tcmsg(interface_.index, kJitterdRootHandle, TC_H_ROOT);
  engine->socket().request(msg.get(), "tree remove", describe_tree(interface_));
  state_ = TreeState{};
}

}  // namespace shaper
