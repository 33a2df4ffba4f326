#pragma once
// The real ShapingBackend: one route socket, one NetemEngine, and the owners of the qdiscs this process
// installed (removed on destruction unless the interface is gone).

#include <map>

#include "shaper/netlink.hpp"
#include "shaping_backend.hpp"

namespace jitterd {

class KernelBackend final : public ShapingBackend {
 public:
  KernelBackend();
  KernelBackend(const KernelBackend&) = delete;
  KernelBackend& operator=(const KernelBackend&) = delete;
  ~KernelBackend() override;

  std::vector<shaper::Interface> interfaces() override;
  std::optional<shaper::Interface> find_interface(const std::string& name) override;
  std::vector<shaper::QdiscInfo> root_qdiscs() override;
  std::optional<shaper::QdiscInfo> root_qdisc(const shaper::Interface& interface) override;
  bool installed(const shaper::Interface& interface) const override;
  void apply(const shaper::Interface& interface, const shaper::NetemSpec& spec, bool force) override;
  void remove(const shaper::Interface& interface) override;
  void forget(const shaper::Interface& interface) override;
  bool remove_leftover(const shaper::Interface& interface) override;
  bool adopt(const shaper::Interface& interface) override;
  std::uint32_t netlink_port() const override;

 private:
  shaper::RouteSocket socket_;
  shaper::NetemEngine engine_;
  // By ifindex. Declared after engine_, so destroyed first: each owner removes its qdisc through it.
  std::map<int, shaper::NetemQdisc> qdiscs_;
};

}  // namespace jitterd
