#pragma once
// ICMP echo probes for the protocol's `probe` method (docs/protocol.md): N echo requests at a fixed
// interval to each of a few IPv4 addresses, each round trip measured from the send to the kernel's
// receive timestamp of the reply (SO_TIMESTAMPNS), so that the time the daemon takes to wake up
// and read the reply is not in it. `jitterctl fleet validate` uses it to probe between the hosts
// of a fleet through their shaped links.
//
// The sockets are ICMP datagram sockets (SOCK_DGRAM, IPPROTO_ICMP: "ping sockets"), not raw ones:
// they need no capability (the shipped unit gives jitterd exactly CAP_NET_ADMIN, and CAP_NET_RAW
// would let it forge any packet), only a gid inside net.ipv4.ping_group_range (per network
// namespace; systemd sets "0 2147483647", the kernel's default "1 0" allows nobody), and the
// kernel hands each socket only the replies to its own echo identifier, so probes running side by
// side never see each other's replies.
//
// Runs blocking on the caller's thread (the server runs it on a thread of its own, so the loop,
// with every schedule and every other request, is never held).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clock.hpp"

namespace jitterd {

// The bounds of one probe request: beyond them it is refused (docs/protocol.md, probe).
inline constexpr std::size_t kMaxProbeAddresses = 16;    // a host probing a fleet's others
inline constexpr std::uint32_t kMaxProbeCount = 10'000;  // per address; fits the 16-bit seq
inline constexpr Nanoseconds kMinProbeInterval = std::chrono::milliseconds(1);
inline constexpr Nanoseconds kMaxProbeInterval = std::chrono::seconds(10);
// The whole request, count x interval plus the wait for the last reply: a connection with a probe
// running holds a thread, so a probe is short.
inline constexpr Nanoseconds kMaxProbeDuration = std::chrono::seconds(120);
inline constexpr Nanoseconds kMaxProbeWait = std::chrono::seconds(10);
// Echo payload bytes: ping's default (56), so that a probe is the size the profiles were captured
// with.
inline constexpr std::size_t kProbePayloadBytes = 56;

struct ProbeRequest {
  std::vector<std::string> addresses;  // IPv4, dotted quad, checked by the dispatcher
  std::uint32_t count = 0;
  Nanoseconds interval{0};
  Nanoseconds wait{0};  // after the last send, how long replies are still awaited
};

struct ProbeSeries {
  std::string address;
  // One per probe sent, in order: when it was sent (CLOCK_REALTIME) and its round trip, nullopt
  // for no reply within `wait` of the last send (lost).
  std::vector<Nanoseconds> sent;
  std::vector<std::optional<Nanoseconds>> rtt;
  std::uint64_t errors = 0;  // ICMP errors received instead of replies (unreachable...)
};

// Probes every address of `request` side by side, one socket each. Throws shaper::SystemError when
// a socket cannot be made or used (the hint names ping_group_range for EACCES). `stop` ends the run
// early (the daemon shutting down): what was measured so far is returned.
std::vector<ProbeSeries> run_probes(const ProbeRequest& request, const std::atomic<bool>& stop);

}  // namespace jitterd
