// jitterd measured from the outside, as a client sees it: the real binary, talked to over its
// Unix socket with the documented protocol (docs/protocol.md); nothing of the daemon is linked in.
// Every part has a floor measured in the same run:
//
//   rtt       request round trip and requests/s, next to a newline echo server forked by this
//             program. No root, no netem.
//   lateness  a 10 Hz schedule on --interfaces veths (one session each, default 1) for --duration
//             seconds while ping crosses them: lateness (deadline to kernel ACK) and apply time of
//             every transition, per interface and in drift windows with least-squares slopes,
//             missed deadlines, the deadline grid, jitterd's VmRSS every 10 s; next to a thread
//             doing the same netem changes with libshaper's engine on the same grid. The soak
//             (issue 7) is 16 interfaces for an hour. Root and netem: run it in tests/vm/run.
//   memory    jitterd's VmRSS/VmHWM idle, with 100 shaped interfaces (a 4096-entry table each) and
//             after clearing them. Root and netem: run it in tests/vm/run.
//
// One command runs all three and builds what is missing: tests/bench/daemon_bench.sh. Figures and
// the conditions they were taken under: docs/benchmarks.md, "jitterd daemon".

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/netem_engine.hpp"
#include "shaper/profile.hpp"
#include "shaper/statistics.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using shaper::check_syscall;
using Nanoseconds = std::chrono::nanoseconds;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Small owners and helpers

// CLOCK_MONOTONIC, the clock jitterd stamps its events with (`monotonic_ns`), so that a deadline in
// an event and the moment this process read the event are comparable.
std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

using Fd = shaper::UniqueFd;
// A fresh folder under /tmp (the guest's own tmpfs in the VM, like /run/jitterd on a real host),
// removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/jitterd-bench-XXXXXX";
    if (!::mkdtemp(pattern.data())) throw shaper::SystemError("mkdtemp", pattern, errno);
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Starts argv[0] (looked up in PATH) with stdout and stderr going to `output` (or inherited when
// empty) and `extra_env` ("NAME=value") added to this process's environment.
pid_t spawn(const std::vector<std::string>& argv, const std::string& output = {},
            const std::vector<std::string>& extra_env = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!output.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  for (const auto& e : extra_env) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw shaper::SystemError("posix_spawnp", join(argv), rc);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw shaper::SystemError("waitpid", std::to_string(pid), errno);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw shaper::SystemError("write", path, errno);
}

// Runs a tool (ip, tc) to completion; its output goes to a file that is shown when it fails.
void run(const std::vector<std::string>& argv, const std::string& log_dir) {
  const std::string log = log_dir + "/command.log";
  const int rc = wait_for(spawn(argv, log));
  if (rc != 0) {
    throw std::runtime_error(join(argv) + " exited with " + std::to_string(rc) + ": " +
                             read_text(log));
  }
}

std::string run_capture(const std::vector<std::string>& argv, const std::string& log_dir) {
  const std::string log = log_dir + "/capture.txt";
  const int rc = wait_for(spawn(argv, log));
  std::string out = read_text(log);
  if (rc != 0)
    throw std::runtime_error(join(argv) + " exited with " + std::to_string(rc) + ": " + out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// A line client: what any program talking to jitterd does (connect, write a line, read a line).

class LineClient {
 public:
  explicit LineClient(const std::string& path)
      : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    check_syscall(fd_.get(), "socket", "AF_UNIX");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof address.sun_path)
      throw std::runtime_error("socket path too long: " + path);
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    check_syscall(::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address),
                  "connect", path);
  }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      check_syscall(n, "write", "control socket");
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // The next line without its '\n'; nullopt when `deadline_ns` (CLOCK_MONOTONIC) passes first.
  // Throws when the peer closes the connection.
  std::optional<std::string_view> read_line(
      std::optional<std::int64_t> deadline_ns = std::nullopt) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
    std::size_t scanned = 0;
    for (;;) {
      if (const auto end = buffer_.find('\n', scanned); end != std::string::npos) {
        consumed_ = end + 1;
        return std::string_view(buffer_.data(), end);
      }
      scanned = buffer_.size();
      if (deadline_ns) {
        const std::int64_t left = *deadline_ns - monotonic_ns();
        if (left <= 0) return std::nullopt;
        pollfd p{fd_.get(), POLLIN, 0};
        const int rc =
            ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left / 1'000'000 + 1, 1000)));
        if (rc < 0 && errno == EINTR) continue;
        check_syscall(rc, "poll", "control socket");
        if (rc == 0) continue;
      }
      char chunk[65536];
      const ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      check_syscall(n, "read", "control socket");
      if (n == 0) throw std::runtime_error("the server closed the connection");
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // One request, its reply parsed; events that arrive first are handed to `on_event`.
  json call(const std::string& line, const std::function<void(const json&)>& on_event = {}) {
    send(line + "\n");
    for (;;) {
      const json reply = json::parse(*read_line());
      if (reply.contains("event")) {
        if (on_event) on_event(reply);
        continue;
      }
      if (!reply.value("ok", false))
        throw std::runtime_error("jitterd refused " + line + ": " + reply.dump());
      return reply["result"];
    }
  }

 private:
  Fd fd_;
  std::string buffer_;
  std::size_t consumed_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The floor: a newline echo server, one process with one thread and epoll, the shape jitterd has
// (one thread, one reactor), and nothing else: no JSON, no dispatch. What jitterd costs above it is
// jitterd's own. `Writes::kPerLine` answers each line with its own write(2), as jitterd does;
// `kCoalesced` answers everything one read brought in with one write, which is what a pipelining
// client lets a server do.

class EchoServer {
 public:
  enum class Writes { kCoalesced, kPerLine };

  EchoServer(std::string path, Writes writes)
      : path_(std::move(path)),
        writes_(writes),
        listener_(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)),
        epoll_(::epoll_create1(EPOLL_CLOEXEC)),
        stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    check_syscall(listener_.get(), "socket", path_);
    check_syscall(epoll_.get(), "epoll_create1", "echo server");
    check_syscall(stop_.get(), "eventfd", "echo server");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    check_syscall(
        ::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address),
        "bind", path_);
    check_syscall(::listen(listener_.get(), SOMAXCONN), "listen", path_);
    watch(listener_.get(), EPOLLIN);
    watch(stop_.get(), EPOLLIN);
    // A process of its own, scheduled (and pinned) like jitterd. Forked before this process starts
    // any thread, so the child may allocate freely.
    child_ = static_cast<pid_t>(check_syscall(::fork(), "fork", "echo server"));
    if (child_ == 0) {
      serve();
      ::_exit(0);
    }
  }
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  ~EchoServer() {
    const std::uint64_t one = 1;
    // The child shares the eventfd; without this write it would never end.
    if (::write(stop_.get(), &one, sizeof one) < 0) std::abort();
    ::waitpid(child_, nullptr, 0);
    ::unlink(path_.c_str());
  }
  pid_t pid() const { return child_; }
  const std::string& path() const { return path_; }

 private:
  struct Connection {
    Fd fd;
    std::string in;
    std::string out;
    bool want_write = false;
  };

  void watch(int fd, std::uint32_t events, int op = EPOLL_CTL_ADD) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    check_syscall(::epoll_ctl(epoll_.get(), op, fd, &e), "epoll_ctl", "echo server");
  }

  // Writes what is queued; returns false when the connection is gone.
  bool flush(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::write(c.fd.get(), c.out.data(), c.out.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n < 0) return false;
      c.out.erase(0, static_cast<std::size_t>(n));
    }
    const bool want = !c.out.empty();
    if (want != c.want_write) {
      std::uint32_t events = EPOLLIN;
      if (want) events |= EPOLLOUT;
      watch(c.fd.get(), events, EPOLL_CTL_MOD);
      c.want_write = want;
    }
    return true;
  }

  // Reads what is there and echoes every complete line; returns false at end of stream.
  bool receive(Connection& c) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::read(c.fd.get(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) return false;
      c.in.append(chunk, static_cast<std::size_t>(n));
    }
    const auto last = c.in.rfind('\n');
    if (last == std::string::npos) return true;
    if (writes_ == Writes::kCoalesced || !c.out.empty()) {
      c.out.append(c.in, 0, last + 1);
      c.in.erase(0, last + 1);
      return flush(c);
    }
    std::size_t begin = 0;
    for (std::size_t end; (end = c.in.find('\n', begin)) != std::string::npos; begin = end + 1) {
      const std::string_view line(c.in.data() + begin, end + 1 - begin);
      const ssize_t n = ::write(c.fd.get(), line.data(), line.size());
      if (n == static_cast<ssize_t>(line.size())) continue;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      // The socket is full: queue the rest and let flush() finish it.
      c.out.append(c.in, begin + static_cast<std::size_t>(std::max<ssize_t>(n, 0)),
                   last + 1 - begin - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      break;
    }
    c.in.erase(0, last + 1);
    return flush(c);
  }

  void serve() {
    std::unordered_map<int, Connection> connections;
    epoll_event events[64];
    for (;;) {
      const int n = ::epoll_wait(epoll_.get(), events, 64, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) std::abort();  // the benchmark cannot go on without its floor
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == stop_.get()) return;
        if (fd == listener_.get()) {
          for (;;) {
            Fd accepted(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
            if (accepted.get() < 0) break;
            const int key = accepted.get();
            watch(key, EPOLLIN);
            connections[key].fd = std::move(accepted);
          }
          continue;
        }
        auto it = connections.find(fd);
        if (it == connections.end()) continue;
        bool alive = true;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) alive = receive(it->second);
        if (alive && (events[i].events & EPOLLOUT)) alive = flush(it->second);
        if (!alive) connections.erase(it);  // closing the fd takes it out of the epoll set
      }
    }
  }

  std::string path_;
  Writes writes_;
  Fd listener_;
  Fd epoll_;
  Fd stop_;
  pid_t child_ = -1;
};

// ---------------------------------------------------------------------------------------------
// The real jitterd, started as a child with its own config, socket and state folder.

struct ProcessMemory {
  long vm_rss_kib = 0;
  long vm_hwm_kib = 0;
  long rss_anon_kib = 0;
  long rss_file_kib = 0;
};

ProcessMemory memory_of(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  ProcessMemory m;
  std::string line;
  while (std::getline(status, line)) {
    auto field = [&](std::string_view name, long* out) {
      if (line.starts_with(name)) *out = std::strtol(line.c_str() + name.size(), nullptr, 10);
    };
    field("VmRSS:", &m.vm_rss_kib);
    field("VmHWM:", &m.vm_hwm_kib);
    field("RssAnon:", &m.rss_anon_kib);
    field("RssFile:", &m.rss_file_kib);
  }
  if (m.vm_rss_kib == 0)
    throw std::runtime_error("no VmRSS in /proc/" + std::to_string(pid) + "/status");
  return m;
}

// utime and stime of a process, from /proc/<pid>/stat (fields 14 and 15, in clock ticks): its own
// code, and the kernel working for it (netlink, the qdisc change, file writes).
struct CpuSplit {
  Nanoseconds user{0};
  Nanoseconds system{0};
  Nanoseconds total() const { return user + system; }
};

CpuSplit cpu_split_of(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  // The command name (field 2) may hold spaces; the fields after it start past the last ')'.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return {Nanoseconds(utime * 1'000'000'000LL / ticks),
          Nanoseconds(stime * 1'000'000'000LL / ticks)};
}

Nanoseconds cpu_time_of(pid_t pid) {
  return cpu_split_of(pid).total();
}

// This process's CPU time, all threads (the engine floor's too).
Nanoseconds own_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return Nanoseconds(std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec);
}

class Jitterd {
 public:
  // Starts `binary` in network namespace `netns` (the current one when empty) with interfaces
  // matching `allow` shapeable and profiles from <dir>/profiles, and waits until it answers.
  Jitterd(const std::string& binary, const std::string& dir, const std::vector<std::string>& allow,
          const std::string& netns = {}, const std::vector<std::string>& extra_env = {})
      : socket_(dir + "/jitterd.sock"), log_(dir + "/jitterd.log") {
    fs::create_directories(dir + "/profiles");
    json config = {{"socket", {{"path", socket_}}},
                   {"state_dir", dir + "/state"},
                   {"profile_dirs", {dir + "/profiles"}},
                   {"interfaces", {{"allow", allow}}}};
    write_text(dir + "/config.json", config.dump(2) + "\n");
    std::vector<std::string> argv;
    // `ip netns exec` enters the namespace and execs jitterd: the pid stays jitterd's.
    if (!netns.empty()) argv = {"ip", "netns", "exec", netns};
    argv.insert(argv.end(), {binary, "--config", dir + "/config.json"});
    pid_ = spawn(argv, log_, extra_env);
    // Under TCG, starting a program takes ~0.1-1 s; 60 s means it is not coming.
    const std::int64_t give_up = monotonic_ns() + 60'000'000'000;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("jitterd exited at start: " + read_text(log_));
      }
      try {
        LineClient probe(socket_);
        probe.call(R"({"method":"version"})");
        break;
      } catch (const std::exception&) {
        if (monotonic_ns() > give_up)
          throw std::runtime_error("jitterd did not answer in 60 s: " + read_text(log_));
        std::this_thread::sleep_for(20ms);
      }
    }
  }
  Jitterd(const Jitterd&) = delete;
  Jitterd& operator=(const Jitterd&) = delete;
  ~Jitterd() {
    try {
      stop();
    } catch (const std::exception& e) {
      std::cerr << "daemon_bench: stopping jitterd: " << e.what() << '\n';
    }
  }

  // SIGTERM (jitterd removes what it installed) and the exit status; SIGKILL after 30 s.
  int stop() {
    if (pid_ < 0) return exit_status_;
    ::kill(pid_, SIGTERM);
    const std::int64_t give_up = monotonic_ns() + 30'000'000'000;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (monotonic_ns() > give_up) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_status_;
  }

  pid_t pid() const { return pid_; }
  // For an error message when a connection to it breaks: whether it still runs, and if not how it
  // ended (the process is reaped here, and stop() then only reports it).
  std::string state() {
    if (pid_ < 0) return "has stopped (status " + std::to_string(exit_status_) + ")";
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return "is still running";
    pid_ = -1;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                             : "was killed by signal " + std::to_string(WTERMSIG(status));
  }
  const std::string& socket() const { return socket_; }
  std::string log() const { return read_text(log_); }

 private:
  std::string socket_;
  std::string log_;
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Figures

std::vector<Nanoseconds> to_ns(const std::vector<std::int64_t>& values) {
  std::vector<Nanoseconds> out;
  out.reserve(values.size());
  for (auto v : values) out.emplace_back(v);
  return out;
}

// Quantiles are type 1 (a value that occurred): "p99 = 412 µs" is a round trip that really
// happened.
struct Summary {
  std::size_t n = 0;
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};

Summary summarize(const std::vector<std::int64_t>& values_ns) {
  Summary s;
  s.n = values_ns.size();
  if (values_ns.empty()) return s;
  const shaper::SortedSamples sorted(to_ns(values_ns));
  auto q = [&](double p) {
    return static_cast<double>(shaper::quantile_inverse_ecdf(sorted, p)->count()) / 1e3;
  };
  s.p50_us = q(0.5);
  s.p90_us = q(0.9);
  s.p99_us = q(0.99);
  s.p999_us = q(0.999);
  s.max_us = static_cast<double>(sorted.max().count()) / 1e3;
  double sum = 0;
  for (auto v : values_ns) sum += static_cast<double>(v);
  s.mean_us = sum / static_cast<double>(values_ns.size()) / 1e3;
  return s;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// "1 234 567" (thin grouping as in docs/benchmarks.md).
std::string grouped(double value) {
  std::string digits = std::to_string(std::llround(value));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ' ';
    out += digits[i];
  }
  return out;
}

std::string mib(long kib) {
  return fixed(static_cast<double>(kib) / 1024.0, 2) + " MiB";
}

// The "cpu" line of /proc/stat: all CPU time, and the part the hypervisor gave to someone else
// (steal). This development machine is itself a VM on a shared host; steal is the noise that its
// load average does not show.
struct CpuTimes {
  long long total = 0;
  long long steal = 0;
};

CpuTimes cpu_times() {
  std::istringstream line(read_text("/proc/stat"));
  std::string cpu;
  line >> cpu;
  CpuTimes t;
  long long value = 0;
  for (int field = 1; field <= 8 && line >> value; ++field) {
    t.total += value;
    if (field == 8) t.steal = value;
  }
  return t;
}

void print_conditions(const CpuTimes* since = nullptr) {
  utsname u{};
  ::uname(&u);
  std::string cpu = "?";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  std::string load = read_text("/proc/loadavg");
  if (!load.empty() && load.back() == '\n') load.pop_back();
  std::cout << "# " << u.nodename << ", kernel " << u.release << ", "
            << std::thread::hardware_concurrency() << " CPUs (" << cpu << "), load " << load;
  if (since) {
    const CpuTimes now = cpu_times();
    const long long total = now.total - since->total;
    std::cout << "; CPU time stolen by the hypervisor since the start: "
              << fixed(total > 0 ? 100.0 * static_cast<double>(now.steal - since->steal) /
                                       static_cast<double>(total)
                                 : 0.0,
                       1)
              << " %";
  }
  std::cout << "\n";
}

std::int64_t ns_of(const json& stamp) {
  return stamp.at("monotonic_ns").get<std::int64_t>();
}

// ---------------------------------------------------------------------------------------------
// rtt: round trip and throughput, jitterd next to the echo floor

// Keeps a process (or, with 0, the calling thread) on one CPU.
void pin(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  check_syscall(::sched_setaffinity(pid, sizeof set, &set), "sched_setaffinity",
                "pid " + std::to_string(pid) + " to CPU " + std::to_string(cpu));
}

struct Contender {
  std::string name;
  std::string socket;
  // Cheap check of every reply (a find, for both contenders alike): a refused request must not pass
  // as a fast one.
  std::function<bool(std::string_view)> reply_ok;
};

// Sequential round trips over one connection per contender, in runs of `run_length` requests, the
// contenders taking turns (A×100, B×100, C×100, A×100 ...): a burst of load from elsewhere on this
// shared machine hits every contender alike, while each server still sees back-to-back requests as
// a sequential client sends them. (With turns of one request, each server sleeps between its
// requests and every round trip includes waking it up on an idle vCPU, tens of µs on this machine;
// `--run-length 1` shows that.) Returns the samples per contender.
std::vector<std::vector<std::int64_t>> round_trips(const std::vector<const Contender*>& contenders,
                                                   const std::string& line, std::size_t count,
                                                   std::size_t run_length) {
  std::vector<std::unique_ptr<LineClient>> clients;
  for (const auto* c : contenders) clients.push_back(std::make_unique<LineClient>(c->socket));
  const std::string request = line + "\n";
  std::vector<std::vector<std::int64_t>> out(contenders.size());
  for (auto& v : out) v.reserve(count);
  for (std::size_t done = 0; done < count; done += run_length) {
    for (std::size_t k = 0; k < contenders.size(); ++k) {
      for (std::size_t i = done; i < std::min(count, done + run_length); ++i) {
        const std::int64_t t0 = monotonic_ns();
        clients[k]->send(request);
        const auto reply = clients[k]->read_line();
        out[k].push_back(monotonic_ns() - t0);
        if (!contenders[k]->reply_ok(*reply)) {
          throw std::runtime_error(contenders[k]->name + " answered " + std::string(*reply));
        }
      }
    }
  }
  return out;
}

// `clients` connections, each sending `batch` requests in one write and then reading their `batch`
// replies (batch 1: one request in flight per client), for `seconds`. Returns requests per second.
double throughput(const Contender& c, const std::string& line, int clients, int batch,
                  double seconds) {
  std::string burst;
  for (int i = 0; i < batch; ++i) burst += line + "\n";
  std::vector<std::unique_ptr<LineClient>> connections;
  for (int i = 0; i < clients; ++i) connections.push_back(std::make_unique<LineClient>(c.socket));
  std::atomic<bool> go{false}, stop{false};
  std::atomic<std::int64_t> done{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (auto& connection : connections) {
    threads.emplace_back([&, client = connection.get()] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::int64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        client->send(burst);
        for (int i = 0; i < batch; ++i) {
          if (!c.reply_ok(*client->read_line())) failures.fetch_add(1);
        }
        mine += batch;
      }
      done.fetch_add(mine);
    });
  }
  const std::int64_t t0 = monotonic_ns();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& t : threads) t.join();
  const double elapsed = static_cast<double>(monotonic_ns() - t0) / 1e9;
  if (failures.load() != 0)
    throw std::runtime_error(c.name + " refused " + std::to_string(failures.load()) + " requests");
  return static_cast<double>(done.load()) / elapsed;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int rtt_command(const std::map<std::string, std::string>& options) {
  const std::string binary = options.at("jitterd");
  const auto requests = static_cast<std::size_t>(std::stoul(options.at("requests")));
  const double seconds = std::stod(options.at("seconds"));
  const int rounds = std::stoi(options.at("rounds"));
  const auto run_length = static_cast<std::size_t>(std::stoul(options.at("run-length")));
  constexpr int kPipelineDepth = 32;  // requests per write when pipelining

  const CpuTimes start = cpu_times();
  print_conditions();
  TempDir dir;
  Jitterd daemon(binary, dir.path() + "/jitterd", {"veth*"});
  EchoServer echo(dir.path() + "/echo.sock", EchoServer::Writes::kPerLine);
  EchoServer echo_coalesced(dir.path() + "/echo-coalesced.sock", EchoServer::Writes::kCoalesced);
  auto jitterd_ok = [](std::string_view r) {
    return r.find("\"ok\":true") != std::string_view::npos;
  };
  auto echo_ok = [](std::string_view r) { return r.find("\"method\"") != std::string_view::npos; };
  const std::vector<Contender> contenders = {
      {"jitterd", daemon.socket(), jitterd_ok},
      {"echo", echo.path(), echo_ok},
      {"echo, coalesced writes", echo_coalesced.path(), echo_ok},
  };
  // Sequential round trips bring one line per read, so the two write styles are the same there.
  const std::vector<const Contender*> sequential = {&contenders[0], &contenders[1]};
  const std::vector<pid_t> servers = {daemon.pid(), echo.pid(), echo_coalesced.pid()};
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"status", R"({"id":1,"method":"status"})"},
      {"version", R"({"id":1,"method":"version"})"},
  };

  // Where the processes run decides a round trip more than the server does: left to the scheduler,
  // a server process sometimes shares the client's CPU (a hand-over) and sometimes sits on the
  // other (a cross-CPU wake-up of an idle vCPU, ~50 µs on this VM), and which one happens differs
  // between contenders and runs. So the contenders are pinned, the same way for all: every process
  // on CPU 0 (what the software costs), and the client on CPU 0 with every server on CPU 1 (what a
  // client on another CPU sees).
  struct Placement {
    std::string label;
    int server_cpu;
  };
  std::vector<Placement> placements = {{"same CPU (all on CPU 0)", 0}};
  if (std::thread::hardware_concurrency() > 1) {
    placements.push_back({"client CPU 0, server CPU 1", 1});
  }
  auto place = [&](const Placement& p) {
    pin(0, 0);  // this thread; client threads started later inherit it
    for (pid_t server : servers) pin(server, p.server_cpu);
  };

  std::cout << "# rtt: " << requests
            << " sequential requests per method and contender, one connection each, contenders "
               "taking turns of "
            << run_length << " requests; throughput " << seconds
            << " s per cell, contenders in rotating order, medians of " << rounds
            << " rounds (ratios within each round); pipelined = " << kPipelineDepth
            << " requests per write\n";

  std::cout << "\n| placement | request | contender | p50 | p90 | p99 | p99.9 | max | mean | "
               "sequential requests/s |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& placement : placements) {
    place(placement);
    // Warm up (page faults, allocator, the daemon's first JSON, the new CPU) outside the figures.
    for (const auto& [name, line] : methods) round_trips(sequential, line, 2000, run_length);
    for (const auto& [name, line] : methods) {
      const auto samples = round_trips(sequential, line, requests, run_length);
      std::vector<Summary> s;
      for (std::size_t k = 0; k < sequential.size(); ++k) {
        s.push_back(summarize(samples[k]));
        std::cout << "| " << placement.label << " | `" << name << "` | " << sequential[k]->name
                  << " | " << fixed(s[k].p50_us, 1) << " µs | " << fixed(s[k].p90_us, 1) << " µs | "
                  << fixed(s[k].p99_us, 1) << " µs | " << fixed(s[k].p999_us, 1) << " µs | "
                  << fixed(s[k].max_us, 0) << " µs | " << fixed(s[k].mean_us, 1) << " µs | "
                  << grouped(1e6 / s[k].mean_us) << " |\n";
      }
      std::cout << "| " << placement.label << " | `" << name << "` | **jitterd / echo** | "
                << fixed(s[0].p50_us / s[1].p50_us, 2) << "× | "
                << fixed(s[0].p90_us / s[1].p90_us, 2) << "× | "
                << fixed(s[0].p99_us / s[1].p99_us, 2) << "× | "
                << fixed(s[0].p999_us / s[1].p999_us, 2) << "× | | "
                << fixed(s[0].mean_us / s[1].mean_us, 2) << "× | "
                << fixed(s[1].mean_us / s[0].mean_us, 2) << "× |\n";
    }
  }

  // What loading a profile from the profile folder costs: the same one-phase profile, once by name
  // and once inline, to an interface that does not exist, so that jitterd reads (or parses) the
  // profile, then answers not-found without touching the kernel. Same CPU, turns of 100.
  {
    place(placements.front());
    const json tiny = {
        {"version", 1}, {"name", "tiny"}, {"phases", {{"low", {{"delay", {{"latency", "1ms"}}}}}}}};
    write_text(dir.path() + "/jitterd/profiles/tiny.json", tiny.dump() + "\n");
    auto not_found = [](std::string_view r) {
      return r.find("\"not-found\"") != std::string_view::npos;
    };
    const Contender by_name{"`apply`, profile by name (read from its folder)", daemon.socket(),
                            not_found};
    const Contender inline_profile{"`apply`, the same profile inline", daemon.socket(), not_found};
    const std::string absent = "veth-absent";
    const json name_request = {
        {"id", 1}, {"method", "apply"}, {"params", {{"interface", absent}, {"profile", "tiny"}}}};
    const json inline_request = {
        {"id", 1}, {"method", "apply"}, {"params", {{"interface", absent}, {"profile", tiny}}}};
    const std::size_t count = std::max<std::size_t>(requests / 5, 1000);
    std::vector<std::vector<std::int64_t>> samples(2);
    for (std::size_t done = 0; done < count; done += run_length) {
      const std::size_t n = std::min(run_length, count - done);
      auto a = round_trips({&by_name}, name_request.dump(), n, n);
      auto b = round_trips({&inline_profile}, inline_request.dump(), n, n);
      samples[0].insert(samples[0].end(), a[0].begin(), a[0].end());
      samples[1].insert(samples[1].end(), b[0].begin(), b[0].end());
    }
    const Summary n = summarize(samples[0]), i = summarize(samples[1]);
    std::cout << "\nprofile load, " << placements.front().label << ", " << count
              << " requests each, refused with not-found after the profile is loaded:\n\n"
                 "| request | p50 | p99 | mean |\n|---|---|---|---|\n"
              << "| " << by_name.name << " | " << fixed(n.p50_us, 1) << " µs | "
              << fixed(n.p99_us, 1) << " µs | " << fixed(n.mean_us, 1) << " µs |\n"
              << "| " << inline_profile.name << " | " << fixed(i.p50_us, 1) << " µs | "
              << fixed(i.p99_us, 1) << " µs | " << fixed(i.mean_us, 1) << " µs |\n"
              << "| **by name / inline** | " << fixed(n.p50_us / i.p50_us, 2) << "× | "
              << fixed(n.p99_us / i.p99_us, 2) << "× | " << fixed(n.mean_us / i.mean_us, 2)
              << "× |\n";
  }

  // Throughput with the server on a CPU of its own and the clients on the other.
  place(placements.back());
  std::cout << "\nthroughput, " << placements.back().label << ":\n";
  std::cout << "\n| request | clients | pipelined | jitterd requests/s | echo requests/s | jitterd "
               "/ echo | "
               "echo, coalesced writes | jitterd / coalesced |\n"
               "|---|---|---|---|---|---|---|---|\n";
  for (const auto& [name, line] : methods) {
    for (int clients : {1, 8}) {
      for (int batch : {1, kPipelineDepth}) {
        std::vector<std::vector<double>> rates(contenders.size());
        for (int r = 0; r < rounds; ++r) {
          for (std::size_t k = 0; k < contenders.size(); ++k) {
            const std::size_t which =
                (k + static_cast<std::size_t>(r)) % contenders.size();  // rotating order
            rates[which].push_back(throughput(contenders[which], line, clients, batch, seconds));
          }
        }
        // Ratios are taken within each round (neighbours in time), then their median.
        std::vector<double> to_echo, to_coalesced;
        for (int r = 0; r < rounds; ++r) {
          to_echo.push_back(rates[0][r] / rates[1][r]);
          to_coalesced.push_back(rates[0][r] / rates[2][r]);
        }
        std::cout << "| `" << name << "` | " << clients << " | " << (batch > 1 ? "yes" : "no")
                  << " | " << grouped(median(rates[0])) << " | " << grouped(median(rates[1]))
                  << " | " << fixed(median(to_echo), 2) << " | " << grouped(median(rates[2]))
                  << " | " << fixed(median(to_coalesced), 3) << " |\n";
      }
    }
  }

  const ProcessMemory m = memory_of(daemon.pid());
  std::cout << "\njitterd after all of the above (no sessions): VmRSS " << mib(m.vm_rss_kib)
            << ", VmHWM " << mib(m.vm_hwm_kib) << " (RssAnon " << mib(m.rss_anon_kib)
            << ", RssFile " << mib(m.rss_file_kib) << ")\n";
  print_conditions(&start);
  const int status = daemon.stop();
  if (status != 0) {
    std::cerr << "jitterd exited with " << status << ":\n" << daemon.log();
    return 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The network: fresh namespaces built with `ip` (a test tool here, as in tests/kernel), removed
// after.

// Namespaces "<prefix>a" and "<prefix>b" joined by `count` veths: jta<i> (198.18.<i>.1/24, in a) -
// jtb<i> (198.18.<i>.2/24, in b), i = 0 .. count - 1, each pair its own /24 so that the probes to
// 198.18.<i>.2 cross jta<i> and nothing else. 198.18.0.0/15 is RFC 2544's benchmarking range. No
// IPv6 (its chatter would cross netem too) and fixed MACs with permanent neighbour entries, so that
// only ping's probes cross the qdiscs. One `ip -batch` per namespace: under TCG every `ip` process
// costs 50-100 ms, and 16 pairs one command at a time would be ~100 of them.
class VethPairs {
 public:
  // The third octet of the addresses and the fifth byte of the MACs number the pairs.
  static constexpr int kMaxPairs = 250;

  VethPairs(std::string log_dir, int count) : log_dir_(std::move(log_dir)), count_(count) {
    if (count < 1 || count > kMaxPairs) {
      throw std::runtime_error("VethPairs: " + std::to_string(count) + " pairs asked for, 1 to " +
                               std::to_string(kMaxPairs) + " possible (one 198.18.<i>.0/24 each)");
    }
    const std::string prefix = "jtbench" + std::to_string(::getpid());
    a_ = prefix + "a";
    b_ = prefix + "b";
    run({"ip", "netns", "add", a_}, log_dir_);
    run({"ip", "netns", "add", b_}, log_dir_);
    created_ = true;
    for (const auto& ns : {a_, b_}) {
      run({"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
           "net.ipv6.conf.default.disable_ipv6=1"},
          log_dir_);
    }
    // Namespace a first: it creates both ends and moves every jtb<i> into b.
    std::string in_a = "link set lo up\n", in_b = "link set lo up\n";
    for (int i = 0; i < count; ++i) {
      const std::string net = "198.18." + std::to_string(i) + ".";
      in_a += "link add " + dev_a(i) + " address " + mac(i, 1) + " type veth peer name " +
              dev_b(i) + " address " + mac(i, 2) + " netns " + b_ + "\n" + "addr add " + net +
              "1/24 dev " + dev_a(i) + "\n" + "link set " + dev_a(i) + " up\n" + "neigh replace " +
              net + "2 lladdr " + mac(i, 2) + " dev " + dev_a(i) + " nud permanent\n";
      in_b += "addr add " + net + "2/24 dev " + dev_b(i) + "\n" + "link set " + dev_b(i) + " up\n" +
              "neigh replace " + net + "1 lladdr " + mac(i, 1) + " dev " + dev_b(i) +
              " nud permanent\n";
    }
    write_text(log_dir_ + "/veths-a.batch", in_a);
    write_text(log_dir_ + "/veths-b.batch", in_b);
    run({"ip", "-n", a_, "-batch", log_dir_ + "/veths-a.batch"}, log_dir_);
    run({"ip", "-n", b_, "-batch", log_dir_ + "/veths-b.batch"}, log_dir_);
  }
  VethPairs(const VethPairs&) = delete;
  VethPairs& operator=(const VethPairs&) = delete;
  ~VethPairs() {
    if (!created_) return;
    for (const auto& ns : {a_, b_}) {
      try {
        run({"ip", "netns", "del", ns}, log_dir_);  // takes the veths with it
      } catch (const std::exception& e) {
        std::cerr << "daemon_bench: " << e.what() << '\n';
      }
    }
  }
  int count() const { return count_; }
  const std::string& ns_a() const { return a_; }
  const std::string& ns_b() const { return b_; }
  static std::string dev_a(int i) { return "jta" + std::to_string(i); }
  static std::string dev_b(int i) { return "jtb" + std::to_string(i); }
  static std::string addr_b(int i) { return "198.18." + std::to_string(i) + ".2"; }

 private:
  // 02:... is locally administered; "jt" in the second and third bytes, the pair in the fifth.
  static std::string mac(int pair, int side) {
    char text[32];
    std::snprintf(text, sizeof text, "02:6a:74:00:%02x:%02x", pair, side);
    return text;
  }

  std::string log_dir_;
  int count_;
  std::string a_, b_;
  bool created_ = false;
};

// One namespace holding `pairs` veth pairs veth<i>a - veth<i>b, all up, made with one `ip -batch`.
class VethFarm {
 public:
  VethFarm(int pairs, std::string log_dir) : log_dir_(std::move(log_dir)) {
    ns_ = "jtmem" + std::to_string(::getpid());
    run({"ip", "netns", "add", ns_}, log_dir_);
    created_ = true;
    std::string batch;
    for (int i = 0; i < pairs; ++i) {
      const std::string a = "veth" + std::to_string(i) + "a", b = "veth" + std::to_string(i) + "b";
      batch += "link add " + a + " type veth peer name " + b + "\nlink set " + a +
               " up\nlink set " + b + " up\n";
      names_.push_back(a);
      names_.push_back(b);
    }
    write_text(log_dir_ + "/veths.batch", batch);
    run({"ip", "-n", ns_, "-batch", log_dir_ + "/veths.batch"}, log_dir_);
  }
  VethFarm(const VethFarm&) = delete;
  VethFarm& operator=(const VethFarm&) = delete;
  ~VethFarm() {
    if (!created_) return;
    try {
      run({"ip", "netns", "del", ns_}, log_dir_);
    } catch (const std::exception& e) {
      std::cerr << "daemon_bench: " << e.what() << '\n';
    }
  }
  const std::string& ns() const { return ns_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::string log_dir_;
  std::string ns_;
  std::vector<std::string> names_;
  bool created_ = false;
};

// ---------------------------------------------------------------------------------------------
// lateness: a 10 Hz schedule on one or more interfaces for a long time (the soak: 16 for an hour)

constexpr std::int64_t kStepNs = 100'000'000;  // 100 ms steps: 10 transitions per second
// jitterd's memory is read every 10 s (360 samples in an hour): often enough to see a slope, rare
// enough that reading /proc costs nothing beside 160 transitions a second.
constexpr std::int64_t kRssEveryNs = 10'000'000'000;
// Drift windows: 5 minutes (12 in the hour's soak), or a tenth of a shorter run.
constexpr std::int64_t kDriftWindowNs = 300'000'000'000;
constexpr double kNsPerHour = 3'600e9;

std::int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Transition {
  int interface = 0;    // index into the run's interfaces
  bool missed = false;  // deadline-missed rather than phase-changed
  std::int64_t deadline_ns = 0;
  std::int64_t lateness_ns = 0;
  std::int64_t apply_ns = -1;  // absent for deadline-missed
  std::int64_t received_ns = 0;
  std::int64_t step = -1;
};

struct MemorySample {
  std::int64_t at_ns;
  ProcessMemory memory;
};

// When the sessions' schedules start. With one thread in jitterd, whether the deadlines of the
// interfaces coincide decides the tail: at a shared instant the transitions are applied one after
// another, and the last waits for all the others.
enum class StartMode {
  kTogether,  // every session given the same `start` time: N deadlines at each 100 ms instant
  kSpread,    // session i starts i × 100 ms / N later: the deadlines evenly interleaved
  kOnApply,   // no `start`: each schedule starts when its apply is read (what a loop of applies
              // gets)
};

std::optional<StartMode> parse_start_mode(std::string_view text) {
  if (text == "together") return StartMode::kTogether;
  if (text == "spread") return StartMode::kSpread;
  if (text == "apply") return StartMode::kOnApply;
  return std::nullopt;
}

// Least squares y = intercept + slope × x, with the half-width of the slope's 95 % interval under
// the textbook assumption of independent residuals (1.96 standard errors: the normal quantile, fine
// for the thousands of points it is used on; left at 0 below 3 points). Transition lateness is not
// independent from one transition to the next (load comes in bursts), so the interval is a lower
// bound on the real uncertainty.
struct LineFit {
  std::size_t n = 0;
  double slope = 0;
  double slope_ci95 = 0;
};

LineFit least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  LineFit f;
  f.n = x.size();
  if (f.n < 2) return f;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < f.n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(f.n);
  my /= static_cast<double>(f.n);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < f.n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx <= 0) return f;
  f.slope = sxy / sxx;
  if (f.n < 3) return f;
  double residuals = 0;
  for (std::size_t i = 0; i < f.n; ++i) {
    const double r = y[i] - (my + f.slope * (x[i] - mx));
    residuals += r * r;
  }
  f.slope_ci95 = 1.96 * std::sqrt(residuals / static_cast<double>(f.n - 2) / sxx);
  return f;
}

// The floor: what a program built directly on libshaper's engine gets on this machine at the same
// moment. A thread of this process, in namespace b, sleeps to absolute CLOCK_MONOTONIC deadlines on
// the same 100 ms grid (shifted by 50 ms, so that it does not compete with jitterd for a CPU at the
// same instant), and at each one changes a netem on jtb0 (ping's replies cross it) between 1 ms and
// 5 ms with NetemQdisc::change(), the call jitterd's transition makes. Its lateness, wake-up and
// apply time stand beside jitterd's: the difference is what the daemon adds (timers on Asio, the
// event, the ledger), the rest is the machine's. One netem, whatever the number of jitterd's
// interfaces: it measures one transition on the machine as jitterd's load leaves it.
class EngineFloor {
 public:
  struct Sample {
    std::int64_t deadline_ns;
    std::int64_t wake_ns;      // deadline → running again
    std::int64_t apply_ns;     // change request → kernel ACK
    std::int64_t lateness_ns;  // deadline → kernel ACK
  };

  EngineFloor(std::string netns, std::string device, std::int64_t first_deadline_ns,
              std::int64_t until_ns)
      : thread_([this, netns = std::move(netns), device = std::move(device), first_deadline_ns,
                 until_ns] {
          try {
            run(netns, device, first_deadline_ns, until_ns);
          } catch (const std::exception& e) {
            error_ = e.what();
          }
        }) {}
  EngineFloor(const EngineFloor&) = delete;
  EngineFloor& operator=(const EngineFloor&) = delete;
  ~EngineFloor() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<Sample>& join() {
    thread_.join();
    if (!error_.empty()) throw std::runtime_error("the engine floor failed: " + error_);
    return samples_;
  }

 private:
  void run(const std::string& netns, const std::string& device, std::int64_t first_deadline_ns,
           std::int64_t until_ns) {
    // setns(2) moves this thread only; the rest of the process stays where it is.
    const std::string path = "/run/netns/" + netns;
    {
      Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      check_syscall(ns.get(), "open", path);
      check_syscall(::setns(ns.get(), CLONE_NEWNET), "setns", path);
    }
    shaper::RouteSocket socket;
    shaper::NetemEngine engine(socket);
    const shaper::Interface dev = engine.resolve(device);
    std::array<shaper::NetemSpec, 2> phases;
    phases[0].delay.latency = 1ms;  // the two phases of the profile jitterd runs
    phases[1].delay.latency = 5ms;
    shaper::NetemQdisc qdisc = engine.install(dev, phases[0]);
    std::int64_t deadline = first_deadline_ns;
    for (std::size_t k = 1; deadline < until_ns; ++k, deadline += kStepNs) {
      const timespec at{static_cast<time_t>(deadline / 1'000'000'000),
                        static_cast<long>(deadline % 1'000'000'000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
      }
      const std::int64_t woke = monotonic_ns();
      qdisc.change(phases[k % 2]);
      const std::int64_t acked = monotonic_ns();
      samples_.push_back({deadline, woke - deadline, acked - woke, acked - deadline});
    }
  }

  std::vector<Sample> samples_;
  std::string error_;
  std::thread thread_;
};

// "1 interface", "16 interfaces".
std::string count_of(std::size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// "1.23 ms" from nanoseconds.
std::string ms(double ns, int decimals = 2) {
  return fixed(ns / 1e6, decimals) + " ms";
}

int lateness_command(const std::map<std::string, std::string>& options) {
  const std::string binary = options.at("jitterd");
  const double duration_s = std::stod(options.at("duration"));
  const int count = options.contains("interfaces") ? std::stoi(options.at("interfaces")) : 1;
  const auto start_mode = parse_start_mode(options.at("start"));
  if (count < 1 || count > VethPairs::kMaxPairs) {
    std::cerr << "daemon_bench lateness: --interfaces " << count << " is out of range: give 1 to "
              << VethPairs::kMaxPairs << " (one 198.18.<i>.0/24 per veth pair)\n";
    return 2;
  }
  if (!start_mode) {
    std::cerr << "daemon_bench lateness: --start " << options.at("start")
              << " is not a start mode: give together, spread or apply\n";
    return 2;
  }
  print_conditions();
  const CpuTimes host_start = cpu_times();
  TempDir dir;
  VethPairs net(dir.path(), count);
  std::vector<std::string> names;
  std::unordered_map<std::string, int> index_of;
  for (int i = 0; i < count; ++i) {
    names.push_back(VethPairs::dev_a(i));
    index_of[names.back()] = i;
  }
  Jitterd daemon(binary, dir.path() + "/jitterd", names, net.ns_a());

  // Two phases that differ only in delay, switched every 100 ms, forever.
  const json profile = {
      {"version", 1},
      {"name", "tenhz"},
      {"description",
       "daemon_bench lateness: 1 ms and 5 ms, 100 ms each, looped (10 transitions/s)"},
      {"phases",
       {{"low", {{"delay", {{"latency", "1ms"}}}}}, {"high", {{"delay", {{"latency", "5ms"}}}}}}},
      {"schedule",
       {{"loop", true},
        {"steps",
         {{{"phase", "low"}, {"duration", "100ms"}},
          {{"phase", "high"}, {"duration", "100ms"}}}}}}};
  write_text(dir.path() + "/jitterd/profiles/tenhz.json", profile.dump(2) + "\n");

  // Traffic through every qdisc all along: 100 probes a second in total, as in the one-interface
  // run, shared by the interfaces (each pings its own peer every count × 10 ms), so that the
  // machine's load from ping does not grow with --interfaces.
  const std::string ping_interval = fixed(0.01 * count, 2);
  std::vector<pid_t> pings;
  std::vector<std::string> ping_outputs;
  for (int i = 0; i < count; ++i) {
    ping_outputs.push_back(dir.path() + "/ping" + std::to_string(i) + ".txt");
    pings.push_back(spawn({"ip", "netns", "exec", net.ns_a(), "ping", "-n", "-q", "-i",
                           ping_interval, VethPairs::addr_b(i)},
                          ping_outputs.back()));
  }

  // When a connection to jitterd breaks, the run stops with what became of jitterd and the end of
  // its log (the temporary folder holding the log goes with the run).
  auto broken = [&](const std::exception& e, const std::string& during) {
    const std::string log = daemon.log();
    constexpr std::size_t kLogTail = 4000;  // the last few dozen lines
    return std::runtime_error(
        during + ": " + e.what() + "; jitterd " + daemon.state() + "; the end of its log:\n" +
        (log.size() > kLogTail ? "..." + log.substr(log.size() - kLogTail) : log));
  };
  std::vector<Transition> transitions;
  std::map<std::string, int> counts;
  std::vector<std::string> errors;
  std::vector<std::optional<std::int64_t>> origin_ns(static_cast<std::size_t>(count));
  std::vector<std::int64_t> applied_lateness_ns(static_cast<std::size_t>(count), 0);
  int applied = 0;
  // `seq` counts every event jitterd publishes, and all of them are about these interfaces: a gap
  // is events this client never got (a subscription jitterd dropped, see below).
  std::optional<std::int64_t> last_seq;
  std::int64_t lost_events = 0;
  auto take = [&](const json& e, std::int64_t received) {
    const std::string type = e.at("event");
    ++counts[type];
    if (const auto seq = e.value("seq", std::int64_t{-1}); seq >= 0) {
      if (last_seq && seq > *last_seq + 1) lost_events += seq - *last_seq - 1;
      last_seq = std::max(seq, last_seq.value_or(seq));
    }
    const auto where = index_of.find(e.value("interface", ""));
    if (type == "error") errors.push_back(e.value("interface", "") + ": " + e.value("message", ""));
    if (where == index_of.end()) return;
    const auto i = static_cast<std::size_t>(where->second);
    if (type == "applied" && !origin_ns[i]) {
      origin_ns[i] = ns_of(e.at("deadline"));
      applied_lateness_ns[i] = e.at("lateness_ns");
      ++applied;
    }
    if (type != "phase-changed" && type != "deadline-missed") return;
    Transition t;
    t.interface = where->second;
    t.missed = type == "deadline-missed";
    t.deadline_ns = ns_of(e.at("deadline"));
    t.lateness_ns = e.at("lateness_ns");
    t.apply_ns = e.value("apply_ns", std::int64_t{-1});
    t.received_ns = received;
    t.step = e.value("step", std::int64_t{-1});
    transitions.push_back(t);
  };

  std::optional<LineClient> events;
  auto subscribe = [&] {
    events.emplace(daemon.socket());
    events->call(
        json{{"id", 1}, {"method", "subscribe"}, {"params", {{"interfaces", names}}}}.dump(),
        [&](const json& e) { take(e, monotonic_ns()); });
  };
  try {
    subscribe();
  } catch (const std::exception& e) {
    throw broken(e, "subscribe");
  }

  LineClient control(daemon.socket());
  const pid_t pid = daemon.pid();
  const Nanoseconds cpu_before = cpu_time_of(pid);
  // jitterd's CPU time when set-up is over (every first phase installed), for its share of the run.
  CpuSplit cpu_at_setup;
  std::int64_t setup_done = 0;
  // The start time given to the sessions: far enough ahead that every apply is read before it
  // (under TCG on a loaded host an apply takes up to ~0.5 s; 5 s on top for the first request).
  // Too short shows as an apply answered `active` instead of `pending`, which stops the run.
  const std::int64_t margin_ns =
      *start_mode == StartMode::kOnApply ? 0 : 5'000'000'000 + std::int64_t{count} * 500'000'000;
  const std::int64_t started = monotonic_ns();
  const std::int64_t started_realtime = realtime_ns();
  const std::int64_t first_start = started + margin_ns;
  const std::int64_t until = first_start + static_cast<std::int64_t>(duration_s * 1e9);
  EngineFloor engine_floor(net.ns_b(), VethPairs::dev_b(0), first_start + kStepNs / 2, until);
  for (int i = 0; i < count; ++i) {
    json params = {{"interface", names[static_cast<std::size_t>(i)]}, {"profile", "tenhz"}};
    if (*start_mode != StartMode::kOnApply) {
      const std::int64_t at =
          first_start + (*start_mode == StartMode::kSpread ? i * kStepNs / count : 0);
      // jitterd turns a UTC start into its CLOCK_MONOTONIC with its own pair of readings; both
      // clocks are this guest's, so the sessions' grids agree to within those readings (µs).
      params["start"] = shaper::format_utc_timestamp(Nanoseconds(started_realtime + at - started));
    }
    json status;
    try {
      status = control.call(json{{"id", 2 + i}, {"method", "apply"}, {"params", params}}.dump());
    } catch (const std::exception& e) {
      throw broken(e, "apply on " + names[static_cast<std::size_t>(i)]);
    }
    if (*start_mode != StartMode::kOnApply && status.value("state", "") != "pending") {
      throw std::runtime_error(
          "the apply on " + names[static_cast<std::size_t>(i)] +
          " was read after its start time (state " + status.value("state", "?") +
          " instead of pending): the start margin of " + ms(static_cast<double>(margin_ns), 0) +
          " is too short for this machine now; retry when it is less loaded, or raise margin_ns "
          "in tests/bench/daemon_bench.cpp");
    }
  }

  std::vector<MemorySample> rss;
  std::optional<std::int64_t> next_rss;
  // Progress on stderr: every minute, or six times in a shorter run (not under every 10 s).
  const std::int64_t progress_every = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(duration_s * 1e9) / 6, 10'000'000'000, 60'000'000'000);
  std::int64_t next_progress = started + progress_every;
  Nanoseconds progress_cpu = cpu_before, progress_own_cpu = own_cpu_time();
  std::int64_t progress_at = started;
  std::size_t progress_transitions = 0;
  std::vector<std::int64_t> dropped_at;  // since the start, when jitterd dropped our subscription
  for (;;) {
    std::optional<std::string_view> line;
    try {
      line = events->read_line(next_rss ? std::min(until, *next_rss) : until);
    } catch (const std::exception& e) {
      // jitterd drops a subscriber that lets more than limits.max_queued_events (4096) pile up. The
      // run goes on with a new subscription, and the events lost in between are counted (`seq`);
      // jitterd's own counters in its status at the end still cover every transition.
      if (daemon.state() != "is still running") throw broken(e, "the event stream");
      dropped_at.push_back(monotonic_ns() - first_start);
      std::cerr << "daemon_bench lateness: the event stream broke "
                << fixed(static_cast<double>(dropped_at.back()) / 1e9, 1) << " s after the start ("
                << e.what() << "); subscribing again\n";
      try {
        subscribe();
      } catch (const std::exception& again) {
        throw broken(again, "subscribing again");
      }
      continue;
    }
    const std::int64_t now = monotonic_ns();
    if (line) {
      const json e = json::parse(*line);
      if (e.contains("event")) take(e, now);
      // Set-up is over when every session has installed its first phase: the first sample.
      if (!next_rss && applied == count) {
        next_rss = now;
        setup_done = now;
        cpu_at_setup = cpu_split_of(pid);
      }
    }
    if (next_rss && now >= *next_rss) {
      rss.push_back({now, memory_of(pid)});
      while (*next_rss <= now) *next_rss += kRssEveryNs;
    }
    if (now >= next_progress) {
      // CPU shares since the previous line: who is short of CPU when the events fall behind.
      const Nanoseconds jitterd_cpu = cpu_time_of(pid), own_cpu = own_cpu_time();
      const double interval = static_cast<double>(now - progress_at);
      std::cerr
          << "daemon_bench lateness: " << (now - started) / 1'000'000'000 << " s, "
          << transitions.size() << " transitions ("
          << fixed(static_cast<double>(transitions.size() - progress_transitions) * 1e9 / interval,
                   0)
          << "/s), jitterd "
          << fixed(100.0 * static_cast<double>((jitterd_cpu - progress_cpu).count()) / interval, 0)
          << " % of a CPU, this client "
          << fixed(100.0 * static_cast<double>((own_cpu - progress_own_cpu).count()) / interval, 0)
          << " %" << (rss.empty() ? std::string() : ", VmRSS " + mib(rss.back().memory.vm_rss_kib))
          << "\n";
      progress_cpu = jitterd_cpu;
      progress_own_cpu = own_cpu;
      progress_at = now;
      progress_transitions = transitions.size();
      while (next_progress <= now) next_progress += progress_every;
    }
    if (now >= until) break;
  }
  const std::int64_t stopped = monotonic_ns();
  const CpuSplit cpu_after = cpu_split_of(pid);
  rss.push_back({stopped, memory_of(pid)});
  const auto& floor = engine_floor.join();
  // A new connection: jitterd closes one that has been silent for limits.idle_timeout (10 min), as
  // the apply connection has been by now in a long run. The figures are printed even if this fails.
  json sessions_status = json::array();
  try {
    LineClient last(daemon.socket());
    sessions_status = last.call(R"({"id":3,"method":"status"})").at("sessions");
    last.call(R"({"id":4,"method":"clear","params":{"all":true}})");
  } catch (const std::exception& e) {
    errors.push_back(std::string("status and clear at the end: ") + e.what());
  }

  for (pid_t ping : pings) ::kill(ping, SIGINT);  // ping prints its summary on SIGINT
  for (pid_t ping : pings) wait_for(ping);
  const int jitterd_status = daemon.stop();

  auto since_origin = [&](const Transition& t) {
    return t.deadline_ns - origin_ns[static_cast<std::size_t>(t.interface)].value_or(0);
  };
  if (options.contains("csv")) {
    const std::string path = options.at("csv");
    std::ofstream csv(path);
    csv << "interface,event,step,deadline_since_origin_ns,lateness_ns,apply_ns,"
           "received_minus_deadline_ns\n";
    for (const auto& t : transitions) {
      csv << names[static_cast<std::size_t>(t.interface)] << ','
          << (t.missed ? "deadline-missed" : "phase-changed") << ',' << t.step << ','
          << since_origin(t) << ',' << t.lateness_ns << ',' << t.apply_ns << ','
          << t.received_ns - t.deadline_ns << '\n';
    }
    // jitterd's memory samples beside it: FILE.csv -> FILE-memory.csv.
    const std::string stem = path.ends_with(".csv") ? path.substr(0, path.size() - 4) : path;
    std::ofstream memory_csv(stem + "-memory.csv");
    memory_csv << "since_start_ns,vm_rss_kib,vm_hwm_kib,rss_anon_kib,rss_file_kib\n";
    for (const auto& s : rss) {
      memory_csv << s.at_ns - first_start << ',' << s.memory.vm_rss_kib << ','
                 << s.memory.vm_hwm_kib << ',' << s.memory.rss_anon_kib << ','
                 << s.memory.rss_file_kib << '\n';
    }
  }

  // --- figures
  std::vector<std::int64_t> lateness, apply, wake_up, delivered, floor_lateness, floor_apply,
      floor_wake;
  for (const auto& t : transitions) {
    if (t.missed) continue;
    lateness.push_back(t.lateness_ns);
    apply.push_back(t.apply_ns);
    wake_up.push_back(t.lateness_ns - t.apply_ns);
    delivered.push_back(t.received_ns - t.deadline_ns);
  }
  for (const auto& f : floor) {
    floor_lateness.push_back(f.lateness_ns);
    floor_apply.push_back(f.apply_ns);
    floor_wake.push_back(f.wake_ns);
  }
  // Time runs from the first session's schedule origin (the common start, except with
  // --start apply).
  std::int64_t base = first_start;
  if (*start_mode == StartMode::kOnApply) {
    std::optional<std::int64_t> earliest;
    for (const auto& o : origin_ns) {
      if (o) earliest = std::min(*o, earliest.value_or(*o));
    }
    base = earliest.value_or(first_start);
  }
  const double seconds = static_cast<double>(stopped - base) / 1e9;
  const char* start_text = *start_mode == StartMode::kTogether ? "together (one start time for all)"
                           : *start_mode == StartMode::kSpread
                               ? "spread (session i starts i x 100 ms / N later)"
                               : "apply (each schedule starts when its apply is read)";
  std::cout << "# lateness: " << fixed(seconds, 1) << " s of a looping schedule, 2 phases (1 ms / "
            << "5 ms delay) x 100 ms, on " << count_of(count, "interface")
            << (count > 1 ? " (one session each, one jitterd)" : "") << ", start " << start_text
            << "; ping -i " << ping_interval << " through each qdisc all along\n";
  std::cout << "events: ";
  for (const auto& [type, n] : counts) std::cout << type << " " << n << "  ";
  std::int64_t first_phase_max = 0;
  for (auto l : applied_lateness_ns) first_phase_max = std::max(first_phase_max, l);
  std::cout << "\nfirst phase (applied events): " << applied << " of " << count_of(count, "session")
            << ", installed at most " << ms(static_cast<double>(first_phase_max), 1) << " after "
            << (*start_mode == StartMode::kOnApply ? "the apply request was read"
                                                   : "the start time")
            << "\n";
  std::cout << "\n| per transition (all interfaces) | n | p50 | p90 | p99 | p99.9 | max | mean "
               "|\n|---|---|---|---|---|---|---|---|\n";
  auto row = [](const std::string& what, const std::vector<std::int64_t>& v) {
    const Summary s = summarize(v);
    std::cout << "| " << what << " | " << s.n << " | " << fixed(s.p50_us, 0) << " µs | "
              << fixed(s.p90_us, 0) << " µs | " << fixed(s.p99_us, 0) << " µs | "
              << fixed(s.p999_us, 0) << " µs | " << fixed(s.max_us, 0) << " µs | "
              << fixed(s.mean_us, 0) << " µs |\n";
  };
  row("jitterd: **lateness** (deadline → kernel ACK)", lateness);
  row("jitterd: apply time (netem change request → kernel ACK)", apply);
  row("jitterd: wake-up and queueing (lateness − apply time)", wake_up);
  row("floor: **lateness** (deadline → kernel ACK)", floor_lateness);
  row("floor: apply time (`NetemQdisc::change`)", floor_apply);
  row("floor: wake-up (`clock_nanosleep` to the deadline)", floor_wake);
  row("jitterd: event read by this client − deadline", delivered);
  const Summary sj = summarize(lateness), sfl = summarize(floor_lateness);
  std::cout << "jitterd / floor, lateness: p50 " << fixed(sj.p50_us / sfl.p50_us, 2) << "×, p90 "
            << fixed(sj.p90_us / sfl.p90_us, 2) << "×, p99 " << fixed(sj.p99_us / sfl.p99_us, 2)
            << "×, p99.9 " << fixed(sj.p999_us / sfl.p999_us, 2) << "×\n";
  const auto floor_over = std::count_if(floor_lateness.begin(), floor_lateness.end(),
                                        [](auto v) { return v > 1'000'000; });
  std::cout << "floor transitions later than 1 ms: " << floor_over << " of "
            << floor_lateness.size() << "\n";
  const auto over_1ms =
      std::count_if(lateness.begin(), lateness.end(), [](auto v) { return v > 1'000'000; });
  std::int64_t status_count = 0, status_missed = 0, status_late_max = 0;
  for (const auto& s : sessions_status) {
    const json& t = s.at("transitions");
    status_count += t.value("count", std::int64_t{0});
    status_missed += t.value("missed", std::int64_t{0});
    status_late_max = std::max(status_late_max, t.value("late_max_ns", std::int64_t{0}));
  }
  std::cout << "event subscription dropped by jitterd: " << dropped_at.size() << " times";
  for (std::size_t d = 0; d < dropped_at.size() && d < 20; ++d) {
    std::cout << (d ? ", " : " (at ") << fixed(static_cast<double>(dropped_at[d]) / 1e9, 1) << " s";
  }
  std::cout << (dropped_at.empty() ? "" : ")")
            << "; events never received (gaps in seq): " << lost_events << "\n";
  std::cout << "transitions later than 1 ms: " << over_1ms << " of " << lateness.size()
            << "; **deadline-missed: " << counts["deadline-missed"]
            << "**; errors: " << errors.size() << "; jitterd's status at the end ("
            << count_of(sessions_status.size(), "session") << "): transitions " << status_count
            << ", missed " << status_missed << ", late_max "
            << ms(static_cast<double>(status_late_max)) << "\n";
  // A long run can miss many; the CSV has them all.
  constexpr std::size_t kListed = 20;
  std::size_t listed = 0;
  for (const auto& t : transitions) {
    if (t.missed && listed++ < kListed) {
      std::cout << "  deadline-missed: " << names[static_cast<std::size_t>(t.interface)]
                << ", step deadline at +" << fixed(static_cast<double>(since_origin(t)) / 1e6, 0)
                << " ms, " << ms(static_cast<double>(t.lateness_ns), 1) << " late\n";
    }
  }
  for (std::size_t e = 0; e < errors.size() && e < kListed; ++e) {
    std::cout << "  error: " << errors[e] << "\n";
  }

  // The grid, per interface: deadline[k] - deadline[0] must be exactly k x 100 ms, k counting every
  // step since that session's origin (its applied event's deadline), and every k must be there
  // exactly once.
  auto deviation = [&](const Transition& t) {
    const std::int64_t since = since_origin(t);
    return std::abs(since - (since + kStepNs / 2) / kStepNs * kStepNs);
  };
  std::vector<std::int64_t> grid_worst(static_cast<std::size_t>(count), 0);
  {
    std::vector<std::int64_t> expected_k(static_cast<std::size_t>(count), 1);
    std::size_t gaps = 0, wrong_step = 0, without_origin = 0;
    for (const auto& t : transitions) {
      const auto i = static_cast<std::size_t>(t.interface);
      if (!origin_ns[i]) {
        ++without_origin;
        continue;
      }
      const std::int64_t k = (since_origin(t) + kStepNs / 2) / kStepNs;
      grid_worst[i] = std::max(grid_worst[i], deviation(t));
      if (k != expected_k[i]) ++gaps;
      expected_k[i] = k + 1;
      if (t.step != k % 2) ++wrong_step;
    }
    std::int64_t worst = 0, min_last_k = -1, max_last_k = 0;
    for (std::size_t i = 0; i < grid_worst.size(); ++i) {
      worst = std::max(worst, grid_worst[i]);
      const std::int64_t last = expected_k[i] - 1;
      min_last_k = min_last_k < 0 ? last : std::min(min_last_k, last);
      max_last_k = std::max(max_last_k, last);
    }
    std::cout << "grid: " << transitions.size() << " deadlines on " << count_of(count, "interface")
              << ", k = 1.." << min_last_k << "–" << max_last_k
              << "; max |deadline[k] - deadline[0] - k x 100 ms| = " << worst
              << " ns; k not consecutive: " << gaps << "; step != k mod 2: " << wrong_step
              << "; on an interface without an applied event: " << without_origin << "\n";
  }

  // Per interface.
  std::cout << "\n| interface | n | lateness p50 | p99 | p99.9 | max | apply p50 | "
               "deadline-missed | grid max deviation |\n|---|---|---|---|---|---|---|---|---|\n";
  for (int i = 0; i < count; ++i) {
    std::vector<std::int64_t> l, a;
    std::size_t missed = 0;
    for (const auto& t : transitions) {
      if (t.interface != i) continue;
      if (t.missed) {
        ++missed;
        continue;
      }
      l.push_back(t.lateness_ns);
      a.push_back(t.apply_ns);
    }
    const Summary sl = summarize(l), sa = summarize(a);
    std::cout << "| " << names[static_cast<std::size_t>(i)] << " | " << sl.n << " | "
              << fixed(sl.p50_us, 0) << " µs | " << fixed(sl.p99_us, 0) << " µs | "
              << fixed(sl.p999_us, 0) << " µs | " << fixed(sl.max_us, 0) << " µs | "
              << fixed(sa.p50_us, 0) << " µs | " << missed << " | "
              << grid_worst[static_cast<std::size_t>(i)] << " ns |\n";
  }

  // Drift: the run in windows of 5 minutes, or ten equal ones in a run shorter than 50 minutes; the
  // last window takes the remainder. The floor and jitterd's memory beside each.
  std::vector<double> window_mid_h, window_p99_us;
  if (!lateness.empty() && stopped > base) {
    const std::int64_t span = std::min(kDriftWindowNs, (stopped - base) / 10);
    const std::int64_t windows = std::max<std::int64_t>(1, (stopped - base) / span);
    std::cout << "\n| window | n | lateness p50 | p99 | p99.9 | max | deadline-missed | apply p50 "
                 "| floor lateness p50 | floor p99 | grid max deviation | jitterd VmRSS at the "
                 "end |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (std::int64_t w = 0; w < windows; ++w) {
      const std::int64_t from = base + w * span;
      const std::int64_t to =
          w + 1 == windows ? std::numeric_limits<std::int64_t>::max() : from + span;
      std::vector<std::int64_t> l, a, f;
      std::int64_t worst = 0;
      std::size_t missed = 0;
      for (const auto& t : transitions) {
        if (t.deadline_ns < from || t.deadline_ns >= to) continue;
        if (origin_ns[static_cast<std::size_t>(t.interface)]) worst = std::max(worst, deviation(t));
        if (t.missed) {
          ++missed;
          continue;
        }
        l.push_back(t.lateness_ns);
        a.push_back(t.apply_ns);
      }
      for (const auto& sample : floor) {
        if (sample.deadline_ns >= from && sample.deadline_ns < to) f.push_back(sample.lateness_ns);
      }
      std::optional<long> rss_kib;
      for (const auto& s : rss) {
        if (s.at_ns < to) rss_kib = s.memory.vm_rss_kib;
      }
      const Summary sl = summarize(l), sa = summarize(a), sf = summarize(f);
      const std::int64_t end = std::min(to, stopped);
      if (sl.n > 0) {
        window_mid_h.push_back(static_cast<double>((from + end) / 2 - base) / kNsPerHour);
        window_p99_us.push_back(sl.p99_us);
      }
      // "–" where no event of the window was received (a dropped subscription).
      auto us = [](const Summary& v, double value) {
        return v.n ? fixed(value, 0) + " µs" : std::string("–");
      };
      std::cout << "| " << fixed(static_cast<double>(from - base) / 1e9, 0) << "–"
                << fixed(static_cast<double>(end - base) / 1e9, 0) << " s | " << sl.n << " | "
                << us(sl, sl.p50_us) << " | " << us(sl, sl.p99_us) << " | " << us(sl, sl.p999_us)
                << " | " << us(sl, sl.max_us) << " | " << missed << " | " << us(sa, sa.p50_us)
                << " | " << us(sf, sf.p50_us) << " | " << us(sf, sf.p99_us) << " | " << worst
                << " ns | " << (rss_kib ? mib(*rss_kib) : std::string("–")) << " |\n";
    }
  }

  // Slopes (least squares) over the whole run, per hour whatever the run's length: in a short run
  // they are extrapolations with wide intervals.
  {
    std::vector<double> x, y;
    for (const auto& t : transitions) {
      if (t.missed) continue;
      x.push_back(static_cast<double>(t.deadline_ns - base) / kNsPerHour);
      y.push_back(static_cast<double>(t.lateness_ns) / 1e3);
    }
    const LineFit all = least_squares(x, y), p99 = least_squares(window_mid_h, window_p99_us);
    std::cout << "\ndrift: lateness slope " << fixed(all.slope, 1) << " ± "
              << fixed(all.slope_ci95, 1) << " µs per hour (least squares over " << all.n
              << " transitions, 95 % interval assuming independent residuals); slope of the "
                 "windows' p99: "
              << fixed(p99.slope, 1) << " µs per hour (" << p99.n << " windows)\n";
  }
  {
    std::vector<double> x, y;
    long max_rss = 0;
    for (const auto& s : rss) {
      x.push_back(static_cast<double>(s.at_ns - base) / kNsPerHour);
      y.push_back(static_cast<double>(s.memory.vm_rss_kib));
      max_rss = std::max(max_rss, s.memory.vm_rss_kib);
    }
    const LineFit fit = least_squares(x, y);
    const ProcessMemory& first = rss.front().memory;
    const ProcessMemory& last = rss.back().memory;
    std::cout << "jitterd memory (" << rss.size() << " samples, every "
              << kRssEveryNs / 1'000'000'000 << " s from the end of set-up): VmRSS at the start "
              << mib(first.vm_rss_kib) << ", max " << mib(max_rss) << ", at the end "
              << mib(last.vm_rss_kib) << "; slope " << fixed(fit.slope, 1) << " ± "
              << fixed(fit.slope_ci95, 1) << " KiB per hour; VmHWM at the end "
              << mib(last.vm_hwm_kib) << "; RssAnon " << mib(first.rss_anon_kib) << " → "
              << mib(last.rss_anon_kib) << "\n";
  }

  if (setup_done > 0 && stopped > setup_done) {
    // Shares of one CPU from the end of set-up to the end, and per transition jitterd made in that
    // time: its status counts every transition including each session's first phase (the set-up);
    // without the status, the transitions received with deadlines in that time.
    const double span = static_cast<double>(stopped - setup_done);
    std::int64_t made = status_count - static_cast<std::int64_t>(sessions_status.size());
    const char* made_from = "jitterd's status";
    if (sessions_status.empty()) {
      made = std::count_if(transitions.begin(), transitions.end(), [&](const auto& t) {
        return !t.missed && t.deadline_ns >= setup_done && t.deadline_ns < stopped;
      });
      made_from = "received";
    }
    const Nanoseconds used = cpu_after.total() - cpu_at_setup.total();
    auto share = [&](Nanoseconds part) {
      return fixed(100.0 * static_cast<double>(part.count()) / span, 1) + " %";
    };
    std::cout << "\njitterd after set-up: " << share(used) << " of one CPU (user "
              << share(cpu_after.user - cpu_at_setup.user) << ", system "
              << share(cpu_after.system - cpu_at_setup.system) << "), "
              << fixed(static_cast<double>(used.count()) / 1e3 /
                           static_cast<double>(std::max<std::int64_t>(1, made)),
                       0)
              << " µs of CPU per transition made (" << made << ", " << made_from << ")\n";
  }
  long long transmitted = 0, received = 0;
  for (std::size_t i = 0; i < ping_outputs.size(); ++i) {
    const std::string text = read_text(ping_outputs[i]);
    long long t = 0, r = 0;
    if (const auto at = text.find(" packets transmitted, "); at != std::string::npos) {
      const auto line_start = text.rfind('\n', at);
      std::sscanf(text.c_str() + (line_start == std::string::npos ? 0 : line_start + 1),
                  "%lld packets transmitted, %lld", &t, &r);
    }
    transmitted += t;
    received += r;
    // One interface: its summary as ping wrote it; several: only those that lost probes.
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const bool summary = line.find("transmitted") != std::string::npos || line.starts_with("rtt");
      if (summary && (count == 1 || t != r))
        std::cout << "ping " << names[i] << ": " << line << "\n";
    }
  }
  std::cout << "ping, " << count_of(count, "interface") << ": " << transmitted << " probes sent, "
            << received << " answered\n";
  print_conditions(&host_start);
  if (jitterd_status != 0) {
    std::cerr << "jitterd exited with " << jitterd_status << ":\n" << daemon.log();
    return 1;
  }
  return !lateness.empty() && applied == count && errors.empty() && dropped_at.empty() ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// memory: resident set idle, with 100 shaped interfaces, after clearing

struct MemoryVariant {
  std::string label;
  std::vector<std::string> env;  // added to jitterd's environment
};

// One jitterd, idle, then shaping every interface in `names`, then cleared; returns whether both
// witnesses saw every interface shaped.
bool memory_run(const std::string& binary, const MemoryVariant& variant,
                const std::string& profile_file, const std::string& name, const std::string& phase,
                const VethFarm& farm, const std::vector<std::string>& names, int cycles,
                const std::string& dir) {
  Jitterd daemon(binary, dir, {"veth*"}, farm.ns(), variant.env);
  fs::copy_file(profile_file, dir + "/profiles/" + name + ".json");
  const pid_t pid = daemon.pid();
  std::cout << "\n### " << variant.label
            << "\n\n| jitterd | VmRSS | VmHWM | RssAnon | RssFile |\n|---|---|---|---|---|\n";
  auto show = [&](const std::string& when) {
    const ProcessMemory m = memory_of(pid);
    std::cout << "| " << when << " | " << mib(m.vm_rss_kib) << " | " << mib(m.vm_hwm_kib) << " | "
              << mib(m.rss_anon_kib) << " | " << mib(m.rss_file_kib) << " |\n";
    return m;
  };
  LineClient client(daemon.socket());
  client.call(R"({"id":1,"method":"version"})");
  const ProcessMemory idle = show("idle after start");

  std::vector<std::int64_t> apply_rtt, status_rtt, clear_rtt;
  // `milestones`: after how many sessions to show the memory on the way (it should grow linearly).
  auto apply_all = [&](const std::vector<std::size_t>& milestones) {
    for (std::size_t k = 0; k < names.size(); ++k) {
      const json request = {
          {"id", 2},
          {"method", "apply"},
          {"params", {{"interface", names[k]}, {"profile", name}, {"phase", phase}}}};
      const std::int64_t t0 = monotonic_ns();
      client.call(request.dump());
      apply_rtt.push_back(monotonic_ns() - t0);
      if (std::find(milestones.begin(), milestones.end(), k + 1) != milestones.end()) {
        show(std::to_string(k + 1) + " session" + (k ? "s" : ""));
      }
    }
  };
  auto clear_all = [&] {
    const std::int64_t t0 = monotonic_ns();
    const json cleared = client.call(R"({"id":4,"method":"clear","params":{"all":true}})");
    clear_rtt.push_back(monotonic_ns() - t0);
    if (cleared.at("cleared").size() != names.size())
      throw std::runtime_error("clear: " + cleared.dump());
  };

  apply_all({1, 2, 10, names.size() / 2});
  // Two witnesses that all of them are shaped: jitterd's own listing and the kernel's, through tc.
  std::size_t ours = 0;
  const json listing = client.call(R"({"id":3,"method":"interfaces"})");
  for (const auto& i : listing.at("interfaces")) {
    if (i.at("root").is_object() && i.at("root").at("owner") == "jitterd") ++ours;
  }
  std::size_t in_kernel = 0;
  const json qdiscs = json::parse(
      run_capture({"ip", "netns", "exec", farm.ns(), "tc", "-j", "qdisc", "show"}, dir));
  for (const auto& q : qdiscs) {
    if (q.value("kind", "") == "netem" && q.value("handle", "") == "1a7e:" && q.contains("root"))
      ++in_kernel;
  }
  const ProcessMemory shaped =
      show("**" + std::to_string(names.size()) + " sessions** (jitterd counts " +
           std::to_string(ours) + ", tc counts " + std::to_string(in_kernel) + ")");
  std::size_t status_bytes = 0;
  for (int i = 0; i < 20; ++i) {
    const std::int64_t t0 = monotonic_ns();
    status_bytes = client.call(R"({"id":5,"method":"status"})").dump().size();
    status_rtt.push_back(monotonic_ns() - t0);
  }
  show("… after 20 `status` of all " + std::to_string(names.size()));
  clear_all();
  const ProcessMemory cleared = show("after `clear all`");
  for (int c = 0; c < cycles; ++c) {
    apply_all({});
    clear_all();
  }
  const ProcessMemory cycled =
      show("after " + std::to_string(cycles) + " more apply-all / clear-all cycles");

  std::cout << "\n"
            << names.size() << " sessions − idle: " << (shaped.vm_rss_kib - idle.vm_rss_kib)
            << " KiB ("
            << fixed(static_cast<double>(shaped.vm_rss_kib - idle.vm_rss_kib) /
                         static_cast<double>(names.size()),
                     1)
            << " KiB per session); cleared − idle: " << (cleared.vm_rss_kib - idle.vm_rss_kib)
            << " KiB; after the cycles − cleared: " << (cycled.vm_rss_kib - cleared.vm_rss_kib)
            << " KiB\n\n";
  std::cout << "| request (" << names.size()
            << " interfaces) | n | p50 | p99 | max |\n|---|---|---|---|---|\n";
  for (const auto& [what, v] :
       {std::pair{std::string("`apply` (profile by name, phase held)"), &apply_rtt},
        std::pair{"`status` of all sessions (" + std::to_string(status_bytes) + " bytes)",
                  &status_rtt},
        std::pair{std::string("`clear` all"), &clear_rtt}}) {
    const Summary s = summarize(*v);
    std::cout << "| " << what << " | " << s.n << " | " << fixed(s.p50_us / 1e3, 2) << " ms | "
              << fixed(s.p99_us / 1e3, 2) << " ms | " << fixed(s.max_us / 1e3, 2) << " ms |\n";
  }
  const int status = daemon.stop();
  if (status != 0) {
    std::cerr << "jitterd exited with " << status << ":\n" << daemon.log();
    return false;
  }
  return ours == names.size() && in_kernel == names.size();
}

int memory_command(const std::map<std::string, std::string>& options) {
  const std::string binary = options.at("jitterd");
  if (!options.contains("profile")) {
    std::cerr << "daemon_bench memory: --profile FILE is required (tests/bench/daemon_bench.sh "
                 "compiles one with "
                 "jitterctl compile tests/fixtures/captures/multimodal.txt --entries 4096)\n";
    return 2;
  }
  const std::string profile_file = options.at("profile");
  const json profile = json::parse(read_text(profile_file));
  const std::string phase = options.at("phase");
  const int interfaces = options.contains("interfaces") ? std::stoi(options.at("interfaces")) : 100;
  const int cycles = std::stoi(options.at("cycles"));
  const auto& table = profile.at("phases").at(phase).at("delay").at("distribution").at("table");
  const std::string name = profile.at("name");

  print_conditions();
  TempDir dir;
  VethFarm farm((interfaces + 1) / 2, dir.path());
  const std::vector<std::string> names(farm.names().begin(), farm.names().begin() + interfaces);
  std::cout << "# memory: profile " << name << " (" << fs::file_size(profile_file)
            << " bytes), phase " << phase << " held (a " << table.size()
            << "-entry delay table), on " << interfaces << " veth interfaces in one namespace\n";
  // The second jitterd is a diagnosis, not a configuration anyone should run: with glibc's mmap
  // threshold pinned at 1 MiB, every block of 1 MiB or more goes back to the kernel when freed, so
  // what stays resident is what jitterd really holds. The gap between the two is memory malloc
  // keeps after a transient allocation (see docs/benchmarks.md); when the two agree, there is none.
  const std::vector<MemoryVariant> variants = {
      {"jitterd as built", {}},
      {"diagnosis: the same with GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1048576",
       {"GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1048576"}},
  };
  bool all_shaped = true;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    all_shaped &= memory_run(binary, variants[v], profile_file, name, phase, farm, names, cycles,
                             dir.path() + "/jitterd" + std::to_string(v));
  }
  print_conditions();
  return all_shaped ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------

constexpr const char* kUsage =
    "usage: daemon_bench rtt [--jitterd PATH] [--requests 100000] [--seconds 1.2] [--rounds 5]\n"
    "                        [--run-length 100]\n"
    "       daemon_bench lateness [--jitterd PATH] [--duration 600] [--interfaces 1]\n"
    "                             [--start together|spread|apply] [--csv FILE]\n"
    "       daemon_bench memory [--jitterd PATH] --profile FILE [--phase capture]\n"
    "                           [--interfaces 100] [--cycles 3]\n"
    "lateness and memory need root and netem: run them in tests/vm/run.\n"
    "All three at once, built if needed: tests/bench/daemon_bench.sh (docs/benchmarks.md).\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  std::map<std::string, std::string> options = {{"jitterd", JITTERD_BINARY},
                                                {"requests", "100000"},
                                                {"seconds", "1.2"},
                                                {"rounds", "5"},
                                                {"run-length", "100"},
                                                {"duration", "600"},
                                                {"phase", "capture"},
                                                {"start", "together"},
                                                {"cycles", "3"}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string key = arg.starts_with("--") ? arg.substr(2) : "";
    // Every option has a default except these, which have none (--interfaces: 1 for lateness, 100
    // for memory).
    const bool known =
        options.contains(key) || key == "profile" || key == "csv" || key == "interfaces";
    if (!known || i + 1 >= argc) {
      std::cerr << "daemon_bench: unexpected '" << arg << "'\n" << kUsage;
      return 2;
    }
    options[key] = argv[++i];
  }
  // A client that goes away must not kill us; a write error says so instead.
  ::signal(SIGPIPE, SIG_IGN);
  try {
    if (command == "rtt") return rtt_command(options);
    if (command == "lateness") return lateness_command(options);
    if (command == "memory") return memory_command(options);
  } catch (const std::exception& e) {
    std::cerr << "daemon_bench " << command << ": " << e.what() << '\n';
    return 1;
  }
  std::cerr << kUsage;
  return 2;
}
