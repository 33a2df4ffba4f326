#include "shaper/ifb.hpp"

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>
#include <set>
#include <utility>

#include "shaper/errors.hpp"
#include "shaper/netlink_message.hpp"
#include "shaper/tc_tree.hpp"

namespace shaper {

namespace {

struct RedirectFilter {
  std::uint16_t prio;
  std::uint16_t protocol;
};
// IPv4 and IPv6 only: ARP and other non-IP traffic stay unshaped.
constexpr RedirectFilter kRedirectFilters[] = {{kIngressPrioIpv4, ETH_P_IP},
                                               {kIngressPrioIpv6, ETH_P_IPV6}};

bool is_our_filter(const FilterInfo& f) {
  return f.kind == "u32" &&
         (f.prio == kIngressPrioNdPass || f.prio == kIngressPrioIpv4 || f.prio == kIngressPrioIpv6);
}

bool is_our_ifb_name(const std::string& name) {
  const std::string prefix = kIfbNamePrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

// The interface's ingress hook: the `ingress` or `clsact` qdisc (only one can exist), if any.
std::optional<QdiscInfo> ingress_hook(NetemEngine& engine, const Interface& interface) {
  for (auto& q : engine.qdiscs(interface)) {
    if (q.parent == TC_H_INGRESS) return std::move(q);
  }
  return std::nullopt;
}

std::uint32_t filter_parent_of(const QdiscInfo& hook) {
  return hook.kind == "clsact" ? kClsactIngressParent : kIngressQdiscHandle;
}

void delete_ingress_qdisc(RouteSocket& socket, const Interface& interface) {
  NetlinkMessage msg(RTM_DELQDISC, 0, "ingress remove");
  msg.append_tcmsg(interface.index, kIngressQdiscHandle, TC_H_INGRESS);
  socket.request(msg.get(), "ingress qdisc remove", "dev " + interface.name + " handle ffff:");
}

void delete_link(RouteSocket& socket, const Interface& link) {
  NlMsgPtr msg = build_link_delete_message(link.index);
  socket.request(msg.get(), "ifb remove", "dev " + link.name);
}

}  // namespace

std::string ifb_name_for(const Interface& interface) {
  return kIfbNamePrefix + std::to_string(interface.index);
}

// ---------------------------------------------------------------------------------------------
// Message builders

NlMsgPtr build_ifb_create_message(const std::string& name) {
  NetlinkMessage msg(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, "ifb create");
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  msg.append(ifi, "ifinfomsg");
  msg.put_string(IFLA_IFNAME, name);
  const NetlinkMessage::Nest linkinfo = msg.begin_nest(IFLA_LINKINFO);
  msg.put_string(IFLA_INFO_KIND, "ifb");
  msg.end_nest(linkinfo);
  return std::move(msg).release();
}

NlMsgPtr build_link_delete_message(int ifindex) {
  NetlinkMessage msg(RTM_DELLINK, 0, "link delete");
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = ifindex;
  msg.append(ifi, "ifinfomsg");
  return std::move(msg).release();
}

NlMsgPtr build_ingress_qdisc_message(int ifindex) {
  NetlinkMessage msg(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL, "ingress qdisc");
  msg.append_tcmsg(ifindex, kIngressQdiscHandle, TC_H_INGRESS);
  msg.put_string(TCA_KIND, "ingress");
  return std::move(msg).release();
}

std::vector<U32Selector> neighbour_discovery_selectors() {
  // IPv6 header word at offset 4: payload length (16 bits), next header (8), hop limit (8).
  const U32Key icmpv6{htonl(0x0000ff00), htonl(58 << 8), 4};
  // The ICMPv6 type is the first byte after the 40-byte IPv6 header. Types 133 (router
  // solicitation) to 137 (redirect) in aligned blocks: 133, 134-135, 136-137.
  auto type_block = [](std::uint32_t first, std::uint32_t mask) {
    return U32Key{htonl(mask << 24), htonl(first << 24), 40};
  };
  return {U32Selector{ETH_P_IPV6, {icmpv6, type_block(133, 0xff)}},
          U32Selector{ETH_P_IPV6, {icmpv6, type_block(134, 0xfe)}},
          U32Selector{ETH_P_IPV6, {icmpv6, type_block(136, 0xfe)}}};
}

std::vector<LinkInfo> dump_links(RouteSocket& socket) {
  NetlinkMessage msg(RTM_GETLINK, 0, "link dump");
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  msg.append(ifi, "ifinfomsg");
  std::vector<LinkInfo> out;
  socket.dump_parsed(
      msg.get(), "link dump", "all devices", RTM_NEWLINK, sizeof(ifinfomsg), IFLA_MAX,
      [&](const nlmsghdr& hdr, nlattr* const* tb) {
        const auto* info = static_cast<const ifinfomsg*>(nlmsg_data(&hdr));
        if (!tb[IFLA_IFNAME]) {
          throw NetlinkError("link dump", "ifindex " + std::to_string(info->ifi_index), EPROTO,
                             "RTM_NEWLINK without IFLA_IFNAME");
        }
        LinkInfo link{Interface{info->ifi_index, nla_get_string(tb[IFLA_IFNAME])}, {}};
        if (tb[IFLA_LINK]) {
          const int peer = static_cast<int>(nla_get_u32(tb[IFLA_LINK]));
          if (peer != info->ifi_index) link.link_index = peer;
        }
        link.peer_elsewhere = tb[IFLA_LINK_NETNSID] != nullptr;
        if (tb[IFLA_LINKINFO]) {
          nlattr* li[IFLA_INFO_MAX + 1] = {};
          if (nla_parse_nested(li, IFLA_INFO_MAX, tb[IFLA_LINKINFO], nullptr) == 0 &&
              li[IFLA_INFO_KIND]) {
            link.kind = nla_get_string(li[IFLA_INFO_KIND]);
          }
        }
        out.push_back(std::move(link));
      });
  return out;
}

// ---------------------------------------------------------------------------------------------
// IngressRedirect

IngressRedirect::IngressRedirect(NetemEngine& engine, Interface interface)
    : engine_(&engine), interface_(std::move(interface)) {}

IngressRedirect::IngressRedirect(IngressRedirect&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      interface_(std::move(other.interface_)),
      ifb_(std::move(other.ifb_)),
      filter_parent_(other.filter_parent_),
      created_ingress_(other.created_ingress_),
      ifb_created_(other.ifb_created_),
      filters_(std::move(other.filters_)) {}

IngressRedirect& IngressRedirect::operator=(IngressRedirect&& other) noexcept {
  if (this != &other) {
    remove_quietly();
    engine_ = std::exchange(other.engine_, nullptr);
    interface_ = std::move(other.interface_);
    ifb_ = std::move(other.ifb_);
    filter_parent_ = other.filter_parent_;
    created_ingress_ = other.created_ingress_;
    ifb_created_ = other.ifb_created_;
    filters_ = std::move(other.filters_);
  }
  return *this;
}

IngressRedirect::~IngressRedirect() {
  remove_quietly();
}

void IngressRedirect::remove_quietly() noexcept {
  if (!engine_) return;
  try {
    remove();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitterd: cleanup: %s\n", e.what());
  }
}

void IngressRedirect::interface_gone() noexcept {
  filters_.clear();
  created_ingress_ = false;
  remove_quietly();
}

IngressRedirect IngressRedirect::install(NetemEngine& engine, const Interface& interface) {
  RouteSocket& socket = engine.socket();
  const std::string name = ifb_name_for(interface);
  for (const auto& link : dump_links(socket)) {
    if (link.interface.name == name) {
      throw OwnershipError(
          "ingress install (dev " + interface.name + "): device " + name +
          " already exists, left by an earlier jitterd; remove the leftovers first");
    }
  }
  const auto hook = ingress_hook(engine, interface);
  if (hook) {
    for (const auto& f : dump_filters(socket, interface, filter_parent_of(*hook))) {
      if (is_our_filter(f)) {
        throw OwnershipError(
            "ingress install (dev " + interface.name +
            "): jitterd's redirect filters "
            "are already there, left by an earlier jitterd; remove the leftovers first");
      }
    }
  }

  // From here on the owner undoes whatever was done if a step fails.
  IngressRedirect redirect(engine, interface);
  NlMsgPtr create = build_ifb_create_message(name);
  try {
    socket.request(create.get(), "ifb install", "dev " + name);
  } catch (const NetlinkError& e) {
    throw with_missing_part_hint(e, "IFB devices, which ingress shaping goes through", "ifb");
  }
  redirect.ifb_created_ = true;
  redirect.ifb_ = engine.resolve(name);

  if (hook) {
    redirect.filter_parent_ = filter_parent_of(*hook);
  } else {
    NlMsgPtr ingress = build_ingress_qdisc_message(interface.index);
    try {
      socket.request(ingress.get(), "ingress qdisc install",
                     "dev " + interface.name + " handle ffff:");
    } catch (const NetlinkError& e) {
      throw with_missing_part_hint(e, "the ingress qdisc, where arrivals are redirected",
                                   "sch_ingress");
    }
    redirect.created_ingress_ = true;
    redirect.filter_parent_ = kIngressQdiscHandle;
  }

  auto add_filter = [&](std::uint16_t prio, const U32Selector& selector, const U32Target& target) {
    NlMsgPtr msg =
        build_u32_filter_message(interface.index, redirect.filter_parent_, prio, selector, target);
    char object[96];
    std::snprintf(object, sizeof object, " parent %s prio 0x%x",
                  format_handle(redirect.filter_parent_).c_str(), prio);
    try {
      socket.request(msg.get(), "ingress filter install", "dev " + interface.name + object);
    } catch (const NetlinkError& e) {
      throw with_missing_part_hint(
          e, "the u32 classifier or the mirred action, which redirect arrivals to the IFB",
          "cls_u32 act_mirred");
    }
    const std::pair<std::uint16_t, std::uint16_t> instance{prio, selector.eth_protocol};
    if (std::find(redirect.filters_.begin(), redirect.filters_.end(), instance) ==
        redirect.filters_.end()) {
      redirect.filters_.push_back(instance);
    }
  };
  // The pass filters first: a matching filter with neither class nor action lets the packet through
  // the ingress hook untouched, and no later (higher-numbered) filter sees it.
  for (const auto& selector : neighbour_discovery_selectors())
    add_filter(kIngressPrioNdPass, selector, {});
  for (const auto& filter : kRedirectFilters) {
    add_filter(filter.prio, U32Selector{filter.protocol, {}},
               U32Target{std::nullopt, redirect.ifb_.index});
  }
  return redirect;
}

void IngressRedirect::remove() {
  if (!engine_) return;
  NetemEngine* engine = std::exchange(engine_, nullptr);
  RouteSocket& socket = engine->socket();
  // Every step is tried even if one before it failed (the interface may be gone, taking its filters
  // and ingress qdisc along); the first failure is rethrown at the end.
  std::exception_ptr first_failure;
  auto attempt = [&](auto&& step) {
    try {
      step();
    } catch (const std::exception&) {
      if (!first_failure) first_failure = std::current_exception();
    }
  };
  for (auto it = filters_.rbegin(); it != filters_.rend(); ++it) {
    attempt([&] { delete_filters(socket, interface_, filter_parent_, it->first, it->second); });
  }
  if (created_ingress_) attempt([&] { delete_ingress_qdisc(socket, interface_); });
  if (ifb_created_) attempt([&] { delete_link(socket, ifb_); });
  if (first_failure) std::rethrow_exception(first_failure);
}

bool IngressRedirect::remove_leftover(NetemEngine& engine, const Interface& interface) {
  RouteSocket& socket = engine.socket();
  bool removed_any = false;
  std::optional<LinkInfo> ifb;
  for (auto& link : dump_links(socket)) {
    if (link.interface.name == ifb_name_for(interface) && link.kind == "ifb") ifb = std::move(link);
  }
  if (auto hook = ingress_hook(engine, interface)) {
    const std::uint32_t parent = filter_parent_of(*hook);
    std::set<std::pair<std::uint16_t, std::uint16_t>>
        ours;  // (prio, protocol): one u32 instance each
    for (const auto& f : dump_filters(socket, interface, parent)) {
      if (is_our_filter(f)) ours.insert({f.prio, f.protocol});
    }
    for (const auto& [prio, protocol] : ours) {
      delete_filters(socket, interface, parent, prio, protocol);
      removed_any = true;
    }
    // An empty `ingress` qdisc is ours when our filters or our IFB were there (a crash between
    // adding it and adding the filters leaves only the IFB). Never a clsact: others build on it.
    if (hook->kind == "ingress" && (removed_any || ifb) &&
        dump_filters(socket, interface, parent).empty()) {
      delete_ingress_qdisc(socket, interface);
      removed_any = true;
    }
  }
  if (ifb) {
    delete_link(socket, ifb->interface);
    removed_any = true;
  }
  return removed_any;
}

std::vector<Interface> IngressRedirect::leftover_ifbs(NetemEngine& engine) {
  std::vector<Interface> out;
  for (auto& link : dump_links(engine.socket())) {
    if (link.kind == "ifb" && is_our_ifb_name(link.interface.name))
      out.push_back(std::move(link.interface));
  }
  return out;
}

void IngressRedirect::remove_ifb(NetemEngine& engine, const Interface& ifb) {
  for (const auto& link : dump_links(engine.socket())) {
    if (link.interface.index == ifb.index && link.kind == "ifb" &&
        is_our_ifb_name(link.interface.name)) {
      delete_link(engine.socket(), link.interface);
      return;
    }
  }
  throw OwnershipError("ifb remove (dev " + ifb.name +
                       "): not an IFB of jitterd's (kind ifb, named " + kIfbNamePrefix +
                       "<ifindex>)");
}

}  // namespace shaper
