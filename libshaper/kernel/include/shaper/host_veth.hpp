#pragma once
// The host side of a container's veth pair (issue 23, `--via host-veth`): shaping there needs only
// CAP_NET_ADMIN in jitterd's own namespace and never enters the container's. A veth device reports
// its peer's ifindex (IFLA_LINK) in the peer's namespace, and IFLA_LINK_NETNSID when that namespace
// is another one; the pairing is accepted only when it holds both ways (the host device is a veth
// whose IFLA_LINK is the container device's ifindex), since an ifindex alone can name an unrelated
// device of the host.

#include <string>

#include "shaper/netlink.hpp"
#include "shaper/tc_types.hpp"

namespace shaper {

struct HostVeth {
  Interface inside;  // as the target namespace sees it ("eth0")
  Interface host;    // its peer in the host namespace ("veth3c9a1f2")
};

// The peer in `host`'s namespace of device `inside_name` of `inside`'s namespace; `target` names
// the target namespace in messages ("netns blue"). Throws SystemError naming the device and the
// target, with what to do instead, when there is no such device (ENODEV), it is not a veth
// (EOPNOTSUPP: macvlan, ipvlan and physical devices have no host side), its peer is in its own
// namespace or not in the host's (ENODEV).
HostVeth find_host_veth(RouteSocket& inside, const std::string& inside_name, RouteSocket& host,
                        const std::string& target);

}  // namespace shaper
