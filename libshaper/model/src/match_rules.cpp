#include "shaper/match_rules.hpp"

#include <arpa/inet.h>
#include <linux/if_ether.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace shaper {

namespace {

using json = nlohmann::json;

// Longer than any textual address ("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255" is 45
// characters); anything longer is refused before it is copied.
constexpr std::size_t kMaxAddressText = 64;

// Offsets from the network header (RFC 791 / RFC 8200 layouts), see netem-kernel.md section 7.
constexpr std::int32_t kV4ProtocolWord = 8;  // TTL, protocol, checksum: protocol is byte 9
constexpr std::uint32_t kV4ProtocolMask = 0x00ff0000;
constexpr std::int32_t kV4Src = 12;
constexpr std::int32_t kV4Dst = 16;
constexpr std::int32_t kV4Ports = 20;  // IHL = 5: the transport header follows 20 bytes of IPv4
constexpr std::int32_t kV6NextHeaderWord = 4;  // payload length (2 bytes), next header, hop limit
constexpr std::uint32_t kV6NextHeaderMask = 0x0000ff00;
constexpr std::int32_t kV6Src = 8;
constexpr std::int32_t kV6Dst = 24;
constexpr std::int32_t kV6Ports =
    40;  // no extension headers: the transport header follows 40 bytes

enum class Field { kRule, kSrc, kDst, kProtocol, kSrcPort, kDstPort };
using Locate = std::function<std::string(Field)>;

int family_bits(IpFamily family) {
  return family == IpFamily::kV4 ? 32 : 128;
}
const char* family_name(IpFamily family) {
  return family == IpFamily::kV4 ? "IPv4" : "IPv6";
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A decimal number without sign or spaces, at most `max`.
std::optional<std::uint32_t> parse_decimal(std::string_view s, std::uint32_t max) {
  if (!all_digits(s) || s.size() > 10) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  if (v > max) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

std::string quoted(std::string_view s) {
  return json(std::string(s)).dump();
}

// A parser's refusal: one diagnostic without a `where`, which its caller knows (a JSON pointer, a
// column of $JITTERD_RULES...), and `why` to read it back.
Diagnostics refusal(std::string message) {
  return {{"", std::move(message)}};
}
template <typename T>
const std::string& why(const Expected<T>& refused) {
  return refused.diagnostics().front().message;
}

IpPrefix masked(IpPrefix p) {
  for (int i = 0; i < 16; ++i) {
    const int bits_here = std::clamp(p.length - i * 8, 0, 8);
    p.bytes[static_cast<std::size_t>(i)] &= static_cast<std::uint8_t>(0xff00u >> bits_here);
  }
  return p;
}

bool has_host_bits(const IpPrefix& p) {
  return masked(p) != p;
}

const char* protocol_name(std::uint8_t protocol) {
  switch (protocol) {
    case kProtoTcp:
      return "tcp";
    case kProtoUdp:
      return "udp";
    case kProtoSctp:
      return "sctp";
    case kProtoIcmp:
      return "icmp";
    case kProtoIcmpV6:
      return "icmpv6";
    default:
      return nullptr;
  }
}

bool has_ports(std::uint8_t protocol) {
  return protocol == kProtoTcp || protocol == kProtoUdp || protocol == kProtoSctp;
}

Expected<std::uint8_t> parse_protocol(std::string_view s) {
  for (std::uint8_t p : {kProtoTcp, kProtoUdp, kProtoSctp, kProtoIcmp, kProtoIcmpV6}) {
    if (s == protocol_name(p)) return p;
  }
  if (auto n = parse_decimal(s, 255)) return static_cast<std::uint8_t>(*n);
  return refusal(
      quoted(s) +
      " is not a protocol; expected tcp, udp, sctp, icmp, icmpv6 or a number from 0 to 255");
}

std::string port_range_text(PortRange r) {
  return r.first == r.last ? std::to_string(r.first)
                           : std::to_string(r.first) + "-" + std::to_string(r.last);
}

// "6379" or "6000-6100".
Expected<PortRange> parse_ports(std::string_view s) {
  const auto dash = s.find('-');
  const auto first = parse_decimal(s.substr(0, dash), 65535);
  const auto last =
      dash == std::string_view::npos ? first : parse_decimal(s.substr(dash + 1), 65535);
  if (!first || !last) {
    return refusal(quoted(s) +
                   " is not a port; expected a number from 0 to 65535 or a range such as "
                   "\"6000-6100\"");
  }
  if (*first > *last) {
    return refusal(quoted(s) + ": the first port is above the last; write " +
                   std::to_string(*last) + "-" + std::to_string(*first));
  }
  return PortRange{static_cast<std::uint16_t>(*first), static_cast<std::uint16_t>(*last)};
}

std::optional<IpFamily> rule_family(const MatchRule& rule) {
  if (rule.src) return rule.src->family;
  if (rule.dst) return rule.dst->family;
  return std::nullopt;
}

// The families a rule's selectors cover.
std::vector<IpFamily> rule_families(const MatchRule& rule) {
  if (auto f = rule_family(rule)) return {*f};
  if (rule.protocol == kProtoIcmp) return {IpFamily::kV4};
  if (rule.protocol == kProtoIcmpV6) return {IpFamily::kV6};
  return {IpFamily::kV4, IpFamily::kV6};
}

std::size_t block_count(const std::optional<PortRange>& r) {
  return r ? port_blocks(*r).size() : 1;
}

void validate_prefix(const IpPrefix& p, Field field, const Locate& where, Diagnostics& out) {
  if (p.length > family_bits(p.family)) {
    out.push_back({where(field), "/" + std::to_string(p.length) + " is out of range; an " +
                                     family_name(p.family) + " prefix length is 0 to " +
                                     std::to_string(family_bits(p.family))});
  } else if (has_host_bits(p)) {
    out.push_back({where(field), to_string(p) + " has host bits set; did you mean " +
                                     to_string(masked(p)) + "?"});
  }
}

void validate_ports(const std::optional<PortRange>& ports, const MatchRule& rule, Field field,
                    const Locate& where, Diagnostics& out) {
  if (!ports) return;
  if (ports->first > ports->last) {
    out.push_back(
        {where(field), port_range_text(*ports) + ": the first port is above the last; write " +
                           std::to_string(ports->last) + "-" + std::to_string(ports->first)});
  }
  if (!rule.protocol || !has_ports(*rule.protocol)) {
    out.push_back(
        {where(field),
         "a port needs \"protocol\": \"tcp\", \"udp\" or \"sctp\" in the same rule (u32 reads "
         "ports at "
         "a fixed offset, which holds ports only for those protocols); add \"protocol\": \"tcp\""});
  }
}

void validate_into(const MatchRule& rule, const Locate& where, Diagnostics& out) {
  const std::size_t before = out.size();
  if (rule.src) validate_prefix(*rule.src, Field::kSrc, where, out);
  if (rule.dst) validate_prefix(*rule.dst, Field::kDst, where, out);
  if (rule.src && rule.dst && rule.src->family != rule.dst->family) {
    out.push_back({where(Field::kDst), std::string("is ") + family_name(rule.dst->family) +
                                           " but src is " + family_name(rule.src->family) +
                                           "; a packet has one family: put them in two rules"});
  }
  if (auto family = rule_family(rule); family && rule.protocol) {
    if (*family == IpFamily::kV6 && *rule.protocol == kProtoIcmp) {
      out.push_back(
          {where(Field::kProtocol), "icmp is IPv4's; the addresses are IPv6: use icmpv6"});
    } else if (*family == IpFamily::kV4 && *rule.protocol == kProtoIcmpV6) {
      out.push_back(
          {where(Field::kProtocol), "icmpv6 is IPv6's; the addresses are IPv4: use icmp"});
    }
  }
  validate_ports(rule.src_ports, rule, Field::kSrcPort, where, out);
  validate_ports(rule.dst_ports, rule, Field::kDstPort, where, out);
  if (out.size() != before) return;

  const std::size_t src_blocks = block_count(rule.src_ports);
  const std::size_t dst_blocks = block_count(rule.dst_ports);
  const std::size_t families = rule_families(rule).size();
  const std::size_t selectors = src_blocks * dst_blocks * families;
  if (selectors > kMaxSelectorsPerRule) {
    out.push_back(
        {where(Field::kRule),
         "needs " + std::to_string(selectors) + " u32 selectors (" + std::to_string(families) +
             " address families x " + std::to_string(src_blocks) + " source-port blocks x " +
             std::to_string(dst_blocks) + " destination-port blocks); at most " +
             std::to_string(kMaxSelectorsPerRule) +
             " per rule: split the rule, name one address family, or use ranges that start and end "
             "on powers of two"});
  }
}

std::uint32_t word_of(const std::array<std::uint8_t, 16>& bytes, int word) {
  const auto i = static_cast<std::size_t>(word) * 4;
  return (std::uint32_t{bytes[i]} << 24) | (std::uint32_t{bytes[i + 1]} << 16) |
         (std::uint32_t{bytes[i + 2]} << 8) | std::uint32_t{bytes[i + 3]};
}

U32Key key(std::uint32_t mask, std::uint32_t value, std::int32_t offset) {
  return U32Key{htonl(mask), htonl(value & mask), offset};
}

// One key per 32-bit word the prefix covers; the last one masks only the prefix's bits.
void add_prefix_keys(const IpPrefix& p, std::int32_t base, std::vector<U32Key>& keys) {
  for (int word = 0; word * 32 < p.length; ++word) {
    const int bits = std::min(32, p.length - word * 32);
    const std::uint32_t mask = bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
    keys.push_back(key(mask, word_of(p.bytes, word), base + word * 4));
  }
}

std::string column(std::size_t index) {
  return "column " + std::to_string(index + 1);
}

}  // namespace

std::optional<IpAddress> parse_ip_address(std::string_view text) {
  if (text.empty() || text.size() > kMaxAddressText) return std::nullopt;
  const std::string s(text);
  IpAddress a;
  if (s.find(':') == std::string::npos) {
    a.family = IpFamily::kV4;
    if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
  } else {
    a.family = IpFamily::kV6;
    if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
  }
  return a;
}

std::string to_string(const IpAddress& address) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(address.family == IpFamily::kV4 ? AF_INET : AF_INET6, address.bytes.data(), buf,
            sizeof buf);
  return buf;
}

IpPrefix host_prefix(const IpAddress& address) {
  return IpPrefix{address.family, address.bytes,
                  static_cast<std::uint8_t>(family_bits(address.family))};
}

std::string to_string(const IpPrefix& prefix) {
  return to_string(IpAddress{prefix.family, prefix.bytes}) + "/" + std::to_string(prefix.length);
}

Expected<IpPrefix> parse_ip_prefix(std::string_view text) {
  const auto slash = text.find('/');
  const auto address = parse_ip_address(text.substr(0, slash));
  if (!address) {
    return refusal(quoted(text) +
                   " is not an address or prefix; expected one such as 10.0.0.0/8, 192.0.2.7 or "
                   "2001:db8::/32");
  }
  IpPrefix p = host_prefix(*address);
  if (slash != std::string_view::npos) {
    const auto length =
        parse_decimal(text.substr(slash + 1), static_cast<std::uint32_t>(family_bits(p.family)));
    if (!length) {
      return refusal(quoted(text) + ": the prefix length must be a number from 0 to " +
                     std::to_string(family_bits(p.family)) + " for " + family_name(p.family));
    }
    p.length = static_cast<std::uint8_t>(*length);
  }
  if (has_host_bits(p)) {
    return refusal(quoted(text) + " has host bits set; did you mean " + to_string(masked(p)) + "?");
  }
  return p;
}

std::vector<PortBlock> port_blocks(PortRange range) {
  std::vector<PortBlock> out;
  std::uint32_t first = range.first;
  const std::uint32_t last = range.last;
  while (first <= last) {
    // The largest block that starts at `first` (aligned to its own size) and ends by `last`.
    std::uint32_t size = first == 0 ? 0x10000u : (first & -first);
    while (first + size - 1 > last) size >>= 1;
    out.push_back(
        PortBlock{static_cast<std::uint16_t>(first), static_cast<std::uint16_t>(0x10000u - size)});
    first += size;
  }
  return out;
}

Diagnostics validate(const MatchRule& rule) {
  Diagnostics out;
  validate_into(
      rule,
      [](Field f) -> std::string {
        switch (f) {
          case Field::kRule:
            return "";
          case Field::kSrc:
            return "src";
          case Field::kDst:
            return "dst";
          case Field::kProtocol:
            return "protocol";
          case Field::kSrcPort:
            return "src_port";
          case Field::kDstPort:
            return "dst_port";
        }
        return "";
      },
      out);
  return out;
}

std::vector<U32Selector> compile_match(const MatchRule& rule) {
  if (const auto problems = validate(rule); !problems.empty()) {
    std::fprintf(stderr, "compile_match called with an invalid rule: %s\n",
                 to_string(problems).c_str());
    std::abort();
  }
  const std::vector<PortBlock> any_port{PortBlock{0, 0}};
  const auto src_blocks = rule.src_ports ? port_blocks(*rule.src_ports) : any_port;
  const auto dst_blocks = rule.dst_ports ? port_blocks(*rule.dst_ports) : any_port;

  std::vector<U32Selector> out;
  for (IpFamily family : rule_families(rule)) {
    const bool v4 = family == IpFamily::kV4;
    U32Selector base;
    base.eth_protocol = v4 ? ETH_P_IP : ETH_P_IPV6;
    if (rule.protocol) {
      base.keys.push_back(
          v4 ? key(kV4ProtocolMask, std::uint32_t{*rule.protocol} << 16, kV4ProtocolWord)
             : key(kV6NextHeaderMask, std::uint32_t{*rule.protocol} << 8, kV6NextHeaderWord));
    }
    if (rule.src) add_prefix_keys(*rule.src, v4 ? kV4Src : kV6Src, base.keys);
    if (rule.dst) add_prefix_keys(*rule.dst, v4 ? kV4Dst : kV6Dst, base.keys);
    if (!rule.src_ports && !rule.dst_ports) {
      out.push_back(std::move(base));
      continue;
    }
    // The port word: source port in the high half, destination port in the low half.
    for (const PortBlock& s : src_blocks) {
      for (const PortBlock& d : dst_blocks) {
        U32Selector selector = base;
        selector.keys.push_back(key((std::uint32_t{s.mask} << 16) | d.mask,
                                    (std::uint32_t{s.value} << 16) | d.value,
                                    v4 ? kV4Ports : kV6Ports));
        out.push_back(std::move(selector));
      }
    }
  }
  return out;
}

std::optional<MatchRule> read_match_rule(JsonReader& reader, const json& j,
                                         const std::string& pointer) {
  Diagnostics problems;
  JsonReader local(problems);
  if (!local.object(j, pointer, {"src", "dst", "protocol", "src_port", "dst_port"})) {
    for (auto& d : problems) reader.error(d.where, d.message);
    return std::nullopt;
  }
  MatchRule rule;
  for (const char* name : {"src", "dst"}) {
    const json* v = local.member(j, pointer, name, false);
    if (!v) continue;
    if (!v->is_string()) {
      local.error(pointer + "/" + name,
                  "expected an address or prefix such as \"10.0.0.0/8\", found " + v->dump());
      continue;
    }
    if (auto p = parse_ip_prefix(v->get<std::string>())) {
      (std::string_view(name) == "src" ? rule.src : rule.dst) = *p;
    } else {
      local.error(pointer + "/" + name, why(p));
    }
  }
  if (const json* v = local.member(j, pointer, "protocol", false)) {
    if (v->is_string()) {
      if (auto p = parse_protocol(v->get<std::string>())) {
        rule.protocol = *p;
      } else {
        local.error(pointer + "/protocol", why(p));
      }
    } else if (v->is_number_unsigned() && v->get<std::uint64_t>() <= 255) {
      rule.protocol = static_cast<std::uint8_t>(v->get<std::uint64_t>());
    } else {
      local.error(
          pointer + "/protocol",
          "expected tcp, udp, sctp, icmp, icmpv6 or a number from 0 to 255, found " + v->dump());
    }
  }
  for (const char* name : {"src_port", "dst_port"}) {
    const json* v = local.member(j, pointer, name, false);
    if (!v) continue;
    std::optional<PortRange> ports;
    if (v->is_number_unsigned() && v->get<std::uint64_t>() <= 65535) {
      const auto port = static_cast<std::uint16_t>(v->get<std::uint64_t>());
      ports = PortRange{port, port};
    } else if (v->is_string()) {
      auto parsed = parse_ports(v->get<std::string>());
      if (parsed) {
        ports = *parsed;
      } else {
        local.error(pointer + "/" + name, why(parsed));
      }
    } else {
      local.error(
          pointer + "/" + name,
          "expected a port from 0 to 65535 or a range such as \"6000-6100\", found " + v->dump());
    }
    if (ports) (std::string_view(name) == "src_port" ? rule.src_ports : rule.dst_ports) = ports;
  }
  // Value checks only on a rule whose fields all parsed: a missing protocol after a misspelt one
  // would otherwise add a second, misleading diagnostic on the ports.
  if (problems.empty()) {
    validate_into(
        rule,
        [&](Field f) -> std::string {
          switch (f) {
            case Field::kRule:
              return pointer;
            case Field::kSrc:
              return pointer + "/src";
            case Field::kDst:
              return pointer + "/dst";
            case Field::kProtocol:
              return pointer + "/protocol";
            case Field::kSrcPort:
              return pointer + "/src_port";
            case Field::kDstPort:
              return pointer + "/dst_port";
          }
          return pointer;
        },
        problems);
  }
  for (auto& d : problems) reader.error(d.where, d.message);
  if (!problems.empty()) return std::nullopt;
  return rule;
}

std::optional<std::vector<MatchRule>> read_match_rules(JsonReader& reader, const json& j,
                                                       const std::string& pointer) {
  if (!j.is_array()) {
    reader.error(pointer, "expected an array of match rules, found " + std::string(j.type_name()));
    return std::nullopt;
  }
  std::vector<MatchRule> rules;
  bool ok = true;
  for (std::size_t i = 0; i < j.size(); ++i) {
    auto rule = read_match_rule(reader, j[i], pointer + "/" + std::to_string(i));
    if (rule) {
      rules.push_back(std::move(*rule));
    } else {
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return rules;
}

MatchRuleParse parse_match_rule_text(std::string_view text) {
  MatchRuleParse result;
  Diagnostics& out = result.diagnostics;
  MatchRule rule;
  if (text == "all") {
    result.rule = rule;
    return result;
  }
  if (text.empty()) {
    out.push_back({column(0),
                   "empty rule; write key=value pairs such as dst=10.0.0.0/8,proto=tcp,dport=6379, "
                   "or \"all\" for every packet"});
    return result;
  }
  // Where each field's value starts, for the value checks at the end.
  std::size_t at[6] = {0, 0, 0, 0, 0, 0};
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, end - start);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      out.push_back(
          {column(start),
           "expected key=value (keys: src, dst, proto, sport, dport), found " + quoted(item)});
    } else {
      const std::string_view name = item.substr(0, eq);
      const std::string_view value = item.substr(eq + 1);
      const std::size_t value_at = start + eq + 1;
      Field field = Field::kRule;
      bool given = false;
      if (name == "src" || name == "dst") {
        field = name == "src" ? Field::kSrc : Field::kDst;
        auto& slot = name == "src" ? rule.src : rule.dst;
        given = slot.has_value();
        if (!given) {
          auto p = parse_ip_prefix(value);
          if (p)
            slot = *p;
          else
            out.push_back({column(value_at), why(p)});
        }
      } else if (name == "proto") {
        field = Field::kProtocol;
        given = rule.protocol.has_value();
        if (!given) {
          auto p = parse_protocol(value);
          if (p)
            rule.protocol = *p;
          else
            out.push_back({column(value_at), why(p)});
        }
      } else if (name == "sport" || name == "dport") {
        field = name == "sport" ? Field::kSrcPort : Field::kDstPort;
        auto& slot = name == "sport" ? rule.src_ports : rule.dst_ports;
        given = slot.has_value();
        if (!given) {
          auto p = parse_ports(value);
          if (p)
            slot = *p;
          else
            out.push_back({column(value_at), why(p)});
        }
      } else {
        out.push_back({column(start), "unknown key " + quoted(name) +
                                          "; expected one of: src, dst, proto, sport, dport"});
      }
      if (given) {
        out.push_back({column(start),
                       quoted(name) + " is given twice; a rule has one of each (use two rules to "
                                      "match either)"});
      } else if (field != Field::kRule) {
        at[static_cast<int>(field)] = value_at;
      }
    }
    start = end + 1;
  }
  if (out.empty()) {
    validate_into(
        rule, [&](Field f) { return column(at[static_cast<int>(f)]); }, out);
  }
  if (out.empty()) result.rule = rule;
  return result;
}

std::string to_string(const MatchRule& rule) {
  std::string out;
  auto add = [&](const char* name, const std::string& value) {
    out += (out.empty() ? "" : ",") + std::string(name) + "=" + value;
  };
  if (rule.src) add("src", to_string(*rule.src));
  if (rule.dst) add("dst", to_string(*rule.dst));
  if (rule.protocol) {
    const char* name = protocol_name(*rule.protocol);
    add("proto", name ? name : std::to_string(*rule.protocol));
  }
  if (rule.src_ports) add("sport", port_range_text(*rule.src_ports));
  if (rule.dst_ports) add("dport", port_range_text(*rule.dst_ports));
  return out.empty() ? "all" : out;
}

}  // namespace shaper
