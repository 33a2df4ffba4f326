#pragma once
// The real ShapingBackend: one route socket, one NetemEngine, and the owners of what this process
// installed on each interface: per direction a plain netem root or a classful tree, for ingress the
// IFB plumbing, and the offload guard. Owners remove their objects on destruction unless the
// interface is gone (forget).

#include <map>
#include <optional>

#include "config.hpp"
#include "shaper/ifb.hpp"
#include "shaper/netem_gate.hpp"
#include "shaper/netlink.hpp"
#include "shaper/offloads.hpp"
#include "shaper/tc_tree.hpp"
#include "shaping_backend.hpp"

namespace jitterd {

class KernelBackend final : public ShapingBackend {
 public:
  // `gate` kKernel: a whole-direction lane is a gated root (shaper::GatedNetem) whose switches can
  // be armed ahead (arm_switch); kOff: a plain netem root, switched when asked.
  explicit KernelBackend(SwitchGate gate = SwitchGate::kOff);
  // On a route socket of another network namespace (created there: NetworkNamespace::
  // create_inside), the backend shapes that namespace's interfaces and creates its IFBs there.
  explicit KernelBackend(shaper::RouteSocket socket, SwitchGate gate = SwitchGate::kOff);
  KernelBackend(const KernelBackend&) = delete;
  KernelBackend& operator=(const KernelBackend&) = delete;
  ~KernelBackend() override;

  std::vector<shaper::Interface> interfaces() override;
  std::optional<shaper::Interface> find_interface(const std::string& name) override;
  std::vector<shaper::QdiscInfo> root_qdiscs() override;
  std::optional<shaper::QdiscInfo> root_qdisc(const shaper::Interface& interface) override;
  std::vector<shaper::QdiscInfo> all_qdiscs() override;
  std::optional<shaper::QdiscStats> lane_counters(
      const shaper::Interface& interface, Direction direction, const std::string& set,
      const std::vector<shaper::QdiscInfo>& all) override;
  bool installed(const shaper::Interface& interface) const override;
  bool installed(const shaper::Interface& interface, Direction direction) const override;
  std::vector<std::exception_ptr> shape_batch(std::span<const ShapeRequest> requests) override;
  bool arm_switch(const ShapeRequest& request, MonotonicTime at) override;
  void disarm_switch(const shaper::Interface& interface, Direction direction) override;
  bool stage_start(const ShapeRequest& request, MonotonicTime at) override;
  bool drop_staged(const shaper::Interface& interface, Direction direction) override;
  std::optional<MonotonicTime> landed(const shaper::Interface& interface,
                                      Direction direction) const override;
  void remove(const shaper::Interface& interface) override;
  void forget(const shaper::Interface& interface, std::optional<Direction> direction) override;
  std::optional<shaper::Offloads> offloads_to_save(const shaper::Interface& interface) override;
  void disable_offloads(const shaper::Interface& interface, const shaper::Offloads& saved) override;
  void restore_offloads(const shaper::Interface& interface, const shaper::Offloads& saved) override;
  bool carries_default_route(const shaper::Interface& interface) override;
  std::vector<std::uint16_t> ssh_listening_ports() override;
  bool remove_leftover(const shaper::Interface& interface) override;
  bool adopt(const shaper::Interface& interface) override;
  std::uint32_t netlink_port() const override;

 private:
  // What one direction holds: a plain netem root (one lane for everything, nothing spared), the
  // same lane as a gated root (switch_gate "kernel"), or a tree.
  struct Shaped {
    Layout layout;
    std::optional<shaper::NetemQdisc> plain;
    std::optional<shaper::GatedNetem> gated;
    std::optional<shaper::NetemTree> tree;
    // The layout an armed switch puts in force at its deadline (gated only).
    std::optional<Layout> armed;
    // Set by shape_batch when the layout asked for was already in force by an armed switch.
    std::optional<MonotonicTime> landed;
    // Installed by stage_start ahead of its apply's start, passing packets on unchanged until the
    // armed layout lands; cleared by the first shape_batch() that succeeds on this direction.
    bool staged = false;
    std::map<std::string, std::uint16_t> minors;  // rule set -> leaf minor in the tree
    void remove();
    void release();
    // The armed switch, settled now: one that has landed is in force (`layout`; its deadline is
    // returned), one still to come is disarmed.
    std::optional<MonotonicTime> settle_armed();
  };
  struct State {
    shaper::Interface interface;
    std::optional<Shaped> egress;
    std::optional<shaper::IngressRedirect> plumbing;  // the IFB and the redirect filters
    std::optional<Shaped> ingress;                    // on the IFB
    std::optional<shaper::OffloadGuard> offloads;
    bool empty() const { return !egress && !plumbing && !ingress && !offloads; }
  };

  // Builds `layout` on `device` (the interface, or its IFB).
  Shaped build(const shaper::Interface& device, const Layout& layout, bool force);
  // The leaf minor of every rule set of `layout`, keeping those in `existing`.
  static Shaped plan(const Layout& layout, const std::map<std::string, std::uint16_t>* existing);
  static shaper::TreeSpec tree_spec(const Shaped& shaped, const Layout& layout);
  // The spec of every netem of `shaped` under `layout` (same structure): by leaf minor, or the
  // plain root alone under minor 0.
  static std::map<std::uint16_t, shaper::NetemSpec> netem_specs(const Shaped& shaped,
                                                                const Layout& layout);
  // The in-place changes that give those netems `specs` (built, not sent), with their minors.
  static std::vector<std::pair<std::uint16_t, shaper::PreparedChange>> prepare_changes(
      Shaped& shaped, const std::map<std::uint16_t, shaper::NetemSpec>& specs);
  // shape_batch() but for what it does to staged directions.
  std::vector<std::exception_ptr> shape_all(std::span<const ShapeRequest> requests);
  // shape() of a request that is not a change in place: a removal, an install, a new structure.
  void rebuild(const ShapeRequest& request);
  // Where `direction` of `interface` is held, or null.
  Shaped* held(const shaper::Interface& interface, Direction direction);
  void drop_if_empty(int index);

  SwitchGate gate_;
  shaper::RouteSocket socket_;
  shaper::NetemEngine engine_;
  // By ifindex. Declared after engine_, so destroyed first: each owner removes its objects through
  // it.
  std::map<int, State> states_;
};

}  // namespace jitterd
