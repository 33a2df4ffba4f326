#pragma once
// File descriptors, bounded file reads and output files, shared by the library, the daemon and
// jitterctl.

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace shaper {

// Owns one file descriptor; move-only, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// The file's first `max_bytes + 1` bytes at most: one byte past the limit is enough for the caller
// to refuse the file by its size, without a larger file ever being held in memory. Reads in chunks,
// so memory follows the file's size, not the limit. Throws SystemError (open, read) naming `path`.
std::string read_file_bounded(const std::string& path, std::size_t max_bytes);

// A file replaced whole or not at all: written to a private temporary in the destination's folder,
// then renamed over the destination by commit(). The temporary is created with O_CREAT | O_EXCL |
// O_NOFOLLOW under a random name, so nothing another user planted in that folder (a symlink at a
// predictable "X.tmp") is followed, truncated or renamed; `mode` is what open(2) gets, the umask
// applying as to any new file. Until commit() succeeds the temporary is unlinked on destruction, so
// a failure anywhere (a full disk, an exception between writes) leaves the folder as it was.
// Environment failures throw SystemError naming the operation and the temporary (or the rename).
class OutputFile {
 public:
  explicit OutputFile(std::string path, mode_t mode = 0666);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  const std::string& path() const { return path_; }
  const std::string& temporary() const { return temporary_; }
  void write(std::string_view bytes);
  // fsync, then rename over path(): a reader sees the old file or the whole new one.
  void commit();

 private:
  std::string path_;
  std::string temporary_;  // empty once committed (or moved from)
  UniqueFd fd_;
};

// `text` as the whole of `path`, through an OutputFile.
void write_file_atomically(const std::string& path, std::string_view text, mode_t mode = 0666);

}  // namespace shaper
