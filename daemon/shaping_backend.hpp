#pragma once
// What the daemon needs from the kernel, as an interface: the real one (KernelBackend) drives
// shaper::NetemEngine; protocol tests use a fake. Calls are synchronous (a netlink request is answered
// in microseconds) and throw shaper's exceptions on environment failures.

#include <optional>
#include <string>
#include <vector>

#include "shaper/netem_engine.hpp"
#include "shaper/netem_spec.hpp"

namespace jitterd {

class ShapingBackend {
 public:
  virtual ~ShapingBackend() = default;

  virtual std::vector<shaper::Interface> interfaces() = 0;
  virtual std::optional<shaper::Interface> find_interface(const std::string& name) = 0;
  // Root qdisc of every interface (index -> info), in one dump.
  virtual std::vector<shaper::QdiscInfo> root_qdiscs() = 0;
  virtual std::optional<shaper::QdiscInfo> root_qdisc(const shaper::Interface& interface) = 0;

  // Whether this process holds an installed qdisc on the interface.
  virtual bool installed(const shaper::Interface& interface) const = 0;
  // Installs jitterd's qdisc, or changes it in place if this process already holds one there.
  virtual void apply(const shaper::Interface& interface, const shaper::NetemSpec& spec, bool force) = 0;
  // Removes the qdisc this process holds (the kernel default comes back). No-op when none.
  virtual void remove(const shaper::Interface& interface) = 0;
  // The interface is gone or the qdisc was replaced behind our back: drop the owner, touch nothing.
  virtual void forget(const shaper::Interface& interface) = 0;

  // Crash recovery: a qdisc with jitterd's handle that this process does not hold.
  virtual bool remove_leftover(const shaper::Interface& interface) = 0;
  virtual bool adopt(const shaper::Interface& interface) = 0;

  // The netlink port id of the socket that makes our changes (0 for a fake): notifications carrying it
  // are our own.
  virtual std::uint32_t netlink_port() const = 0;
};

}  // namespace jitterd
