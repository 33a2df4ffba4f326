// NetlinkMessage, the kernel layer's one message builder: its bytes (headers, attributes, nests,
// libnl's empty-nest rule) and its one error for whatever does not fit.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/netlink_message.hpp"

using namespace shaper;

namespace {

std::vector<std::uint8_t> bytes_of(const NetlinkMessage& msg) {
  const nlmsghdr* hdr = nlmsg_hdr(msg.get());
  const auto* p = reinterpret_cast<const std::uint8_t*>(hdr);
  return {p, p + hdr->nlmsg_len};
}

}  // namespace

TEST(NetlinkMessage, HeaderAttributesAndNestsAsTheKernelReadsThem) {
  NetlinkMessage msg(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL, "test qdisc");
  msg.append_tcmsg(7, 0x1a7e0000, 0xffffffff, 0x00030008);
  msg.put_string(TCA_KIND, "abc");
  const auto options = msg.begin_nest(TCA_OPTIONS);
  msg.put_value(5, std::uint16_t{0x1234});
  msg.end_nest(options);
  const std::vector<std::uint8_t> expected = {
      // nlmsghdr: len 56, type 36, flags CREATE|EXCL, seq 0, port 0
      56, 0, 0, 0, 36, 0, 0x00, 0x06, 0, 0, 0, 0, 0, 0, 0, 0,
      // tcmsg: family 0 + pad, ifindex 7, handle, parent, info
      0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0x7e, 0x1a, 0xff, 0xff, 0xff, 0xff, 0x08, 0, 0x03, 0,
      // TCA_KIND "abc\0"
      8, 0, 1, 0, 'a', 'b', 'c', 0,
      // TCA_OPTIONS (flagged nested by libnl), holding attribute 5, u16 padded to 4
      12, 0, 2, 0x80, 6, 0, 5, 0, 0x34, 0x12, 0, 0};
  EXPECT_EQ(bytes_of(msg), expected);
}

TEST(NetlinkMessage, AnEmptyNestIsDroppedUnlessKept) {
  NetlinkMessage msg(RTM_NEWQDISC, 0, "test qdisc");
  msg.end_nest(msg.begin_nest(1));
  EXPECT_EQ(nlmsg_hdr(msg.get())->nlmsg_len, NLMSG_HDRLEN) << "libnl's nla_nest_end drops it";
  msg.end_nest(msg.begin_nest(2), /*keep_empty=*/true);
  EXPECT_EQ(nlmsg_hdr(msg.get())->nlmsg_len, NLMSG_HDRLEN + 4u);
}

TEST(NetlinkMessage, WhatDoesNotFitNamesTheMessageAndTheAttribute) {
  NetlinkMessage msg(RTM_NEWQDISC, 0, "test qdisc", 0);  // room for about 1 KiB
  const std::vector<char> big(2000);
  try {
    msg.put(13, big.data(), big.size());
    FAIL() << "a 2000-byte attribute fit a 1 KiB message";
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.operation(), "encode test qdisc");
    EXPECT_EQ(e.object(), "attribute 13");
    EXPECT_EQ(e.error_number(), EMSGSIZE);
    EXPECT_EQ(e.kernel_message(), "message full");
  }
}

TEST(NetlinkMessage, ANestLongerThanOneAttributeCanBeIsRefused) {
  NetlinkMessage msg(RTM_NEWQDISC, 0, "test qdisc", 90000);
  const auto options = msg.begin_nest(2);
  const std::vector<char> table(40000);
  msg.put(2, table.data(), table.size());
  msg.put(13, table.data(), table.size());
  try {
    msg.end_nest(options);
    FAIL() << "a nest of 80 000 bytes was closed";
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.operation(), "encode test qdisc");
    EXPECT_EQ(e.object(), "attribute 2");
    EXPECT_EQ(e.error_number(), E2BIG);
    EXPECT_EQ(e.kernel_message(), "longer than the 65535 bytes of one netlink attribute");
  }
}
