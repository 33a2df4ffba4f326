#include "shaper/files.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "shaper/errors.hpp"

namespace shaper {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    UniqueFd old(std::exchange(fd_, other.release()));
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  // Nothing written through these descriptors is still in flight when they are dropped (writers
  // fsync and check first), and a destructor must not throw: the result is not checked.
  if (fd_ >= 0) ::close(fd_);
}

std::string read_file_bounded(const std::string& path, std::size_t max_bytes) {
  const UniqueFd fd(
      static_cast<int>(check_syscall(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "open", path)));
  // Profiles and configs are kilobytes to a few MiB; 64 KiB reads keep small files cheap.
  constexpr std::size_t kChunk = 64 * 1024;
  std::string text;
  while (text.size() <= max_bytes) {
    const std::size_t old_size = text.size();
    text.resize(old_size + std::min(kChunk, max_bytes + 1 - old_size));
    const long n = ::read(fd.get(), text.data() + old_size, text.size() - old_size);
    if (n < 0 && errno == EINTR) {
      text.resize(old_size);
      continue;
    }
    text.resize(old_size + static_cast<std::size_t>(check_syscall(n, "read", path)));
    if (n == 0) break;
  }
  return text;
}

namespace {

// "dir/.name." + 16 random hex digits + ".tmp": hidden, in the destination's folder (rename(2) does
// not cross file systems), and not guessable, so another user cannot plant anything at it
// beforehand.
std::string temporary_name(const std::string& path) {
  std::uint64_t random = 0;
  check_syscall(::getrandom(&random, sizeof random, 0), "getrandom",
                "a temporary name for " + path);
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, ".%016llx.tmp", static_cast<unsigned long long>(random));
  return folder + "." + name + suffix;
}

}  // namespace

OutputFile::OutputFile(std::string path, mode_t mode) : path_(std::move(path)) {
  // A name already taken (by chance, or planted) is never opened: O_EXCL fails on anything there,
  // a symlink included. 64 random bits make a second collision in a row practically impossible;
  // the bound keeps a folder someone fills with guesses from looping forever.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string candidate = temporary_name(path_);
    const int fd =
        ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      fd_ = UniqueFd(fd);
      temporary_ = std::move(candidate);
      return;
    }
    // Named by the file asked for, and how to fix it: the temporary's name alone puzzled users.
    if (errno != EEXIST || attempt + 1 == kAttempts) {
      check_syscall(-1, "create",
                    path_ + ", through its temporary " + candidate +
                        " beside it; the folder must exist and be writable");
    }
  }
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::exchange(other.temporary_, {})),
      fd_(std::move(other.fd_)) {}

OutputFile::~OutputFile() {
  // Not committed: the partial file goes. On a full disk it holds the room the next attempt needs.
  // A destructor must not throw, and there is nothing better to do if unlink fails.
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void OutputFile::write(std::string_view bytes) {
  while (!bytes.empty()) {
    const long n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    bytes.remove_prefix(static_cast<std::size_t>(check_syscall(n, "write", temporary_)));
  }
}

void OutputFile::commit() {
  // fsync first: after a crash the destination holds the old file or the whole new one, never an
  // empty one whose data the kernel had not written yet.
  check_syscall(::fsync(fd_.get()), "fsync", temporary_);
  check_syscall(::close(fd_.release()), "close", temporary_);
  check_syscall(::rename(temporary_.c_str(), path_.c_str()), "rename", temporary_ + " to " + path_);
  temporary_.clear();
}

void write_file_atomically(const std::string& path, std::string_view text, mode_t mode) {
  OutputFile out(path, mode);
  out.write(text);
  out.commit();
}

}  // namespace shaper
