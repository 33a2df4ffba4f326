// Match rules: the u32 keys they compile to (exact bytes for known rules), what those keys match (a
// model of cls_u32 applied to synthetic IPv4/IPv6 headers, u32_evaluator.hpp), the port-range block
// decomposition, and every diagnostic of the JSON and text readers with its pointer or column.
#include "shaper/match_rules.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "u32_evaluator.hpp"

using namespace shaper;
using jitterd_test::ipv4;
using jitterd_test::ipv6;
using jitterd_test::matches;
using json = nlohmann::json;

namespace {

U32Key k(std::uint32_t mask, std::uint32_t value, std::int32_t offset) {
  return {htonl(mask), htonl(value), offset};
}

MatchRule text_rule(std::string_view text) {
  auto parsed = parse_match_rule_text(text);
  EXPECT_TRUE(parsed.diagnostics.empty()) << text << ": " << to_string(parsed.diagnostics);
  return parsed.rule.value_or(MatchRule{});
}

// The diagnostics of reading `rules` as the member "match" of a request.
Diagnostics json_diagnostics(const json& rules) {
  Diagnostics out;
  JsonReader reader(out);
  EXPECT_FALSE(read_match_rules(reader, rules, "/match").has_value()) << rules.dump();
  return out;
}

// The one diagnostic of `rules`: its pointer, and a piece of its message.
void expect_json_error(const json& rules, const std::string& pointer, const std::string& fragment) {
  const auto d = json_diagnostics(rules);
  ASSERT_EQ(d.size(), 1u) << rules.dump() << "\n" << to_string(d);
  EXPECT_EQ(d[0].where, pointer) << d[0].message;
  EXPECT_NE(d[0].message.find(fragment), std::string::npos) << d[0].message;
}

void expect_text_error(std::string_view text, std::size_t col, const std::string& fragment) {
  const auto parsed = parse_match_rule_text(text);
  EXPECT_FALSE(parsed.rule.has_value()) << text;
  ASSERT_EQ(parsed.diagnostics.size(), 1u) << text << "\n" << to_string(parsed.diagnostics);
  EXPECT_EQ(parsed.diagnostics[0].where, "column " + std::to_string(col))
      << parsed.diagnostics[0].message;
  EXPECT_NE(parsed.diagnostics[0].message.find(fragment), std::string::npos)
      << parsed.diagnostics[0].message;
}

}  // namespace

// --- exact keys ---------------------------------------------------------------------------------

TEST(MatchRulesCompile, Ipv4DestinationPrefixIsOneKeyAtOffset16) {
  const auto s = compile_match(text_rule("dst=10.1.2.0/24"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].eth_protocol, ETH_P_IP);
  EXPECT_EQ(s[0].keys, (std::vector<U32Key>{k(0xffffff00, 0x0a010200, 16)}));
}

TEST(MatchRulesCompile, Ipv4SourceProtocolAndPortsPerTheSection7Table) {
  const auto s = compile_match(text_rule("src=192.0.2.7,proto=udp,sport=53,dport=5353"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].keys,
            (std::vector<U32Key>{
                k(0x00ff0000, 17u << 16, 8),             // protocol byte 9
                k(0xffffffff, 0xc0000207, 12),           // source address
                k(0xffffffff, (53u << 16) | 5353u, 20),  // sport high half, dport low half
            }));
}

TEST(MatchRulesCompile, RuleWithoutFamilyGivesIpv4AndIpv6Selectors) {
  const auto s = compile_match(text_rule("proto=tcp,dport=6379"));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].eth_protocol, ETH_P_IP);
  EXPECT_EQ(s[0].keys, (std::vector<U32Key>{k(0x00ff0000, 6u << 16, 8), k(0x0000ffff, 6379, 20)}));
  EXPECT_EQ(s[1].eth_protocol, ETH_P_IPV6);
  EXPECT_EQ(s[1].keys, (std::vector<U32Key>{k(0x0000ff00, 6u << 8, 4), k(0x0000ffff, 6379, 40)}));
}

TEST(MatchRulesCompile, Ipv6Slash36CoversOneWordAndMasksTheNext) {
  const auto s = compile_match(text_rule("src=2001:db8:a000::/36"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].eth_protocol, ETH_P_IPV6);
  EXPECT_EQ(s[0].keys,
            (std::vector<U32Key>{k(0xffffffff, 0x20010db8, 8), k(0xf0000000, 0xa0000000, 12)}));
  EXPECT_TRUE(matches(s, ipv6("2001:db8:a000::1", "::1", 6)));
  EXPECT_TRUE(matches(s, ipv6("2001:db8:afff:ffff::1", "::1", 6)));
  EXPECT_FALSE(matches(s, ipv6("2001:db8:b000::1", "::1", 6)));
  EXPECT_FALSE(matches(s, ipv6("2001:db9:a000::1", "::1", 6)));
  EXPECT_FALSE(matches(s, ipv6("::1", "2001:db8:a000::1", 6)));  // as destination: no
}

TEST(MatchRulesCompile, Ipv6DestinationHostUsesFourWordsFrom24) {
  const auto s = compile_match(text_rule("dst=2001:db8::1:2"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].keys, (std::vector<U32Key>{k(0xffffffff, 0x20010db8, 24), k(0xffffffff, 0, 28),
                                            k(0xffffffff, 0, 32), k(0xffffffff, 0x00010002, 36)}));
}

TEST(MatchRulesCompile, ZeroLengthPrefixOnlyPicksTheFamily) {
  const auto s = compile_match(text_rule("dst=0.0.0.0/0"));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].eth_protocol, ETH_P_IP);
  EXPECT_TRUE(s[0].keys.empty());
  EXPECT_TRUE(matches(s, ipv4("203.0.113.9", "198.51.100.1", 17)));
  EXPECT_FALSE(matches(s, ipv6("::1", "::2", 17)));
}

TEST(MatchRulesCompile, IcmpFlavoursPickTheirOwnFamily) {
  const auto v4 = compile_match(text_rule("proto=icmp"));
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0].eth_protocol, ETH_P_IP);
  const auto v6 = compile_match(text_rule("proto=icmpv6"));
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].eth_protocol, ETH_P_IPV6);
  EXPECT_TRUE(matches(v6, ipv6("::1", "::2", kProtoIcmpV6)));
  EXPECT_FALSE(matches(v6, ipv6("::1", "::2", kProtoTcp)));
}

TEST(MatchRulesCompile, EmptyRuleMatchesEveryPacketOfBothFamilies) {
  const auto s = compile_match(MatchRule{});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(matches(s, ipv4("192.0.2.1", "192.0.2.2", 47)));
  EXPECT_TRUE(matches(s, ipv6("::1", "::2", 47)));
}

// --- meaning
// --------------------------------------------------------------------------------------

TEST(MatchRulesMeaning, EveryFieldMustMatch) {
  const auto s = compile_match(
      text_rule("src=192.0.2.0/24,dst=10.0.0.0/8,proto=tcp,sport=1024-2047,dport=22"));
  EXPECT_TRUE(matches(s, ipv4("192.0.2.200", "10.200.0.1", 6, 1500, 22)));
  EXPECT_FALSE(matches(s, ipv4("192.0.3.1", "10.200.0.1", 6, 1500, 22)));     // src
  EXPECT_FALSE(matches(s, ipv4("192.0.2.200", "11.0.0.1", 6, 1500, 22)));     // dst
  EXPECT_FALSE(matches(s, ipv4("192.0.2.200", "10.200.0.1", 17, 1500, 22)));  // protocol
  EXPECT_FALSE(matches(s, ipv4("192.0.2.200", "10.200.0.1", 6, 1023, 22)));   // sport
  EXPECT_FALSE(matches(s, ipv4("192.0.2.200", "10.200.0.1", 6, 2048, 22)));   // sport
  EXPECT_FALSE(matches(s, ipv4("192.0.2.200", "10.200.0.1", 6, 1500, 23)));   // dport
  EXPECT_FALSE(
      matches(s, ipv4("10.200.0.1", "192.0.2.200", 6, 22, 1500)));  // the reverse direction
}

TEST(MatchRulesMeaning, PortRangeMatchesExactlyItsPortsInBothFamilies) {
  const auto s = compile_match(text_rule("proto=tcp,dport=6000-6100"));
  ASSERT_EQ(s.size(), 10u);  // 5 blocks x 2 families
  for (std::uint32_t port = 0; port <= 65535; ++port) {
    const auto p = static_cast<std::uint16_t>(port);
    const bool inside = port >= 6000 && port <= 6100;
    ASSERT_EQ(matches(s, ipv4("192.0.2.1", "192.0.2.2", 6, 40000, p)), inside) << port;
    ASSERT_EQ(matches(s, ipv6("::1", "::2", 6, 40000, p)), inside) << port;
    // The source port is not looked at: any source port with a destination inside matches.
    ASSERT_TRUE(matches(s, ipv4("192.0.2.1", "192.0.2.2", 6, p, 6050))) << port;
  }
}

TEST(MatchRulesMeaning, SourceAndDestinationRangesAreACrossProduct) {
  const auto s = compile_match(text_rule("proto=udp,sport=1000-1010,dport=20-23"));
  // 1000-1010: 1000/8, 1008/2, 1010/1; 20-23: one block of 4; IPv4 and IPv6.
  EXPECT_EQ(s.size(), 3u * 1u * 2u);
  for (std::uint16_t sport = 990; sport < 1020; ++sport) {
    for (std::uint16_t dport = 15; dport < 30; ++dport) {
      const bool inside = sport >= 1000 && sport <= 1010 && dport >= 20 && dport <= 23;
      ASSERT_EQ(matches(s, ipv4("192.0.2.1", "192.0.2.2", 17, sport, dport)), inside)
          << sport << " " << dport;
      ASSERT_EQ(matches(s, ipv6("::1", "::2", 17, sport, dport)), inside) << sport << " " << dport;
    }
  }
}

// --- port blocks
// ----------------------------------------------------------------------------------

TEST(PortBlocks, KnownDecomposition) {
  EXPECT_EQ(port_blocks({6000, 6100}), (std::vector<PortBlock>{
                                           {6000, 0xfff0},  // 6000-6015
                                           {6016, 0xffc0},  // 6016-6079
                                           {6080, 0xfff0},  // 6080-6095
                                           {6096, 0xfffc},  // 6096-6099
                                           {6100, 0xffff},  // 6100
                                       }));
  EXPECT_EQ(port_blocks({0, 65535}), (std::vector<PortBlock>{{0, 0}}));
  EXPECT_EQ(port_blocks({6379, 6379}), (std::vector<PortBlock>{{6379, 0xffff}}));
  EXPECT_EQ(port_blocks({65535, 65535}), (std::vector<PortBlock>{{65535, 0xffff}}));
  EXPECT_EQ(port_blocks({1, 65534}).size(), 30u);  // the worst case: 15 growing, 15 shrinking
}

// Random ranges (fixed seed): the blocks are aligned, ascending, contiguous, cover exactly the
// range, and are fewest: no two neighbours could merge into one aligned block.
TEST(PortBlocks, CoverExactlyAlignedAndMinimal) {
  std::mt19937 rng(20260611);
  std::uniform_int_distribution<int> port(0, 65535);
  for (int i = 0; i < 2000; ++i) {
    int a = port(rng), b = port(rng);
    if (i % 4 == 0) b = std::min(65535, a + (b % 300));  // many short ranges too
    const PortRange r{static_cast<std::uint16_t>(std::min(a, b)),
                      static_cast<std::uint16_t>(std::max(a, b))};
    const auto blocks = port_blocks(r);
    ASSERT_FALSE(blocks.empty());
    ASSERT_LE(blocks.size(), 30u);
    std::uint32_t next = r.first;
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      const std::uint32_t size = 0x10000u - blocks[j].mask;
      ASSERT_EQ(blocks[j].value, next);
      ASSERT_EQ(blocks[j].value & ~std::uint32_t{blocks[j].mask} & 0xffff, 0u) << "unaligned";
      if (j > 0) {
        const std::uint32_t prev = 0x10000u - blocks[j - 1].mask;
        // Equal sizes with the first aligned to twice the size would merge.
        ASSERT_FALSE(prev == size && blocks[j - 1].value % (2 * size) == 0) << "not minimal";
      }
      next += size;
    }
    ASSERT_EQ(next, std::uint32_t{r.last} + 1);
  }
}

// --- parsing
// --------------------------------------------------------------------------------------

TEST(MatchRulesJson, ReadsEveryFieldInEveryForm) {
  Diagnostics d;
  JsonReader reader(d);
  const auto rules = read_match_rules(reader, json::parse(R"([
    {"dst": "10.0.0.0/8", "protocol": "tcp", "dst_port": 6379},
    {"src": "2001:db8::/32", "protocol": 17, "src_port": "53", "dst_port": "6000-6100"},
    {"dst": "192.0.2.7"},
    {}
  ])"),
                                      "/match");
  ASSERT_TRUE(rules) << to_string(d);
  ASSERT_EQ(rules->size(), 4u);
  EXPECT_EQ(to_string((*rules)[0]), "dst=10.0.0.0/8,proto=tcp,dport=6379");
  EXPECT_EQ(to_string((*rules)[1]), "src=2001:db8::/32,proto=udp,sport=53,dport=6000-6100");
  EXPECT_EQ((*rules)[2].dst->length, 32);  // a bare address is a host
  EXPECT_EQ(to_string((*rules)[3]), "all");
  EXPECT_EQ((*rules)[1].src->family, IpFamily::kV6);
  EXPECT_EQ((*rules)[1].src_ports, (PortRange{53, 53}));
}

TEST(MatchRulesJson, EveryDiagnosticHasItsPointerAndFix) {
  expect_json_error(json::parse(R"([{"dst": "10.0.0.0/8", "port": 1}])"), "/match/0/port",
                    "unknown key; expected one of: src, dst, protocol, src_port, dst_port");
  expect_json_error(json::parse(R"([{}, {"dst": "10.1.2.3/8"}])"), "/match/1/dst",
                    "did you mean 10.0.0.0/8?");
  expect_json_error(json::parse(R"([{"src": "2001:db8::1/32"}])"), "/match/0/src",
                    "did you mean 2001:db8::/32?");
  expect_json_error(json::parse(R"([{}, {"dst": "10.0.0.0/8", "dst_port": 6379}])"),
                    "/match/1/dst_port", "add \"protocol\": \"tcp\"");
  expect_json_error(json::parse(R"([{"protocol": "icmp", "src_port": 1}])"), "/match/0/src_port",
                    "u32 reads ports at a fixed offset");
  expect_json_error(json::parse(R"([{"src": "192.0.2.0/24", "dst": "2001:db8::/32"}])"),
                    "/match/0/dst", "is IPv6 but src is IPv4");
  expect_json_error(json::parse(R"([{"protocol": "tcp", "dst_port": "6100-6000"}])"),
                    "/match/0/dst_port", "write 6000-6100");
  expect_json_error(json::parse(R"([{"dst": "10.0.0.0/33"}])"), "/match/0/dst",
                    "from 0 to 32 for IPv4");
  expect_json_error(json::parse(R"([{"dst": "10.0.0.300"}])"), "/match/0/dst",
                    "is not an address or prefix");
  expect_json_error(json::parse(R"([{"dst": 10}])"), "/match/0/dst",
                    "expected an address or prefix");
  expect_json_error(json::parse(R"([{"protocol": "tcpp"}])"), "/match/0/protocol",
                    "expected tcp, udp, sctp");
  expect_json_error(json::parse(R"([{"protocol": 256}])"), "/match/0/protocol",
                    "0 to 255, found 256");
  expect_json_error(json::parse(R"([{"protocol": "tcp", "dst_port": 70000}])"), "/match/0/dst_port",
                    "found 70000");
  expect_json_error(json::parse(R"([{"protocol": "tcp", "dst_port": -1}])"), "/match/0/dst_port",
                    "found -1");
  expect_json_error(json::parse(R"([{"protocol": "tcp", "src_port": "ssh"}])"), "/match/0/src_port",
                    "\"ssh\" is not a port");
  expect_json_error(json::parse(R"([{"dst": "2001:db8::/32", "protocol": "icmp"}])"),
                    "/match/0/protocol", "use icmpv6");
  expect_json_error(
      json::parse(R"([{"protocol": "tcp", "src_port": "1-65534", "dst_port": "1-65534"}])"),
      "/match/0", "needs 1800 u32 selectors (2 address families x 30 source-port blocks x 30");
  expect_json_error(json::parse(R"([3])"), "/match/0", "expected an object");
  expect_json_error(json::parse(R"({"dst": "10.0.0.0/8"})"), "/match",
                    "expected an array of match rules");
}

TEST(MatchRulesJson, AllProblemsOfAllRulesAreReported) {
  const auto d = json_diagnostics(json::parse(R"([{"dst": "x", "protocol": "y"}, {"nope": 1}])"));
  ASSERT_EQ(d.size(), 3u) << to_string(d);
  EXPECT_EQ(d[0].where, "/match/0/dst");
  EXPECT_EQ(d[1].where, "/match/0/protocol");
  EXPECT_EQ(d[2].where, "/match/1/nope");
}

TEST(MatchRulesText, ParsesTheCompactForm) {
  const auto r = text_rule("dst=10.0.0.0/8,proto=tcp,dport=6379");
  ASSERT_TRUE(r.dst);
  EXPECT_EQ(to_string(*r.dst), "10.0.0.0/8");
  EXPECT_EQ(r.protocol, kProtoTcp);
  EXPECT_EQ(r.dst_ports, (PortRange{6379, 6379}));
  EXPECT_FALSE(r.src || r.src_ports);
  EXPECT_EQ(text_rule("all"), MatchRule{});
  EXPECT_EQ(text_rule("proto=47").protocol, 47);
}

TEST(MatchRulesText, RoundTripsThroughToString) {
  for (const char* text :
       {"all", "dst=10.0.0.0/8,proto=tcp,dport=6379", "src=2001:db8:a000::/36,proto=sctp,sport=1-9",
        "src=192.0.2.7/32,dst=198.51.100.0/24,proto=udp,sport=53,dport=1024-65535", "proto=icmpv6",
        "proto=200"}) {
    EXPECT_EQ(to_string(text_rule(text)), text);
  }
}

TEST(MatchRulesText, EveryDiagnosticHasItsColumn) {
  expect_text_error("dst=10.0.0.1/8,proto=tcp", 5, "did you mean 10.0.0.0/8?");
  expect_text_error("proto=tcp,dprt=1", 11,
                    "unknown key \"dprt\"; expected one of: src, dst, proto, sport, dport");
  expect_text_error("dst=10.0.0.0/8,dport=80", 22, "add \"protocol\": \"tcp\"");
  expect_text_error("proto=tcp,dport=90-80", 17, "write 80-90");
  expect_text_error("proto=tcp,dport=80,dport=81", 20, "\"dport\" is given twice");
  expect_text_error("src=10.0.0.0/8,dst=::/0", 20, "is IPv6 but src is IPv4");
  expect_text_error("proto=tcp,sport=x", 17, "\"x\" is not a port");
  expect_text_error("proto=tls", 7, "\"tls\" is not a protocol");
  expect_text_error("dst", 1, "expected key=value");
  expect_text_error("proto=tcp,", 11, "expected key=value");
  expect_text_error("", 1, "empty rule");
  expect_text_error("proto=tcp,sport=1-65534,dport=1-65534", 1, "at most 64 per rule");
}

TEST(MatchRulesValidate, RulesBuiltInCodeAreCheckedToo) {
  MatchRule r;
  r.dst = IpPrefix{IpFamily::kV4, {10, 1, 2, 3}, 8};
  r.dst_ports = PortRange{9, 8};
  const auto d = validate(r);
  ASSERT_EQ(d.size(), 3u) << to_string(d);
  EXPECT_EQ(d[0], (Diagnostic{"dst", "10.1.2.3/8 has host bits set; did you mean 10.0.0.0/8?"}));
  EXPECT_EQ(d[1].where, "dst_port");
  EXPECT_NE(d[1].message.find("write 8-9"), std::string::npos);
  EXPECT_EQ(d[2].where, "dst_port");
  r.dst->length = 40;
  EXPECT_EQ(validate(r)[0].message, "/40 is out of range; an IPv4 prefix length is 0 to 32");
}

TEST(MatchRulesValidateDeathTest, CompilingAnInvalidRuleIsAProgrammingError) {
  MatchRule r;
  r.dst_ports = PortRange{80, 80};  // no protocol
  EXPECT_DEATH(compile_match(r), "compile_match called with an invalid rule");
}

TEST(IpAddresses, ParseAndPrint) {
  EXPECT_EQ(to_string(jitterd_test::address("192.0.2.1")), "192.0.2.1");
  EXPECT_EQ(to_string(jitterd_test::address("2001:DB8:0::1")), "2001:db8::1");
  EXPECT_FALSE(parse_ip_address(""));
  EXPECT_FALSE(parse_ip_address("192.0.2"));
  EXPECT_FALSE(parse_ip_address("fe80::1%eth0"));
  EXPECT_FALSE(parse_ip_address(std::string(100, '1')));
  const auto no_length = parse_ip_prefix("10.0.0.0/");
  ASSERT_FALSE(no_length);
  ASSERT_EQ(no_length.diagnostics().size(), 1u);
  EXPECT_EQ(no_length.diagnostics()[0].where, "");
  EXPECT_EQ(no_length.diagnostics()[0].message,
            "\"10.0.0.0/\": the prefix length must be a number from 0 to 32 for IPv4");
  const auto too_long = parse_ip_prefix("::/129");
  ASSERT_FALSE(too_long);
  EXPECT_NE(to_string(too_long.diagnostics()).find("from 0 to 128 for IPv6"), std::string::npos)
      << to_string(too_long.diagnostics());
  EXPECT_EQ(parse_ip_prefix("::/0")->length, 0);
}
