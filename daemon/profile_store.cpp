#include "profile_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"

namespace jitterd {
namespace {

namespace fs = std::filesystem;
using shaper::UniqueFd;

// What a file that is not a regular file is, for the diagnostic.
const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a folder";
  return "not a regular file";
}

// Where the opened file really is (symlinks resolved), from the descriptor rather than the name, so
// that a link swapped after the open cannot send the check elsewhere. /proc may be absent (a
// chroot): then from the name.
fs::path resolved(int fd, const fs::path& file) {
  std::error_code ec;
  fs::path real = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec || real.empty() || real.native().front() != '/') real = fs::canonical(file, ec);
  return ec ? fs::path() : real;
}

// A profile file's text, read only if it is a regular file inside `dir` and not larger than a
// profile may be; otherwise `error` says which rule it broke and how to fix it. Nothing here blocks
// on what is in the folder: the first open is O_PATH (it opens no device and waits for no FIFO
// writer), the kind and size come from that descriptor, and only then is the same inode opened for
// reading.
std::optional<std::string> read_profile_text(const fs::path& file, const fs::path& dir,
                                             std::string* error, bool* missing) {
  const std::string name = file.string();
  const UniqueFd path_fd(::open(name.c_str(), O_PATH | O_CLOEXEC));
  if (!path_fd) {
    if (missing) *missing = errno == ENOENT;
    *error = name + ": cannot open: " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(path_fd.get(), &st) != 0) {
    *error = name + ": cannot stat: " + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    *error =
        name + " is " + kind_of(st.st_mode) +
        ", not a regular file; jitterd reads only regular files as profiles (it never waits on a "
        "FIFO or "
        "device): remove it from the profile folder or give it a name that does not end in .json";
    return std::nullopt;
  }
  std::error_code ec;
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec || resolved(path_fd.get(), file).parent_path() != real_dir) {
    *error = name + " resolves outside " + dir.string() +
             "; jitterd reads profiles only from its folders";
    return std::nullopt;
  }
  if (static_cast<std::size_t>(st.st_size) > shaper::kMaxProfileBytes) {
    *error = name + " has " + std::to_string(st.st_size) +
             " bytes; a profile file may have at most " + std::to_string(shaper::kMaxProfileBytes) +
             " (8 MiB)";
    return std::nullopt;
  }
  // The same inode again, for reading, through the descriptor (a regular file: the open does not
  // wait). Without /proc, by its name: a swap in between is then not caught.
  const std::string by_fd = "/proc/self/fd/" + std::to_string(path_fd.get());
  try {
    // A file that grew meanwhile is cut one byte past the limit: parse_profile refuses it by size.
    return shaper::read_file_bounded(::access(by_fd.c_str(), F_OK) == 0 ? by_fd : name,
                                     shaper::kMaxProfileBytes);
  } catch (const shaper::SystemError& e) {
    *error = name + ": " + e.what();
    return std::nullopt;
  }
}

std::optional<StoredProfile> load_file(const std::string& name, const fs::path& file,
                                       const fs::path& dir, std::string* error, bool* missing) {
  const auto text = read_profile_text(file, dir, error, missing);
  if (!text) return std::nullopt;
  shaper::ProfileLoad load = shaper::parse_profile(*text);
  if (!load) {
    *error = shaper::to_string(load.diagnostics(), file.string());
    return std::nullopt;
  }
  return StoredProfile{name, file.string(),
                       std::make_shared<const shaper::Profile>(std::move(load->profile)),
                       load->digest};
}

}  // namespace

bool ProfileStore::valid_name(const std::string& name) {
  if (name.empty() || name.size() > shaper::kMaxNameLength || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

ProfileListing ProfileStore::list() const {
  if (lent_ && lent_->listing) return *lent_->listing;
  return scan();
}

shaper::Expected<StoredProfile, ProfileRefusal> ProfileStore::load(const std::string& name) const {
  ProfileLookup found =
      lent_ && lent_->lookup && lent_->lookup->name == name ? *lent_->lookup : lookup(name);
  if (found.profile) return std::move(*found.profile);
  return ProfileRefusal{std::move(found.error), found.not_found};
}

ProfileListing ProfileStore::scan() const {
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
        out.invalid.push_back({file.string(),
                               {"\"" + name +
                                "\" is not a profile name: use letters, digits, '.', "
                                "'_' and '-', not starting with '.'; rename the file"}});
        continue;
      }
      seen.push_back(name);
      std::string error;
      if (auto p = load_file(name, file, dir, &error, nullptr)) {
        out.profiles.push_back(std::move(*p));
      } else {
        out.invalid.push_back({file.string(), {error}});
      }
    }
  }
  return out;
}

ProfileLookup ProfileStore::lookup(const std::string& name) const {
  ProfileLookup out;
  out.name = name;
  if (!valid_name(name)) {
    out.error =
        "\"" + name +
        "\" is not a profile name: names are file stems of letters, digits, '.', '_' and '-' "
        "(not starting with '.'); to send a profile from elsewhere, send it inline";
    return out;
  }
  for (const auto& dir : dirs_) {
    const fs::path file = fs::path(dir) / (name + ".json");
    bool missing = false;
    out.profile = load_file(name, file, dir, &out.error, &missing);
    if (out.profile || !missing) return out;
    out.error.clear();
  }
  out.not_found = true;
  std::string folders;
  for (const auto& d : dirs_) folders += (folders.empty() ? "" : ", ") + d;
  out.error = "no profile \"" + name + "\" in " +
              (folders.empty() ? "(no profile folders configured)" : folders);
  return out;
}

}  // namespace jitterd
