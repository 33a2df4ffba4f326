#pragma once
// Our own encoder for netem's TCA_OPTIONS (libnl 3.7's rtnl_netem_* miscounts the options length
// and lacks GE, rate, slot, ECN and 64-bit delays), and the decoder for what the kernel dumps back.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "shaper/change_plan.hpp"
#include "shaper/netem_spec.hpp"
#include "shaper/netlink.hpp"
#include "shaper/netlink_message.hpp"
#include "shaper/tc_types.hpp"

namespace shaper {

// TCA_NETEM_PRNG_SEED (Linux 6.6) is missing from the 6.1 uapi headers we build against.
inline constexpr int kTcaNetemPrngSeed = 14;

// Appends TCA_OPTIONS for `spec` to `msg` (whose tcmsg and TCA_KIND are already in place).
// Throws NetlinkError if the options do not fit a netlink attribute (validate() reports that
// first).
void append_netem_options(NetlinkMessage& msg, const NetemSpec& spec, const NetemEncodePlan& plan);

// A complete RTM_NEWQDISC request for a netem qdisc: tcmsg, TCA_KIND "netem", TCA_OPTIONS.
// `flags`: NLM_F_CREATE|NLM_F_EXCL to install, 0 to change in place, NLM_F_CREATE|NLM_F_REPLACE to
// replace whatever is there.
NlMsgPtr build_netem_message(int ifindex, std::uint32_t handle, std::uint32_t parent, int flags,
                             const NetemSpec& spec, const NetemEncodePlan& plan);

// Bytes the options will take, to size the message buffer.
std::size_t netem_options_size_hint(const NetemSpec& spec, const NetemEncodePlan& plan);

// Decodes a TCA_OPTIONS payload (tc_netem_qopt followed by netem attributes) from a reply to
// `operation` about `object`. A malformed payload is the kernel's data, not the user's: it throws
// NetlinkError(operation, object, EPROTO, what is wrong).
DecodedNetem decode_netem_options(std::span<const std::byte> payload, const std::string& operation,
                                  const std::string& object);

}  // namespace shaper
