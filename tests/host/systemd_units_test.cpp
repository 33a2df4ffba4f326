// The shipped systemd files (systemd/), checked by systemd's own tools in a throw-away root laid
// out as docs/systemd.md installs them: the units load without a single warning, the hardening
// scores what docs/systemd.md says, sysusers and tmpfiles make the user and /run/jitterd as
// designed, and the example config agrees with the socket unit. Each test skips, saying why, where
// a tool is missing.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;

const fs::path kSource = fs::path(JITTERD_SOURCE_DIR) / "systemd";

// The highest exposure `systemd-analyze security` may give jitterd.service (0 = fully locked down,
// 10 = unprotected). The unit scores 1.1 with systemd 252; one notch of slack lets another systemd
// version weigh its checks a little differently. Which checks are open is pinned exactly below.
constexpr double kMaxExposure = 1.2;

// The checks jitterd.service leaves open, each because the daemon's job needs it.
const std::set<std::string> kOpenByDesign = {
    // Shaping the host's interfaces means running in the host's network namespace...
    "PrivateNetwork=",
    // ...with the one capability rtnetlink asks of a qdisc change,
    "CapabilityBoundingSet=~CAP_NET_ADMIN",
    // given to the unprivileged jitterd user as an ambient capability,
    "AmbientCapabilities=",
    // and counted in the initial user namespace (a private one would make it worthless there).
    "PrivateUsers=",
    // rtnetlink is how qdiscs are changed; AF_UNIX carries the control socket, sd_notify and NSS.
    "RestrictAddressFamilies=~AF_NETLINK",
    "RestrictAddressFamilies=~AF_UNIX",
    // The binary and its libraries live in /usr, read-only already (ProtectSystem=strict).
    "RootDirectory=/RootImage=",
    // The device ACL's one entry, char-rtc read, is what ProtectClock=yes itself adds.
    "DeviceAllow=",
};

struct Finished {
  int exit_code = -1;
  std::string output;  // stdout and stderr together, in order
};

std::optional<std::string> find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

Finished run(const std::string& program, const std::vector<std::string>& arguments) {
  int ends[2];
  if (::pipe(ends) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, ends[0]);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, ends[1]);
  std::vector<std::string> argv_storage{program};
  argv_storage.insert(argv_storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  const int spawned =
      ::posix_spawn(&child, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(ends[1]);
  Finished result;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(ends[0], buffer, sizeof(buffer))) > 0)
    result.output.append(buffer, static_cast<std::size_t>(n));
  ::close(ends[0]);
  if (spawned != 0) throw std::runtime_error("posix_spawn " + program + " failed");
  int status = 0;
  ::waitpid(child, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "Key=value" lines of one unit file section's worth: the last assignment of each key wins.
std::map<std::string, std::string> unit_settings(const fs::path& unit) {
  std::map<std::string, std::string> settings;
  std::ifstream in(unit);
  std::string line;
  while (std::getline(in, line)) {
    const auto equals = line.find('=');
    if (line.empty() || line[0] == '#' || line[0] == '[' || equals == std::string::npos) continue;
    settings[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return settings;
}

// A throw-away root: the host's own units (sysinit.target and the rest that default dependencies
// name), ours installed where docs/systemd.md installs them, and a stand-in /usr/sbin/jitterd
// (`verify` checks only that ExecStart= names an executable; the unit is checked byte for byte).
class SystemdRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    analyze_ = find_program("systemd-analyze");
    if (!analyze_) GTEST_SKIP() << "systemd-analyze is not installed (Debian package: systemd)";
    const auto host_units =
        std::find_if(kHostUnitDirs.begin(), kHostUnitDirs.end(),
                     [](const char* dir) { return fs::exists(fs::path(dir) / "sysinit.target"); });
    if (host_units == kHostUnitDirs.end())
      GTEST_SKIP() << "no systemd unit directory with sysinit.target here";

    std::string pattern = (fs::temp_directory_path() / "jitterd-root-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    fs::create_directories(root_ / "usr/lib/systemd");
    fs::copy(*host_units, root_ / "usr/lib/systemd/system",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    install("jitterd.service", "usr/lib/systemd/system/jitterd.service");
    install("jitterd.socket", "usr/lib/systemd/system/jitterd.socket");
    install("jitterd-metrics.socket", "usr/lib/systemd/system/jitterd-metrics.socket");
    install("jitterd.sysusers", "usr/lib/sysusers.d/jitterd.conf");
    install("jitterd.tmpfiles", "usr/lib/tmpfiles.d/jitterd.conf");
    install("jitterd-modules.conf", "usr/lib/modules-load.d/jitterd.conf");
    install("config.json", "etc/jitterd/config.json");
    fs::create_directories(root_ / "usr/sbin");
    std::ofstream(root_ / "usr/sbin/jitterd") << "#!/bin/sh\nexit 1\n";
    fs::permissions(root_ / "usr/sbin/jitterd", fs::perms::owner_all);
  }

  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  void install(const std::string& source, const std::string& target) {
    fs::create_directories((root_ / target).parent_path());
    fs::copy_file(kSource / source, root_ / target);
  }

  Finished analyze(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin() + 1, "--root=" + root_.string());
    return run(*analyze_, arguments);
  }

  static constexpr std::array<const char*, 2> kHostUnitDirs = {"/usr/lib/systemd/system",
                                                               "/lib/systemd/system"};
  std::optional<std::string> analyze_;
  fs::path root_;
};

TEST_F(SystemdRoot, VerifyReportsNothing) {
  const Finished verify =
      analyze({"verify", "jitterd.service", "jitterd.socket", "jitterd-metrics.socket"});
  EXPECT_EQ(verify.exit_code, 0);
  EXPECT_EQ(verify.output, "") << "systemd-analyze verify warned about the shipped units";
}

// The check above can fail: in this same root, a misspelled directive is reported.
TEST_F(SystemdRoot, VerifyReportsAMisspelledDirective) {
  std::string unit = read_file(kSource / "jitterd.service");
  unit.replace(unit.find("ProtectSystem="), 14, "ProtectSytem=");
  std::ofstream(root_ / "usr/lib/systemd/system/jitterd-typo.service") << unit;
  const Finished verify = analyze({"verify", "jitterd-typo.service"});
  EXPECT_NE(verify.output.find("Unknown key 'ProtectSytem'"), std::string::npos) << verify.output;
}

TEST_F(SystemdRoot, SecurityExposureIsLow) {
  const int threshold = static_cast<int>(kMaxExposure * 10 + 0.5);  // --threshold counts tenths
  const Finished security = analyze(
      {"security", "--offline=yes", "--threshold=" + std::to_string(threshold), "jitterd.service"});
  std::smatch score;
  const std::regex overall(R"(Overall exposure level for jitterd\.service: ([0-9]+\.[0-9]))");
  ASSERT_TRUE(std::regex_search(security.output, score, overall)) << security.output;
  std::cout << "exposure of jitterd.service: " << score[1] << " (docs/systemd.md quotes it)\n";
  RecordProperty("exposure", score[1].str());
  EXPECT_LE(std::stod(score[1]), kMaxExposure) << security.output;
  EXPECT_EQ(security.exit_code, 0)
      << "systemd-analyze security --threshold=" << threshold << " refused";
}

// The checks `systemd-analyze security --json=short` reports as open: not set, with an exposure.
std::set<std::string> open_checks(const std::string& security_json) {
  std::set<std::string> open;
  for (const auto& check : nlohmann::json::parse(security_json)) {
    const auto& exposure = check.at("exposure");
    if (!check.at("set").get<bool>() && exposure.is_string() &&
        std::stod(exposure.get<std::string>()) > 0) {
      open.insert(check.at("name").get<std::string>());
    }
  }
  return open;
}

TEST_F(SystemdRoot, OnlyTheChecksTheDaemonNeedsAreOpen) {
  const Finished security =
      analyze({"security", "--offline=yes", "--json=short", "jitterd.service"});
  ASSERT_EQ(security.exit_code, 0) << security.output;
  const std::set<std::string> open = open_checks(security.output);
  std::string unexpected;
  for (const std::string& name : open) {
    if (!kOpenByDesign.contains(name)) unexpected += " " + name;
  }
  std::string closed;
  for (const std::string& name : kOpenByDesign) {
    if (!open.contains(name)) closed += " " + name;
  }
  EXPECT_EQ(unexpected, "")
      << "open checks the design does not explain (harden, or add the reason here)";
  EXPECT_EQ(closed, "") << "checks now closed: tighten kOpenByDesign and docs/systemd.md";
}

TEST_F(SystemdRoot, SysusersAndTmpfilesMakeTheUserAndRuntimeDirectory) {
  const auto sysusers = find_program("systemd-sysusers");
  const auto tmpfiles = find_program("systemd-tmpfiles");
  if (!sysusers || !tmpfiles)
    GTEST_SKIP() << "systemd-sysusers or systemd-tmpfiles is not installed";
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root: systemd-tmpfiles gives /run/jitterd to the jitterd user";
  fs::create_directories(root_ / "etc");
  const Finished users = run(*sysusers, {"--root=" + root_.string(), "jitterd.conf"});
  ASSERT_EQ(users.exit_code, 0) << users.output;
  const Finished files = run(*tmpfiles, {"--root=" + root_.string(), "--create", "jitterd.conf"});
  ASSERT_EQ(files.exit_code, 0) << files.output;

  std::smatch user;
  const std::string passwd = read_file(root_ / "etc/passwd");
  ASSERT_TRUE(std::regex_search(
      passwd, user, std::regex(R"((^|\n)jitterd:x:([0-9]+):([0-9]+):[^:]*:/:(.*nologin)\n)")))
      << "no system user jitterd without a login shell in:\n"
      << passwd;
  EXPECT_LT(std::stoul(user[2]), 1000u) << "not a system user";
  EXPECT_NE(read_file(root_ / "etc/group").find("jitterd:x:" + user[3].str() + ":"),
            std::string::npos);

  struct stat st {};
  ASSERT_EQ(::stat((root_ / "run/jitterd").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_uid, std::stoul(user[2]));
  EXPECT_EQ(st.st_gid, std::stoul(user[3]));
}

TEST(SystemdFiles, ExampleConfigAgreesWithTheUnits) {
  const auto config = nlohmann::json::parse(read_file(kSource / "config.json"));
  const auto socket = unit_settings(kSource / "jitterd.socket");
  const auto service = unit_settings(kSource / "jitterd.service");
  EXPECT_EQ(config.at("socket").at("path"), socket.at("ListenStream"));
  EXPECT_EQ(config.at("socket").at("group"), socket.at("SocketGroup"));
  EXPECT_EQ(config.at("socket").at("mode"), socket.at("SocketMode"));
  EXPECT_EQ(config.at("state_dir"), "/run/" + service.at("RuntimeDirectory"));
  EXPECT_EQ(service.at("ExecStart"), "/usr/sbin/jitterd --config /etc/jitterd/config.json");
  EXPECT_EQ(config.at("interfaces").at("allow"), nlohmann::json::array())
      << "a fresh install shapes nothing";
  const std::string tmpfiles = read_file(kSource / "jitterd.tmpfiles");
  EXPECT_NE(tmpfiles.find("\nd /run/" + service.at("RuntimeDirectory") + " " +
                          service.at("RuntimeDirectoryMode") + " " + service.at("User") + " " +
                          service.at("Group") + " -\n"),
            std::string::npos)
      << "jitterd.tmpfiles and RuntimeDirectory= disagree about /run/jitterd";
}

}  // namespace

// The targets drop-in (systemd/jitterd-targets.conf, docs/operations.md "Containers and
// namespaces") installed where its header says: the unit still verifies, and what it opens is
// exactly what it says it opens: the two capabilities and entering network namespaces.
TEST_F(SystemdRoot, TheTargetsDropInOpensOnlyWhatItSays) {
  install("jitterd-targets.conf", "etc/systemd/system/jitterd.service.d/targets.conf");
  const Finished verify = analyze({"verify", "jitterd.service"});
  EXPECT_EQ(verify.exit_code, 0);
  EXPECT_EQ(verify.output, "") << "systemd-analyze verify warned about the drop-in";
  const Finished security =
      analyze({"security", "--offline=yes", "--json=short", "jitterd.service"});
  ASSERT_EQ(security.exit_code, 0) << security.output;
  const std::set<std::string> open = open_checks(security.output);
  std::string opened;
  for (const std::string& name : open) {
    if (!kOpenByDesign.contains(name)) opened += " " + name;
  }
  EXPECT_NE(opened.find("CapabilityBoundingSet=~CAP_SYS_ADMIN"), std::string::npos) << opened;
  EXPECT_NE(opened.find("CapabilityBoundingSet=~CAP_SYS_PTRACE"), std::string::npos) << opened;
  // systemd-analyze names the namespace checks by type ("RestrictNamespaces=~net").
  EXPECT_NE(opened.find("RestrictNamespaces=~net"), std::string::npos) << opened;
  EXPECT_EQ(opened.find("RestrictNamespaces=~user"), std::string::npos) << opened;
  EXPECT_EQ(opened.find("RestrictNamespaces=~mnt"), std::string::npos) << opened;
  EXPECT_EQ(opened.find("PrivateDevices"), std::string::npos) << opened;
}
