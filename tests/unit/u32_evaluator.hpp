#pragma once
// A test model of what cls_u32 does with our selectors, so tests can check what a rule MATCHES and
// not only its bytes: each key reads the big-endian 32-bit word at `offset` from the network
// header, masks it and compares; a word past the end of the packet fails the key (as the kernel's
// u32_classify does). Plus builders for synthetic IPv4/IPv6 headers with a transport header's two
// ports.

#include <arpa/inet.h>
#include <linux/if_ether.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shaper/match_rules.hpp"
#include "shaper/u32_match.hpp"

namespace jitterd_test {

struct Packet {
  std::uint16_t eth_protocol = 0;   // host order
  std::vector<std::uint8_t> bytes;  // from the network header on
};

inline bool matches(const shaper::U32Selector& s, const Packet& p) {
  if (s.eth_protocol != p.eth_protocol) return false;
  for (const auto& k : s.keys) {
    if (k.offset < 0 || static_cast<std::size_t>(k.offset) + 4 > p.bytes.size()) return false;
    std::uint32_t word_be;
    std::memcpy(&word_be, p.bytes.data() + k.offset, 4);
    if ((word_be & k.mask_be) != k.value_be) return false;
  }
  return true;
}

inline bool matches(const std::vector<shaper::U32Selector>& selectors, const Packet& p) {
  for (const auto& s : selectors) {
    if (matches(s, p)) return true;
  }
  return false;
}

// A rule set matches when any of its rules does.
inline bool matches(const std::vector<shaper::MatchRule>& rules, const Packet& p) {
  for (const auto& r : rules) {
    if (matches(shaper::compile_match(r), p)) return true;
  }
  return false;
}

inline shaper::IpAddress address(const char* text) {
  auto a = shaper::parse_ip_address(text);
  if (!a) throw std::invalid_argument(text);
  return *a;
}

inline void put_ports(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t sport,
                      std::uint16_t dport) {
  b[at] = static_cast<std::uint8_t>(sport >> 8);
  b[at + 1] = static_cast<std::uint8_t>(sport);
  b[at + 2] = static_cast<std::uint8_t>(dport >> 8);
  b[at + 3] = static_cast<std::uint8_t>(dport);
}

// IPv4, IHL 5, followed by 8 transport bytes starting with the two ports.
inline Packet ipv4(const char* src, const char* dst, std::uint8_t protocol, std::uint16_t sport = 0,
                   std::uint16_t dport = 0) {
  Packet p{ETH_P_IP, std::vector<std::uint8_t>(28, 0)};
  p.bytes[0] = 0x45;
  p.bytes[3] = 28;
  p.bytes[8] = 64;  // TTL: nonzero so a mask slip onto it would show
  p.bytes[9] = protocol;
  std::memcpy(&p.bytes[12], address(src).bytes.data(), 4);
  std::memcpy(&p.bytes[16], address(dst).bytes.data(), 4);
  put_ports(p.bytes, 20, sport, dport);
  return p;
}

// IPv6 without extension headers, followed by 8 transport bytes starting with the two ports.
inline Packet ipv6(const char* src, const char* dst, std::uint8_t next_header,
                   std::uint16_t sport = 0, std::uint16_t dport = 0) {
  Packet p{ETH_P_IPV6, std::vector<std::uint8_t>(48, 0)};
  p.bytes[0] = 0x60;
  p.bytes[5] = 8;  // payload length
  p.bytes[6] = next_header;
  p.bytes[7] = 64;  // hop limit: nonzero so a mask slip onto it would show
  std::memcpy(&p.bytes[8], address(src).bytes.data(), 16);
  std::memcpy(&p.bytes[24], address(dst).bytes.data(), 16);
  put_ports(p.bytes, 40, sport, dport);
  return p;
}

}  // namespace jitterd_test
