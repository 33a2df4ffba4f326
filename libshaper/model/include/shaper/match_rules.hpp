#pragma once
// Match rules: which packets a profile shapes ("dst 10.0.0.0/8, tcp port 6379"), as typed values,
// read from JSON (profiles, requests) or from jitterctl's compact text form, and compiled to u32
// selectors (u32_match.hpp). A rule ANDs its fields; a rule set (a vector of rules) ORs its rules.
//
// What u32 can and cannot see: it matches words at fixed offsets from the network header. Ports are
// therefore read where they are when the IPv4 header has no options (IHL = 5, 20 bytes, as tc
// itself assumes) and when IPv6 has no extension headers (the transport header at byte 40). A
// packet with IPv4 options or IPv6 extension headers is compared at the wrong place and normally
// does not match (it then goes unshaped, the safe side); ports are only accepted with tcp, udp or
// sctp, whose headers start with the source and destination ports.

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/expected.hpp"
#include "shaper/json_reader.hpp"
#include "shaper/u32_match.hpp"

namespace shaper {

enum class IpFamily : std::uint8_t { kV4, kV6 };

// An IPv4 or IPv6 address. IPv4 uses bytes[0..3]; the remaining bytes are zero.
struct IpAddress {
  IpFamily family = IpFamily::kV4;
  std::array<std::uint8_t, 16> bytes{};  // network byte order
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// "192.0.2.1", "2001:db8::1" (inet_pton's forms, no zone suffix); nullopt for anything else.
std::optional<IpAddress> parse_ip_address(std::string_view text);
std::string to_string(const IpAddress& address);

// An address prefix; host bits (beyond `length`) are always zero in a valid prefix.
struct IpPrefix {
  IpFamily family = IpFamily::kV4;
  std::array<std::uint8_t, 16> bytes{};  // network byte order; IPv4 uses bytes[0..3]
  std::uint8_t length = 0;               // 0..32 (IPv4) or 0..128 (IPv6)
  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};

// The one-address prefix: /32 or /128.
IpPrefix host_prefix(const IpAddress& address);
std::string to_string(const IpPrefix& prefix);

// "10.0.0.0/8", "2001:db8::/32", or a bare address (/32, /128). On failure, one diagnostic without
// a `where` (the caller knows it) saying what is wrong and the fix ("10.1.2.3/8 has host bits set;
// did you mean 10.0.0.0/8?").
Expected<IpPrefix> parse_ip_prefix(std::string_view text);

// IP protocol numbers the rules name (IANA "Protocol Numbers").
inline constexpr std::uint8_t kProtoIcmp = 1;
inline constexpr std::uint8_t kProtoTcp = 6;
inline constexpr std::uint8_t kProtoUdp = 17;
inline constexpr std::uint8_t kProtoIcmpV6 = 58;
inline constexpr std::uint8_t kProtoSctp = 132;

struct PortRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;  // inclusive; first <= last in a valid range
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

// Every present field must match. src and dst, when both present, are of one family.
struct MatchRule {
  std::optional<IpPrefix> src;
  std::optional<IpPrefix> dst;
  std::optional<std::uint8_t> protocol;  // IP protocol (IPv4) / next header (IPv6)
  std::optional<PortRange> src_ports;    // only with tcp, udp or sctp
  std::optional<PortRange> dst_ports;
  friend bool operator==(const MatchRule&, const MatchRule&) = default;
};

// A rule becomes one u32 selector per (family x source-port block x destination-port block); above
// this many the filter chain gets long for little benefit, and the rule is refused with a
// diagnostic.
inline constexpr std::size_t kMaxSelectorsPerRule = 64;

// The aligned power-of-two blocks that exactly cover [first, last], fewest possible, in ascending
// order: 6000-6100 -> 6000/16, 6016/64, 6080/16, 6096/4, 6100/1. Each block is a u32 (mask, value)
// on the 16-bit port. At most 30 blocks for any range.
struct PortBlock {
  std::uint16_t value = 0;  // first port of the block
  std::uint16_t mask = 0;   // 0xffff with the block's low bits cleared
  friend bool operator==(const PortBlock&, const PortBlock&) = default;
};
std::vector<PortBlock> port_blocks(PortRange range);

// Every check the readers make on values, for rules built in code. Each diagnostic's `where` is the
// JSON member name ("dst_port", "src"), or "" for the rule as a whole (too many selectors).
Diagnostics validate(const MatchRule& rule);

// Compiles a valid rule (validate(rule) empty; anything else is a programming error and aborts) to
// the selectors that together match exactly its packets (under the IHL = 5 / no-extension-header
// assumption above). A rule without addresses gives an IPv4 and an IPv6 selector (only one when the
// protocol is icmp or icmpv6, which belong to one family).
std::vector<U32Selector> compile_match(const MatchRule& rule);

// Reads one rule object: {"src": "2001:db8::/32", "dst": "10.0.0.0/8", "protocol": "tcp" | "udp" |
// "sctp" | "icmp" | "icmpv6" | 0-255, "src_port": 22 | "22" | "6000-6100", "dst_port": ...}. Every
// problem is reported through `reader` with its pointer below `pointer` ("/match/1/dst_port"), and
// the rule is validated (validate above); nullopt if anything was reported.
std::optional<MatchRule> read_match_rule(JsonReader& reader, const nlohmann::json& j,
                                         const std::string& pointer);

// Reads an array of rule objects (a rule set) at `pointer`; nullopt if anything was reported.
std::optional<std::vector<MatchRule>> read_match_rules(JsonReader& reader, const nlohmann::json& j,
                                                       const std::string& pointer);

struct MatchRuleParse {
  std::optional<MatchRule> rule;  // set only when there are no diagnostics
  Diagnostics diagnostics;  // each `where` is "column N" (1-based) of the offending key or value
};

// jitterctl's compact form: comma-separated key=value with keys src, dst, proto, sport, dport and
// the same values as the JSON form ("dst=10.0.0.0/8,proto=tcp,dport=6379"), or "all" for the rule
// that matches every packet. Validated like the JSON form.
MatchRuleParse parse_match_rule_text(std::string_view text);

// The compact form of a rule (keys in the order src, dst, proto, sport, dport; "all" for the rule
// that matches everything). parse_match_rule_text(to_string(r)).rule == r.
std::string to_string(const MatchRule& rule);

}  // namespace shaper
