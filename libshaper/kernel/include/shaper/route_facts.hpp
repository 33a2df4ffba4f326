#pragma once
// Facts that keep a shaping session from locking its operator out: which interfaces carry the
// default route (shaping them shapes the way back to the operator), read from the kernel. The SSH
// side (the operator's connection, sshd's ports, the rules that exempt SSH) is ssh_rules.hpp.

#include <vector>

#include "shaper/netlink.hpp"
#include "shaper/ssh_rules.hpp"

namespace shaper {

// The interface indexes that carry an IPv4 or IPv6 default route of the main table (dst_len 0,
// unicast), including each nexthop of a multipath route; sorted, without duplicates. Reads the
// calling thread's network namespace through `socket` (an RTM_GETROUTE dump). Throws NetlinkError.
std::vector<int> default_route_interfaces(RouteSocket& socket);

}  // namespace shaper
