#include "shaper/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

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
  const UniqueFd fd(static_cast<int>(check_syscall(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "open", path)));
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

}  // namespace shaper
