// Faults, end to end (issue 7): jitterd killed -9 in the middle of a 10 Hz schedule while it holds
// every kind of object it owns (an egress HTB tree with u32 filters, an IFB with a tree of its own,
// the redirect filters on the interface's ingress hook), then restarted; a state folder that is
// read-only, not writable for jitterd's user or full, at start and under a request; a config that
// is missing or invalid; a stale socket file and a regular file at the socket path; two jitterds on
// one state folder and socket. jitterd must say what, where, why and how to fix it, exit non-zero
// where it cannot run, keep what is in force when a change cannot be recorded, and never shape what
// its ledger does not name. iproute2 (`tc`, `ip`), the ledger file, the socket file and exit codes
// are the witnesses.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Clock;
using jitterd_e2e::Completed;
using jitterd_e2e::Credentials;
using jitterd_e2e::Json;
using jitterd_e2e::Process;
using jitterd_e2e::SpawnOptions;
using jitterd_test::VethPair;

namespace {

// Events come from jitterd within milliseconds; the rest is the emulated machine.
constexpr auto kEventTimeout = 10s;
// A jitterd that refuses to start ends within milliseconds; 30 s is the emulated machine while the
// host builds (a program starts in ~0.1 s there when idle).
constexpr auto kRefusalTimeout = 30s;
// An unprivileged user to run jitterd as where mode bits must matter (root writes through them);
// the shipped unit runs jitterd as a user of its own too.
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
// jitterd's exit codes (docs/daemon.md): an invalid config, and the environment (state folder,
// socket).
constexpr int kExitConfig = 3;
constexpr int kExitEnvironment = 4;
// jitterctl's exit code when jitterd answers system-error (ctl/exit_codes.hpp).
constexpr int kCtlExitEnvironment = 4;

// A tmpfs on `dir` for the scope, so that a state folder can be made read-only or full without
// touching a real file system. Unmounted lazily at the end: a jitterd still holding its lock file
// there does not keep it busy.
class TmpfsMount {
 public:
  TmpfsMount(std::string dir, const std::string& options) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    jitterd_test::run("mount -t tmpfs -o " + options + " jitterd-e2e-state " + dir_);
    mounts_ = 1;
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  ~TmpfsMount() {
    for (; mounts_ > 0; --mounts_) {
      try {
        jitterd_test::run("umount -l " + dir_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "unmounting the test's state folder: %s\n", e.what());
      }
    }
  }

  // A read-only bind mount of the folder over itself: whatever is opened there from now on is
  // read-only. (A plain `mount -o remount,ro` is refused, EBUSY, while jitterd holds its lock file
  // open for writing; under the cover that open file stays writable, and new opens are not.)
  void cover_read_only() {
    jitterd_test::run("mount --bind " + dir_ + " " + dir_);
    ++mounts_;
    jitterd_test::run("mount -o remount,bind,ro " + dir_);
  }
  void uncover() {
    jitterd_test::run("umount " + dir_);
    --mounts_;
  }
  // A file that grows until the kernel says ENOSPC (dd's failure is the point). Returns the blocks
  // left for unprivileged writers afterwards: 0 when it worked.
  unsigned long fill() const {
    jitterd_test::run("dd if=/dev/zero of=" + filler() + " bs=4096 2>/dev/null || true");
    struct statvfs st {};
    if (::statvfs(dir_.c_str(), &st) != 0) throw std::runtime_error("statvfs " + dir_);
    return st.f_bavail;
  }
  void unfill() const { std::filesystem::remove(filler()); }

 private:
  std::string filler() const { return dir_ + "/filler"; }
  std::string dir_;
  int mounts_ = 0;
};

// A 10 Hz schedule: "low" 5 ms and "high" 20 ms of delay, 100 ms each, looping.
std::string ten_hertz_profile() {
  const Json profile = {
      {"version", 1},
      {"name", "tenhz"},
      {"description", "end-to-end fault tests: a transition every 100 ms"},
      {"phases",
       {{"low", {{"delay", {{"latency", "5ms"}}}}}, {"high", {{"delay", {{"latency", "20ms"}}}}}}},
      {"schedule",
       {{"steps",
         {{{"phase", "low"}, {"duration", "100ms"}}, {{"phase", "high"}, {"duration", "100ms"}}}},
        {"loop", true}}},
  };
  return profile.dump(2) + "\n";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

class E2eFaults : public jitterd_e2e::E2eTest {
 protected:
  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.start = false;  // each test prepares the state folder, socket path or config first
    return options;
  }

  const std::string& state_dir() { return bed().daemon.state_dir(); }
  std::string lock_path() { return state_dir() + "/jitterd.lock"; }

  // A jitterd with `config` (default: the bed's) and `extra` arguments in namespace a, run to its
  // end: for starts that must be refused. `binary` and `as`: another user's copy and credentials.
  Completed run_jitterd(const std::vector<std::string>& extra = {}, std::string config = {},
                        const std::optional<Credentials>& as = std::nullopt,
                        std::string binary = {}) {
    std::vector<std::string> argv = {binary.empty() ? jitterd_e2e::jitterd_binary() : binary,
                                     "--config",
                                     config.empty() ? bed().daemon.config_path() : config};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return jitterd_e2e::run_to_completion(argv, SpawnOptions{bed().daemon.netns(), as, ""},
                                          kRefusalTimeout);
  }

  // A copy of jitterd in the bed's 0755 folder: another user may not reach the build tree
  // (scripts/test builds a checkout under root's 0700 home).
  std::string jitterd_for_others() {
    const std::filesystem::path copy = bed().dir.file("bin/jitterd");
    std::filesystem::create_directories(copy.parent_path());
    std::filesystem::copy_file(jitterd_e2e::jitterd_binary(), copy,
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(copy, std::filesystem::perms(0755));
    std::filesystem::permissions(copy.parent_path(), std::filesystem::perms(0755));
    return copy.string();
  }

  void expect_ok(const std::vector<std::string>& args) {
    const Completed done = bed().ctl(args);
    EXPECT_EQ(done.exit_code, 0) << jitterd_e2e::command_line(args) << ": " << done.err;
  }

  // The name of the IFB jitterd made in namespace a ("" when there is none).
  std::string ifb_name() {
    static const std::regex name("jdifb[0-9]+");
    const std::string links = bed().in_ns_a("ip -o link show type ifb");
    std::smatch m;
    return std::regex_search(links, m, name) ? m.str() : "";
  }

  // Nothing of jitterd's in namespace a: jta has the kernel's default root (veth: noqueue 0:), no
  // ingress hook, no filter on either side, and there is no IFB.
  void expect_unshaped() {
    const Json root = bed().root_qdisc_by_tc();
    EXPECT_EQ(root.value("handle", ""), "0:") << root.dump();
    const std::string qdiscs = bed().in_ns_a("tc qdisc show dev jta");
    for (const char* kind : {"netem", "htb", "ingress", "clsact"})
      EXPECT_FALSE(contains(qdiscs, kind)) << kind << " left on jta:\n" << qdiscs;
    EXPECT_EQ(bed().in_ns_a("tc filter show dev jta"), "");
    EXPECT_EQ(bed().in_ns_a("tc filter show dev jta ingress"), "");
    EXPECT_EQ(bed().in_ns_a("ip -o link show type ifb"), "");
  }

  // The egress netem's delay as tc reads it, in seconds.
  double netem_delay_by_tc() {
    const Json root = bed().root_qdisc_by_tc();
    if (root.value("kind", "") != "netem")
      throw std::runtime_error("no netem root on jta: " + root.dump());
    return root.at("options").at("delay").at("delay").get<double>();
  }

  std::string phase_of_jta() {
    const Json status = bed().ctl_json({"status", "jta"});
    if (status.at("sessions").size() != 1)
      throw std::runtime_error("expected one session: " + status.dump());
    return status.at("sessions")[0].at("phase").get<std::string>();
  }

  // A refused start: exit code, and the message's parts on stderr. Nothing listens afterwards.
  void expect_refused(const Completed& run, int exit_code, const std::vector<std::string>& parts) {
    EXPECT_EQ(run.exit_code, exit_code) << run.err;
    for (const auto& part : parts)
      EXPECT_TRUE(contains(run.err, part)) << "missing \"" << part << "\" in:\n" << run.err;
  }
};

// ---------------------------------------------------------------------------------------------
// kill -9 in the middle of a 10 Hz schedule

TEST_F(E2eFaults, KillNineMidTenHertzScheduleOnTreesIfbAndFiltersThenRestartLeavesNothing) {
  bed().daemon.start();
  bed().dir.write("profiles/tenhz.json", ten_hertz_profile());
  // Four lanes, each on its own 10 Hz schedule: the whole egress and the whole ingress (the IFB and
  // the redirect filters), an egress rule set (jta's root becomes an HTB tree with u32 filters) and
  // an ingress rule set (a tree with filters on the IFB).
  expect_ok({"apply", "jta", "tenhz", "--direction", "both"});
  expect_ok({"apply", "jta", "tenhz", "--set", "far", "--match", "dst=198.18.0.3"});
  expect_ok({"apply", "jta", "tenhz", "--direction", "ingress", "--set", "near", "--match",
             "src=198.18.0.3"});
  auto events = bed().subscribe();
  // Mid-schedule: every lane has moved (four lanes at 10 Hz give 8 transitions in ~0.2 s).
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(events.wait_for("phase-changed", kEventTimeout)) << events.describe();
  const Json status = bed().ctl_json({"status", "jta"});
  ASSERT_EQ(status.at("sessions").size(), 4u) << status.dump();
  for (const auto& s : status.at("sessions")) {
    EXPECT_EQ(s.at("schedule").at("state"), "running") << s.dump();
    EXPECT_GE(s.at("transitions").at("count").get<int>(), 1) << s.dump();
  }
  // Right behind a transition, with the next ones due within 100 ms.
  ASSERT_TRUE(events.wait_for("phase-changed", kEventTimeout)) << events.describe();
  const pid_t first = bed().daemon.pid();
  bed().daemon.kill_hard();

  // Nothing was cleaned up: what the kernel held at the kill is all there ...
  const std::string ifb = ifb_name();
  ASSERT_FALSE(ifb.empty()) << bed().in_ns_a("ip -o link show");
  const Json root = bed().root_qdisc_by_tc();
  EXPECT_EQ(root.value("kind", ""), "htb") << root.dump();
  EXPECT_EQ(root.value("handle", ""), "1a7e:") << root.dump();
  EXPECT_NE(bed().in_ns_a("tc filter show dev jta"), "") << "the egress tree's u32 filters";
  EXPECT_NE(bed().in_ns_a("tc filter show dev jta ingress"), "") << "the redirect to the IFB";
  EXPECT_NE(bed().in_ns_a("tc filter show dev " + ifb), "") << "the IFB tree's u32 filters";
  EXPECT_TRUE(contains(bed().in_ns_a("tc qdisc show dev " + ifb), "netem"));
  // ... and the ledger names every lane.
  const Json ledger = bed().ledger();
  EXPECT_EQ(ledger.at("pid").get<pid_t>(), first);
  EXPECT_EQ(ledger.at("interfaces").size(), 4u) << ledger.dump();

  bed().daemon.start();  // same config, same state folder
  expect_unshaped();
  const Json rewritten = bed().ledger();
  EXPECT_EQ(rewritten.at("pid").get<pid_t>(), bed().daemon.pid());
  EXPECT_TRUE(rewritten.at("interfaces").empty()) << rewritten.dump();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_TRUE(contains(bed().daemon.log(), "previous jitterd left on jta")) << bed().daemon.log();

  // The new jitterd shapes both directions again, and a clear leaves nothing either.
  expect_ok({"apply", "jta", "tenhz", "--direction", "both", "--phase", "high"});
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  EXPECT_FALSE(ifb_name().empty());
  expect_ok({"clear", "jta"});
  expect_unshaped();
}

// ---------------------------------------------------------------------------------------------
// The state folder

TEST_F(E2eFaults, AReadOnlyStateFolderIsRefusedAtStartBeforeAnythingIsTouched) {
  TmpfsMount state(state_dir(), "ro,size=16k,mode=0755");
  const Completed run = run_jitterd();
  expect_refused(run, kExitEnvironment,
                 {"open the state folder's lock (" + lock_path() + "): Read-only file system",
                  "hint: " + state_dir() +
                      " is on a read-only file system: remount it read-write, or set state_dir",
                  "jitterd changes no shaping it cannot record there"});
  EXPECT_FALSE(exists(bed().daemon.socket())) << "it listened";
  expect_unshaped();
}

TEST_F(E2eFaults, AStateFolderItsUserMayNotWriteIsRefusedAtStart) {
  // chmod 0500 on a folder that jitterd's user owns (as under the shipped unit's User=jitterd).
  std::filesystem::create_directories(state_dir());
  ASSERT_EQ(::chown(state_dir().c_str(), kNobody, kNogroup), 0);
  ASSERT_EQ(::chmod(state_dir().c_str(), 0500), 0);
  const Completed run =
      run_jitterd({}, {}, Credentials{kNobody, kNogroup, {}}, jitterd_for_others());
  expect_refused(run, kExitEnvironment,
                 {"open the state folder's lock (" + lock_path() + "): Permission denied",
                  "hint: jitterd (uid 65534) may not write in " + state_dir() +
                      ": give it the folder (chown)"});
  EXPECT_FALSE(exists(bed().daemon.socket())) << "it listened";
  EXPECT_FALSE(exists(lock_path()));
  expect_unshaped();
}

TEST_F(E2eFaults, AFullStateFolderIsRefusedAtStart) {
  TmpfsMount state(state_dir(), "size=16k,mode=0755");  // 4 pages
  ASSERT_EQ(state.fill(), 0u);
  const Completed run = run_jitterd();
  expect_refused(run, kExitEnvironment,
                 {"write the state folder's lock (" + lock_path() + "): No space left on device",
                  "hint: the file system of " + state_dir() + " is full: free some space there"});
  EXPECT_FALSE(exists(bed().daemon.socket())) << "it listened";
  expect_unshaped();
}

TEST_F(E2eFaults, AStateFolderTurnedReadOnlyRefusesChangesAndKeepsWhatIsInForce) {
  TmpfsMount state(state_dir(), "size=1m,mode=0755");
  bed().daemon.start();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "low"});
  auto events = bed().subscribe();
  state.cover_read_only();

  // A switch cannot be recorded: refused before the kernel is touched, the phase in force stays and
  // is the one reported.
  const Completed switched = bed().ctl({"switch", "jta", "high"});
  EXPECT_EQ(switched.exit_code, kCtlExitEnvironment) << switched.err;
  EXPECT_TRUE(contains(switched.err, "create the ledger (" + bed().daemon.ledger_path() +
                                         "): Read-only file system"))
      << switched.err;
  EXPECT_TRUE(contains(switched.err, "hint: " + state_dir() + " is on a read-only file system"))
      << switched.err;
  EXPECT_EQ(phase_of_jta(), "low");
  // 5 ms is 78125 ticks of 64 ns: tc prints it exactly; 2 us covers tc's own float conversion.
  EXPECT_NEAR(netem_delay_by_tc(), 0.005, 2e-6);
  EXPECT_EQ(bed().ledger().at("interfaces")[0].at("phase"), "low") << bed().ledger().dump();

  // A new lane cannot be recorded either: nothing of it is built (no IFB).
  const Completed ingress = bed().ctl(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "ingress"});
  EXPECT_EQ(ingress.exit_code, kCtlExitEnvironment) << ingress.err;
  EXPECT_EQ(ifb_name(), "");
  EXPECT_EQ(bed().ctl_json({"status", "jta"}).at("sessions").size(), 1u);
  // No event tells of a change that did not happen.
  events.drain(300ms);
  EXPECT_TRUE(events.of_type("phase-changed").empty()) << events.describe();
  EXPECT_TRUE(events.of_type("applied").empty()) << events.describe();

  // Unshaping needs no new entry: clear works and leaves nothing (the file still names jta, which a
  // next start would find gone; jitterd logs that it could not rewrite it).
  expect_ok({"clear", "jta"});
  expect_unshaped();
  EXPECT_TRUE(contains(bed().daemon.log(), "the ledger could not be rewritten"))
      << bed().daemon.log();

  // Writable again: requests work and are recorded.
  state.uncover();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  const Json ledger = bed().ledger();
  ASSERT_EQ(ledger.at("interfaces").size(), 1u) << ledger.dump();
  EXPECT_EQ(ledger.at("interfaces")[0].at("phase"), "high");
  EXPECT_NEAR(netem_delay_by_tc(), 0.050, 2e-6);
}

TEST_F(E2eFaults, AFullStateFolderRefusesAnApplyAndShapesNothing) {
  TmpfsMount state(state_dir(), "size=16k,mode=0755");  // 4 pages: the lock and the ledger take 2
  bed().daemon.start();
  const Json before = bed().ledger();
  ASSERT_EQ(state.fill(), 0u);

  const Completed applied = bed().ctl(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "both"});
  EXPECT_EQ(applied.exit_code, kCtlExitEnvironment) << applied.err;
  EXPECT_TRUE(contains(applied.err, "write the ledger (" + bed().daemon.ledger_path() +
                                        "): No space left on device"))
      << applied.err;
  EXPECT_TRUE(contains(
      applied.err, "hint: the file system of " + state_dir() + " is full: free some space there"))
      << applied.err;
  expect_unshaped();
  EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
  EXPECT_EQ(bed().ledger(), before);
  for (const auto& f : std::filesystem::directory_iterator(state_dir())) {
    EXPECT_NE(f.path().extension(), ".tmp") << f.path() << ": a half-written ledger holds the room";
  }

  // With room again, the same request works and is recorded.
  state.unfill();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "both"});
  EXPECT_EQ(bed().ledger().at("interfaces").size(), 2u) << bed().ledger().dump();
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  expect_ok({"clear", "jta"});
  expect_unshaped();
}

// ---------------------------------------------------------------------------------------------
// The config

TEST_F(E2eFaults, AMissingConfigIsNamedAndNothingStarts) {
  const std::string absent = bed().dir.file("absent.json");
  const Completed run = run_jitterd({}, absent);
  expect_refused(run, kExitEnvironment,
                 {"cannot read the config: open (" + absent + "): No such file or directory",
                  "hint: create it (docs/daemon.md lists the keys"});
  EXPECT_FALSE(exists(bed().daemon.socket()));
  EXPECT_FALSE(exists(state_dir())) << "the state folder comes after the config";
  expect_unshaped();
}

TEST_F(E2eFaults, AConfigThatIsNotJsonIsNamedWithItsLine) {
  // Line 3 is `  "state_dir": ,`: the stray comma is its 16th character.
  const std::string config = bed().dir.write(
      "bad.json", "{\n  \"socket\": {\"path\": \"" + bed().daemon.socket() +
                      "\"},\n  \"state_dir\": ,\n  \"interfaces\": {\"allow\": [\"jta\"]}\n}\n");
  const Completed run = run_jitterd({}, config);
  expect_refused(run, kExitConfig, {config + ":3:16: not valid JSON"});
  EXPECT_FALSE(exists(bed().daemon.socket()));
  EXPECT_FALSE(exists(state_dir()));
  expect_unshaped();
}

TEST_F(E2eFaults, AConfigWithAnUnknownKeyIsNamedWithItsPointer) {
  Json config = jitterd_e2e::parse_json(jitterd_e2e::read_file(bed().daemon.config_path()));
  config["state_dirs"] = config["state_dir"];  // a typo of state_dir
  const std::string path = bed().dir.write("typo.json", config.dump(2) + "\n");
  const Completed run = run_jitterd({}, path);
  expect_refused(run, kExitConfig,
                 {path + ": /state_dirs: unknown key; expected one of: ", "state_dir"});
  EXPECT_FALSE(exists(bed().daemon.socket()));
  EXPECT_FALSE(exists(state_dir()));
  expect_unshaped();
}

TEST_F(E2eFaults, AConfigValueOutOfRangeIsNamedWithItsPointerAndTheRange) {
  Json config = jitterd_e2e::parse_json(jitterd_e2e::read_file(bed().daemon.config_path()));
  config["limits"] = {{"max_connections", 0}};
  const std::string path = bed().dir.write("range.json", config.dump(2) + "\n");
  const Completed run = run_jitterd({}, path);
  expect_refused(run, kExitConfig,
                 {path + ": /limits/max_connections: 0 is out of range; expected 1 to 4096"});
  EXPECT_FALSE(exists(bed().daemon.socket()));
  EXPECT_FALSE(exists(state_dir()));
  expect_unshaped();
}

// ---------------------------------------------------------------------------------------------
// The socket path

TEST_F(E2eFaults, TheStaleSocketOfAKilledJitterdIsReplaced) {
  bed().daemon.start();
  bed().daemon.kill_hard();
  struct stat st {};
  ASSERT_EQ(::lstat(bed().daemon.socket().c_str(), &st), 0) << "kill -9 leaves the socket file";
  ASSERT_TRUE(S_ISSOCK(st.st_mode));
  const Completed nobody = bed().ctl({"version"});
  ASSERT_NE(nobody.exit_code, 0) << "something still answers: " << nobody.out;

  bed().daemon.start();  // answers `version` with its own pid, or throws with its log
  ASSERT_EQ(::lstat(bed().daemon.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
}

TEST_F(E2eFaults, ARegularFileAtTheSocketPathIsRefusedAndLeftAlone) {
  bed().dir.write("jitterd.sock", "precious\n");
  ASSERT_EQ(bed().daemon.socket(), bed().dir.file("jitterd.sock"));
  const Completed run = run_jitterd();
  expect_refused(run, kExitEnvironment,
                 {"bind control socket (" + bed().daemon.socket() +
                      " (exists and is not a socket)): File exists",
                  "hint: jitterd leaves it alone"});
  EXPECT_EQ(jitterd_e2e::read_file(bed().daemon.socket()), "precious\n");
  expect_unshaped();
  // The state folder's lock went with the refused process: a jitterd at a free socket starts.
  std::filesystem::remove(bed().daemon.socket());
  bed().daemon.start();
}

// ---------------------------------------------------------------------------------------------
// Two jitterds

TEST_F(E2eFaults, ASecondJitterdRefusesNamingTheFirstWhichKeepsWorking) {
  bed().daemon.start();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  auto events = bed().subscribe();
  const std::string first = std::to_string(bed().daemon.pid());

  // The same config: the state folder is taken.
  const Completed second = run_jitterd();
  expect_refused(
      second, kExitEnvironment,
      {"another jitterd (pid " + first + ", jitterd) holds the state folder (" + lock_path() + ")",
       "hint: only one jitterd may use a state folder (and a socket): stop the other one first "
       "(kill " +
           first});
  // Another state folder, the same socket: refused before its recovery could take the first one's
  // qdisc for a leftover.
  const Completed third = run_jitterd({"--state-dir", bed().dir.file("state2")});
  expect_refused(third, kExitEnvironment,
                 {"bind control socket (" + bed().daemon.socket() +
                      " (another jitterd is listening there (pid " + first +
                      ", jitterd))): Address already in use",
                  "stop the other one first (kill " + first});

  // The first one is untouched: its process, socket, qdisc, ledger and session.
  ASSERT_TRUE(bed().daemon.running()) << bed().daemon.log();
  EXPECT_EQ(bed().ctl_json({"version"}).at("pid").get<pid_t>(), bed().daemon.pid());
  EXPECT_EQ(phase_of_jta(), "high");
  EXPECT_NEAR(netem_delay_by_tc(), 0.050, 2e-6);
  const Json ledger = bed().ledger();
  EXPECT_EQ(ledger.at("pid").get<pid_t>(), bed().daemon.pid());
  ASSERT_EQ(ledger.at("interfaces").size(), 1u) << ledger.dump();
  events.drain(300ms);
  EXPECT_TRUE(events.of_type("cleared").empty()) << events.describe();
  EXPECT_TRUE(events.of_type("external-change").empty()) << events.describe();
  // ... and it keeps working.
  expect_ok({"switch", "jta", "low"});
  ASSERT_TRUE(events.wait_for("phase-changed", kEventTimeout)) << events.describe();
  EXPECT_NEAR(netem_delay_by_tc(), 0.005, 2e-6);
}

TEST_F(E2eFaults, ASecondJitterdWithAFolderAndSocketOfItsOwnRefusesInTheSameNamespace) {
  bed().daemon.start();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  const std::string first = std::to_string(bed().daemon.pid());
  // Nothing shared with the first but the network namespace: its recovery would have taken the
  // first one's qdisc (handle 1a7e:) for a crash's leftover.
  Json other = jitterd_e2e::parse_json(jitterd_e2e::read_file(bed().daemon.config_path()));
  other["state_dir"] = bed().dir.file("state-other");
  other["socket"]["path"] = bed().dir.file("other.sock");
  const std::string config = bed().dir.write("other.json", other.dump(2) + "\n");
  const Completed second = run_jitterd({}, config);
  expect_refused(second, kExitEnvironment,
                 {"another jitterd (pid " + first +
                      ", jitterd) runs in this network namespace (@jitterd/netns)",
                  "hint: one jitterd per network namespace", "(kill " + first});
  EXPECT_FALSE(std::filesystem::exists(bed().dir.file("other.sock")));
  EXPECT_EQ(phase_of_jta(), "high");
  EXPECT_NEAR(netem_delay_by_tc(), 0.050, 2e-6);
  ASSERT_EQ(bed().ledger().at("interfaces").size(), 1u) << bed().ledger().dump();

  // Once the first has gone, the name is free (the kernel drops it with the process, even after
  // kill -9) and the other config starts.
  bed().daemon.kill_hard();
  Process started = Process::spawn(
      {jitterd_e2e::jitterd_binary(), "--config", config},
      SpawnOptions{bed().daemon.netns(), std::nullopt, bed().dir.file("logs/other.log")});
  const auto deadline = Clock::now() + kRefusalTimeout;
  while (started.running() && !std::filesystem::exists(bed().dir.file("other.sock")) &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(started.running()) << jitterd_e2e::read_file(bed().dir.file("logs/other.log"));
  started.signal(SIGTERM);
  EXPECT_EQ(started.wait(20s).value_or(-1), 0)
      << jitterd_e2e::read_file(bed().dir.file("logs/other.log"));
  expect_unshaped();  // its recovery removed what the killed one left
}

TEST_F(E2eFaults, AnotherUserHoldingTheNamespaceNameCannotKeepJitterdFromStarting) {
  // Any user may bind an abstract name; one that is not root (nor jitterd's user) is not a jitterd.
  Process squatter =
      Process::spawn({"/usr/bin/python3", "-c",
                      "import socket, time\n"
                      "s = socket.socket(socket.AF_UNIX)\n"
                      "s.bind('\\0jitterd/netns')\n"
                      "s.listen()\n"
                      "print('bound', flush=True)\n"
                      "time.sleep(120)\n"},
                     SpawnOptions{bed().daemon.netns(), Credentials{kNobody, kNogroup, {}},
                                  bed().dir.file("logs/squatter.log")});
  const auto deadline = Clock::now() + kRefusalTimeout;
  while (!contains(jitterd_e2e::read_file(bed().dir.file("logs/squatter.log")), "bound") &&
         squatter.running() && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(squatter.running()) << jitterd_e2e::read_file(bed().dir.file("logs/squatter.log"));
  bed().daemon.start();
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  EXPECT_TRUE(contains(bed().daemon.log(), "@jitterd/netns is held by uid 65534 (pid " +
                                               std::to_string(squatter.pid())))
      << bed().daemon.log();
  squatter.signal(SIGKILL);
  squatter.wait(5s);
}

TEST_F(E2eFaults, TwoJitterdsStartedAtOnceOneRunsAndTheOtherRefusesNamingIt) {
  const auto racer = [&](int n) {
    return Process::spawn({jitterd_e2e::jitterd_binary(), "--config", bed().daemon.config_path()},
                          SpawnOptions{bed().daemon.netns(), std::nullopt,
                                       bed().dir.file("logs/racer-" + std::to_string(n) + ".log")});
  };
  std::vector<Process> racers;
  racers.push_back(racer(1));
  racers.push_back(racer(2));
  const auto deadline = Clock::now() + kRefusalTimeout;
  while (racers[0].running() && racers[1].running() && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_NE(racers[0].running(), racers[1].running()) << "exactly one of them must have ended";
  Process& winner = racers[0].running() ? racers[0] : racers[1];
  Process& loser = racers[0].running() ? racers[1] : racers[0];
  const int loser_number = &loser == &racers[0] ? 1 : 2;
  const std::string loser_log =
      jitterd_e2e::read_file(bed().dir.file("logs/racer-" + std::to_string(loser_number) + ".log"));
  EXPECT_EQ(loser.wait(0s).value_or(-1), kExitEnvironment) << loser_log;
  EXPECT_TRUE(contains(loser_log, "another jitterd (pid " + std::to_string(winner.pid()) +
                                      ", jitterd) holds the state folder"))
      << loser_log;

  // The winner listens (once its recovery is done) and answers as itself.
  std::optional<Json> version;
  while (!version && Clock::now() < deadline) {
    const Completed asked = bed().ctl({"--json", "version"});
    if (asked.exit_code == 0) {
      version = jitterd_e2e::parse_json(asked.out);
    } else {
      std::this_thread::sleep_for(50ms);
    }
  }
  ASSERT_TRUE(version) << "the winner did not answer within 30 s";
  EXPECT_EQ(version->at("pid").get<pid_t>(), winner.pid());
  expect_ok({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  EXPECT_EQ(bed().ledger().at("pid").get<pid_t>(), winner.pid());
  winner.signal(SIGTERM);
  EXPECT_EQ(winner.wait(20s).value_or(-1), 0) << "still running 20 s after SIGTERM, or failed";
  expect_unshaped();
}

}  // namespace
