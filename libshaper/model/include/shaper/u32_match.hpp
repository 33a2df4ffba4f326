#pragma once
// One u32 classifier match, as the kernel takes it: every key must match (AND) for the filter to
// fire. Keys are what `struct tc_u32_key` carries, with mask and value already in network byte
// order and offsets counted from the network header (multiples of 4). Match rules (match_rules.hpp)
// compile to a list of these (one rule may need several: a port range splits into aligned blocks, a
// rule without an address family covers IPv4 and IPv6); the tc tree (tc_tree.hpp) encodes them.

#include <cstdint>
#include <vector>

namespace shaper {

struct U32Key {
  std::uint32_t mask_be = 0;   // network byte order
  std::uint32_t value_be = 0;  // network byte order, already masked
  std::int32_t offset = 0;     // bytes from the network header, a multiple of 4
  friend bool operator==(const U32Key&, const U32Key&) = default;
};

struct U32Selector {
  std::uint16_t eth_protocol = 0;  // host order: ETH_P_IP (0x0800) or ETH_P_IPV6 (0x86DD)
  std::vector<U32Key> keys;        // empty: every packet of that protocol
  friend bool operator==(const U32Selector&, const U32Selector&) = default;
};

}  // namespace shaper
