// ProfileStore: the profile folders that `apply` names profiles from. Listing (*.json, not
// recursive, first folder wins, broken files reported), loading by name, and the rules that keep a
// request inside the folders (plain file stems only; symlinks that resolve elsewhere refused).
#include "profile_store.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "test_files.hpp"

namespace jitterd {
namespace {

// ProfileStore::load, with its refusal's message and kind in `error` and `not_found` (cleared on
// success), as the tests below read them.
std::optional<StoredProfile> load_into(const ProfileStore& store, const std::string& name,
                                       std::string& error, bool& not_found) {
  auto loaded = store.load(name);
  error = loaded ? std::string() : loaded.error().message;
  not_found = !loaded && loaded.error().not_found;
  return std::move(loaded).take_value();
}

using testing::profile_json;
using testing::TempDir;

std::vector<std::string> names(const ProfileListing& listing) {
  std::vector<std::string> out;
  for (const auto& p : listing.profiles) out.push_back(p.name);
  return out;
}

const InvalidProfile* invalid_file(const ProfileListing& listing, const std::string& file) {
  for (const auto& i : listing.invalid) {
    if (i.file == file) return &i;
  }
  return nullptr;
}

void symlink_or_fail(const std::string& target, const std::string& link) {
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link << " -> " << target;
}

TEST(ProfileStore, ListsTheJsonFilesOfAFolderSortedAndNotRecursively) {
  TempDir dir;
  dir.write("wifi.json", profile_json("wifi"));
  dir.write("lte.json", profile_json("lte", {{"a", "1s"}, {"b", "2s"}}));
  dir.write("notes.txt", "not a profile");
  dir.write("wifi.json.bak", profile_json("old"));
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  dir.write("sub/deep.json", profile_json("deep"));

  const ProfileListing listing = ProfileStore({dir.path()}).list();
  EXPECT_EQ(names(listing), (std::vector<std::string>{"lte", "wifi"}));
  EXPECT_TRUE(listing.invalid.empty());
  ASSERT_EQ(listing.profiles.size(), 2u);
  const StoredProfile& lte = listing.profiles[0];
  EXPECT_EQ(lte.file, dir.file("lte.json"));
  EXPECT_EQ(lte.profile->name, "lte");
  ASSERT_TRUE(lte.profile->schedule);
  EXPECT_EQ(lte.profile->schedule->steps.size(), 2u);
  EXPECT_EQ(lte.digest.rfind("sha256:", 0), 0u) << lte.digest;
  EXPECT_EQ(lte.digest.size(), 7u + 64u) << lte.digest;
}

TEST(ProfileStore, AFolderThatDoesNotExistIsSkipped) {
  TempDir dir;
  dir.write("wifi.json", profile_json("wifi"));
  const ProfileListing listing = ProfileStore({dir.file("absent"), dir.path()}).list();
  EXPECT_EQ(names(listing), std::vector<std::string>{"wifi"});
  EXPECT_TRUE(listing.invalid.empty());
}

TEST(ProfileStore, TheFirstFolderWins) {
  TempDir first, second;
  first.write("wifi.json", profile_json("wifi-from-first"));
  second.write("wifi.json", profile_json("wifi-from-second"));
  second.write("lte.json", profile_json("lte"));
  const ProfileStore store({first.path(), second.path()});

  const ProfileListing listing = store.list();
  ASSERT_EQ(names(listing), (std::vector<std::string>{"wifi", "lte"}));
  EXPECT_EQ(listing.profiles[0].file, first.file("wifi.json"));
  EXPECT_EQ(listing.profiles[0].profile->name, "wifi-from-first");
  EXPECT_EQ(listing.profiles[1].file, second.file("lte.json"));

  std::string error;
  bool not_found = true;
  const auto wifi = load_into(store, "wifi", error, not_found);
  ASSERT_TRUE(wifi) << error;
  EXPECT_FALSE(not_found);
  EXPECT_EQ(wifi->file, first.file("wifi.json"));
  EXPECT_EQ(wifi->profile->name, "wifi-from-first");
  EXPECT_EQ(wifi->digest, listing.profiles[0].digest);
}

TEST(ProfileStore, InvalidProfilesAreListedWithTheirErrors) {
  TempDir dir;
  dir.write("good.json", profile_json("good"));
  dir.write("bad.json",
            R"({"version": 1, "name": "bad", "phases": {"x": {"loss": {"model": "random",
                           "probability": 1.7}}}})");
  dir.write("garbage.json", "{not json");
  const ProfileStore store({dir.path()});
  const ProfileListing listing = store.list();
  EXPECT_EQ(names(listing), std::vector<std::string>{"good"});
  ASSERT_EQ(listing.invalid.size(), 2u);
  const InvalidProfile* bad = invalid_file(listing, dir.file("bad.json"));
  ASSERT_TRUE(bad);
  ASSERT_EQ(bad->errors.size(), 1u);
  EXPECT_NE(bad->errors[0].find("/phases/x/loss/probability"), std::string::npos) << bad->errors[0];
  EXPECT_NE(bad->errors[0].find("1.7 is not a probability"), std::string::npos) << bad->errors[0];
  const InvalidProfile* garbage = invalid_file(listing, dir.file("garbage.json"));
  ASSERT_TRUE(garbage);
  ASSERT_FALSE(garbage->errors.empty());

  // Loading it by name says why, and that it exists (not "not found").
  std::string error;
  bool not_found = true;
  EXPECT_FALSE(load_into(store, "bad", error, not_found));
  EXPECT_FALSE(not_found);
  EXPECT_NE(error.find("1.7 is not a probability"), std::string::npos) << error;
}

TEST(ProfileStore, AMissingProfileIsNotFoundAndTheFoldersAreNamed) {
  TempDir first, second;
  std::string error;
  bool not_found = false;
  EXPECT_FALSE(load_into(ProfileStore({first.path(), second.path()}), "wifi", error, not_found));
  EXPECT_TRUE(not_found);
  EXPECT_EQ(error, "no profile \"wifi\" in " + first.path() + ", " + second.path());
}

TEST(ProfileStore, ValidNamesArePlainFileStems) {
  for (const char* name : {"wifi", "wan-evening.2", "LTE_cell", "a", "x.y.z"}) {
    EXPECT_TRUE(ProfileStore::valid_name(name)) << name;
  }
  for (const char* name : {"", "a/b", "/etc/passwd", "..", "../wifi", ".hidden", ".", "a b",
                           "wifi\n", "caf\xc3\xa9", "a\\b"}) {
    EXPECT_FALSE(ProfileStore::valid_name(name)) << name;
  }
  EXPECT_TRUE(ProfileStore::valid_name(std::string(64, 'x')));
  EXPECT_FALSE(ProfileStore::valid_name(std::string(65, 'x')));
}

TEST(ProfileStore, NamesThatCouldLeaveTheFolderAreRefusedBeforeAnyFileIsRead) {
  TempDir root;
  // profiles/ is the folder; a valid profile sits beside it and below it.
  ASSERT_EQ(::mkdir(root.file("profiles").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(root.file("profiles/sub").c_str(), 0755), 0);
  root.write("outside.json", profile_json("outside"));
  root.write("profiles/sub/inner.json", profile_json("inner"));
  root.write("profiles/.hidden.json", profile_json("hidden"));
  const ProfileStore store({root.file("profiles")});
  for (const char* name : {"../outside", "sub/inner", ".hidden", "..", "/tmp/outside"}) {
    std::string error;
    bool not_found = true;
    EXPECT_FALSE(load_into(store, name, error, not_found)) << name;
    EXPECT_FALSE(not_found) << name << ": a bad name is not a missing profile";
    EXPECT_NE(error.find("is not a profile name"), std::string::npos) << error;
  }
  // Nor does the listing offer a file whose stem could not be asked for.
  EXPECT_TRUE(store.list().profiles.empty());
}

TEST(ProfileStore, ASymlinkResolvingOutsideTheFolderIsRefused) {
  TempDir root;
  ASSERT_EQ(::mkdir(root.file("profiles").c_str(), 0755), 0);
  root.write("secret.json", profile_json("secret"));
  symlink_or_fail(root.file("secret.json"), root.file("profiles/evil.json"));
  const ProfileStore store({root.file("profiles")});

  const ProfileListing listing = store.list();
  EXPECT_TRUE(listing.profiles.empty());
  const InvalidProfile* evil = invalid_file(listing, root.file("profiles/evil.json"));
  ASSERT_TRUE(evil);
  ASSERT_EQ(evil->errors.size(), 1u);
  EXPECT_NE(evil->errors[0].find("resolves outside"), std::string::npos) << evil->errors[0];

  std::string error;
  bool not_found = true;
  EXPECT_FALSE(load_into(store, "evil", error, not_found));
  EXPECT_FALSE(not_found);
  EXPECT_NE(error.find("resolves outside"), std::string::npos) << error;
}

TEST(ProfileStore, ASymlinkWithinTheFolderIsFollowed) {
  TempDir dir;
  dir.write("wifi.json", profile_json("wifi"));
  symlink_or_fail("wifi.json", dir.file("default.json"));
  const ProfileStore store({dir.path()});
  EXPECT_EQ(names(store.list()), (std::vector<std::string>{"default", "wifi"}));
  std::string error;
  bool not_found = true;
  const auto p = load_into(store, "default", error, not_found);
  ASSERT_TRUE(p) << error;
  EXPECT_EQ(p->profile->name, "wifi");
}

TEST(ProfileStore, ListAndLoadAgreeWhenTheFirstFolderRefusesAName) {
  // The first folder has "wifi" as a symlink to a file elsewhere; the second has a good "wifi".
  // load() refuses "wifi" (the first folder that has the name wins, and its file resolves outside),
  // so the listing must not offer the second folder's "wifi" as loadable: every listed profile must
  // load, from the listed file.
  TempDir root;
  ASSERT_EQ(::mkdir(root.file("first").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(root.file("second").c_str(), 0755), 0);
  root.write("elsewhere.json", profile_json("elsewhere"));
  symlink_or_fail(root.file("elsewhere.json"), root.file("first/wifi.json"));
  root.write("second/wifi.json", profile_json("wifi"));
  const ProfileStore store({root.file("first"), root.file("second")});

  const ProfileListing listing = store.list();
  for (const auto& listed : listing.profiles) {
    std::string error;
    bool not_found = false;
    const auto loaded = load_into(store, listed.name, error, not_found);
    EXPECT_TRUE(loaded) << "\"" << listed.name << "\" is listed (" << listed.file
                        << ") but does not load: " << error;
    if (loaded) {
      EXPECT_EQ(loaded->file, listed.file);
    }
  }
  EXPECT_TRUE(invalid_file(listing, root.file("first/wifi.json")));
}

// Whether anyone opens a FIFO for reading while it lives: a writer polls it without blocking (an
// open for writing fails with ENXIO while there is no reader). If someone does (jitterd before
// issue 21 §2 opened x.json for reading and waited there for a writer), the writer gives it "{}"
// and closes, so that the test ends instead of hanging.
class FifoWatch {
 public:
  explicit FifoWatch(const std::string& path) : path_(path) {
    if (::mkfifo(path.c_str(), 0644) != 0) ADD_FAILURE() << "mkfifo " << path;
    writer_ = std::thread([this] {
      while (!stop_) {
        const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
          opened_by_reader_ = true;
          (void)::write(fd, "{}", 2);
          ::close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  FifoWatch(const FifoWatch&) = delete;
  FifoWatch& operator=(const FifoWatch&) = delete;
  ~FifoWatch() {
    stop_ = true;
    writer_.join();
  }
  bool opened_by_reader() const { return opened_by_reader_; }

 private:
  std::string path_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> opened_by_reader_{false};
  std::thread writer_;
};

TEST(ProfileStore, AFifoIsReportedAndNeverOpenedForReading) {
  TempDir dir;
  dir.write("wifi.json", profile_json("wifi"));
  FifoWatch fifo(dir.file("x.json"));
  const ProfileListing listing = ProfileStore({dir.path()}).list();
  EXPECT_EQ(names(listing), (std::vector<std::string>{"wifi"}));
  const InvalidProfile* bad = invalid_file(listing, dir.file("x.json"));
  ASSERT_TRUE(bad);
  ASSERT_EQ(bad->errors.size(), 1u);
  EXPECT_NE(bad->errors[0].find("is a FIFO, not a regular file"), std::string::npos)
      << bad->errors[0];

  std::string error;
  bool not_found = true;
  EXPECT_FALSE(load_into(ProfileStore({dir.path()}), "x", error, not_found));
  EXPECT_FALSE(not_found) << "it is there, and broken";
  EXPECT_NE(error.find("is a FIFO"), std::string::npos) << error;
  EXPECT_FALSE(fifo.opened_by_reader())
      << "the FIFO was opened for reading: a reader would wait for a writer";
}

TEST(ProfileStore, DevicesFoldersAndOversizedFilesAreRefusedUnread) {
  TempDir dir;
  // A link to /dev/zero would be read as 8 MiB of zeros; it is a device, and outside the folder.
  symlink_or_fail("/dev/zero", dir.file("zero.json"));
  ASSERT_EQ(::mkdir(dir.file("folder.json").c_str(), 0755), 0);
  // One byte over the limit, sparse: refused by its size, not read.
  const std::string huge = dir.write("huge.json", "");
  ASSERT_EQ(::truncate(huge.c_str(), static_cast<off_t>(shaper::kMaxProfileBytes + 1)), 0);
  const ProfileListing listing = ProfileStore({dir.path()}).list();
  EXPECT_TRUE(listing.profiles.empty());
  ASSERT_EQ(listing.invalid.size(), 3u);
  const auto error_of = [&](const std::string& file) {
    const InvalidProfile* bad = invalid_file(listing, dir.file(file));
    return bad && !bad->errors.empty() ? bad->errors[0] : std::string("(not listed)");
  };
  EXPECT_NE(error_of("zero.json").find("is a character device"), std::string::npos)
      << error_of("zero.json");
  EXPECT_NE(error_of("folder.json").find("is a folder"), std::string::npos)
      << error_of("folder.json");
  EXPECT_NE(
      error_of("huge.json").find("has 8388609 bytes; a profile file may have at most 8388608"),
      std::string::npos)
      << error_of("huge.json");
}

TEST(ProfileStore, ALoanAnswersInsteadOfTheFolders) {
  TempDir dir;
  dir.write("wifi.json", profile_json("wifi"));
  const ProfileStore store({dir.path()});
  ProfileStore::Prefetch prefetch;
  prefetch.listing = store.scan();
  prefetch.lookup = store.lookup("wifi");
  std::filesystem::remove(dir.file("wifi.json"));
  {
    const ProfileStore::Lend lend(store, prefetch);
    EXPECT_EQ(names(store.list()), (std::vector<std::string>{"wifi"}));
    std::string error;
    bool not_found = false;
    EXPECT_TRUE(load_into(store, "wifi", error, not_found)) << error;
    EXPECT_FALSE(load_into(store, "lte", error, not_found))
        << "a name the loan does not have is read";
    EXPECT_TRUE(not_found);
  }
  EXPECT_TRUE(store.list().profiles.empty()) << "after the loan, the folders again";
}

}  // namespace
}  // namespace jitterd
