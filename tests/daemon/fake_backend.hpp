#pragma once
// A ShapingBackend without a kernel, for the daemon's protocol tests (the real netlink path is
// tested in tests/kernel, in the VM). It keeps interfaces and one root qdisc per interface the way
// the kernel does, follows NetemEngine's ownership rules (a foreign root is replaced only with
// force; a jitterd qdisc this process does not hold is neither changed nor installed over), and
// records every call with the spec and a steady_clock timestamp, so tests can compare when a phase
// reached the "kernel" with the deadline it was due at. It can be told to fail the next apply the
// way the kernel (NetlinkError with extended-ACK text) or the engine (OwnershipError) fails, and to
// take a while to answer (a stalled kernel, for missed deadlines).
//
// Thread-safe (one mutex), so that a test may run the io_context on a thread of its own and still
// look at the fake from the test thread.

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shaper/errors.hpp"
#include "shaping_backend.hpp"

namespace jitterd::testing {

class FakeBackend final : public ShapingBackend {
 public:
  using Clock = std::chrono::steady_clock;

  // What sits at the root of an interface.
  enum class Root {
    kKernelDefault,  // handle 0: (noqueue, pfifo_fast ...): free to install over
    kForeign,        // htb 1:, installed by someone else: refused unless forced
    kJitterd,        // netem 1a7e:; a leftover of an earlier jitterd unless this process holds it
  };

  // kApply: a request of shape_batch() with a layout; kRemoveDirection: one with an empty layout;
  // kRemove: remove().
  enum class CallKind {
    kApply,
    kRemove,
    kForget,
    kRemoveLeftover,
    kAdopt,
    kRemoveDirection,
    kDisableOffloads,
    kRestoreOffloads
  };

  struct Call {
    CallKind kind = CallKind::kApply;
    shaper::Interface interface;
    std::optional<shaper::NetemSpec> spec;  // apply: the first lane's spec
    bool force = false;                     // apply only
    bool change = false;                    // apply: an in-place change of a direction we held
    bool succeeded = true;
    Clock::time_point entered;   // when the call was made
    Clock::time_point returned;  // when it returned or threw: the "kernel's acknowledgement"
    Direction direction = Direction::kEgress;
    Layout layout;  // apply: the whole layout of that direction
    // apply, remove_direction: which shape_batch() call it came in (1, 2, ...): the requests of one
    // batch share it. 0 for the other kinds.
    std::uint64_t batch = 0;
  };

  // The interface appears; its root is `root`.
  void add_interface(const std::string& name, int index, Root root = Root::kKernelDefault);
  // The interface is deleted (with whatever was installed on it). The owner is kept, as the kernel
  // backend keeps its NetemQdisc until forget().
  void remove_interface(const std::string& name);
  // Someone else puts `root` in place of whatever is there (our held qdisc, if any, stays "held" in
  // the backend until forget(), as in KernelBackend).
  void set_root(int index, Root root);
  void set_counters(int index, const shaper::QdiscStats& stats);

  // The next apply() throws this instead of reaching the kernel (one shot each).
  void fail_next_apply(const shaper::NetlinkError& error);
  void fail_next_apply(const shaper::OwnershipError& error);

  // Faults at the engine boundary, by what the request would do: install (on a direction this
  // process does not hold), change (on one it holds), remove (remove(), or a request with an empty
  // layout).
  enum class Fault { kInstall, kChange, kRemove };
  // The next request of that kind (on interface `index` only, when given) fails the way NetemEngine
  // reports a kernel refusal: a NetlinkError that names its own operation ("netem install", "netem
  // change", "netem remove") and object ("dev veth0 handle 1a7e:", the IFB "dev jdifb5 handle
  // 1a7e:" for ingress), with `error_number` and the kernel's extended-ACK text. Nothing changes;
  // the other requests of its batch go on. One shot per kind.
  void fail_next(Fault at, int error_number, std::string kernel_message = {},
                 std::optional<int> index = std::nullopt);
  // Every request with a layout from now on takes this long before it "reaches the kernel" (a
  // stalled kernel or daemon; in a batch, each request takes it). Zero: answers at once.
  void set_apply_delay(std::chrono::nanoseconds delay);
  // Called on the caller's thread as each request of shape_batch() reaches "the kernel", before it
  // acts (what was written by then, e.g. the ledger, is what a kill -9 at that instant would
  // leave).
  void on_shape(std::function<void(const Call&)> hook);
  // Called on the caller's thread as disable_offloads() reaches "the driver", before it acts.
  void on_disable_offloads(std::function<void()> hook);
  // The next disable_offloads() fails as a driver that cannot change them (SystemError,
  // EOPNOTSUPP), changing nothing. One shot.
  void fail_next_disable_offloads();

  // Kernel-timed switches, as KernelBackend does them with switch_gate "kernel": arm_switch()
  // accepts a spec change of a direction this process holds; the shape_batch() request that brings
  // the armed layout at or after its time "lands" without reaching the kernel (no call recorded).
  struct Armed {
    int index = 0;
    Direction direction = Direction::kEgress;
    Layout layout;
    MonotonicTime at;
  };
  void enable_gate() { gate_ = true; }
  // Every arm_switch() that armed, in order; and how many armed switches were cancelled.
  std::vector<Armed> armed_switches() const;
  std::size_t disarmed() const;
  bool arm_switch(const ShapeRequest& request, MonotonicTime at) override;
  void disarm_switch(const shaper::Interface& interface, Direction direction) override;
  std::optional<MonotonicTime> landed(const shaper::Interface& interface,
                                      Direction direction) const override;
  // Kernel-timed starts: stage_start() on a direction this process does not hold installs it
  // through shape() with a pass-through spec (no delay; the phase's limit), recorded as an apply,
  // and arms the layout as arm_switch() does; drop_staged() removes it while no other shape() has
  // taken it over. staged_starts(): every stage_start() that staged, in order.
  bool stage_start(const ShapeRequest& request, MonotonicTime at) override;
  bool drop_staged(const shaper::Interface& interface, Direction direction) override;
  std::vector<Armed> staged_starts() const;

  std::vector<Call> calls() const;
  std::vector<Call> calls(CallKind kind) const;
  std::size_t count(CallKind kind) const { return calls(kind).size(); }
  // How many shape_batch() calls there were.
  std::uint64_t batches() const;
  // The spec jitterd's qdisc on `index` carries now (held or leftover); nullopt when it has none.
  std::optional<shaper::NetemSpec> spec_on(int index) const;
  std::optional<Root> root_of(int index) const;
  // The layout this process holds on a direction of `index` (empty when none).
  Layout layout_on(int index, Direction direction) const;
  bool offloads_off(int index) const;
  void set_default_route(int index, bool carries);
  void set_ssh_ports(std::vector<std::uint16_t> ports);

  // ShapingBackend
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
  void remove(const shaper::Interface& interface) override;
  void forget(const shaper::Interface& interface, std::optional<Direction> direction) override;
  std::optional<shaper::Offloads> offloads_to_save(const shaper::Interface& interface) override;
  void disable_offloads(const shaper::Interface& interface, const shaper::Offloads& saved) override;
  void restore_offloads(const shaper::Interface& interface, const shaper::Offloads& saved) override;
  bool carries_default_route(const shaper::Interface& interface) override;
  std::vector<std::uint16_t> ssh_listening_ports() override;
  bool remove_leftover(const shaper::Interface& interface) override;
  bool adopt(const shaper::Interface& interface) override;
  std::uint32_t netlink_port() const override { return 0; }

 private:
  struct Link {
    std::string name;
    Root root = Root::kKernelDefault;
    std::optional<shaper::NetemSpec> spec;  // jitterd's qdisc's spec, when the root is kJitterd
    shaper::QdiscStats stats;
    std::map<Direction, Layout> layouts;  // what this process holds
    bool offloads_off = false;
    bool default_route = false;
  };
  std::optional<shaper::QdiscInfo> info_locked(int index) const;
  // One request of batch number `batch`; throws its failure.
  void shape_one(const ShapeRequest& request, std::uint64_t batch);
  void record(Call call);

  mutable std::mutex mutex_;
  bool gate_ = false;
  std::map<std::pair<int, Direction>, Armed> armed_;
  std::map<std::pair<int, Direction>, MonotonicTime> landed_;
  std::vector<Armed> armed_log_;
  std::vector<Armed> staged_log_;
  std::set<std::pair<int, Direction>> staged_;  // installed by stage_start, not taken over since
  std::size_t disarmed_ = 0;
  std::function<void(const Call&)> on_shape_;
  std::function<void()> on_disable_offloads_;
  bool fail_disable_offloads_ = false;
  std::map<int, Link> links_;
  std::vector<std::uint16_t> ssh_ports_;
  // Interfaces this process holds an egress root on (KernelBackend's map of owners), by index.
  std::map<int, shaper::Interface> held_;
  // ... and an ingress IFB on.
  std::map<int, shaper::Interface> held_ingress_;
  std::optional<shaper::NetlinkError> netlink_failure_;
  std::optional<shaper::OwnershipError> ownership_failure_;
  struct InjectedFault {
    int error_number = 0;
    std::string kernel_message;
    std::optional<int> index;
  };
  std::map<Fault, InjectedFault> faults_;
  std::chrono::nanoseconds apply_delay_{0};
  std::vector<Call> calls_;
  std::uint64_t batches_ = 0;
};

std::string to_string(FakeBackend::CallKind kind);

}  // namespace jitterd::testing
