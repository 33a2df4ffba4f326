// OutputFile and write_file_atomically: every output file of the product (profiles, plots, the
// ledger) is written through a private temporary in its folder and renamed into place. These tests
// plant what another user could plant, and fail the write midway.
#include "shaper/files.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shaper/errors.hpp"
#include "test_files.hpp"

namespace shaper {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
std::string contents(const fs::path& path) {
  return jitterd::testing::read_file(path.string());
}
std::vector<std::string> names_in(const fs::path& folder) {
  return jitterd::testing::names_in(folder.string());
}

class OutputFileTest : public ::testing::Test {
 protected:
  jitterd::testing::TempDir temp_;
  fs::path dir_ = temp_.path();
};

TEST_F(OutputFileTest, WritesTheWholeTextAndLeavesOnlyTheFile) {
  const fs::path out = dir_ / "profile.json";
  put(out, "the old profile, longer than the new one");
  write_file_atomically(out.string(), "{}\n");
  EXPECT_EQ(contents(out), "{}\n");
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"profile.json"});
}

TEST_F(OutputFileTest, APlantedSymlinkAtTheOldTemporaryNameIsNeitherFollowedNorMoved) {
  // Before: `X.tmp` was opened with O_CREAT | O_TRUNC, following a symlink planted there (as root,
  // onto any file), and then renamed over X.
  const fs::path victim = dir_ / "victim";
  put(victim, "precious");
  fs::create_symlink(victim, dir_ / "plot.svg.tmp");
  write_file_atomically((dir_ / "plot.svg").string(), "<svg/>");
  EXPECT_EQ(contents(victim), "precious");
  ASSERT_TRUE(fs::is_symlink(dir_ / "plot.svg.tmp"));
  EXPECT_EQ(fs::read_symlink(dir_ / "plot.svg.tmp"), victim);
  EXPECT_FALSE(fs::is_symlink(dir_ / "plot.svg"));
  EXPECT_EQ(contents(dir_ / "plot.svg"), "<svg/>");
  EXPECT_EQ(names_in(dir_), (std::vector<std::string>{"plot.svg", "plot.svg.tmp", "victim"}));
}

TEST_F(OutputFileTest, TheTemporaryIsPrivateUntilRenamedAndTheModeFollowsTheUmask) {
  const mode_t old = ::umask(027);
  {
    OutputFile out((dir_ / "a.json").string());
    EXPECT_EQ(fs::path(out.temporary()).parent_path(), dir_)
        << "in the destination's folder, for rename";
    EXPECT_NE(out.temporary(), (dir_ / "a.json.tmp").string()) << "not a name anyone can predict";
    out.write("x");
    out.commit();
  }
  write_file_atomically((dir_ / "b.json").string(), "y", 0644);
  ::umask(old);
  struct stat a {
  }, b{};
  ASSERT_EQ(::stat((dir_ / "a.json").c_str(), &a), 0);
  ASSERT_EQ(::stat((dir_ / "b.json").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode & 07777, 0640u);
  EXPECT_EQ(b.st_mode & 07777, 0640u);
}

TEST_F(OutputFileTest, NotCommittedTheTemporaryGoes) {
  const fs::path out = dir_ / "profile.json";
  put(out, "old");
  {
    OutputFile file(out.string());
    file.write("half of a new profile");
    EXPECT_EQ(names_in(dir_).size(), 2u) << "the file and its temporary";
  }
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"profile.json"});
  EXPECT_EQ(contents(out), "old");
}

TEST_F(OutputFileTest, AWriteThatFailsMidwayLeavesTheOldFileAndNoTemporary) {
  // The disk fills midway: RLIMIT_FSIZE makes write(2) fail with EFBIG past 4 KiB, as ENOSPC would.
  // In a child, so the limit stays there.
  const fs::path out = dir_ / "profile.json";
  put(out, "old");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::signal(SIGXFSZ, SIG_IGN);
    try {
      write_file_atomically(out.string(), std::string(1 << 20, 'x'));
    } catch (const SystemError& e) {
      ::_exit(e.operation() == "write" && e.error_number() == EFBIG ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the write did not fail; 2: it failed otherwise";
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"profile.json"});
  EXPECT_EQ(contents(out), "old");
}

TEST_F(OutputFileTest, ARenameThatFailsLeavesNoTemporary) {
  fs::create_directories(dir_ / "taken" / "inside");
  try {
    write_file_atomically((dir_ / "taken").string(), "x");
    ADD_FAILURE() << "renamed over a folder";
  } catch (const SystemError& e) {
    EXPECT_EQ(e.operation(), "rename");
    EXPECT_NE(std::string(e.what()).find("to " + (dir_ / "taken").string()), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"taken"});
}

TEST_F(OutputFileTest, AFolderThatCannotBeWrittenIsNamedInTheError) {
  try {
    write_file_atomically((dir_ / "missing" / "x.json").string(), "x");
    ADD_FAILURE() << "wrote into a folder that does not exist";
  } catch (const SystemError& e) {
    EXPECT_EQ(e.operation(), "create");
    EXPECT_EQ(
        e.object().rfind((dir_ / "missing" / "x.json").string() + ", through its temporary ", 0),
        0u)
        << e.object();
    EXPECT_NE(e.object().find("the folder must exist and be writable"), std::string::npos);
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_NE(std::string(e.what()).find((dir_ / "missing" / ".x.json.").string()),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shaper
