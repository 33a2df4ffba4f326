#include "control_rig.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "../support/temp_dir.hpp"

namespace jitterd::testing {

// connect(2) to `path`; the fd, or -1 with errno.
int connect_to(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const test_support::UnixAddress a = test_support::unix_address(path);
  if (::connect(fd, a.get(), a.length) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace jitterd::testing
