#pragma once
// The profile folders: `apply` names a profile ("wifi" is <dir>/wifi.json in the first folder that
// has it). Names are plain file stems, so a request can never reach a file outside the folders: no
// "/", no leading ".", and a symlink that resolves outside its folder is refused. Only regular
// files are read, and never with a blocking open: a FIFO, socket, device or folder called *.json is
// reported, not opened for reading (a FIFO would hold the reader until someone writes to it).
//
// Reading a folder can still take long (thousands of files, 8 MiB each, a slow disk), so the
// control server reads on a thread of its own (scan(), lookup(): they touch nothing but the
// folders) and lends the result to the request while the loop dispatches it (Lend). Without a loan,
// list() and load() read on the caller's thread, as --check-config does.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/results.hpp"
#include "shaper/diagnostics.hpp"
#include "shaper/expected.hpp"
#include "shaper/profile.hpp"

namespace jitterd {

struct StoredProfile {
  std::string name;  // file stem
  std::string file;
  std::shared_ptr<const shaper::Profile> profile;
  std::string digest;
};

// A file in a profile folder that is not a valid profile, as `profiles` lists it.
using protocol::InvalidProfile;

struct ProfileListing {
  std::vector<StoredProfile> profiles;
  std::vector<InvalidProfile> invalid;
};

// One profile looked up by name: the profile, or why not (`not_found` tells a missing profile from
// a broken one).
// Why a profile cannot be had.
struct ProfileRefusal {
  std::string message;
  bool not_found = false;  // no such profile, rather than one that is broken
};

struct ProfileLookup {
  std::string name;
  std::optional<StoredProfile> profile;
  std::string error;
  bool not_found = false;
};

class ProfileStore {
 public:
  explicit ProfileStore(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  // Every *.json in the folders (not recursive), loaded; a folder that does not exist is skipped.
  // From the loan when there is one.
  ProfileListing list() const;

  // The profile called `name`, or why not (not found, invalid, outside the folders), telling a
  // missing profile from a broken one. From the loan when it has this name.
  shaper::Expected<StoredProfile, ProfileRefusal> load(const std::string& name) const;

  // What list() and load() read, read now. Safe on any thread, beside each other and the loop.
  ProfileListing scan() const;
  ProfileLookup lookup(const std::string& name) const;

  // What was read ahead for one request.
  struct Prefetch {
    std::optional<ProfileListing> listing;
    std::optional<ProfileLookup> lookup;
  };
  // While it lives, list() and load() answer from `prefetch` instead of reading. The loop thread
  // only.
  class Lend {
   public:
    Lend(const ProfileStore& store, const Prefetch& prefetch) : store_(store) {
      store_.lent_ = &prefetch;
    }
    Lend(const Lend&) = delete;
    Lend& operator=(const Lend&) = delete;
    ~Lend() { store_.lent_ = nullptr; }

   private:
    const ProfileStore& store_;
  };

  static bool valid_name(const std::string& name);
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
  mutable const Prefetch* lent_ = nullptr;
};

}  // namespace jitterd
