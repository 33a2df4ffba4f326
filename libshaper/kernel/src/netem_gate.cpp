#include "shaper/netem_gate.hpp"

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>

#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "shaper/change_plan.hpp"
#include "shaper/errors.hpp"
#include "shaper/netlink_message.hpp"

namespace shaper {

namespace {

constexpr const char* kGateName = "jitterd_gate";
constexpr std::uint16_t kGateFilterPrio = 1;
// The map's one key.
constexpr std::uint32_t kGateKey = 0;

std::string describe_gate(const Interface& interface) {
  return "dev " + interface.name + " handle " + format_handle(kJitterdRootHandle) + " (gated)";
}

std::string describe_band(const Interface& interface, int band) {
  return "dev " + interface.name + " handle " + format_handle(gate_band_handle(band)) + " parent " +
         format_handle(gate_band_class(band));
}

long bpf(int command, bpf_attr& attr) {
  return ::syscall(__NR_bpf, command, &attr, sizeof attr);
}

std::uint64_t encode(std::uint8_t code, std::uint8_t dst, std::uint8_t src, std::int16_t off,
                     std::int32_t imm) {
  bpf_insn insn{};
  insn.code = code;
  insn.dst_reg = dst & 0xf;
  insn.src_reg = src & 0xf;
  insn.off = off;
  insn.imm = imm;
  std::uint64_t out = 0;
  static_assert(sizeof insn == sizeof out);
  std::memcpy(&out, &insn, sizeof out);
  return out;
}

constexpr std::uint8_t kR0 = BPF_REG_0, kR1 = BPF_REG_1, kR2 = BPF_REG_2, kR6 = BPF_REG_6,
                       kR7 = BPF_REG_7, kR10 = BPF_REG_10;

// Errors of a gate whose part the kernel does not have or lets no one load.
SystemError bpf_error(const std::string& operation, int error_number, std::string detail = {}) {
  std::string hint = std::move(detail);
  auto add = [&](const std::string& text) { hint += (hint.empty() ? "" : "; ") + text; };
  if (error_number == EPERM) {
    add("loading a BPF program needs CAP_BPF (Linux 5.8+, or CAP_SYS_ADMIN) besides CAP_NET_ADMIN, "
        "and the bpf system call: under systemd, install the drop-in jitterd-switch-gate.conf "
        "(docs/daemon.md, \"Kernel-timed switches\"), or turn the kernel-timed switch off "
        "(\"switch_gate\": \"off\" in the daemon's config)");
  } else if (error_number == ENOSYS || error_number == EINVAL) {
    add("this kernel cannot load the gate (CONFIG_BPF_SYSCALL, BPF array maps, SCHED_CLS "
        "programs and bpf_ktime_get_ns are needed): turn the kernel-timed switch off "
        "(\"switch_gate\": \"off\" in the daemon's config)");
  }
  return SystemError(operation, kGateName, error_number, std::move(hint));
}

}  // namespace

std::vector<std::uint64_t> gate_program(int map_fd) {
  // r0 = the classid. r6 (callee-saved) keeps the word across the second call.
  const std::int32_t band0 = static_cast<std::int32_t>(kGateBandClass0);
  return {
      // r1 = &map (ld_imm64 with a map fd: two slots)
      encode(BPF_LD | BPF_DW | BPF_IMM, kR1, BPF_PSEUDO_MAP_FD, 0, map_fd),
      encode(0, 0, 0, 0, 0),
      // *(u32 *)(r10 - 4) = 0; r2 = r10 - 4: the key
      encode(BPF_ST | BPF_MEM | BPF_W, kR10, 0, -4, static_cast<std::int32_t>(kGateKey)),
      encode(BPF_ALU64 | BPF_MOV | BPF_X, kR2, kR10, 0, 0),
      encode(BPF_ALU64 | BPF_ADD | BPF_K, kR2, 0, 0, -4),
      encode(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem),
      // no value (cannot happen for an array map's key 0; the verifier wants the check): band 0
      encode(BPF_JMP | BPF_JEQ | BPF_K, kR0, 0, 11, 0),
      encode(BPF_LDX | BPF_MEM | BPF_DW, kR6, kR0, 0, 0),
      encode(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_ktime_get_ns),
      // r7 = word & 1 (the band after); r6 = word without that bit (the deadline)
      encode(BPF_ALU64 | BPF_MOV | BPF_X, kR7, kR6, 0, 0),
      encode(BPF_ALU64 | BPF_AND | BPF_K, kR7, 0, 0, 1),
      encode(BPF_ALU64 | BPF_RSH | BPF_K, kR6, 0, 0, 1),
      encode(BPF_ALU64 | BPF_LSH | BPF_K, kR6, 0, 0, 1),
      // now >= deadline (unsigned): band after; else the other one
      encode(BPF_JMP | BPF_JGE | BPF_X, kR0, kR6, 1, 0),
      encode(BPF_ALU64 | BPF_XOR | BPF_K, kR7, 0, 0, 1),
      encode(BPF_ALU64 | BPF_ADD | BPF_K, kR7, 0, 0, band0),
      encode(BPF_ALU64 | BPF_MOV | BPF_X, kR0, kR7, 0, 0),
      encode(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
      encode(BPF_ALU64 | BPF_MOV | BPF_K, kR0, 0, 0, band0),
      encode(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
}

// --- GateProgram
// ----------------------------------------------------------------------------------

GateProgram GateProgram::load() {
  bpf_attr map_attr{};
  map_attr.map_type = BPF_MAP_TYPE_ARRAY;
  map_attr.key_size = sizeof(std::uint32_t);
  map_attr.value_size = sizeof(std::uint64_t);
  map_attr.max_entries = 1;
  std::strncpy(map_attr.map_name, kGateName, sizeof map_attr.map_name - 1);
  const long map = bpf(BPF_MAP_CREATE, map_attr);
  if (map < 0) throw bpf_error("bpf map create", errno);
  UniqueFd map_fd(static_cast<int>(map));

  const std::vector<std::uint64_t> insns = gate_program(map_fd.get());
  static constexpr char kLicense[] = "GPL";
  auto load_with = [&](char* log, std::uint32_t log_size) {
    bpf_attr attr{};
    attr.prog_type = BPF_PROG_TYPE_SCHED_CLS;
    attr.insn_cnt = static_cast<std::uint32_t>(insns.size());
    attr.insns = reinterpret_cast<std::uint64_t>(insns.data());
    attr.license = reinterpret_cast<std::uint64_t>(kLicense);
    attr.log_level = log ? 1 : 0;
    attr.log_buf = reinterpret_cast<std::uint64_t>(log);
    attr.log_size = log_size;
    std::strncpy(attr.prog_name, kGateName, sizeof attr.prog_name - 1);
    return bpf(BPF_PROG_LOAD, attr);
  };
  long program = load_with(nullptr, 0);
  if (program < 0) {
    const int first = errno;
    if (first == EPERM || first == ENOSYS) throw bpf_error("bpf program load", first);
    // Again with the verifier's log, which says what it refused.
    std::string log(64 * 1024, '\0');
    program = load_with(log.data(), static_cast<std::uint32_t>(log.size()));
    if (program < 0) {
      log.resize(std::strlen(log.c_str()));
      while (!log.empty() && log.back() == '\n') log.pop_back();
      throw bpf_error("bpf program load", errno, log.empty() ? "" : "verifier: " + log);
    }
  }
  return GateProgram(std::move(map_fd), UniqueFd(static_cast<int>(program)));
}

void GateProgram::write(std::uint64_t word) {
  const std::uint32_t key = kGateKey;
  bpf_attr attr{};
  attr.map_fd = static_cast<std::uint32_t>(map_.get());
  attr.key = reinterpret_cast<std::uint64_t>(&key);
  attr.value = reinterpret_cast<std::uint64_t>(&word);
  attr.flags = BPF_ANY;
  if (bpf(BPF_MAP_UPDATE_ELEM, attr) < 0) throw bpf_error("bpf map update", errno);
}

std::uint64_t GateProgram::read() const {
  const std::uint32_t key = kGateKey;
  std::uint64_t word = 0;
  bpf_attr attr{};
  attr.map_fd = static_cast<std::uint32_t>(map_.get());
  attr.key = reinterpret_cast<std::uint64_t>(&key);
  attr.value = reinterpret_cast<std::uint64_t>(&word);
  if (bpf(BPF_MAP_LOOKUP_ELEM, attr) < 0) throw bpf_error("bpf map lookup", errno);
  return word;
}

// --- GatedNetem
// -----------------------------------------------------------------------------------

namespace {

NlMsgPtr build_prio_root_message(int ifindex, int flags) {
  NetlinkMessage msg(RTM_NEWQDISC, flags, "prio qdisc");
  msg.append_tcmsg(ifindex, kJitterdRootHandle, TC_H_ROOT);
  msg.put_string(TCA_KIND, "prio");
  tc_prio_qopt options{};
  options.bands = static_cast<int>(kGateBands);
  // Every priority to band 0: what the gate does not classify (nothing) goes there.
  std::memset(options.priomap, 0, sizeof options.priomap);
  msg.put_value(TCA_OPTIONS, options);
  return std::move(msg).release();
}

NlMsgPtr build_gate_filter_message(int ifindex, int program_fd) {
  NetlinkMessage msg(RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_EXCL, "bpf filter");
  msg.append_tcmsg(ifindex, 0, kJitterdRootHandle,
                   (std::uint32_t{kGateFilterPrio} << 16) | htons(ETH_P_ALL));
  msg.put_string(TCA_KIND, "bpf");
  const NetlinkMessage::Nest options = msg.begin_nest(TCA_OPTIONS);
  msg.put_value(TCA_BPF_FD, static_cast<std::uint32_t>(program_fd));
  msg.put_string(TCA_BPF_NAME, kGateName);
  msg.end_nest(options);
  return std::move(msg).release();
}

NetlinkError with_gate_hint(const NetlinkError& e) {
  if (!e.hint().empty()) return e;
  if (e.kernel_message().find("cannot mix duplicating netems") != std::string::npos) {
    return NetlinkError(
        e.operation(), e.object(), e.error_number(), e.kernel_message(),
        "a kernel-timed switch holds two netems on the device, and this kernel refuses a netem "
        "with duplication next to another one (the fix for CVE-2025-38553): use no duplication, "
        "or turn the kernel-timed switch off (\"switch_gate\": \"off\" in the daemon's config)");
  }
  return e;
}

}  // namespace

GatedNetem::GatedNetem(NetemEngine& engine, Interface interface, GateProgram program,
                       const NetemSpec& spec)
    : engine_(&engine),
      interface_(std::move(interface)),
      program_(std::move(program)),
      specs_{spec, spec} {}

GatedNetem::GatedNetem(GatedNetem&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      interface_(std::move(other.interface_)),
      program_(std::move(other.program_)),
      specs_{std::move(other.specs_[0]), std::move(other.specs_[1])},
      active_(other.active_),
      armed_(other.armed_) {}

GatedNetem& GatedNetem::operator=(GatedNetem&& other) noexcept {
  if (this != &other) {
    remove_quietly();
    engine_ = std::exchange(other.engine_, nullptr);
    interface_ = std::move(other.interface_);
    program_ = std::move(other.program_);
    specs_[0] = std::move(other.specs_[0]);
    specs_[1] = std::move(other.specs_[1]);
    active_ = other.active_;
    armed_ = other.armed_;
  }
  return *this;
}

GatedNetem::~GatedNetem() {
  remove_quietly();
}

void GatedNetem::remove_quietly() noexcept {
  try {
    remove();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitterd: removing the gated netem of %s: %s\n", interface_.name.c_str(),
                 e.what());
  }
}

GatedNetem GatedNetem::install(NetemEngine& engine, const Interface& interface,
                               const NetemSpec& spec, const InstallOptions& options) {
  auto diagnostics = validate(spec);
  if (!diagnostics.empty()) throw std::invalid_argument(to_string(diagnostics));
  const int flags = engine.root_install_flags(
      interface, options, "gated netem install (" + describe_gate(interface) + ")");
  // The program first: a kernel that cannot load it leaves the device untouched.
  GateProgram program = GateProgram::load();
  NlMsgPtr root = build_prio_root_message(interface.index, flags);
  try {
    engine.socket().request(root.get(), "gated netem install", describe_gate(interface));
  } catch (const NetlinkError& e) {
    throw with_missing_part_hint(e, "the prio qdisc, the root of a kernel-timed switch",
                                 "sch_prio");
  }
  // From here the owner removes the root (and all under it) if a step fails.
  GatedNetem gated(engine, interface, std::move(program), spec);
  for (int band = 0; band < static_cast<int>(kGateBands); ++band) {
    NlMsgPtr leaf =
        build_netem_message(interface.index, gate_band_handle(band), gate_band_class(band),
                            NLM_F_CREATE | NLM_F_EXCL, spec, NetemEncodePlan{});
    try {
      engine.socket().request(leaf.get(), "netem install", describe_band(interface, band));
    } catch (const NetlinkError& e) {
      throw with_gate_hint(e);
    }
  }
  NlMsgPtr filter = build_gate_filter_message(interface.index, gated.program_.program_fd());
  try {
    engine.socket().request(filter.get(), "gate filter install",
                            "dev " + interface.name + " parent " +
                                format_handle(kJitterdRootHandle) + " bpf " + kGateName);
  } catch (const NetlinkError& e) {
    throw with_missing_part_hint(e, "the bpf classifier, which keeps the switch's deadline",
                                 "cls_bpf");
  }
  return gated;
}

int GatedNetem::band(Clock::time_point now) const {
  if (armed_ && now >= *armed_) return 1 - active_;
  return active_;
}

const NetemSpec& GatedNetem::spec(Clock::time_point now) const {
  return specs_[band(now)];
}

std::optional<GatedNetem::Clock::time_point> GatedNetem::settle(Clock::time_point now) {
  if (!armed_ || now < *armed_) return std::nullopt;
  active_ = 1 - active_;
  armed_.reset();
  return lands_;
}

bool GatedNetem::disarm() {
  if (!armed_) return false;
  program_.write(gate_word(std::chrono::nanoseconds(0), active_));
  armed_.reset();
  return true;
}

PreparedChange GatedNetem::prepare_band_change(int band, const NetemSpec& spec) {
  if (!engine_) {
    throw OwnershipError("gated netem change (" + describe_gate(interface_) + "): not owned");
  }
  auto diagnostics = validate(spec);
  if (!diagnostics.empty()) throw std::invalid_argument(to_string(diagnostics));
  ChangePlan plan = plan_change(specs_[band], spec, /*tables_known=*/true);
  PreparedChange prepared;
  prepared.message = build_netem_message(interface_.index, gate_band_handle(band),
                                         gate_band_class(band), 0, plan.to_send, plan.encode);
  prepared.object = describe_band(interface_, band);
  prepared.applied = [this, band, sent = std::move(plan.to_send)]() mutable {
    specs_[band] = std::move(sent);
  };
  prepared.explain = with_gate_hint;
  return prepared;
}

PreparedChange GatedNetem::prepare_change(const NetemSpec& spec) {
  const auto now = Clock::now();
  settle(now);
  if (armed_) {
    throw std::logic_error("gated netem change (" + describe_gate(interface_) +
                           "): a switch is armed; disarm it first");
  }
  const int idle = 1 - active_;
  PreparedChange prepared = prepare_band_change(idle, spec);
  // On the ACK the idle band holds `spec`; the gate then points at it, from now on.
  prepared.applied = [this, idle, band_applied = std::move(prepared.applied)]() {
    band_applied();
    program_.write(gate_word(std::chrono::nanoseconds(0), idle));
    active_ = idle;
  };
  return prepared;
}

void GatedNetem::change(const NetemSpec& spec) {
  std::vector<PreparedChange> one;
  one.push_back(prepare_change(spec));
  if (auto error = engine_->change(one).front()) throw *error;
}

void GatedNetem::arm(const NetemSpec& spec, Clock::time_point deadline) {
  const auto now = Clock::now();
  settle(now);
  disarm();
  const int idle = 1 - active_;
  std::vector<PreparedChange> one;
  one.push_back(prepare_band_change(idle, spec));
  if (auto error = engine_->change(one).front()) throw *error;
  program_.write(gate_word(deadline.time_since_epoch(), idle));
  // A deadline that passed before the word was written (an arm that came late: a starved daemon,
  // a commit read just before its deadline) moved the traffic at the write, not at the deadline:
  // the switch is in force from the write's return at the latest, and settle() says so.
  armed_ = deadline;
  lands_ = std::max(deadline, Clock::now());
}

void GatedNetem::remove() {
  if (!engine_) return;
  NetemEngine* engine = std::exchange(engine_, nullptr);
  NetlinkMessage msg(RTM_DELQDISC, 0, "gated netem remove");
  // Our handle: the kernel refuses if the root is no longer ours. The root takes both bands, their
  // netems and the filter (and with it the program's last reference) along.
  msg.append_tcmsg(interface_.index, kJitterdRootHandle, TC_H_ROOT);
  engine->socket().request(msg.get(), "gated netem remove", describe_gate(interface_));
}

}  // namespace shaper
