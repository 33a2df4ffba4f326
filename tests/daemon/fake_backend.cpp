#include "fake_backend.hpp"

#include <linux/pkt_sched.h>

#include <cerrno>
#include <thread>
#include <utility>

#include "shaper/errors.hpp"

namespace jitterd::testing {

namespace {

std::string describe(const shaper::Interface& interface) {
  return "dev " + interface.name + " handle " + shaper::format_handle(shaper::kJitterdRootHandle);
}

// Ingress netem sits on the IFB jitterd owns for the interface (KernelBackend's naming).
std::string describe(const shaper::Interface& interface, Direction direction) {
  if (direction == Direction::kEgress) return describe(interface);
  return "dev jdifb" + std::to_string(interface.index) + " handle " +
         shaper::format_handle(shaper::kJitterdRootHandle);
}

}  // namespace

std::string to_string(FakeBackend::CallKind kind) {
  switch (kind) {
    case FakeBackend::CallKind::kApply:
      return "apply";
    case FakeBackend::CallKind::kRemove:
      return "remove";
    case FakeBackend::CallKind::kForget:
      return "forget";
    case FakeBackend::CallKind::kRemoveLeftover:
      return "remove_leftover";
    case FakeBackend::CallKind::kAdopt:
      return "adopt";
    case FakeBackend::CallKind::kRemoveDirection:
      return "remove_direction";
    case FakeBackend::CallKind::kDisableOffloads:
      return "disable_offloads";
    case FakeBackend::CallKind::kRestoreOffloads:
      return "restore_offloads";
  }
  return "?";
}

void FakeBackend::add_interface(const std::string& name, int index, Root root) {
  std::lock_guard lock(mutex_);
  Link link;
  link.name = name;
  link.root = root;
  // A leftover carries some spec of the earlier process; its content does not matter to recovery.
  if (root == Root::kJitterd) link.spec = shaper::NetemSpec{};
  links_[index] = std::move(link);
}

void FakeBackend::remove_interface(const std::string& name) {
  std::lock_guard lock(mutex_);
  std::erase_if(links_, [&](const auto& entry) { return entry.second.name == name; });
}

void FakeBackend::set_root(int index, Root root) {
  std::lock_guard lock(mutex_);
  Link& link = links_.at(index);
  link.root = root;
  link.spec = root == Root::kJitterd ? std::optional(shaper::NetemSpec{}) : std::nullopt;
}

void FakeBackend::set_counters(int index, const shaper::QdiscStats& stats) {
  std::lock_guard lock(mutex_);
  links_.at(index).stats = stats;
}

void FakeBackend::fail_next_apply(const shaper::NetlinkError& error) {
  std::lock_guard lock(mutex_);
  netlink_failure_ = error;
}

void FakeBackend::fail_next_apply(const shaper::OwnershipError& error) {
  std::lock_guard lock(mutex_);
  ownership_failure_ = error;
}

void FakeBackend::fail_next(Fault at, int error_number, std::string kernel_message,
                            std::optional<int> index) {
  std::lock_guard lock(mutex_);
  faults_[at] = InjectedFault{error_number, std::move(kernel_message), index};
}

void FakeBackend::on_shape(std::function<void(const Call&)> hook) {
  std::lock_guard lock(mutex_);
  on_shape_ = std::move(hook);
}

void FakeBackend::on_disable_offloads(std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  on_disable_offloads_ = std::move(hook);
}

void FakeBackend::fail_next_disable_offloads() {
  std::lock_guard lock(mutex_);
  fail_disable_offloads_ = true;
}

void FakeBackend::set_apply_delay(std::chrono::nanoseconds delay) {
  std::lock_guard lock(mutex_);
  apply_delay_ = delay;
}

std::vector<FakeBackend::Call> FakeBackend::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

std::uint64_t FakeBackend::batches() const {
  std::lock_guard lock(mutex_);
  return batches_;
}

std::vector<FakeBackend::Call> FakeBackend::calls(CallKind kind) const {
  std::lock_guard lock(mutex_);
  std::vector<Call> out;
  for (const auto& c : calls_) {
    if (c.kind == kind) out.push_back(c);
  }
  return out;
}

std::optional<shaper::NetemSpec> FakeBackend::spec_on(int index) const {
  std::lock_guard lock(mutex_);
  auto it = links_.find(index);
  if (it == links_.end() || it->second.root != Root::kJitterd) return std::nullopt;
  return it->second.spec;
}

std::optional<FakeBackend::Root> FakeBackend::root_of(int index) const {
  std::lock_guard lock(mutex_);
  auto it = links_.find(index);
  if (it == links_.end()) return std::nullopt;
  return it->second.root;
}

void FakeBackend::record(Call call) {
  calls_.push_back(std::move(call));
}

std::vector<shaper::Interface> FakeBackend::interfaces() {
  std::lock_guard lock(mutex_);
  std::vector<shaper::Interface> out;
  for (const auto& [index, link] : links_) out.push_back({index, link.name});
  return out;
}

std::optional<shaper::Interface> FakeBackend::find_interface(const std::string& name) {
  std::lock_guard lock(mutex_);
  for (const auto& [index, link] : links_) {
    if (link.name == name) return shaper::Interface{index, link.name};
  }
  return std::nullopt;
}

std::optional<shaper::QdiscInfo> FakeBackend::info_locked(int index) const {
  auto it = links_.find(index);
  if (it == links_.end()) return std::nullopt;
  shaper::QdiscInfo info;
  info.ifindex = index;
  info.parent = TC_H_ROOT;
  switch (it->second.root) {
    case Root::kKernelDefault:
      info.kind = "noqueue";
      info.handle = 0;
      break;
    case Root::kForeign:
      info.kind = "htb";
      info.handle = 0x10000;  // 1:, the handle people give htb by hand
      break;
    case Root::kJitterd:
      info.kind = "netem";
      info.handle = shaper::kJitterdRootHandle;
      info.stats = it->second.stats;
      break;
  }
  return info;
}

std::vector<shaper::QdiscInfo> FakeBackend::root_qdiscs() {
  std::lock_guard lock(mutex_);
  std::vector<shaper::QdiscInfo> out;
  for (const auto& [index, link] : links_) out.push_back(*info_locked(index));
  return out;
}

std::optional<shaper::QdiscInfo> FakeBackend::root_qdisc(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  return info_locked(interface.index);
}

std::vector<shaper::QdiscInfo> FakeBackend::all_qdiscs() {
  return root_qdiscs();
}

std::optional<shaper::QdiscStats> FakeBackend::lane_counters(
    const shaper::Interface& interface, Direction direction, const std::string& set,
    const std::vector<shaper::QdiscInfo>& all) {
  (void)all;
  (void)set;
  std::lock_guard lock(mutex_);
  auto link = links_.find(interface.index);
  if (link == links_.end() || !link->second.layouts.contains(direction)) return std::nullopt;
  if (direction == Direction::kEgress && link->second.root != Root::kJitterd) return std::nullopt;
  return link->second.stats;
}

Layout FakeBackend::layout_on(int index, Direction direction) const {
  std::lock_guard lock(mutex_);
  auto link = links_.find(index);
  if (link == links_.end()) return {};
  auto it = link->second.layouts.find(direction);
  return it == link->second.layouts.end() ? Layout{} : it->second;
}

bool FakeBackend::offloads_off(int index) const {
  std::lock_guard lock(mutex_);
  auto link = links_.find(index);
  return link != links_.end() && link->second.offloads_off;
}

void FakeBackend::set_default_route(int index, bool carries) {
  std::lock_guard lock(mutex_);
  links_.at(index).default_route = carries;
}

bool FakeBackend::installed(const shaper::Interface& interface) const {
  std::lock_guard lock(mutex_);
  return held_.contains(interface.index) || held_ingress_.contains(interface.index);
}

bool FakeBackend::installed(const shaper::Interface& interface, Direction direction) const {
  std::lock_guard lock(mutex_);
  return direction == Direction::kEgress ? held_.contains(interface.index)
                                         : held_ingress_.contains(interface.index);
}

std::vector<std::exception_ptr> FakeBackend::shape_batch(std::span<const ShapeRequest> requests) {
  std::uint64_t batch;
  {
    std::lock_guard lock(mutex_);
    batch = ++batches_;
  }
  // In order, each on its own, as the kernel takes a batch's messages.
  std::vector<std::exception_ptr> out(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    {
      // An armed switch due by now whose layout this is: the "kernel" made it at its time.
      std::lock_guard lock(mutex_);
      const auto key = std::make_pair(requests[i].interface.index, requests[i].direction);
      landed_.erase(key);
      if (auto a = armed_.find(key); a != armed_.end()) {
        const Armed armed = a->second;
        armed_.erase(a);
        if (armed.at <= MonotonicClock::now() && armed.layout == requests[i].layout) {
          landed_[key] = armed.at;
          links_[armed.index].layouts[armed.direction] = armed.layout;
          links_[armed.index].spec = armed.layout.lanes.front().spec;
          continue;
        }
        ++disarmed_;
      }
    }
    try {
      shape_one(requests[i], batch);
    } catch (...) {
      out[i] = std::current_exception();
    }
  }
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!out[i]) staged_.erase({requests[i].interface.index, requests[i].direction});
  }
  return out;
}

bool FakeBackend::arm_switch(const ShapeRequest& request, MonotonicTime at) {
  std::lock_guard lock(mutex_);
  if (!gate_) return false;
  auto link = links_.find(request.interface.index);
  if (link == links_.end()) return false;
  auto held = link->second.layouts.find(request.direction);
  if (held == link->second.layouts.end() || held->second.empty() ||
      !held->second.same_structure(request.layout)) {
    return false;
  }
  const Armed armed{request.interface.index, request.direction, request.layout, at};
  if (armed_.contains({armed.index, armed.direction})) ++disarmed_;
  armed_[{armed.index, armed.direction}] = armed;
  armed_log_.push_back(armed);
  return true;
}

bool FakeBackend::stage_start(const ShapeRequest& request, MonotonicTime at) {
  const auto key = std::make_pair(request.interface.index, request.direction);
  bool held = false;
  {
    std::lock_guard lock(mutex_);
    if (!gate_ || request.layout.empty() || request.layout.lanes.size() != 1 ||
        !request.layout.bypass.empty()) {
      return false;
    }
    held = request.direction == Direction::kEgress
               ? held_.contains(request.interface.index)
               : held_ingress_.contains(request.interface.index);
    if (held && !staged_.contains(key)) return false;
  }
  if (!held) {
    ShapeRequest pass = request;
    shaper::NetemSpec through;
    through.limit = request.layout.lanes.front().spec.limit;
    pass.layout.lanes.front().spec = through;
    std::uint64_t batch;
    {
      std::lock_guard lock(mutex_);
      batch = ++batches_;
    }
    shape_one(pass, batch);
  }
  std::lock_guard lock(mutex_);
  staged_.insert(key);
  const Armed armed{request.interface.index, request.direction, request.layout, at};
  if (armed_.contains(key)) ++disarmed_;
  armed_[key] = armed;
  staged_log_.push_back(armed);
  return true;
}

bool FakeBackend::drop_staged(const shaper::Interface& interface, Direction direction) {
  {
    std::lock_guard lock(mutex_);
    if (!staged_.erase({interface.index, direction})) return false;
    if (armed_.erase({interface.index, direction}) > 0) ++disarmed_;
  }
  shape_one(ShapeRequest{interface, direction, Layout{}, false}, 0);
  return true;
}

std::vector<FakeBackend::Armed> FakeBackend::staged_starts() const {
  std::lock_guard lock(mutex_);
  return staged_log_;
}

void FakeBackend::disarm_switch(const shaper::Interface& interface, Direction direction) {
  std::lock_guard lock(mutex_);
  if (armed_.erase({interface.index, direction}) > 0) ++disarmed_;
}

std::optional<MonotonicTime> FakeBackend::landed(const shaper::Interface& interface,
                                                 Direction direction) const {
  std::lock_guard lock(mutex_);
  auto it = landed_.find({interface.index, direction});
  if (it == landed_.end()) return std::nullopt;
  return it->second;
}

std::vector<FakeBackend::Armed> FakeBackend::armed_switches() const {
  std::lock_guard lock(mutex_);
  return armed_log_;
}

std::size_t FakeBackend::disarmed() const {
  std::lock_guard lock(mutex_);
  return disarmed_;
}

void FakeBackend::shape_one(const ShapeRequest& request, std::uint64_t batch) {
  const shaper::Interface& interface = request.interface;
  const Direction direction = request.direction;
  const Layout& layout = request.layout;
  const bool force = request.force;
  Call call;
  call.batch = batch;
  call.kind = layout.empty() ? CallKind::kRemoveDirection : CallKind::kApply;
  call.interface = interface;
  if (!layout.empty()) call.spec = layout.lanes.front().spec;
  call.force = force;
  call.direction = direction;
  call.layout = layout;
  call.entered = Clock::now();
  std::chrono::nanoseconds delay;
  std::function<void(const Call&)> hook;
  {
    std::lock_guard lock(mutex_);
    delay = apply_delay_;
    hook = on_shape_;
  }
  if (hook) hook(call);
  // Outside the lock: the test thread may look while "the kernel" is slow.
  if (delay > std::chrono::nanoseconds(0) && !layout.empty()) std::this_thread::sleep_for(delay);

  std::lock_guard lock(mutex_);
  auto fail = [&](const auto& error) {
    call.succeeded = false;
    call.returned = Clock::now();
    record(call);
    throw error;
  };
  auto link = links_.find(interface.index);
  {
    const bool held = direction == Direction::kEgress ? held_.contains(interface.index)
                                                      : held_ingress_.contains(interface.index);
    const Fault kind = layout.empty() ? Fault::kRemove : held ? Fault::kChange : Fault::kInstall;
    if (auto fault = faults_.find(kind);
        fault != faults_.end() &&
        (!fault->second.index || *fault->second.index == interface.index)) {
      const InjectedFault injected = fault->second;
      faults_.erase(fault);
      const char* operation = kind == Fault::kRemove   ? "netem remove"
                              : kind == Fault::kChange ? "netem change"
                                                       : "netem install";
      fail(shaper::NetlinkError(operation, describe(interface, direction), injected.error_number,
                                injected.kernel_message));
    }
  }
  if (layout.empty()) {
    if (direction == Direction::kEgress) {
      if (held_.erase(interface.index) && link != links_.end() &&
          link->second.root == Root::kJitterd) {
        link->second.root = Root::kKernelDefault;
        link->second.spec.reset();
      }
    } else {
      held_ingress_.erase(interface.index);
    }
    if (link != links_.end()) link->second.layouts.erase(direction);
    call.returned = Clock::now();
    record(call);
    return;
  }
  if (netlink_failure_) {
    const shaper::NetlinkError error = *netlink_failure_;
    netlink_failure_.reset();
    fail(error);
  }
  if (ownership_failure_) {
    const shaper::OwnershipError error = *ownership_failure_;
    ownership_failure_.reset();
    fail(error);
  }
  if (link == links_.end()) {
    fail(shaper::NetlinkError("netem install", describe(interface), ENODEV, "Cannot find device"));
  }
  if (direction == Direction::kIngress) {
    call.change = held_ingress_.contains(interface.index);
    held_ingress_[interface.index] = interface;
    link->second.layouts[direction] = layout;
    call.returned = Clock::now();
    record(call);
    return;
  }
  call.change = held_.contains(interface.index);
  if (call.change) {
    // The kernel refuses a change naming our handle once the root is no longer ours.
    if (link->second.root != Root::kJitterd) {
      fail(shaper::NetlinkError("netem change", describe(interface), ENOENT, "Qdisc not found"));
    }
  } else if (link->second.root == Root::kJitterd) {
    fail(shaper::OwnershipError(
        "netem install (" + describe(interface) +
        "): jitterd's qdisc is already installed there; change it, or adopt it after "
        "a restart"));
  } else if (link->second.root == Root::kForeign && !force) {
    fail(shaper::OwnershipError(
        "netem install (" + describe(interface) +
        "): the root qdisc is htb 1:, installed by someone else; jitterd leaves it "
        "alone"));
  }
  link->second.root = Root::kJitterd;
  link->second.spec = layout.lanes.front().spec;
  link->second.layouts[direction] = layout;
  held_[interface.index] = interface;
  call.returned = Clock::now();
  record(call);
}

void FakeBackend::remove(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  Call call{CallKind::kRemove, interface, std::nullopt,       false, false, true,
            Clock::now(),      {},        Direction::kEgress, {}};
  // Only what this process holds is removed, so only then can the kernel refuse.
  const bool holds = held_.contains(interface.index) || held_ingress_.contains(interface.index);
  if (auto fault = faults_.find(Fault::kRemove);
      fault != faults_.end() && holds &&
      (!fault->second.index || *fault->second.index == interface.index)) {
    const InjectedFault injected = fault->second;
    faults_.erase(fault);
    call.succeeded = false;
    call.returned = Clock::now();
    record(call);
    throw shaper::NetlinkError(
        "netem remove",
        describe(interface,
                 held_.contains(interface.index) ? Direction::kEgress : Direction::kIngress),
        injected.error_number, injected.kernel_message);
  }
  auto link = links_.find(interface.index);
  if (held_.erase(interface.index)) {
    if (link != links_.end() && link->second.root == Root::kJitterd) {
      link->second.root = Root::kKernelDefault;
      link->second.spec.reset();
    }
  }
  held_ingress_.erase(interface.index);
  std::erase_if(staged_, [&](const auto& key) { return key.first == interface.index; });
  if (link != links_.end()) {
    link->second.layouts.clear();
    link->second.offloads_off = false;
  }
  call.returned = Clock::now();
  record(call);
}

void FakeBackend::forget(const shaper::Interface& interface, std::optional<Direction> direction) {
  std::lock_guard lock(mutex_);
  if (!direction || *direction == Direction::kEgress) held_.erase(interface.index);
  if (!direction || *direction == Direction::kIngress) held_ingress_.erase(interface.index);
  for (const Direction d : {Direction::kEgress, Direction::kIngress}) {
    if (direction && *direction != d) continue;
    staged_.erase({interface.index, d});
    armed_.erase({interface.index, d});
  }
  if (auto link = links_.find(interface.index); link != links_.end()) {
    if (direction) {
      link->second.layouts.erase(*direction);
    } else {
      link->second.layouts.clear();
    }
  }
  const auto now = Clock::now();
  record({CallKind::kForget,
          interface,
          std::nullopt,
          false,
          false,
          true,
          now,
          now,
          direction.value_or(Direction::kEgress),
          {}});
}

std::optional<shaper::Offloads> FakeBackend::offloads_to_save(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  if (links_.at(interface.index).offloads_off) return std::nullopt;
  return shaper::Offloads{true, true, true};
}

void FakeBackend::disable_offloads(const shaper::Interface& interface,
                                   const shaper::Offloads& saved) {
  (void)saved;
  std::function<void()> hook;
  {
    std::lock_guard lock(mutex_);
    hook = on_disable_offloads_;
  }
  if (hook) hook();
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  const bool fail = std::exchange(fail_disable_offloads_, false);
  record({CallKind::kDisableOffloads,
          interface,
          std::nullopt,
          false,
          false,
          !fail,
          now,
          now,
          Direction::kEgress,
          {}});
  if (fail) {
    throw shaper::SystemError("turn offloads off", interface.name, EOPNOTSUPP,
                              "the driver cannot change them; apply without offloads: \"off\"");
  }
  links_.at(interface.index).offloads_off = true;
}

void FakeBackend::restore_offloads(const shaper::Interface& interface,
                                   const shaper::Offloads& saved) {
  (void)saved;
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  record({CallKind::kRestoreOffloads,
          interface,
          std::nullopt,
          false,
          false,
          true,
          now,
          now,
          Direction::kEgress,
          {}});
  if (auto link = links_.find(interface.index); link != links_.end())
    link->second.offloads_off = false;
}

void FakeBackend::set_ssh_ports(std::vector<std::uint16_t> ports) {
  std::lock_guard lock(mutex_);
  ssh_ports_ = std::move(ports);
}

std::vector<std::uint16_t> FakeBackend::ssh_listening_ports() {
  std::lock_guard lock(mutex_);
  return ssh_ports_;
}

bool FakeBackend::carries_default_route(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  auto link = links_.find(interface.index);
  return link != links_.end() && link->second.default_route;
}

bool FakeBackend::remove_leftover(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  record({CallKind::kRemoveLeftover,
          interface,
          std::nullopt,
          false,
          false,
          true,
          now,
          now,
          Direction::kEgress,
          {}});
  if (held_.contains(interface.index)) return false;
  auto link = links_.find(interface.index);
  if (link == links_.end() || link->second.root != Root::kJitterd) return false;
  link->second.root = Root::kKernelDefault;
  link->second.spec.reset();
  return true;
}

bool FakeBackend::adopt(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  record({CallKind::kAdopt,
          interface,
          std::nullopt,
          false,
          false,
          true,
          now,
          now,
          Direction::kEgress,
          {}});
  if (held_.contains(interface.index)) return true;
  auto link = links_.find(interface.index);
  if (link == links_.end() || link->second.root != Root::kJitterd) return false;
  held_[interface.index] = interface;
  return true;
}

}  // namespace jitterd::testing
