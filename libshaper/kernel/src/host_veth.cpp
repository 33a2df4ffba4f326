#include "shaper/host_veth.hpp"

#include <cerrno>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/ifb.hpp"

namespace shaper {

HostVeth find_host_veth(RouteSocket& inside, const std::string& inside_name, RouteSocket& host,
                        const std::string& target) {
  const std::string object = "dev " + inside_name + " in " + target;
  constexpr const char* kOperation = "find host-side veth";
  const std::vector<LinkInfo> inside_links = dump_links(inside);
  const LinkInfo* device = nullptr;
  for (const LinkInfo& link : inside_links) {
    if (link.interface.name == inside_name) device = &link;
  }
  if (device == nullptr) {
    throw SystemError(kOperation, object, ENODEV,
                      "the target has no such device: list its devices with `ip -n NAME link` "
                      "or `nsenter -t PID -n ip link`");
  }
  if (device->kind != "veth") {
    throw SystemError(kOperation, object, EOPNOTSUPP,
                      "it is " +
                          (device->kind.empty() ? std::string("a physical or loopback device")
                                                : "a " + device->kind + " device") +
                          ", not a veth: only a veth pair has a host side; shape inside the "
                          "target's namespace instead");
  }
  if (!device->peer_elsewhere || device->link_index == 0) {
    throw SystemError(kOperation, object, ENODEV,
                      "its veth peer is in the same namespace, so there is no host side; shape "
                      "inside the target's namespace instead");
  }
  for (const LinkInfo& link : dump_links(host)) {
    if (link.interface.index == device->link_index && link.kind == "veth" && link.peer_elsewhere &&
        link.link_index == device->interface.index) {
      return HostVeth{device->interface, link.interface};
    }
  }
  throw SystemError(kOperation, object, ENODEV,
                    "its veth peer (ifindex " + std::to_string(device->link_index) +
                        " of the peer's namespace) is not in jitterd's namespace: the target is "
                        "wired to another namespace; shape inside the target's namespace instead");
}

}  // namespace shaper
