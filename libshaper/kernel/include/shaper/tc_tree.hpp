#pragma once
// A classful netem tree on one device, owned: an HTB root (handle 1a7e:) that never throttles, one
// class plus netem leaf per profile, and u32 filters that send each packet to exactly one leaf, or
// past all of them (bypass, unmatched). Plus the message builders and the filter dump it needs,
// kept pure so the unit tests can check their bytes.
//
// Handles (none can collide with each other, with the root 1a7e:, with ingress ffff: or with the
// kernel's automatic 8000:-ffff: range):
//   root qdisc  htb    1a7e:                   kJitterdRootHandle
//   class              1a7e:N                  N = leaf minor 1..0xfff; the default class 1a7e:1000
//   leaf qdisc  netem  (0x2000 + N):           2001:..2fff:; the default class's 3000:
//   filters     u32    parent 1a7e:, one u32 instance (one protocol, one selector) per prio
//
// Filter priorities. The kernel tries filters by ascending prio and the first match wins, so the
// prios must keep "bypass first, then the leaves in TreeSpec order" after any sequence of updates.
// The filters form groups: the bypass group (classid 1a7e:0, sent directly by HTB), then one group
// per leaf, in spec order; a group's filters have consecutive free prios. Groups are laid out with
// up to kFilterPrioSlack free prios before each (prios 0x100, 0x200.. on a fresh tree), so a group
// can later be inserted between two others without moving them. An update keeps in place the
// largest set of groups that are unchanged (same selectors, contiguous) and still in order (longest
// increasing subsequence of their prios), and places every other group at free prios in the gaps
// between the kept ones; a gap without room makes it place every group afresh, at prios no current
// filter uses. New filters never reuse a prio in use (each prio is one u32 instance, whose
// protocol is fixed), so an update needs as many free prios as it adds filters.
//
// Update order (plan_tree_update): classes and leaves of new minors first, then in-place leaf
// changes, then new filters by ascending prio, then the default class added or deleted, then old
// filters by descending prio, then the classes of removed minors. Adding ascending and deleting
// descending means that at every instant each packet is classified as the old tree or as the new
// tree would classify it, never a third way: a packet whose lane is unchanged never changes lane.
// No filter ever points at a missing class, and HTB refuses to delete a class a filter still points
// at.
//
// Unmatched traffic: the HTB default minor (tc_htb_glob.defcls) is always kDefaultClassMinor,
// whether or not that class exists. HTB sends what no filter classifies to the default class if it
// exists and directly (unshaped) otherwise, so adding or removing TreeSpec::unmatched is creating
// or deleting class 1a7e:1000. It is added or deleted between the two filter phases: a packet that
// matches no filter then is one that neither tree gives to a filter. (When it is added, HTB gives
// the class a pfifo until the netem leaf replaces it: unmatched packets of that instant pass
// unshaped, and the few queued in the pfifo are dropped by the graft. Only the unmatched lane,
// which is the one changing, sees this.) HTB has no qdisc change operation (htb_qdisc_ops has no
// .change; RTM_NEWQDISC without CREATE gets EINVAL "Change operation not supported by specified
// qdisc", see the kernel test), so defcls could not be moved after install.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shaper/netem_engine.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/netlink.hpp"
#include "shaper/u32_match.hpp"

namespace shaper {

inline constexpr std::uint16_t kMaxLeafMinor = 0xfff;
// The class unmatched traffic goes to when TreeSpec::unmatched is set; above every leaf minor.
inline constexpr std::uint16_t kDefaultClassMinor = 0x1000;
// Leaf netem majors are this plus the class minor: 2001:..3000:, far from 1a7e:, ffff: and 8000:+.
inline constexpr std::uint32_t kLeafHandleMajorBase = 0x2000;
// Free prios left before each filter group when there is room (see "Filter priorities" above):
// 255 lets 255 single-filter groups be inserted between two neighbours before a re-layout, and
// still fits 255 groups in the 65535 prios.
inline constexpr std::uint16_t kFilterPrioSlack = 0xff;

// HTB only routes; netem does every impairment. This rate (8 Tbit/s) is above any NIC, so no class
// ever runs out of tokens; the 100 ms buffer lets even a burst of GSO packets through at "line
// rate".
inline constexpr BytesPerSecond kUnthrottledRate{1'000'000'000'000};
inline constexpr Nanoseconds kHtbBuffer = std::chrono::milliseconds(100);
// A fixed DRR quantum: HTB would derive rate/rate2quantum, far above its 200000-byte cap, and warn
// in the kernel log for every class. Sharing between classes never happens (no class is ever
// limited).
inline constexpr std::uint32_t kHtbQuantum = 200000;
// HTB's direct queue (packets it sends unclassified or to 1a7e:0) defaults to the device's
// tx_queue_len, which is 32 on an IFB: too short for a burst of unshaped traffic.
inline constexpr std::uint32_t kHtbDirectQueue = 1000;

constexpr std::uint32_t tree_class_id(std::uint16_t minor) {
  return kJitterdRootHandle | minor;
}
constexpr std::uint32_t tree_leaf_handle(std::uint16_t minor) {
  return (kLeafHandleMajorBase + minor) << 16;
}

struct TreeLeaf {
  std::uint16_t minor = 0;  // 1..kMaxLeafMinor, unique in the tree
  NetemSpec spec;
  std::vector<U32Selector> selectors;  // any of them sends a packet here
};

struct TreeSpec {
  std::vector<TreeLeaf> leaves;     // earlier leaves win when selectors overlap
  std::vector<U32Selector> bypass;  // never shaped, whatever leaf would match too
  // nullopt: traffic that matches no leaf passes unshaped. A value: it gets a class and leaf of its
  // own (minor kDefaultClassMinor).
  std::optional<NetemSpec> unmatched;
};

// --- updates (pure planning) ---------------------------------------------------------------------

// One installed u32 filter of a tree: the only filter at its prio.
struct TreeFilter {
  std::uint16_t prio = 0;
  std::uint32_t classid = 0;  // tree_class_id(minor), or kJitterdRootHandle for a bypass
  U32Selector selector;
  friend bool operator==(const TreeFilter&, const TreeFilter&) = default;
};

// What a tree holds in the kernel, as NetemTree records it after every request that succeeded.
struct TreeState {
  // Class + netem leaf, by minor (kDefaultClassMinor too).
  std::map<std::uint16_t, NetemSpec> leaves;
  std::vector<TreeFilter> filters;  // ascending prio
};

struct TreeStep {
  enum class Kind {
    kAddLeaf,       // class tree_class_id(minor), then its netem leaf with `spec`
    kChangeLeaf,    // netem leaf of `minor` changed in place to `spec`
    kAddFilter,     // `filter`
    kDeleteFilter,  // `filter` (its prio and protocol)
    kDeleteLeaf,    // class tree_class_id(minor); the kernel deletes its leaf with it
  };
  Kind kind;
  std::uint16_t minor = 0;  // leaf steps
  NetemSpec spec;           // kAddLeaf, kChangeLeaf
  TreeFilter filter;        // filter steps
};

// The requests that move `current` to `wanted`, in the order they must be sent (see the header
// comment): add leaves, change leaves, add filters ascending, delete filters descending, delete
// leaves. Pure. Throws std::invalid_argument if `wanted` is invalid (minors, specs, selectors) or
// if there are not enough free prios for the filters it adds.
std::vector<TreeStep> plan_tree_update(const TreeState& current, const TreeSpec& wanted);

// An installed tree, owned: removed (one RTM_DELQDISC of the root takes classes, leaves and filters
// with it) when the owner is destroyed, unless release() was called. Move-only.
// Not supported: adopting a tree left by a crashed process (NetemEngine::remove_if_ours removes
// it).
class NetemTree {
 public:
  // Validates every spec (std::invalid_argument, like NetemEngine::install) and the minors, checks
  // the root is the kernel default (or someone else's and options.force), then builds the tree. If
  // any step fails, whatever was built is removed before the error is rethrown.
  static NetemTree install(NetemEngine& engine, const Interface& interface, const TreeSpec& spec,
                           const InstallOptions& options = {});

  NetemTree(NetemTree&& other) noexcept;
  NetemTree& operator=(NetemTree&& other) noexcept;
  NetemTree(const NetemTree&) = delete;
  NetemTree& operator=(const NetemTree&) = delete;
  ~NetemTree();

  // Changes the named leaves in place, one RTM_NEWQDISC without CREATE each (tables only when they
  // changed), sent as one batch (NetemEngine::change): every packet goes through exactly one leaf,
  // the old or the new. All minors and specs are checked before anything is sent; if the kernel
  // refuses one leaf, the others keep their new spec (spec_of says which is in force) and the first
  // refusal is thrown.
  void change(const std::map<std::uint16_t, NetemSpec>& leaves);

  // One leaf's change in place, checked (std::invalid_argument) and built but not sent, for a batch
  // of changes on many qdiscs (NetemEngine::change); the leaf takes `spec` when the kernel ACKs it.
  PreparedChange prepare_change(std::uint16_t minor, const NetemSpec& spec);

  // Moves the tree to `wanted` in place (plan_tree_update says which requests, in which order):
  // leaves in both keep their class and netem leaf (spec changed in place if it differs) and their
  // filters unless their selectors changed or they moved in the order; new leaves are built before
  // any filter points at them; removed leaves lose their filters before their class. A packet
  // whose lane (bypass, leaf minor, unmatched) is the same in both trees is shaped by that lane
  // throughout. Everything is validated before anything is sent (std::invalid_argument).
  // If the kernel refuses a request midway, the update stops there and rethrows: every filter in
  // the kernel then points at an existing class, each packet is classified as by the old or by the
  // new tree, and state() says exactly what is installed, so another update() (for instance back
  // to the old spec) or remove() works. A new leaf whose netem leaf was refused has its class
  // deleted again before the rethrow.
  void update(const TreeSpec& wanted);

  // What is installed, request by request (for updates, diagnostics and tests).
  const TreeState& state() const { return state_; }

  void remove();
  void release() { engine_ = nullptr; }

  const Interface& interface() const { return interface_; }
  bool owns() const { return engine_ != nullptr; }
  // The spec in force on a leaf (kDefaultClassMinor for the unmatched class); nullptr if no such
  // leaf.
  const NetemSpec* spec_of(std::uint16_t minor) const;

 private:
  NetemTree(NetemEngine& engine, Interface interface);
  void remove_quietly() noexcept;
  void apply(const std::vector<TreeStep>& steps);

  NetemEngine* engine_;
  Interface interface_;
  TreeState state_;
};

// --- filters ------------------------------------------------------------------------------------

struct FilterInfo {
  std::uint32_t parent = 0;
  std::uint16_t prio = 0;
  std::uint16_t protocol = 0;  // host order (ETH_P_IP...)
  std::uint32_t handle = 0;
  std::string kind;
};

// Every filter message the kernel dumps for the block of qdisc/class `parent` on `interface` (u32
// dumps one message per hash table and per rule).
std::vector<FilterInfo> dump_filters(RouteSocket& socket, const Interface& interface,
                                     std::uint32_t parent);
// Deletes every filter at (parent, prio, protocol): the whole u32 instance.
void delete_filters(RouteSocket& socket, const Interface& interface, std::uint32_t parent,
                    std::uint16_t prio, std::uint16_t protocol);

// --- message builders (pure: no socket)
// -----------------------------------------------------------

// RTM_NEWQDISC htb at the root: TCA_OPTIONS{ TCA_HTB_INIT{version 3, rate2quantum 10, defcls},
// TCA_HTB_DIRECT_QLEN }. `flags` as for build_netem_message.
NlMsgPtr build_htb_root_message(int ifindex, std::uint16_t default_minor, int flags);
// RTM_NEWTCLASS of an unthrottled class under the root: TCA_OPTIONS{ TCA_HTB_PARMS, TCA_HTB_RATE64,
// TCA_HTB_CEIL64 }.
NlMsgPtr build_htb_class_message(int ifindex, std::uint32_t classid, int flags);

// What a u32 filter does with a matching packet.
struct U32Target {
  std::optional<std::uint32_t> classid;    // TCA_U32_CLASSID
  std::optional<int> redirect_to_ifindex;  // mirred egress redirect, STOLEN
};
// RTM_NEWTFILTER (CREATE|EXCL) kind u32 on `parent`, tcm_info = prio<<16 | htons(protocol):
// TCA_OPTIONS{ TCA_U32_SEL (TERMINAL + keys; one all-zero key when the selector has none),
// [TCA_U32_CLASSID], [TCA_U32_ACT{ 1{ KIND "mirred", OPTIONS{ MIRRED_PARMS } } }] }.
NlMsgPtr build_u32_filter_message(int ifindex, std::uint32_t parent, std::uint16_t prio,
                                  const U32Selector& selector, const U32Target& target);

}  // namespace shaper
