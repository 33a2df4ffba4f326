// Error messages: operation, object, the system's reason, the kernel's words, and the fix.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <netlink/errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>

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
  EXPECT_STREQ(e.what(),
               "netem change (dev veth0 handle 1a7e:): Invalid argument: netem: negative latency");
  EXPECT_EQ(e.kernel_message(), "netem: negative latency");
}

TEST(Errors, NetlinkErrorAppendsTheHint) {
  const NetlinkError e("netem install", "dev lo handle 1a7e:", ENOENT,
                       "Error: Specified qdisc kind is unknown.", "load it");
  EXPECT_STREQ(
      e.what(),
      "netem install (dev lo handle 1a7e:): No such file or directory: Error: Specified qdisc "
      "kind is unknown. load it");
  // For whoever shows the hint on its own line or member (jitterd's main, the protocol's replies).
  EXPECT_EQ(e.without_hint(),
            "netem install (dev lo handle 1a7e:): No such file or directory: Error: Specified "
            "qdisc kind is unknown.");
  EXPECT_EQ(NetlinkError("a", "b", EBUSY, "").without_hint(), "a (b): Device or resource busy");
}

TEST(Errors, MissingKernelPartGetsTheModuleToLoad) {
  const NetlinkError unknown_kind("tree install", "dev eth0 handle 1a7e:", ENOENT,
                                  "Specified qdisc kind is unknown.");
  const NetlinkError hinted = with_missing_part_hint(unknown_kind, "the HTB qdisc", "sch_htb");
  EXPECT_EQ(hinted.kernel_message(), unknown_kind.kernel_message());
  EXPECT_NE(hinted.hint().find("the HTB qdisc (module sch_htb)"), std::string::npos)
      << hinted.what();
  EXPECT_NE(hinted.hint().find("`modprobe sch_htb`"), std::string::npos) << hinted.what();

  const NetlinkError link_type("ifb install", "dev jdifb3", EOPNOTSUPP, "Unknown device type");
  const NetlinkError two = with_missing_part_hint(link_type, "IFB devices", "cls_u32 act_mirred");
  EXPECT_NE(two.hint().find("`modprobe -a cls_u32 act_mirred`"), std::string::npos) << two.what();

  // Not a missing part: the kernel named another reason, or another errno, or a hint is there
  // already.
  const NetlinkError other_enoent("tree filter install", "dev eth0", ENOENT,
                                  "Parent Qdisc doesn't exists");
  EXPECT_TRUE(with_missing_part_hint(other_enoent, "u32", "cls_u32").hint().empty());
  const NetlinkError invalid("tree install", "dev eth0", EINVAL, "");
  EXPECT_TRUE(with_missing_part_hint(invalid, "u32", "cls_u32").hint().empty());
  const NetlinkError already("netem install", "dev eth0", ENOENT, "", "netem is missing");
  EXPECT_EQ(with_missing_part_hint(already, "u32", "cls_u32").hint(), "netem is missing");
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

TEST(Errors, LibcryptoFailuresKeepEveryQueuedReasonAndEmptyTheQueue) {
  // What EVP_DigestInit_ex queues for an algorithm the providers lack.
  ERR_raise(ERR_LIB_EVP, EVP_R_UNSUPPORTED_ALGORITHM);
  try {
    check_openssl(0, "EVP_DigestInit_ex", "SHA-256");
    FAIL() << "check_openssl did not throw";
  } catch (const CryptoError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("EVP_DigestInit_ex (SHA-256): error:", 0), 0u) << what;
    EXPECT_NE(what.find("unsupported"), std::string::npos) << what;
  }
  EXPECT_EQ(ERR_peek_error(), 0u);
  try {
    check_openssl(0, "EVP_MD_CTX_new", "SHA-256");
    FAIL() << "check_openssl did not throw";
  } catch (const CryptoError& e) {
    EXPECT_STREQ(e.what(), "EVP_MD_CTX_new (SHA-256): libcrypto failed without a reason");
  }
  EXPECT_NO_THROW(check_openssl(1, "EVP_DigestUpdate", "SHA-256"));
}

TEST(Errors, HandlesFormatLikeTc) {
  EXPECT_EQ(format_handle(0x1a7e0000), "1a7e:");
  EXPECT_EQ(format_handle(0x00010003), "1:3");
  EXPECT_EQ(format_handle(0), "0:");
}

TEST(Errors, EnvironmentErrorsAreSystemErrorsWithTheirTextAlone) {
  // std::system_error's own what() appends ": <the code's message>"; ours is the text alone.
  const SystemError system("open", "/run/jitterd/state.json", EACCES);
  EXPECT_EQ(system.code(), std::error_code(EACCES, std::system_category()));
  EXPECT_EQ(system.code(), std::errc::permission_denied);
  EXPECT_STREQ(system.what(), "open (/run/jitterd/state.json): Permission denied");

  const NetlinkError netlink("qdisc add", "dev eth0", EPERM, "");
  EXPECT_EQ(netlink.code(), std::errc::operation_not_permitted);
  EXPECT_STREQ(netlink.what(), "qdisc add (dev eth0): Operation not permitted");

  const OwnershipError ownership("root qdisc of eth0 is htb 1:, installed by someone else");
  EXPECT_EQ(ownership.code(), Errc::kNotOurs);
  EXPECT_STREQ(ownership.code().category().name(), "jitterd");
  EXPECT_STREQ(ownership.what(), "root qdisc of eth0 is htb 1:, installed by someone else");

  // Caught as what it always was, too: every catch (const std::runtime_error&) still sees it.
  try {
    throw CryptoError("EVP_DigestInit_ex (SHA-256): unsupported");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "EVP_DigestInit_ex (SHA-256): unsupported");
  }
  // A copy shares the text, and copying does not throw.
  static_assert(std::is_nothrow_copy_constructible_v<EnvironmentError>);
  const OwnershipError copy = ownership;
  EXPECT_STREQ(copy.what(), ownership.what());
}
