#pragma once
// Ingress shaping, owned: an IFB device for one interface, the interface's ingress hook (an
// `ingress` qdisc we add, or an existing clsact's), and two u32 filters that redirect every IPv4
// and IPv6 packet arriving on the interface to the IFB (ARP and everything else stay unshaped). The
// caller shapes the IFB's egress like any interface (NetemEngine::install or NetemTree::install on
// ifb()).
//
// Recognisable after a crash without any state file:
//   IFB       "jdifb<ifindex of the interface>"   (kind ifb; 5 + at most 10 digits = 15 characters)
//   filters   u32 on the ingress hook: prio 0x1a7d (IPv6 ND pass), 0x1a7e (IPv4 redirect),
//             0x1a7f (IPv6 redirect); one protocol per priority, as the kernel requires
// The ND pass filter assumes no IPv6 extension header before ICMPv6 (u32 offsets are fixed), which
// is how ND packets are sent (RFC 4861 forbids nothing there, but no stack adds one).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shaper/netem_engine.hpp"
#include "shaper/netlink.hpp"
#include "shaper/u32_match.hpp"

namespace shaper {

inline constexpr std::uint16_t kIngressPrioNdPass = 0x1a7d;
inline constexpr std::uint16_t kIngressPrioIpv4 = 0x1a7e;
inline constexpr std::uint16_t kIngressPrioIpv6 = 0x1a7f;
inline constexpr const char* kIfbNamePrefix = "jdifb";

// The ingress qdisc's handle ffff: and the clsact ingress hook ffff:fff2, as filter parents.
inline constexpr std::uint32_t kIngressQdiscHandle = 0xffff0000;
inline constexpr std::uint32_t kClsactIngressParent = 0xfffffff2;

std::string ifb_name_for(const Interface& interface);

class IngressRedirect {
 public:
  // Creates the IFB (up), the ingress qdisc if the interface has neither ingress nor clsact, and
  // the redirect filters. Refuses (OwnershipError) when leftovers of an earlier jitterd are there
  // (call remove_leftover first). On failure, removes what it created, in reverse order.
  static IngressRedirect install(NetemEngine& engine, const Interface& interface);

  IngressRedirect(IngressRedirect&& other) noexcept;
  IngressRedirect& operator=(IngressRedirect&& other) noexcept;
  IngressRedirect(const IngressRedirect&) = delete;
  IngressRedirect& operator=(const IngressRedirect&) = delete;
  ~IngressRedirect();

  const Interface& interface() const { return interface_; }
  Interface ifb() const { return ifb_; }
  bool created_ingress_qdisc() const { return created_ingress_; }
  bool owns() const { return engine_ != nullptr; }

  // Filters first (a redirect to a deleted device drops packets), then the ingress qdisc if we
  // created it, then the IFB (which takes any qdisc on it along). Throws on the first failure.
  void remove();
  void release() { engine_ = nullptr; }
  // The interface is gone, and its filters and ingress hook with it; the IFB, a device of its own,
  // is not: deletes it (a failure is written to stderr, as the destructor does) and owns nothing
  // after.
  void interface_gone() noexcept;

  // Crash recovery for one interface: removes our redirect filters (by priority and kind), an
  // `ingress` qdisc left with no filter at all (never a clsact), and the IFB named for the
  // interface. True if anything was removed.
  static bool remove_leftover(NetemEngine& engine, const Interface& interface);
  // Every IFB in this namespace named like ours, including those whose interface is gone.
  static std::vector<Interface> leftover_ifbs(NetemEngine& engine);
  // Deletes such an IFB; refuses (OwnershipError) a device that is not an IFB named like ours.
  static void remove_ifb(NetemEngine& engine, const Interface& ifb);

 private:
  IngressRedirect(NetemEngine& engine, Interface interface);
  void remove_quietly() noexcept;

  NetemEngine* engine_;
  Interface interface_;
  Interface ifb_;
  std::uint32_t filter_parent_ = kIngressQdiscHandle;
  bool created_ingress_ = false;
  bool ifb_created_ = false;
  // (prio, protocol) of every u32 instance installed, in order; remove() deletes them in reverse.
  std::vector<std::pair<std::uint16_t, std::uint16_t>> filters_;
};

struct LinkInfo {
  Interface interface;
  std::string kind;  // IFLA_INFO_KIND: "ifb", "veth"...; empty for plain devices
  // IFLA_LINK: the ifindex of the device this one is bound to (a veth's peer), in the peer's
  // namespace; 0 when there is none or it is the device itself.
  int link_index = 0;
  // IFLA_LINK_NETNSID present: the peer is in another network namespace.
  bool peer_elsewhere = false;
};
std::vector<LinkInfo> dump_links(RouteSocket& socket);

// --- message builders (pure)
// ----------------------------------------------------------------------

// RTM_NEWLINK (CREATE|EXCL) ifinfomsg{flags = change = IFF_UP}, IFLA_IFNAME, IFLA_LINKINFO{
// IFLA_INFO_KIND "ifb"}: created and up in one request (the kernel unregisters it if bringing it up
// fails).
NlMsgPtr build_ifb_create_message(const std::string& name);
NlMsgPtr build_link_delete_message(int ifindex);
// RTM_NEWQDISC (CREATE|EXCL) kind "ingress", parent TC_H_INGRESS, handle ffff:, no options.
NlMsgPtr build_ingress_qdisc_message(int ifindex);

// The ND pass selectors: IPv6, next header 58 (ICMPv6), ICMPv6 type 133-137 in aligned blocks.
std::vector<U32Selector> neighbour_discovery_selectors();

}  // namespace shaper
