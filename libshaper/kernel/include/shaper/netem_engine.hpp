#pragma once
// The netem engine: installs, changes, reads back and removes jitterd's netem qdisc at the root of
// an interface, over netlink, in the calling thread's network namespace.
//
// Ownership: every qdisc jitterd installs carries the reserved handle 1a7e: (kJitterdHandleMajor).
// The engine never changes or removes a qdisc with another handle, and refuses to replace a
// non-default root qdisc that someone else installed unless the caller forces it. (The kernel backs
// this up: a change or delete that names our handle fails if the root is no longer ours.)

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "shaper/change_plan.hpp"
#include "shaper/netem_encoder.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/netlink.hpp"
#include "shaper/tc_types.hpp"

namespace shaper {

struct InstallOptions {
  // Replace a non-default root qdisc installed by someone else. Its queue is dropped.
  bool force = false;
};

class NetemEngine;

// One netem change built and not yet sent: its message, how a refusal names it, and what its owner
// records once the kernel has taken it. NetemQdisc::prepare_change and NetemTree::prepare_change
// make them, NetemEngine::change sends them. Move-only (it owns its message). Until it is sent, the
// owner that made it must stay where it is and take no other change.
struct PreparedChange {
  NlMsgPtr message;
  std::string object;             // "dev veth0 handle 1a7e:"
  std::function<void()> applied;  // the owner takes the new spec (called only on the kernel's ACK)
  // The refusal as the owner reports it (a hint added where it knows one).
  std::function<NetlinkError(const NetlinkError&)> explain;
};

// An installed netem qdisc, owned: it is removed (the kernel default comes back) when the owner is
// destroyed, unless release() was called. Move-only.
class NetemQdisc {
 public:
  NetemQdisc(NetemQdisc&& other) noexcept;
  NetemQdisc& operator=(NetemQdisc&& other) noexcept;
  NetemQdisc(const NetemQdisc&) = delete;
  NetemQdisc& operator=(const NetemQdisc&) = delete;
  ~NetemQdisc();

  // Changes the qdisc in place: one RTM_NEWQDISC without CREATE, carrying the full state, so
  // nothing in flight is dropped and there is no unshaped moment. The GE/4-state chain keeps
  // running when the loss model did not change; tables are sent only when they changed. A batch of
  // one.
  void change(const NetemSpec& spec);

  // The same change, built and validated (std::invalid_argument) but not sent: for a batch of
  // changes on many qdiscs (NetemEngine::change). The qdisc takes `spec` when the kernel ACKs it.
  PreparedChange prepare_change(const NetemSpec& spec);

  // Removes the qdisc now; the kernel's default root qdisc comes back. Throws on failure.
  void remove();

  // Gives up ownership: the qdisc stays installed after this owner is gone.
  void release() { engine_ = nullptr; }

  const Interface& interface() const { return interface_; }
  const NetemSpec& spec() const { return applied_; }
  bool owns() const { return engine_ != nullptr; }

 private:
  friend class NetemEngine;
  NetemQdisc(NetemEngine& engine, Interface interface, NetemSpec applied, bool tables_known);
  // remove(), reporting a failure on stderr instead of throwing (destructor, move assignment).
  void remove_quietly() noexcept;

  NetemEngine* engine_;
  Interface interface_;
  NetemSpec applied_;
  // False after adopt(): the kernel may hold tables we never saw, so the next change resends them.
  bool tables_known_;
};

class NetemEngine {
 public:
  // Uses (does not own) `socket`, which must outlive the engine and every NetemQdisc it returns.
  explicit NetemEngine(RouteSocket& socket) : socket_(&socket) {}

  Interface resolve(const InterfaceRef& ref);

  // Validates `spec` (throws std::invalid_argument with the diagnostics: callers are expected to
  // validate user data first) and installs it as the root qdisc of `interface`.
  NetemQdisc install(const Interface& interface, const NetemSpec& spec,
                     const InstallOptions& options = {});

  // Takes ownership of a jitterd qdisc left by an earlier process (after a crash). Returns nullopt
  // if the interface's root is not ours.
  std::optional<NetemQdisc> adopt(const Interface& interface);

  std::vector<QdiscInfo> qdiscs(const Interface& interface);
  // The root qdisc of every interface, in one dump (listing, crash recovery).
  std::vector<QdiscInfo> all_root_qdiscs();
  // Every qdisc of every interface, in one dump (the counters of every lane at once).
  std::vector<QdiscInfo> all_qdiscs();
  // Every interface in this network namespace.
  std::vector<Interface> interfaces();
  std::optional<QdiscInfo> root_qdisc(const Interface& interface);
  // The netlink flags for installing a new root qdisc of jitterd's on `interface`: CREATE|EXCL over
  // the kernel's default root, CREATE|REPLACE over someone else's when options.force. Throws
  // OwnershipError, its text starting with `what` ("netem install (dev veth0 handle 1a7e:)"), when
  // jitterd's root is already there (`ours_hint` appended: what to do instead) or someone else's is
  // and force was not given.
  int root_install_flags(const Interface& interface, const InstallOptions& options,
                         const std::string& what, const std::string& ours_hint = {});

  // Removes jitterd's root qdisc from `interface` if there is one (crash cleanup); true if removed.
  bool remove_if_ours(const Interface& interface);

  // Sends prepared changes (of qdiscs on any interfaces of this namespace) as one batch, as
  // `tc -batch` does: every message is already built; all are sent back to back, then every ACK is
  // read. Each change stands alone: the kernel judges each message by itself and goes on after a
  // refusal, so result i is nullopt when change i took effect (its owner has the new spec) and
  // otherwise the kernel's refusal, named after its qdisc, with the kernel's text (its owner keeps
  // the old spec). Throws only when the socket itself fails.
  std::vector<std::optional<NetlinkError>> change(std::vector<PreparedChange>& changes);

  RouteSocket& socket() { return *socket_; }

 private:
  friend class NetemQdisc;
  void send_netem(const Interface& interface, const NetemSpec& spec, const NetemEncodePlan& plan,
                  int flags, const char* operation);
  void delete_root(const Interface& interface);
  std::vector<QdiscInfo> dump_qdiscs(int ifindex, const std::string& object);

  RouteSocket* socket_;
};

}  // namespace shaper
