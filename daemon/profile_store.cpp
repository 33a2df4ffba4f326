#include "profile_store.hpp"

#include <algorithm>
#include <filesystem>

#include "shaper/errors.hpp"

namespace jitterd {
namespace {

namespace fs = std::filesystem;

// Inside `dir` once both are resolved (symlinks followed)?
bool inside(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  const fs::path real_file = fs::canonical(file, ec);
  if (ec) return false;
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) return false;
  return real_file.parent_path() == real_dir;
}

std::optional<StoredProfile> load_file(const std::string& name, const fs::path& file, std::string* error) {
  shaper::ProfileLoad load;
  try {
    load = shaper::load_profile_file(file.string());
  } catch (const shaper::SystemError& e) {
    *error = e.what();
    return std::nullopt;
  }
  if (!load.profile) {
    *error = shaper::to_string(load.diagnostics, file.string());
    return std::nullopt;
  }
  return StoredProfile{name, file.string(), std::make_shared<const shaper::Profile>(std::move(*load.profile)),
                       load.digest};
}

}  // namespace

bool ProfileStore::valid_name(const std::string& name) {
  if (name.empty() || name.size() > shaper::kMaxNameLength || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

ProfileListing ProfileStore::list() const {
  ProfileListing out;
  std::vector<std::string> seen;
  for (const auto& dir : dirs_) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      const std::string name = file.stem().string();
      // The first folder wins, as in load().
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
      if (!valid_name(name)) {
        out.invalid.push_back({file.string(), {"\"" + name + "\" is not a profile name: use letters, digits, '.', "
                                               "'_' and '-', not starting with '.'; rename the file"}});
        continue;
      }
      seen.push_back(name);
      if (!inside(file, dir)) {
        out.invalid.push_back({file.string(), {"resolves outside " + dir + "; jitterd reads profiles only there"}});
        continue;
      }
      std::string error;
      if (auto p = load_file(name, file, &error)) {
        out.profiles.push_back(std::move(*p));
      } else {
        out.invalid.push_back({file.string(), {error}});
      }
    }
  }
  return out;
}

std::optional<StoredProfile> ProfileStore::load(const std::string& name, std::string* error, bool* not_found) const {
  *not_found = false;
  if (!valid_name(name)) {
    *error = "\"" + name + "\" is not a profile name: names are file stems of letters, digits, '.', '_' and '-' "
                           "(not starting with '.'); to send a profile from elsewhere, send it inline";
    return std::nullopt;
  }
  for (const auto& dir : dirs_) {
    const fs::path file = fs::path(dir) / (name + ".json");
    std::error_code ec;
    if (!fs::exists(file, ec)) continue;
    if (!inside(file, dir)) {
      *error = file.string() + " resolves outside " + dir + "; jitterd reads profiles only from its folders";
      return std::nullopt;
    }
    return load_file(name, file, error);
  }
  *not_found = true;
  std::string folders;
  for (const auto& d : dirs_) folders += (folders.empty() ? "" : ", ") + d;
  *error = "no profile \"" + name + "\" in " + (folders.empty() ? "(no profile folders configured)" : folders);
  return std::nullopt;
}

}  // namespace jitterd
