#pragma once
// Our own encoder for netem's TCA_OPTIONS (libnl 3.7's rtnl_netem_* miscounts the options length and
// lacks GE, rate, slot, ECN and 64-bit delays), and the decoder for what the kernel dumps back.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "shaper/netem_spec.hpp"
#include "shaper/netlink.hpp"

struct nl_msg;

namespace shaper {

// TCA_NETEM_PRNG_SEED (Linux 6.6) is missing from the 6.1 uapi headers we build against.
inline constexpr int kTcaNetemPrngSeed = 14;

enum class LossEncoding {
  kFull,         // send the loss model (restarts a GE/4-state chain in its initial state)
  kKeepRunning,  // send an empty LOSS nest: the kernel keeps the model and its current state
};

// What to put in one message beyond the always-sent full state.
struct NetemEncodePlan {
  bool send_delay_table = true;  // tables are large and the kernel keeps the old one when absent
  bool send_slot_table = true;
  LossEncoding loss = LossEncoding::kFull;
};

// Appends TCA_OPTIONS for `spec` to `msg` (whose tcmsg and TCA_KIND are already in place).
// Throws NetlinkError if the options do not fit a netlink attribute (validate() reports that first).
void append_netem_options(nl_msg* msg, const NetemSpec& spec, const NetemEncodePlan& plan);

// A complete RTM_NEWQDISC request for a netem qdisc: tcmsg, TCA_KIND "netem", TCA_OPTIONS.
// `flags`: NLM_F_CREATE|NLM_F_EXCL to install, 0 to change in place, NLM_F_CREATE|NLM_F_REPLACE to
// replace whatever is there.
NlMsgPtr build_netem_message(int ifindex, std::uint32_t handle, std::uint32_t parent, int flags,
                             const NetemSpec& spec, const NetemEncodePlan& plan);

// Bytes the options will take, to size the message buffer.
std::size_t netem_options_size_hint(const NetemSpec& spec, const NetemEncodePlan& plan);

// What the kernel reports for a netem qdisc. Tables are never dumped by the kernel, so the decoded
// spec has none; `has_slot` distinguishes "slot off" from an all-default slot.
struct DecodedNetem {
  NetemSpec spec;
  bool prng_seed_reported = false;  // 6.6+ kernels dump the seed in use
};

// Decodes a TCA_OPTIONS payload (tc_netem_qopt followed by netem attributes). Returns nullopt with
// `error` set if the payload is malformed (a kernel or protocol bug, not user data).
std::optional<DecodedNetem> decode_netem_options(std::span<const std::byte> payload,
                                                 std::string* error);

}  // namespace shaper
