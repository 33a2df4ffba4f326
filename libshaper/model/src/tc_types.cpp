#include "shaper/tc_types.hpp"

#include <linux/pkt_sched.h>

#include <cstdio>

namespace shaper {

bool QdiscInfo::is_root() const {
  return parent == TC_H_ROOT;
}

std::string format_handle(std::uint32_t handle) {
  char buf[32];
  if ((handle & 0xffff) == 0) {
    std::snprintf(buf, sizeof buf, "%x:", handle >> 16);
  } else {
    std::snprintf(buf, sizeof buf, "%x:%x", handle >> 16, handle & 0xffff);
  }
  return buf;
}

}  // namespace shaper
