// Who may drive jitterd. Two locks, tested apart: the socket file (mode 0660, owned by the config's
// socket.group) keeps everyone else out at connect(2); and jitterd itself checks each peer's
// credentials (SO_PEERCRED, SO_PEERGROUPS) so that a socket someone opened up by hand (the config
// refuses a mode with access for others) still lets no outsider in. A member of the group gets
// through both.
//
// The outsider is uid/gid 65534 (nobody/nogroup) without supplementary groups; the member is the
// same uid with the group "users" added. The config names "users" as socket.group: it exists on
// Debian systems (gid 100), and the VM shares this host's /etc/group.
#include <gtest/gtest.h>

#include <grp.h>
#include <sys/stat.h>

#include <string>

#include "e2e_support.hpp"

using jitterd_e2e::Credentials;
using jitterd_e2e::Json;

namespace {

constexpr const char* kGroup = "users";
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

class E2ePermission : public jitterd_e2e::E2eTest {
 protected:
  void SetUp() override {
    const group* g = ::getgrnam(kGroup);
    if (!g) GTEST_SKIP() << "no group \"" << kGroup << "\" on this system to own the socket";
    group_ = g->gr_gid;
    jitterd_e2e::E2eTest::SetUp();
  }
  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.socket_group = kGroup;
    return options;
  }

  Credentials outsider() const { return {kNobody, kNogroup, {}}; }
  Credentials member() const { return {kNobody, kNogroup, {group_}}; }

  gid_t group_ = 0;
};

TEST_F(E2ePermission, SocketModeKeepsOutsidersOutAndLetsGroupMembersIn) {
  struct stat st {};
  ASSERT_EQ(::stat(bed().daemon.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, group_);

  const auto refused = bed().ctl({"status"}, outsider());
  EXPECT_EQ(refused.exit_code, 4) << refused.out << refused.err;  // environment: cannot connect
  EXPECT_NE(refused.err.find("Permission denied"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(kGroup), std::string::npos)
      << "the hint names the socket's group: " << refused.err;
  // Refused by the file system: jitterd never saw it.
  EXPECT_EQ(bed().daemon.log().find("refused"), std::string::npos) << bed().daemon.log();

  const auto status = bed().ctl({"--json", "status"}, member());
  EXPECT_EQ(status.exit_code, 0) << status.err;
  const auto applied =
      bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"}, member());
  EXPECT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  // Mutating requests are logged with the peer's uid.
  EXPECT_NE(bed().daemon.log().find("uid 65534"), std::string::npos) << bed().daemon.log();
}

TEST_F(E2ePermission, JitterdRefusesPeersOutsideTheGroupWhenTheSocketLetsThemIn) {
  // Someone opened the socket to everyone by hand.
  ASSERT_EQ(::chmod(bed().daemon.socket().c_str(), 0666), 0);

  const auto status = bed().ctl({"status"}, outsider());
  EXPECT_EQ(status.exit_code, 5) << status.out << status.err;  // permission denied
  EXPECT_NE(status.err.find("may not use jitterd"), std::string::npos) << status.err;
  EXPECT_TRUE(status.out.empty()) << status.out;

  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName}, outsider());
  EXPECT_EQ(applied.exit_code, 5) << applied.out << applied.err;
  const Json root = bed().root_qdisc_by_tc();
  EXPECT_EQ(root.value("handle", ""), "0:")
      << "an outsider's apply was carried out: " << root.dump();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());

  // jitterd logs the refusal with the peer's credentials.
  const std::string log = bed().daemon.log();
  EXPECT_NE(log.find("refused a control connection from uid 65534"), std::string::npos) << log;

  // The group check is jitterd's, not the file's: a member still gets in through the same socket.
  const auto member_status = bed().ctl({"status"}, member());
  EXPECT_EQ(member_status.exit_code, 0) << member_status.err;
}

}  // namespace
