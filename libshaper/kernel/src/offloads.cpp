#include "shaper/offloads.hpp"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "shaper/errors.hpp"

namespace shaper {

namespace {

// Offloads are read and written through the feature-bit ethtool commands (ETHTOOL_GFEATURES /
// SFEATURES), with the bits found by their names in the ETH_SS_FEATURES string set, as `ethtool -K`
// does. Not through the older one-feature commands (ETHTOOL_STSO ...): those act on a fixed kernel
// mask, and on 6.18 ETHTOOL_STSO leaves the newer tx-tcp-accecn-segmentation on, so TSO stays on
// for AccECN flows while ETHTOOL_GTSO reports it off (seen on a veth, checked with ethtool -k).
//
// An offload is a group of feature bits: it is on when any of them is on, and switching it sets all
// the changeable ones, the meaning `ethtool -k`/`-K` give "tso", "gso" and "gro".
struct OffloadGroup {
  const char* name;
  bool Offloads::*field;
  bool (*member)(std::string_view feature);
};
constexpr OffloadGroup kGroups[] = {
    // Every TCP segmentation flavour: tx-tcp-, -ecn-, -mangleid-, tx-tcp6-, -accecn-segmentation.
    {"tso", &Offloads::tso,
     [](std::string_view f) { return f.starts_with("tx-tcp") && f.ends_with("-segmentation"); }},
    {"gso", &Offloads::gso, [](std::string_view f) { return f == "tx-generic-segmentation"; }},
    {"gro", &Offloads::gro, [](std::string_view f) { return f == "rx-gro"; }},
};

std::string dev(const std::string& ifname) {
  return "dev " + ifname;
}

// One interface's feature bits: names by index, and the kernel's state blocks of 32 bits.
class Features {
 public:
  explicit Features(const std::string& ifname) : ifname_(ifname) {
    if (ifname.empty() || ifname.size() >= IFNAMSIZ)
      throw SystemError("ethtool", dev(ifname), ENODEV);
    // Any socket reaches the ethtool ioctl (the kernel passes device ioctls a family does not know
    // to dev_ioctl). AF_UNIX, because the shipped unit allows only AF_UNIX and AF_NETLINK.
    fd_ = UniqueFd(static_cast<int>(check_syscall(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0),
                                                  "socket for ethtool", dev(ifname))));
    load_names();
    refresh();
  }

  void refresh() {
    // u64 storage: the ethtool structs are read in place and need their natural alignment.
    const std::size_t n_blocks = (names_.size() + 31) / 32;
    std::vector<std::uint64_t> buf(
        words_for(sizeof(ethtool_gfeatures) + n_blocks * sizeof(ethtool_get_features_block)));
    auto* g = reinterpret_cast<ethtool_gfeatures*>(buf.data());
    g->cmd = ETHTOOL_GFEATURES;
    g->size = static_cast<std::uint32_t>(n_blocks);
    call(g, "ethtool get features");
    blocks_.assign(g->features, g->features + n_blocks);
  }

  bool on(const OffloadGroup& group) const {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (group.member(names_[i]) && bit(i, &ethtool_get_features_block::active)) return true;
    }
    return false;
  }

  // Requests every changeable bit of `group` on or off. Returns false when the driver lets none of
  // them change.
  bool request(const OffloadGroup& group, bool wanted) {
    const std::size_t n_blocks = blocks_.size();
    std::vector<std::uint64_t> buf(
        words_for(sizeof(ethtool_sfeatures) + n_blocks * sizeof(ethtool_set_features_block)));
    auto* s = reinterpret_cast<ethtool_sfeatures*>(buf.data());
    if (s == nullptr) std::abort();  // never: the buffer holds the header at least (tells GCC so)
    s->cmd = ETHTOOL_SFEATURES;
    s->size = static_cast<std::uint32_t>(n_blocks);
    bool any = false;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (!group.member(names_[i]) || !bit(i, &ethtool_get_features_block::available)) continue;
      const std::uint32_t mask = 1u << (i % 32);
      s->features[i / 32].valid |= mask;
      if (wanted) s->features[i / 32].requested |= mask;
      any = true;
    }
    if (!any) return false;
    // A positive result (ETHTOOL_F_WISH...) says some request waits on another feature; the caller
    // reads the state back, which says the same more precisely.
    call(s, std::string("ethtool set ") + group.name + (wanted ? " on" : " off"));
    return true;
  }

 private:
  static std::size_t words_for(std::size_t bytes) { return (bytes + 7) / 8; }

  bool bit(std::size_t i, std::uint32_t ethtool_get_features_block::*field) const {
    return (blocks_[i / 32].*field >> (i % 32)) & 1u;
  }

  void call(void* data, const std::string& operation) {
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname_.data(), ifname_.size());
    ifr.ifr_data = static_cast<char*>(data);
    if (ioctl(fd_.get(), SIOCETHTOOL, &ifr) == -1) {
      if (errno == EOPNOTSUPP)
        throw SystemError(operation, dev(ifname_) + "; the driver does not support it", errno);
      check_syscall(-1, operation, dev(ifname_));
    }
  }

  void load_names() {
    std::vector<std::uint64_t> info_buf(
        words_for(sizeof(ethtool_sset_info) + sizeof(std::uint32_t)));
    auto* info = reinterpret_cast<ethtool_sset_info*>(info_buf.data());
    info->cmd = ETHTOOL_GSSET_INFO;
    info->sset_mask = 1ull << ETH_SS_FEATURES;
    call(info, "ethtool get feature count");
    const std::uint32_t count = (info->sset_mask & (1ull << ETH_SS_FEATURES)) ? info->data[0] : 0;

    std::vector<std::uint64_t> str_buf(
        words_for(sizeof(ethtool_gstrings) + std::size_t{count} * ETH_GSTRING_LEN));
    auto* strings = reinterpret_cast<ethtool_gstrings*>(str_buf.data());
    strings->cmd = ETHTOOL_GSTRINGS;
    strings->string_set = ETH_SS_FEATURES;
    strings->len = count;
    call(strings, "ethtool get feature names");
    for (std::uint32_t i = 0; i < count; ++i) {
      const char* name =
          reinterpret_cast<const char*>(strings->data) + std::size_t{i} * ETH_GSTRING_LEN;
      names_.emplace_back(name, strnlen(name, ETH_GSTRING_LEN));
    }
  }

  std::string ifname_;
  UniqueFd fd_;
  std::vector<std::string> names_;
  std::vector<ethtool_get_features_block> blocks_;
};

Offloads state(const Features& features) {
  Offloads out;
  for (const auto& g : kGroups) out.*g.field = features.on(g);
  return out;
}

}  // namespace

Offloads read_offloads(const std::string& ifname) {
  return state(Features(ifname));
}

void write_offloads(const std::string& ifname, const Offloads& wanted) {
  Features features(ifname);
  for (const auto& g : kGroups) {
    const bool want = wanted.*g.field;
    if (features.on(g) == want) continue;
    const std::string operation = std::string("ethtool set ") + g.name + (want ? " on" : " off");
    // The kernel records the wish and recomputes the features; a bit the driver does not let change
    // (not in hw_features), or that depends on another one (TSO on scatter-gather), stays as it was
    // without an error. Reading back is the only way to know.
    if (features.request(g, want)) features.refresh();
    if (features.on(g) != want) {
      throw SystemError(operation,
                        dev(ifname) +
                            "; the driver cannot change it, or it needs another offload that "
                            "is off (tso needs scatter-gather)",
                        EOPNOTSUPP);
    }
  }
}

OffloadGuard::OffloadGuard(std::string ifname) : OffloadGuard(ifname, read_offloads(ifname)) {}

OffloadGuard::OffloadGuard(std::string ifname, const Offloads& saved)
    : ifname_(std::move(ifname)), saved_(saved) {
  try {
    write_offloads(ifname_, Offloads{false, false, false});
  } catch (...) {
    try {
      write_offloads(ifname_, saved_);
    } catch (const SystemError&) {
      // The first error is the one to report; this one usually has the same cause.
    }
    throw;
  }
  active_ = true;
}

OffloadGuard::OffloadGuard(OffloadGuard&& other) noexcept
    : ifname_(std::move(other.ifname_)),
      saved_(other.saved_),
      active_(std::exchange(other.active_, false)) {}

OffloadGuard& OffloadGuard::operator=(OffloadGuard&& other) noexcept {
  if (this != &other) {
    if (active_) {
      try {
        restore();
      } catch (const SystemError&) {
        // As in the destructor.
      }
    }
    ifname_ = std::move(other.ifname_);
    saved_ = other.saved_;
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}

OffloadGuard::~OffloadGuard() {
  if (!active_) return;
  try {
    restore();
  } catch (const SystemError&) {
    // The interface may be gone (a veth deleted with its namespace); nothing is left to restore.
  }
}

void OffloadGuard::restore() {
  if (!active_) return;
  active_ = false;
  write_offloads(ifname_, saved_);
}

}  // namespace shaper
