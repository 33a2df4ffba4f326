// The systemd protocol by hand: notifications arrive on a real datagram socket with the bytes and
// the sender credentials systemd checks; socket activation finds real listening sockets at fd 3 and
// 4 in a forked child (so the test runner's own descriptors are never replaced).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../support/temp_dir.hpp"
#include "shaper/errors.hpp"
#include "systemd_notify.hpp"

using namespace jitterd;
using namespace std::chrono_literals;

namespace {

// Test sockets' parent.
struct TempDir : test_support::TempDir {
  TempDir() : test_support::TempDir("jitterd-sd-") {}
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {
    if (fd_ < 0) throw std::runtime_error(std::string("test setup: ") + std::strerror(errno));
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A socket bound to `name` ("/path" or "@abstract"), as systemd's notify socket or a .socket
// unit's.
Fd bound_socket(int type, const std::string& name) {
  Fd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  const test_support::UnixAddress address = test_support::unix_address(name);
  if (::bind(fd.get(), address.get(), address.length) != 0) {
    throw std::runtime_error("bind " + name + ": " + std::strerror(errno));
  }
  return fd;
}

// What systemd's manager socket sees: the datagram and the sender's pid from SCM_CREDENTIALS (the
// kernel fills them in; systemd uses the pid to enforce NotifyAccess=main). Empty when nothing
// waits.
struct Datagram {
  std::string text;
  pid_t sender = 0;
};

std::optional<Datagram> receive_datagram(int fd) {
  char buffer[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  iovec iov{buffer, sizeof(buffer)};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  // sendto has queued the datagram before it returns, so there is nothing to wait for.
  const ssize_t n = ::recvmsg(fd, &message, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  Datagram out{std::string(buffer, static_cast<std::size_t>(n)), 0};
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      ucred credentials{};
      std::memcpy(&credentials, CMSG_DATA(c), sizeof(credentials));
      out.sender = credentials.pid;
    }
  }
  return out;
}

// A stand-in for systemd's notification socket.
class ManagerSocket {
 public:
  explicit ManagerSocket(const std::string& name) : fd_(bound_socket(SOCK_DGRAM, name)) {
    const int on = 1;
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
  }
  std::optional<Datagram> receive() const { return receive_datagram(fd_.get()); }

 private:
  Fd fd_;
};

// Abstract names are machine-wide (per network namespace): the pid keeps parallel test runs apart.
std::string unique_abstract_name(const std::string& tag) {
  return "@jitterd-test-" + std::to_string(::getpid()) + "-" + tag;
}

// Runs `body` in a forked child and returns what it returned (or the exception it threw), so that a
// test may rearrange fds 3 and up and the environment without touching the test runner's. The pipe
// sits at fd 100 and up, out of the way of the fds the child rearranges.
std::string run_in_child(const std::function<std::string()>& body) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const Fd read_end(::fcntl(ends[0], F_DUPFD_CLOEXEC, 100));
  const int write_end = ::fcntl(ends[1], F_DUPFD_CLOEXEC, 100);
  ::close(ends[0]);
  ::close(ends[1]);
  const pid_t child = ::fork();
  if (child == 0) {
    std::string report;
    try {
      report = body();
    } catch (const std::exception& e) {
      report = std::string("exception: ") + e.what();
    }
    const ssize_t written = ::write(write_end, report.data(), report.size());
    ::_exit(written == static_cast<ssize_t>(report.size()) ? 0 : 1);
  }
  ::close(write_end);
  std::string report;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(read_end.get(), buffer, sizeof(buffer))) > 0) {
    report.append(buffer, static_cast<std::size_t>(n));
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "child failed: status " + std::to_string(status);
  return report;
}

// Moves the listening socket `fd` to `target` (3, 4, ...) as systemd's exec does: inheritable.
void place_at(int fd, int target) {
  const int high = ::fcntl(fd, F_DUPFD, 50);  // out of the way of 3 and 4 first
  ::close(fd);
  if (high < 0 || ::dup2(high, target) != target) throw std::runtime_error("dup2 failed");
  ::close(high);
}

int listening_unix_socket(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  const test_support::UnixAddress address = test_support::unix_address(name);
  if (fd < 0 || ::bind(fd, address.get(), address.length) != 0 || ::listen(fd, 16) != 0) {
    throw std::runtime_error("listening socket " + name + ": " + std::strerror(errno));
  }
  return fd;
}

bool close_on_exec(int fd) {
  return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ",") + part;
  return out;
}

std::string join(const std::vector<int>& fds) {
  std::vector<std::string> parts;
  for (const int fd : fds) parts.push_back(std::to_string(fd));
  return join(parts);
}

}  // namespace

// ---- sd_notify ----

TEST(SystemdNotifier, ReadyArrivesFromOurPidOnAPathSocket) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = dir.file("notify")});
  ASSERT_TRUE(notifier.enabled());
  notifier.ready("listening on /run/jitterd/jitterd.sock; 0 sessions");
  const auto datagram = manager.receive();
  ASSERT_TRUE(datagram);
  EXPECT_EQ(datagram->text, "READY=1\nSTATUS=listening on /run/jitterd/jitterd.sock; 0 sessions");
  EXPECT_EQ(datagram->sender, ::getpid());  // what NotifyAccess=main accepts
  EXPECT_FALSE(manager.receive()) << "one call, one datagram";
}

TEST(SystemdNotifier, AbstractSocketName) {
  const std::string name = unique_abstract_name("notify");
  const ManagerSocket manager(name);
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = name});
  notifier.notify("READY=1");
  const auto datagram = manager.receive();
  ASSERT_TRUE(datagram);
  EXPECT_EQ(datagram->text, "READY=1");
}

TEST(SystemdNotifier, StoppingAndStatusMessages) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = dir.file("notify")});
  notifier.stopping("removing shaping from 2 interfaces");
  notifier.stopping();
  notifier.ready();
  notifier.status("3 sessions");
  EXPECT_EQ(manager.receive()->text, "STOPPING=1\nSTATUS=removing shaping from 2 interfaces");
  EXPECT_EQ(manager.receive()->text, "STOPPING=1");
  EXPECT_EQ(manager.receive()->text, "READY=1");
  EXPECT_EQ(manager.receive()->text, "STATUS=3 sessions");
}

TEST(SystemdNotifier, StatusCannotSmuggleAssignments) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = dir.file("notify")});
  notifier.status("veth0\nMAINPID=1");
  EXPECT_EQ(manager.receive()->text, "STATUS=veth0 MAINPID=1");
  notifier.ready("a\nb");
  EXPECT_EQ(manager.receive()->text, "READY=1\nSTATUS=a b");
}

TEST(SystemdNotifier, UnsetOrEmptyMeansDisabledAndEveryCallIsANoOp) {
  for (const std::optional<std::string>& value :
       {std::optional<std::string>(), std::optional<std::string>("")}) {
    SystemdNotifier notifier(NotifyEnvironment{.notify_socket = value, .watchdog_usec = "1000000"});
    EXPECT_FALSE(notifier.enabled());
    EXPECT_FALSE(notifier.watchdog_interval()) << "nobody to send WATCHDOG=1 to";
    EXPECT_NO_THROW(notifier.ready("x"));
    EXPECT_NO_THROW(notifier.stopping());
    EXPECT_NO_THROW(notifier.watchdog());
  }
}

TEST(SystemdNotifier, MalformedSocketNamesAreRefusedByName) {
  const auto message_for = [](const std::string& value) -> std::string {
    try {
      SystemdNotifier notifier(NotifyEnvironment{.notify_socket = value});
    } catch (const shaper::EnvironmentError& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(
      message_for("run/systemd/notify"),
      "NOTIFY_SOCKET=\"run/systemd/notify\": not an absolute path or an @abstract socket name");
  EXPECT_EQ(message_for("@"), "NOTIFY_SOCKET=\"@\": an abstract socket needs a name after '@'");
  EXPECT_EQ(message_for("/" + std::string(106, 'x')), "accepted");  // 107 bytes + NUL = sun_path
  EXPECT_NE(message_for("/" + std::string(107, 'x')).find("longer than a socket path may be"),
            std::string::npos);
  EXPECT_EQ(message_for("@" + std::string(107, 'x')), "accepted");  // NUL + 107 bytes = sun_path
  EXPECT_NE(message_for("@" + std::string(108, 'x')).find("longer than an abstract socket name"),
            std::string::npos);
}

TEST(SystemdNotifier, SendFailureNamesTheSocket) {
  const TempDir dir;
  SystemdNotifier notifier(NotifyEnvironment{.notify_socket = dir.file("gone")});
  try {
    notifier.ready();
    FAIL() << "sending to a socket that does not exist succeeded";
  } catch (const shaper::SystemError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_EQ(std::string(e.what()),
              "sendto (NOTIFY_SOCKET " + dir.file("gone") + "): No such file or directory");
  }
}

TEST(SystemdNotifier, MovedFromIsDisabledAndTheMoveTargetSends) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier first(
      NotifyEnvironment{.notify_socket = dir.file("notify"), .watchdog_usec = "5000000"});
  SystemdNotifier second(std::move(first));
  EXPECT_FALSE(
      first.enabled());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_FALSE(first.watchdog_interval());
  EXPECT_NO_THROW(first.ready());
  SystemdNotifier third(NotifyEnvironment{});
  third = std::move(second);
  ASSERT_TRUE(third.enabled());
  EXPECT_EQ(third.watchdog_interval(), 5s);
  third.ready();
  EXPECT_EQ(manager.receive()->text, "READY=1");
  EXPECT_FALSE(manager.receive());
}

TEST(SystemdNotifier, FromEnvironmentReadsAndUnsetsTheVariables) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  const std::string report = run_in_child([&] {
    ::setenv("NOTIFY_SOCKET", dir.file("notify").c_str(), 1);
    ::setenv("WATCHDOG_USEC", "20000000", 1);
    ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
    SystemdNotifier notifier = SystemdNotifier::from_environment();
    notifier.ready();
    const bool any_left =
        std::getenv("NOTIFY_SOCKET") || std::getenv("WATCHDOG_USEC") || std::getenv("WATCHDOG_PID");
    return "interval_us=" + std::to_string(notifier.watchdog_interval().value_or(0us).count()) +
           " left=" + (any_left ? "yes" : "no");
  });
  EXPECT_EQ(report, "interval_us=20000000 left=no");
  EXPECT_EQ(manager.receive()->text, "READY=1");
}

// ---- watchdog ----

TEST(SystemdWatchdog, IntervalFromWatchdogUsec) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier notifier(
      NotifyEnvironment{.notify_socket = dir.file("notify"), .watchdog_usec = "30000000"});
  EXPECT_EQ(notifier.watchdog_interval(), 30s);
  notifier.watchdog();
  EXPECT_EQ(manager.receive()->text, "WATCHDOG=1");
}

TEST(SystemdWatchdog, WatchdogPidMustBeOurs) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  const std::string ours = std::to_string(::getpid());
  const std::string other = std::to_string(::getpid() + 1);
  SystemdNotifier mine(NotifyEnvironment{
      .notify_socket = dir.file("notify"), .watchdog_usec = "250000", .watchdog_pid = ours});
  EXPECT_EQ(mine.watchdog_interval(), 250ms);
  SystemdNotifier not_mine(NotifyEnvironment{
      .notify_socket = dir.file("notify"), .watchdog_usec = "250000", .watchdog_pid = other});
  EXPECT_FALSE(not_mine.watchdog_interval());
  not_mine.watchdog();
  EXPECT_FALSE(manager.receive()) << "WATCHDOG=1 sent for another process's watchdog";
}

TEST(SystemdWatchdog, UnsetOrEmptyMeansNoWatchdog) {
  const TempDir dir;
  const ManagerSocket manager(dir.file("notify"));
  SystemdNotifier unset(NotifyEnvironment{.notify_socket = dir.file("notify")});
  SystemdNotifier empty(
      NotifyEnvironment{.notify_socket = dir.file("notify"), .watchdog_usec = ""});
  EXPECT_FALSE(unset.watchdog_interval());
  EXPECT_FALSE(empty.watchdog_interval());
  unset.watchdog();
  EXPECT_FALSE(manager.receive());
}

TEST(SystemdWatchdog, MalformedValuesAreRefusedByName) {
  const TempDir dir;
  const auto message_for = [&](const std::string& usec,
                               const std::optional<std::string>& pid) -> std::string {
    try {
      SystemdNotifier notifier(NotifyEnvironment{
          .notify_socket = dir.file("notify"), .watchdog_usec = usec, .watchdog_pid = pid});
    } catch (const shaper::EnvironmentError& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
      return e.what();
    }
    return "accepted";
  };
  const std::string not_usec = ": not a positive number of microseconds";
  EXPECT_EQ(message_for("0", {}), "WATCHDOG_USEC=\"0\"" + not_usec);
  EXPECT_EQ(message_for("30s", {}), "WATCHDOG_USEC=\"30s\"" + not_usec);
  EXPECT_EQ(message_for("-5", {}), "WATCHDOG_USEC=\"-5\"" + not_usec);
  EXPECT_EQ(message_for(" 5", {}), "WATCHDOG_USEC=\" 5\"" + not_usec);
  EXPECT_EQ(message_for("9223372036854775807", {}), "accepted");  // INT64_MAX µs
  EXPECT_EQ(message_for("9223372036854775808", {}),
            "WATCHDOG_USEC=\"9223372036854775808\"" + not_usec);
  EXPECT_EQ(message_for("1000", "0"), "WATCHDOG_PID=\"0\": not a process id");
  EXPECT_EQ(message_for("1000", "12ab"), "WATCHDOG_PID=\"12ab\": not a process id");
}

// ---- sd_listen_fds ----

TEST(ListenFds, NotActivatedWithoutListenPidOrListenFds) {
  EXPECT_TRUE(listen_fds(ListenEnvironment{}).empty());
  EXPECT_TRUE(listen_fds(ListenEnvironment{.listen_fds = "1"}).empty());
  EXPECT_TRUE(listen_fds(ListenEnvironment{.listen_pid = std::to_string(::getpid())}).empty());
  EXPECT_TRUE(listen_fds(ListenEnvironment{.listen_pid = "", .listen_fds = "1"}).empty());
}

TEST(ListenFds, SocketsMeantForAnotherProcessAreLeftAlone) {
  const TempDir dir;
  const std::string report = run_in_child([&] {
    place_at(listening_unix_socket(dir.file("a.sock")), 3);
    std::vector<std::string> names{"stale"};
    const std::vector<int> fds = listen_fds(
        ListenEnvironment{.listen_pid = std::to_string(::getpid() + 1), .listen_fds = "1"}, &names);
    return "fds=" + join(fds) + " names=" + join(names) +
           " cloexec3=" + std::to_string(close_on_exec(3));
  });
  EXPECT_EQ(report, "fds= names= cloexec3=0");
}

TEST(ListenFds, HandedListenersAtThreeAndFourWithNames) {
  const TempDir dir;
  const std::string report = run_in_child([&] {
    place_at(listening_unix_socket(dir.file("control.sock")), 3);
    place_at(listening_unix_socket("@" + dir.file("metrics.sock")), 4);
    const std::string before = std::to_string(close_on_exec(3)) + std::to_string(close_on_exec(4));
    std::vector<std::string> names;
    const std::vector<int> fds =
        listen_fds(ListenEnvironment{.listen_pid = std::to_string(::getpid()),
                                     .listen_fds = "2",
                                     .listen_fdnames = "control:metrics"},
                   &names);
    std::string out = "fds=" + join(fds) + " names=" + join(names) + " cloexec=" + before + "->" +
                      std::to_string(close_on_exec(3)) + std::to_string(close_on_exec(4));
    for (const int fd : fds) {
      std::string path;
      out += " " + std::to_string(is_unix_stream_listener(fd, &path)) + ":" + path;
    }
    return out;
  });
  EXPECT_EQ(report, "fds=3,4 names=control,metrics cloexec=00->11 1:" + dir.file("control.sock") +
                        " 1:@" + dir.file("metrics.sock"));
}

TEST(ListenFds, NamesDefaultToUnknown) {
  const TempDir dir;
  const std::string report = run_in_child([&] {
    place_at(listening_unix_socket(dir.file("a.sock")), 3);
    std::vector<std::string> names;
    const std::vector<int> fds = listen_fds(
        ListenEnvironment{.listen_pid = std::to_string(::getpid()), .listen_fds = "1"}, &names);
    return "fds=" + join(fds) + " names=" + join(names);
  });
  EXPECT_EQ(report, "fds=3 names=unknown");
}

TEST(ListenFds, AClosedFdIsASystemErrorNamingIt) {
  const std::string report = run_in_child([&] {
    ::close(3);
    listen_fds(ListenEnvironment{.listen_pid = std::to_string(::getpid()), .listen_fds = "1"});
    return std::string("no error");
  });
  EXPECT_EQ(report, "exception: fcntl F_GETFD (fd 3 from LISTEN_FDS): Bad file descriptor");
}

TEST(ListenFds, MalformedValuesAreRefusedBeforeAnyFdIsTouched) {
  // Every case throws before fcntl, so these run in the test process: fds 3.. are never touched.
  const std::string pid = std::to_string(::getpid());
  const auto message_for = [&](const ListenEnvironment& environment) -> std::string {
    try {
      listen_fds(environment);
    } catch (const shaper::EnvironmentError& e) {
      EXPECT_EQ(e.code(), std::errc::invalid_argument);
      return e.what();
    }
    return "accepted";
  };
  const std::string not_count = ": not a positive number of file descriptors";
  EXPECT_EQ(message_for({.listen_pid = "x", .listen_fds = "1"}),
            "LISTEN_PID=\"x\": not a process id");
  EXPECT_EQ(message_for({.listen_pid = "-3", .listen_fds = "1"}),
            "LISTEN_PID=\"-3\": not a process id");
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "0"}), "LISTEN_FDS=\"0\"" + not_count);
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "-1"}), "LISTEN_FDS=\"-1\"" + not_count);
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "2x"}), "LISTEN_FDS=\"2x\"" + not_count);
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "2147483645"}),
            "LISTEN_FDS=\"2147483645\"" + not_count);  // fd 3 + count would overflow int
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "2", .listen_fdnames = "control"}),
            "LISTEN_FDNAMES=\"control\": 1 names for LISTEN_FDS=2 sockets");
  EXPECT_EQ(message_for({.listen_pid = pid, .listen_fds = "1", .listen_fdnames = "a:b"}),
            "LISTEN_FDNAMES=\"a:b\": 2 names for LISTEN_FDS=1 sockets");
}

TEST(ListenFds, FromEnvironmentReadsAndUnsetsTheVariables) {
  const TempDir dir;
  const std::string report = run_in_child([&] {
    place_at(listening_unix_socket(dir.file("a.sock")), 3);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_FDNAMES", "jitterd.socket", 1);
    std::vector<std::string> names;
    const std::vector<int> fds = listen_fds_from_environment(&names);
    const bool any_left =
        std::getenv("LISTEN_PID") || std::getenv("LISTEN_FDS") || std::getenv("LISTEN_FDNAMES");
    return "fds=" + join(fds) + " names=" + join(names) + " left=" + (any_left ? "yes" : "no");
  });
  EXPECT_EQ(report, "fds=3 names=jitterd.socket left=no");
}

// ---- is_unix_stream_listener ----

TEST(UnixStreamListener, AcceptsOnlyAListeningUnixStreamSocket) {
  const TempDir dir;
  const Fd listener(listening_unix_socket(dir.file("l.sock")));
  std::string path = "unchanged";
  EXPECT_TRUE(is_unix_stream_listener(listener.get(), &path));
  EXPECT_EQ(path, dir.file("l.sock"));
  EXPECT_TRUE(is_unix_stream_listener(listener.get()));

  const Fd bound_not_listening(bound_socket(SOCK_STREAM, dir.file("b.sock")));
  const Fd datagram(bound_socket(SOCK_DGRAM, dir.file("d.sock")));
  const Fd seqpacket(bound_socket(SOCK_SEQPACKET, dir.file("s.sock")));
  ASSERT_EQ(::listen(seqpacket.get(), 1), 0);  // a listener, but not a byte stream
  path = "unchanged";
  EXPECT_FALSE(is_unix_stream_listener(bound_not_listening.get(), &path));
  EXPECT_FALSE(is_unix_stream_listener(datagram.get(), &path));
  EXPECT_FALSE(is_unix_stream_listener(seqpacket.get(), &path));
  EXPECT_EQ(path, "unchanged") << "path written for a socket that was refused";
}

TEST(UnixStreamListener, RefusesATcpListener) {
  const Fd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // port 0: any free port
  ASSERT_EQ(::bind(tcp.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(tcp.get(), 1), 0);
  EXPECT_FALSE(is_unix_stream_listener(tcp.get()));
}

TEST(UnixStreamListener, RefusesWhatIsNotASocket) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  const Fd read_end(ends[0]);
  const Fd write_end(ends[1]);
  EXPECT_FALSE(is_unix_stream_listener(read_end.get()));
}

TEST(UnixStreamListener, AbstractListeners) {
  const std::string name = unique_abstract_name("listener");
  const Fd abstract(listening_unix_socket(name));
  std::string path;
  EXPECT_TRUE(is_unix_stream_listener(abstract.get(), &path));
  EXPECT_EQ(path, name);

  // bind with only the family autobinds: the kernel picks an abstract name of five hex digits.
  const Fd autobound(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un family_only{};
  family_only.sun_family = AF_UNIX;
  ASSERT_EQ(
      ::bind(autobound.get(), reinterpret_cast<const sockaddr*>(&family_only), sizeof(sa_family_t)),
      0);
  ASSERT_EQ(::listen(autobound.get(), 1), 0);
  EXPECT_TRUE(is_unix_stream_listener(autobound.get(), &path));
  EXPECT_EQ(path.size(), 6u) << path;
  EXPECT_EQ(path.front(), '@') << path;
}

TEST(UnixStreamListener, AClosedFdIsASystemError) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ::close(fd);
  try {
    is_unix_stream_listener(fd);
    FAIL() << "a closed fd was examined without error";
  } catch (const shaper::SystemError& e) {
    EXPECT_EQ(e.error_number(), EBADF);
    EXPECT_EQ(std::string(e.what()),
              "getsockopt SO_TYPE (fd " + std::to_string(fd) + "): Bad file descriptor");
  }
}
