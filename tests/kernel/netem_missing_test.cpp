// On a kernel without netem (the development and CI hosts), installing says what failed and how to
// fix it. Skipped where netem exists (the VM), since there the install succeeds.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <iostream>
#include <thread>

#include "shaper/errors.hpp"
#include "shaper/netem_engine.hpp"
#include "test_network.hpp"

using namespace shaper;

TEST(NetemMissing, InstallExplainsHowToGetNetem) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a network namespace";
  if (!jitterd_test::kernel_unavailable_reason()) GTEST_SKIP() << "this kernel has netem";
  std::string message;
  int error_number = 0;
  std::thread isolated([&] {
    ASSERT_EQ(unshare(CLONE_NEWNET), 0);
    RouteSocket socket;
    NetemEngine engine(socket);
    try {
      engine.install(engine.resolve(std::string("lo")), NetemSpec{});
    } catch (const NetlinkError& e) {
      message = e.what();
      error_number = e.error_number();
    }
  });
  isolated.join();
  std::cout << "the message users see: " << message << '\n';
  EXPECT_EQ(error_number, ENOENT);
  EXPECT_EQ(message.rfind("netem install (dev lo handle 1a7e:): No such file or directory", 0), 0u)
      << message;
  EXPECT_NE(message.find("modprobe sch_netem"), std::string::npos) << message;
  EXPECT_NE(message.find("linux-modules-extra-$(uname -r)"), std::string::npos) << message;
}
