#include "systemd_notify.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>
#include <tuple>
#include <utility>

#include "shaper/errors.hpp"

namespace jitterd {
namespace {

using shaper::check_syscall;

// sd_listen_fds(3): passed sockets start right after stdin, stdout and stderr.
constexpr int kListenFdsStart = 3;

// The offset of sun_path: an address length at or below it is an unnamed socket.
constexpr socklen_t kSunPathOffset = offsetof(sockaddr_un, sun_path);

std::optional<std::string> environment_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

bool present(const std::optional<std::string>& value) {
  return value && !value->empty();
}

[[noreturn]] void malformed(std::string_view variable, std::string_view value,
                            std::string_view why) {
  throw shaper::EnvironmentError(
      std::make_error_code(std::errc::invalid_argument),
      std::string(variable) + "=\"" + std::string(value) + "\": " + std::string(why));
}

// A whole decimal number: digits only (no sign, no spaces, nothing after), as systemd writes them.
template <typename Integer>
std::optional<Integer> parse_decimal(std::string_view text) {
  Integer value{};
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

pid_t parse_pid(std::string_view variable, const std::string& value) {
  const auto pid = parse_decimal<pid_t>(value);
  if (!pid || *pid <= 0) malformed(variable, value, "not a process id");
  return *pid;
}

// "STATUS=..." must stay one line: a newline would start another assignment.
std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  return out;
}

std::string with_status(std::string_view state, std::string_view status) {
  std::string message(state);
  if (!status.empty()) message += "\nSTATUS=" + one_line(status);
  return message;
}

// NOTIFY_SOCKET as a socket address: "/path" (NUL-terminated in sun_path) or "@name" (the abstract
// namespace: a leading NUL, and the length says where the name ends).
std::pair<sockaddr_un, socklen_t> notify_address(const std::string& value) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (value.front() == '/') {
    if (value.find('\0') != std::string::npos)
      malformed("NOTIFY_SOCKET", value, "contains a NUL byte");
    if (value.size() >= sizeof(address.sun_path)) {
      malformed("NOTIFY_SOCKET", value, "longer than a socket path may be (107 bytes)");
    }
    std::memcpy(address.sun_path, value.data(), value.size());
    return {address, static_cast<socklen_t>(kSunPathOffset + value.size() + 1)};
  }
  if (value.front() == '@') {
    if (value.size() < 2)
      malformed("NOTIFY_SOCKET", value, "an abstract socket needs a name after '@'");
    if (value.size() > sizeof(address.sun_path)) {
      malformed("NOTIFY_SOCKET", value, "longer than an abstract socket name may be (107 bytes)");
    }
    std::memcpy(address.sun_path + 1, value.data() + 1, value.size() - 1);
    return {address, static_cast<socklen_t>(kSunPathOffset + value.size())};
  }
  malformed("NOTIFY_SOCKET", value, "not an absolute path or an @abstract socket name");
}

// sd_watchdog_enabled(3): WATCHDOG_USEC is a positive count of microseconds; WATCHDOG_PID, when
// set, names the one process that must send WATCHDOG=1.
std::optional<std::chrono::microseconds> watchdog_interval_of(
    const NotifyEnvironment& environment) {
  if (!present(environment.watchdog_usec)) return std::nullopt;
  const std::string& usec = *environment.watchdog_usec;
  const auto value = parse_decimal<std::uint64_t>(usec);
  // The upper bound keeps the count representable in std::chrono::microseconds (int64).
  if (!value || *value == 0 ||
      *value >
          static_cast<std::uint64_t>(std::numeric_limits<std::chrono::microseconds::rep>::max())) {
    malformed("WATCHDOG_USEC", usec, "not a positive number of microseconds");
  }
  if (present(environment.watchdog_pid) &&
      parse_pid("WATCHDOG_PID", *environment.watchdog_pid) != ::getpid()) {
    return std::nullopt;
  }
  return std::chrono::microseconds(static_cast<std::chrono::microseconds::rep>(*value));
}

// LISTEN_FDNAMES: one name per fd, ':'-separated (FileDescriptorName= may not contain ':').
std::vector<std::string> split_names(const std::string& joined) {
  std::vector<std::string> names;
  std::size_t begin = 0;
  while (true) {
    const std::size_t colon = joined.find(':', begin);
    names.push_back(joined.substr(begin, colon - begin));
    if (colon == std::string::npos) return names;
    begin = colon + 1;
  }
}

}  // namespace

SystemdNotifier::SystemdNotifier(const NotifyEnvironment& environment) {
  if (!present(environment.notify_socket)) return;
  socket_name_ = *environment.notify_socket;
  std::tie(address_, address_length_) = notify_address(socket_name_);
  // Parsed before the socket is opened, so that a malformed value leaks nothing.
  const auto interval = watchdog_interval_of(environment);
  fd_ = static_cast<int>(check_syscall(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), "socket",
                                       "AF_UNIX SOCK_DGRAM for NOTIFY_SOCKET " + socket_name_));
  watchdog_interval_ = interval;
}

SystemdNotifier SystemdNotifier::from_environment() {
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = environment_value("NOTIFY_SOCKET"),
                                             .watchdog_usec = environment_value("WATCHDOG_USEC"),
                                             .watchdog_pid = environment_value("WATCHDOG_PID")});
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  return notifier;
}

SystemdNotifier::SystemdNotifier(SystemdNotifier&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      address_(other.address_),
      address_length_(other.address_length_),
      socket_name_(std::move(other.socket_name_)),
      watchdog_interval_(std::exchange(other.watchdog_interval_, std::nullopt)) {}

SystemdNotifier& SystemdNotifier::operator=(SystemdNotifier&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(address_, other.address_);
  std::swap(address_length_, other.address_length_);
  std::swap(socket_name_, other.socket_name_);
  std::swap(watchdog_interval_, other.watchdog_interval_);
  return *this;
}

SystemdNotifier::~SystemdNotifier() {
  if (fd_ >= 0) ::close(fd_);  // a datagram socket: nothing is buffered that close could lose
}

void SystemdNotifier::notify(std::string_view state) {
  if (!enabled()) return;
  // sendto with the address each time (not connect once): the manager re-creates its socket on
  // daemon-reexec, and a connected socket would keep pointing at the old one.
  check_syscall(::sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL,
                         reinterpret_cast<const sockaddr*>(&address_), address_length_),
                "sendto", "NOTIFY_SOCKET " + socket_name_);
}

void SystemdNotifier::ready(std::string_view status) {
  notify(with_status("READY=1", status));
}

void SystemdNotifier::stopping(std::string_view status) {
  notify(with_status("STOPPING=1", status));
}

void SystemdNotifier::status(std::string_view text) {
  notify("STATUS=" + one_line(text));
}

void SystemdNotifier::watchdog() {
  if (watchdog_interval_) notify("WATCHDOG=1");
}

std::vector<int> listen_fds(const ListenEnvironment& environment, std::vector<std::string>* names) {
  if (names != nullptr) names->clear();
  if (!present(environment.listen_pid)) return {};
  if (parse_pid("LISTEN_PID", *environment.listen_pid) != ::getpid()) return {};
  if (!present(environment.listen_fds)) return {};

  const std::string& count_text = *environment.listen_fds;
  const auto count = parse_decimal<int>(count_text);
  if (!count || *count <= 0 || *count > INT_MAX - kListenFdsStart) {
    malformed("LISTEN_FDS", count_text, "not a positive number of file descriptors");
  }
  std::vector<std::string> fd_names;
  if (present(environment.listen_fdnames)) {
    fd_names = split_names(*environment.listen_fdnames);
    if (fd_names.size() != static_cast<std::size_t>(*count)) {
      malformed(
          "LISTEN_FDNAMES", *environment.listen_fdnames,
          std::to_string(fd_names.size()) + " names for LISTEN_FDS=" + count_text + " sockets");
    }
  } else {
    fd_names.assign(static_cast<std::size_t>(*count), "unknown");  // as sd_listen_fds_with_names(3)
  }

  std::vector<int> fds;
  for (int fd = kListenFdsStart; fd < kListenFdsStart + *count; ++fd) {
    const std::string object = "fd " + std::to_string(fd) + " from LISTEN_FDS";
    // systemd leaves them inheritable; nothing jitterd starts may hold the listening socket open.
    const long flags = check_syscall(::fcntl(fd, F_GETFD), "fcntl F_GETFD", object);
    check_syscall(::fcntl(fd, F_SETFD, static_cast<int>(flags) | FD_CLOEXEC),
                  "fcntl F_SETFD FD_CLOEXEC", object);
    fds.push_back(fd);
  }
  if (names != nullptr) *names = std::move(fd_names);
  return fds;
}

std::vector<int> listen_fds_from_environment(std::vector<std::string>* names) {
  const ListenEnvironment environment{.listen_pid = environment_value("LISTEN_PID"),
                                      .listen_fds = environment_value("LISTEN_FDS"),
                                      .listen_fdnames = environment_value("LISTEN_FDNAMES")};
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return listen_fds(environment, names);
}

bool is_unix_stream_listener(int fd, std::string* path) {
  const std::string object = "fd " + std::to_string(fd);
  const auto option = [&](int name, const char* operation) {
    int value = 0;
    socklen_t length = sizeof(value);
    check_syscall(::getsockopt(fd, SOL_SOCKET, name, &value, &length), operation, object);
    return value;
  };
  // SO_TYPE works on every socket; anything else that is open answers ENOTSOCK.
  int type = 0;
  socklen_t type_length = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) == -1) {
    if (errno == ENOTSOCK) return false;
    check_syscall(-1, "getsockopt SO_TYPE", object);
  }
  if (type != SOCK_STREAM) return false;
  if (option(SO_DOMAIN, "getsockopt SO_DOMAIN") != AF_UNIX) return false;
  if (option(SO_ACCEPTCONN, "getsockopt SO_ACCEPTCONN") == 0) return false;

  if (path != nullptr) {
    sockaddr_un address{};
    socklen_t length = sizeof(address);
    check_syscall(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), "getsockname",
                  object);
    const std::size_t name_length = length > kSunPathOffset ? length - kSunPathOffset : 0;
    if (name_length == 0) {
      path->clear();
    } else if (address.sun_path[0] == '\0') {
      *path = "@" + std::string(address.sun_path + 1, name_length - 1);
    } else {
      *path = std::string(address.sun_path, ::strnlen(address.sun_path, name_length));
    }
  }
  return true;
}

}  // namespace jitterd
