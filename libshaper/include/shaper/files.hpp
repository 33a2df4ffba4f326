#pragma once
// File descriptors and bounded file reads, shared by the library, the daemon and jitterctl.

#include <cstddef>
#include <string>
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

// The file's first `max_bytes + 1` bytes at most: one byte past the limit is enough for the caller to
// refuse the file by its size, without a larger file ever being held in memory. Reads in chunks, so
// memory follows the file's size, not the limit. Throws SystemError (open, read) naming `path`.
std::string read_file_bounded(const std::string& path, std::size_t max_bytes);

}  // namespace shaper
