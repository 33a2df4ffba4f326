#include "shaper/route_facts.hpp"

#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shaper/errors.hpp"
#include "shaper/netlink_message.hpp"

namespace shaper {

namespace {

constexpr const char* kOperation = "route dump";
constexpr const char* kObject = "default routes";

// The nexthops of an RTA_MULTIPATH attribute: a packed list of struct rtnexthop, each followed by
// its own attributes and aligned to RTNH_ALIGNTO (the RTNH_NEXT macros, without their casts).
void add_multipath_interfaces(const nlattr* multipath, std::vector<int>& out) {
  const auto* p = static_cast<const std::byte*>(nla_data(multipath));
  std::size_t left = static_cast<std::size_t>(nla_len(multipath));
  while (left >= sizeof(rtnexthop)) {
    rtnexthop nh;
    std::memcpy(&nh, p, sizeof nh);
    if (nh.rtnh_len < sizeof(rtnexthop) || nh.rtnh_len > left) {
      throw NetlinkError(kOperation, kObject, EPROTO, "malformed RTA_MULTIPATH nexthop");
    }
    out.push_back(nh.rtnh_ifindex);
    const std::size_t step = std::min<std::size_t>(RTNH_ALIGN(nh.rtnh_len), left);
    p += step;
    left -= step;
  }
}

}  // namespace

std::vector<int> default_route_interfaces(RouteSocket& socket) {
  NetlinkMessage msg(RTM_GETROUTE, 0, kOperation);
  rtmsg rtm{};
  rtm.rtm_family = AF_UNSPEC;  // IPv4 and IPv6 (and other families, skipped below) in one dump
  msg.append(rtm, "rtmsg");
  std::vector<int> out;
  socket.dump(msg.get(), kOperation, kObject, [&](const nlmsghdr& hdr) {
    if (hdr.nlmsg_type != RTM_NEWROUTE) return;
    const auto* r = static_cast<const rtmsg*>(nlmsg_data(&hdr));
    if (r->rtm_family != AF_INET && r->rtm_family != AF_INET6) return;
    if (r->rtm_dst_len != 0 || r->rtm_type != RTN_UNICAST) return;
    nlattr* tb[RTA_MAX + 1] = {};
    if (nlmsg_parse(const_cast<nlmsghdr*>(&hdr), sizeof(rtmsg), tb, RTA_MAX, nullptr) < 0) {
      throw NetlinkError(kOperation, kObject, EPROTO, "unparseable RTM_NEWROUTE");
    }
    // rtm_table is 8 bits; tables above 255 are only in RTA_TABLE, which kernels always send.
    const std::uint32_t table = tb[RTA_TABLE] ? nla_get_u32(tb[RTA_TABLE]) : r->rtm_table;
    if (table != RT_TABLE_MAIN) return;
    // Routes through nexthop objects (RTA_NH_ID) carry RTA_OIF/RTA_MULTIPATH as well while
    // net.ipv4.nexthop_compat_mode is 1, the default.
    if (tb[RTA_OIF]) out.push_back(static_cast<int>(nla_get_u32(tb[RTA_OIF])));
    if (tb[RTA_MULTIPATH]) add_multipath_interfaces(tb[RTA_MULTIPATH], out);
  });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace shaper
