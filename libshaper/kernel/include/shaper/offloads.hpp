#pragma once
// Segmentation and receive offloads of one interface, read and written through the ethtool ioctl
// (SIOCETHTOOL, the feature-bit commands ETHTOOL_GFEATURES/SFEATURES, bits found by name as
// `ethtool -K` finds them), and a guard that turns them off for a shaping session.
//
// Why: netem acts per kernel packet (skb). With TSO/GSO a "packet" on egress is a super-packet of
// up to 64 KiB that the NIC or the stack cuts into wire packets after netem; with GRO, packets
// received are merged before an ingress/IFB netem sees them. Loss, duplication, the limit and every
// delay then apply to the aggregate, not to each wire packet (netem-kernel.md section 4). Turning
// them off costs CPU and gives per-wire-packet fidelity.

#include <string>

#include "shaper/files.hpp"
#include "shaper/tc_types.hpp"

namespace shaper {

// Reads the three offloads of `ifname` in the calling thread's network namespace. Throws
// SystemError naming the operation and the interface (ENODEV for an unknown name).
Offloads read_offloads(const std::string& ifname);

// Sets each offload that differs from the interface's current state, then reads it back: the kernel
// accepts a change to a feature the driver cannot toggle (or one that depends on another feature
// that is off) and silently keeps it, so a value that did not take is reported as EOPNOTSUPP ("the
// driver cannot change it ..."). Not transactional: a failure leaves the offloads before it
// changed. Throws SystemError.
void write_offloads(const std::string& ifname, const Offloads& wanted);

// Turns TSO, GSO and GRO off on construction and restores the values it found when destroyed or on
// restore(); release() keeps them off. If construction fails halfway, what was changed is restored
// before the exception leaves. Move-only; a moved-from guard does nothing.
class OffloadGuard {
 public:
  explicit OffloadGuard(std::string ifname);
  // The same, restoring `saved`: what the caller read (and recorded) before the change.
  OffloadGuard(std::string ifname, const Offloads& saved);
  OffloadGuard(OffloadGuard&& other) noexcept;
  OffloadGuard& operator=(OffloadGuard&& other) noexcept;
  OffloadGuard(const OffloadGuard&) = delete;
  OffloadGuard& operator=(const OffloadGuard&) = delete;
  // Restores, swallowing errors (the interface may be gone); call restore() to see them.
  ~OffloadGuard();

  // Writes the saved values back now (throws SystemError); the guard is then inactive.
  void restore();
  // Forgets the saved values: the offloads stay as they are now.
  void release() { active_ = false; }

  const std::string& ifname() const { return ifname_; }
  const Offloads& saved() const { return saved_; }
  bool active() const { return active_; }

 private:
  std::string ifname_;
  Offloads saved_;
  bool active_ = false;
};

}  // namespace shaper
