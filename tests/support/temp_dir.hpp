#pragma once
// The one temporary folder of every test suite (unit, daemon, ctl, e2e), and the address of a Unix
// socket: a path in such a folder, or an abstract name. Header-only, so that each suite takes it
// without a library of its own: #include "../support/temp_dir.hpp".

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace test_support {

// A fresh folder /tmp/<prefix>XXXXXX, removed with everything in it. The path stays short, so that
// a socket inside fits sun_path's 108 bytes. `mode`: 0700 as mkdtemp makes it, or wider where
// another user must reach a socket inside (the e2e permission tests).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "jitterd-test-", mode_t mode = 0700) {
    std::string pattern = "/tmp/" + prefix + "XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    path_ = pattern;
    if (mode != 0700 && ::chmod(path_.c_str(), mode) != 0) {
      throw std::runtime_error("chmod " + path_ + ": " + std::strerror(errno));
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `text` to <path>/<name> (creating <path>/<dir> for "dir/name"); returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path target = file(name);
    std::filesystem::create_directories(target.parent_path());
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + target.string());
    return target.string();
  }

 private:
  std::string path_;
};

// A Unix socket's address and its length, for bind(2) and connect(2).
struct UnixAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address); }
};

// `name` is a path, or "@name" for an abstract socket (a leading NUL and no terminator, as
// systemd writes it). Throws std::length_error when it does not fit sun_path.
inline UnixAddress unix_address(const std::string& name) {
  UnixAddress out;
  out.address.sun_family = AF_UNIX;
  if (name.size() >= sizeof out.address.sun_path + (name.starts_with('@') ? 1 : 0)) {
    throw std::length_error("socket address longer than sun_path: " + name);
  }
  if (name.starts_with('@')) {
    std::memcpy(out.address.sun_path + 1, name.data() + 1, name.size() - 1);
    out.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  } else {
    std::memcpy(out.address.sun_path, name.data(), name.size());
    out.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  }
  return out;
}

}  // namespace test_support
