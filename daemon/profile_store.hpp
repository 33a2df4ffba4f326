#pragma once
// The profile folders: `apply` names a profile ("wifi" is <dir>/wifi.json in the first folder that has
// it). Names are plain file stems, so a request can never reach a file outside the folders: no "/",
// no leading ".", and a symlink that resolves outside its folder is refused.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/profile.hpp"

namespace jitterd {

struct StoredProfile {
  std::string name;  // file stem
  std::string file;
  std::shared_ptr<const shaper::Profile> profile;
  std::string digest;
};

struct InvalidProfile {
  std::string file;
  std::vector<std::string> errors;
};

struct ProfileListing {
  std::vector<StoredProfile> profiles;
  std::vector<InvalidProfile> invalid;
};

class ProfileStore {
 public:
  explicit ProfileStore(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

  // Every *.json in the folders (not recursive), loaded; a folder that does not exist is skipped.
  ProfileListing list() const;

  // The profile called `name`. On failure, `error` says why (not found, invalid, outside the folders)
  // and `not_found` tells a missing profile from a broken one.
  std::optional<StoredProfile> load(const std::string& name, std::string* error, bool* not_found) const;

  static bool valid_name(const std::string& name);
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
};

}  // namespace jitterd
