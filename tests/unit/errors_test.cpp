// Error messages: operation, object, the system's reason, the kernel's words, and the fix.
#include <gtest/gtest.h>
#include <fcntl.h>

#include <netlink/errno.h>

#include <cerrno>

#include "shaper/errors.hpp"
#include "shaper/netem_engine.hpp"

using namespace shaper;

TEST(Errors, SystemErrorNamesOperationAndObject) {
  try {
    check_syscall(::open("/nonexistent/jitterd", O_RDONLY), "open", "/nonexistent/jitterd");
    FAIL() << "open of a missing file succeeded";
  } catch (const SystemError& e) {
    EXPECT_STREQ(e.what(), "open (/nonexistent/jitterd): No such file or directory");
    EXPECT_EQ(e.error_number(), ENOENT);
  }
  EXPECT_EQ(check_syscall(3, "dup", "fd 1"), 3);
}

TEST(Errors, NetlinkErrorKeepsTheKernelsText) {
  const NetlinkError e("netem change", "dev veth0 handle 1a7e:", EINVAL, "netem: negative latency");
  EXPECT_STREQ(e.what(), "netem change (dev veth0 handle 1a7e:): Invalid argument: netem: negative latency");
  EXPECT_EQ(e.kernel_message(), "netem: negative latency");
}

TEST(Errors, NetlinkErrorAppendsTheHint) {
  const NetlinkError e("netem install", "dev lo handle 1a7e:", ENOENT, "Error: Specified qdisc kind is unknown.",
                       "load it");
  EXPECT_STREQ(e.what(),
               "netem install (dev lo handle 1a7e:): No such file or directory: Error: Specified qdisc "
               "kind is unknown. load it");
}

TEST(Errors, LibnlCodesBecomeErrnoWithLibnlText) {
  try {
    check_libnl(-NLE_NOMEM, "nla_put", "TCA_KIND");
  } catch (const NetlinkError& e) {
    EXPECT_EQ(e.error_number(), ENOMEM);
    EXPECT_STREQ(e.what(), "nla_put (TCA_KIND): Cannot allocate memory: libnl: Out of memory");
    return;
  }
  FAIL() << "check_libnl did not throw";
}

TEST(Errors, HandlesFormatLikeTc) {
  EXPECT_EQ(format_handle(0x1a7e0000), "1a7e:");
  EXPECT_EQ(format_handle(0x00010003), "1:3");
  EXPECT_EQ(format_handle(0), "0:");
}
