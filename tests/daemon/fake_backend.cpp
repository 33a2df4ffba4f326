#include "fake_backend.hpp"

#include <linux/pkt_sched.h>

#include <cerrno>
#include <thread>

#include "shaper/errors.hpp"

namespace jitterd::testing {

namespace {

std::string describe(const shaper::Interface& interface) {
  return "dev " + interface.name + " handle " + shaper::format_handle(shaper::kJitterdRootHandle);
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
  }
  return "?";
}

void FakeBackend::add_interface(const std::string& name, int index, Root root) {
  std::lock_guard lock(mutex_);
  Link link{name, root, std::nullopt, {}};
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

void FakeBackend::set_apply_delay(std::chrono::nanoseconds delay) {
  std::lock_guard lock(mutex_);
  apply_delay_ = delay;
}

std::vector<FakeBackend::Call> FakeBackend::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
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

bool FakeBackend::installed(const shaper::Interface& interface) const {
  std::lock_guard lock(mutex_);
  return held_.contains(interface.index);
}

void FakeBackend::apply(const shaper::Interface& interface, const shaper::NetemSpec& spec,
                        bool force) {
  Call call;
  call.kind = CallKind::kApply;
  call.interface = interface;
  call.spec = spec;
  call.force = force;
  call.entered = Clock::now();
  std::chrono::nanoseconds delay;
  {
    std::lock_guard lock(mutex_);
    delay = apply_delay_;
  }
  // Outside the lock: the test thread may look while "the kernel" is slow.
  if (delay > std::chrono::nanoseconds(0)) std::this_thread::sleep_for(delay);

  std::lock_guard lock(mutex_);
  auto fail = [&](const auto& error) {
    call.succeeded = false;
    call.returned = Clock::now();
    record(call);
    throw error;
  };
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
  auto link = links_.find(interface.index);
  if (link == links_.end()) {
    fail(shaper::NetlinkError("netem install", describe(interface), ENODEV, "Cannot find device"));
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
  link->second.spec = spec;
  held_[interface.index] = interface;
  call.returned = Clock::now();
  record(call);
}

void FakeBackend::remove(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  Call call{CallKind::kRemove, interface, std::nullopt, false, false, true, Clock::now(), {}};
  if (held_.erase(interface.index)) {
    if (auto link = links_.find(interface.index);
        link != links_.end() && link->second.root == Root::kJitterd) {
      link->second.root = Root::kKernelDefault;
      link->second.spec.reset();
    }
  }
  call.returned = Clock::now();
  record(call);
}

void FakeBackend::forget(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  held_.erase(interface.index);
  const auto now = Clock::now();
  record({CallKind::kForget, interface, std::nullopt, false, false, true, now, now});
}

bool FakeBackend::remove_leftover(const shaper::Interface& interface) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  record({CallKind::kRemoveLeftover, interface, std::nullopt, false, false, true, now, now});
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
  record({CallKind::kAdopt, interface, std::nullopt, false, false, true, now, now});
  if (held_.contains(interface.index)) return true;
  auto link = links_.find(interface.index);
  if (link == links_.end() || link->second.root != Root::kJitterd) return false;
  held_[interface.index] = interface;
  return true;
}

}  // namespace jitterd::testing
