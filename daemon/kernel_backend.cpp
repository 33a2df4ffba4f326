#include "kernel_backend.hpp"

#include <cerrno>

#include "shaper/errors.hpp"

namespace jitterd {

KernelBackend::KernelBackend() : engine_(socket_) {}

KernelBackend::~KernelBackend() = default;

std::vector<shaper::Interface> KernelBackend::interfaces() { return engine_.interfaces(); }

std::optional<shaper::Interface> KernelBackend::find_interface(const std::string& name) {
  for (auto& i : engine_.interfaces()) {
    if (i.name == name) return i;
  }
  return std::nullopt;
}

std::vector<shaper::QdiscInfo> KernelBackend::root_qdiscs() { return engine_.all_root_qdiscs(); }

std::optional<shaper::QdiscInfo> KernelBackend::root_qdisc(const shaper::Interface& interface) {
  return engine_.root_qdisc(interface);
}

bool KernelBackend::installed(const shaper::Interface& interface) const {
  return qdiscs_.contains(interface.index);
}

void KernelBackend::apply(const shaper::Interface& interface, const shaper::NetemSpec& spec, bool force) {
  if (auto it = qdiscs_.find(interface.index); it != qdiscs_.end()) {
    it->second.change(spec);
    return;
  }
  qdiscs_.emplace(interface.index, engine_.install(interface, spec, shaper::InstallOptions{.force = force}));
}

void KernelBackend::remove(const shaper::Interface& interface) {
  auto it = qdiscs_.find(interface.index);
  if (it == qdiscs_.end()) return;
  // Removed from the map only once the kernel agreed: a failed removal stays owned and is retried at
  // shutdown.
  it->second.remove();
  qdiscs_.erase(it);
}

void KernelBackend::forget(const shaper::Interface& interface) {
  auto it = qdiscs_.find(interface.index);
  if (it == qdiscs_.end()) return;
  it->second.release();
  qdiscs_.erase(it);
}

bool KernelBackend::remove_leftover(const shaper::Interface& interface) {
  if (qdiscs_.contains(interface.index)) return false;
  return engine_.remove_if_ours(interface);
}

bool KernelBackend::adopt(const shaper::Interface& interface) {
  if (qdiscs_.contains(interface.index)) return true;
  auto owner = engine_.adopt(interface);
  if (!owner) return false;
  qdiscs_.emplace(interface.index, std::move(*owner));
  return true;
}

std::uint32_t KernelBackend::netlink_port() const { return socket_.local_port(); }

}  // namespace jitterd
