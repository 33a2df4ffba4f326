// load_clients: many well-behaved clients against a running jitterd, and optionally hostile ones
// beside them (issue 7, item 4, "Load"). It talks the documented protocol (docs/protocol.md) over
// the Unix socket; nothing of the daemon is linked in.
//
//   - N connections (--clients, default 1000) share a total request rate R (--rate, default 10 000
//     requests/s), paced evenly (request k is due at start + k/R and goes to client k mod N), for D
//     seconds (--duration, default 60). Requests are read-only and need no kernel change: `status`
//     (no sessions), `version` and `metrics`, in turn; each has a unique numeric id.
//   - Every reply is matched to its request (replies come in request order on a connection, and the
//     id must be the one expected). A request without a reply --grace seconds after the last one
//     was sent is lost; a reply with "ok": false is an error; latency is from the write of the
//     request to the read of its reply. Stalled: latency above --stall-ms (default 100 ms).
//   - With --hostile, a second phase of the same length runs the same load next to a client that
//     streams garbage as fast as it can (up to --garbage-bytes in total, reconnecting whenever
//     jitterd closes it) and one that sends a request one byte per second; the table puts the two
//     phases side by side.
//   - With --pid, jitterd's VmRSS/VmHWM are sampled every second (start, peak, end of each phase),
//     and its CPU time and involuntary context switches are counted per phase.
//
// Prints a table and, as its last line, a one-line JSON summary. Exit status: 0 when every request
// was answered correctly, 1 when a request was lost, answered with an error or out of order, 2 for
// a bad command line, 3 when the run could not be set up (no daemon, too few connections allowed).
// tests/bench/load_test.sh starts a jitterd for it; docs/benchmarks.md, "Load", has the figures.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "protocol/errors.hpp"
#include "shaper/errors.hpp"
#include "shaper/files.hpp"

namespace {

using json = nlohmann::json;
using shaper::check_syscall;

constexpr std::int64_t kNsPerSecond = 1'000'000'000;

// CLOCK_MONOTONIC, in ns.
std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * kNsPerSecond + ts.tv_nsec;
}

using Fd = shaper::UniqueFd;  // closing one is assigning an empty Fd
// A connected stream socket to `path`, non-blocking once connected. An empty Fd (errno kept) when
// the connect fails, so that callers that retry (the garbage client) need no exception per attempt.
Fd try_connect(const std::string& path) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Fd();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    fd = Fd();
    errno = error;
    return fd;
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return Fd();
  return fd;
}

Fd connect_or_throw(const std::string& path) {
  Fd fd = try_connect(path);
  if (!fd) {
    throw shaper::SystemError("connect",
                              path +
                                  " (is jitterd running there? start it with "
                                  "tests/bench/load_test.sh)",
                              errno);
  }
  return fd;
}

// ---------------------------------------------------------------------------------------------
// Replies, read without building a JSON document: the load reads 10 000 of them a second on a
// machine it shares with the daemon, so it scans the top level for the members it needs (the error
// codes are protocol/'s ErrorCode).

struct ReplyView {
  std::optional<std::uint64_t> id;  // a numeric id (the load's own requests have one)
  std::optional<bool> ok;
  std::optional<jitterd::protocol::ErrorCode> error_code;  // error.code, when "ok" is false
  bool event = false;  // an event line (never expected: the load does not subscribe)
};

ReplyView scan_reply(std::string_view line) {
  ReplyView view;
  int depth = 0;
  std::string_view outer_key;  // the top-level member the scanner is inside
  std::size_t i = 0;
  auto skip_spaces = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  auto read_string = [&]() -> std::string_view {  // at an opening quote; ends past the closing one
    const std::size_t begin = ++i;
    while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
    const std::string_view s = line.substr(begin, std::min(i, line.size()) - begin);
    ++i;
    return s;
  };
  while (i < line.size()) {
    const char c = line[i];
    if (c == '"') {
      const std::string_view s = read_string();
      skip_spaces();
      if (i >= line.size() || line[i] != ':') continue;  // a value, not a key
      ++i;
      skip_spaces();
      if (depth == 1) {
        outer_key = s;
        if (s == "id") {
          std::uint64_t id = 0;
          const auto [end, ec] = std::from_chars(line.data() + i, line.data() + line.size(), id);
          if (ec == std::errc()) view.id = id;
          (void)end;
        } else if (s == "ok") {
          view.ok = line.substr(i).starts_with("true");
        } else if (s == "event") {
          view.event = true;
        }
      } else if (depth == 2 && outer_key == "error" && s == "code" && i < line.size() &&
                 line[i] == '"') {
        view.error_code = jitterd::protocol::error_code_from_string(read_string());
      }
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    ++i;
  }
  return view;
}

// ---------------------------------------------------------------------------------------------
// The daemon as seen from /proc: memory, CPU time, context switches.

struct ProcStatus {
  long vm_rss_kib = 0;
  long vm_hwm_kib = 0;
  long nonvoluntary_switches = 0;
};

std::optional<ProcStatus> proc_status(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  ProcStatus s;
  for (std::string line; std::getline(in, line);) {
    auto field = [&](std::string_view name, long* out) {
      if (line.starts_with(name)) *out = std::strtol(line.c_str() + name.size(), nullptr, 10);
    };
    field("VmRSS:", &s.vm_rss_kib);
    field("VmHWM:", &s.vm_hwm_kib);
    field("nonvoluntary_ctxt_switches:", &s.nonvoluntary_switches);
  }
  return s;
}

// utime + stime from /proc/<pid>/stat (fields 14 and 15, clock ticks), in ns.
std::int64_t cpu_ns_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');  // the command name (field 2) may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * kNsPerSecond / ::sysconf(_SC_CLK_TCK);
}

std::int64_t own_cpu_ns() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto ns = [](const timeval& t) {
    return std::int64_t{t.tv_sec} * kNsPerSecond + t.tv_usec * 1000;
  };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

// The "cpu" line of /proc/stat: all CPU time and the part the hypervisor gave to someone else
// (steal). This machine may itself be a VM on a shared host; steal is noise its load average hides.
struct CpuTimes {
  long long total = 0;
  long long steal = 0;
};

CpuTimes host_cpu_times() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  CpuTimes t;
  long long value = 0;
  for (int field = 1; field <= 8 && in >> value; ++field) {
    t.total += value;
    if (field == 8) t.steal = value;
  }
  return t;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ---------------------------------------------------------------------------------------------
// A blocking side connection for `metrics` at phase boundaries: jitterd's own request counters
// say whether it read every request the load sent.

struct DaemonCounters {
  std::uint64_t requests_total = 0;
  std::uint64_t request_errors_total = 0;
  std::uint64_t connections_refused_total = 0;
};

class MetricsProbe {
 public:
  explicit MetricsProbe(const std::string& path) : fd_(connect_or_throw(path)) {}

  DaemonCounters read() {
    const std::string request = R"({"id":"probe","method":"metrics"})"
                                "\n";
    if (::send(fd_.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      throw shaper::SystemError("send", "metrics probe", errno);
    }
    std::string in;
    const std::int64_t give_up = monotonic_ns() + 10 * kNsPerSecond;
    while (in.find('\n') == std::string::npos) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (monotonic_ns() > give_up) throw std::runtime_error("metrics probe: no reply in 10 s");
      if (::poll(&p, 1, 100) <= 0) continue;
      char chunk[16384];
      const ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) throw std::runtime_error("metrics probe: jitterd closed the connection");
      in.append(chunk, static_cast<std::size_t>(n));
    }
    const json reply = json::parse(in.substr(0, in.find('\n')));
    const std::string text = reply.at("result").at("text").get<std::string>();
    auto counter = [&](std::string_view name) -> std::uint64_t {
      const std::string key = "\n" + std::string(name) + " ";
      const auto at = text.find(key);
      return at == std::string::npos ? 0
                                     : std::strtoull(text.c_str() + at + key.size(), nullptr, 10);
    };
    return {counter("jitterd_requests_total"), counter("jitterd_request_errors_total"),
            counter("jitterd_connections_refused_total")};
  }

 private:
  Fd fd_;
};

// ---------------------------------------------------------------------------------------------
// Hostile clients, each on a thread of its own so that they hammer the daemon as hard as they can
// without taking turns with the well-behaved clients' loop.

enum class GarbageKind {
  kRandom,        // uniform random bytes: a '\n' every 256 bytes on average, so many short lines,
                  // each one a parse-error reply (the most work per byte for the daemon)
  kUnterminated,  // random bytes without '\n': jitterd buffers up to limits.max_request_bytes,
                  // answers too-large and closes (the most memory per connection)
  kNested,        // lines of '[' up to --garbage-line bytes: the deepest JSON a line can hold
  kWide,          // lines "[0,0,...,0]" of --garbage-line bytes: valid JSON with the most values
};

std::optional<GarbageKind> garbage_kind_from(std::string_view name) {
  if (name == "random") return GarbageKind::kRandom;
  if (name == "unterminated") return GarbageKind::kUnterminated;
  if (name == "nested") return GarbageKind::kNested;
  if (name == "wide") return GarbageKind::kWide;
  return std::nullopt;
}

std::string garbage_block(GarbageKind kind, std::size_t line_bytes) {
  if (kind == GarbageKind::kNested) return std::string(line_bytes - 1, '[') + "\n";
  if (kind == GarbageKind::kWide) {
    std::string line = "[0";
    while (line.size() + 4 <= line_bytes) line += ",0";
    return line + "]\n";
  }
  // 1 MiB of random bytes, sent over and over: random enough for a parser, cheap to produce.
  std::string block(1 << 20, '\0');
  std::mt19937_64 random(7);
  for (std::size_t i = 0; i < block.size(); i += 8) {
    const std::uint64_t r = random();
    std::memcpy(block.data() + i, &r, 8);
  }
  if (kind == GarbageKind::kUnterminated) std::replace(block.begin(), block.end(), '\n', 'x');
  return block;
}

struct GarbageStats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t connections = 0;
  std::uint64_t connect_failures = 0;
  std::uint64_t reply_lines = 0;
  std::map<std::string, std::uint64_t> replies_by_code;
  std::int64_t elapsed_ns = 0;
};

// Streams garbage as fast as the socket takes it, reading (and counting) what jitterd answers so
// that it is never disconnected for not reading; reconnects whenever jitterd closes the connection.
void garbage_client(const std::string& path, GarbageKind kind, std::size_t line_bytes,
                    std::uint64_t budget, const std::atomic<bool>& stop, GarbageStats& stats) {
  const std::string block = garbage_block(kind, line_bytes);
  const std::int64_t start = monotonic_ns();
  std::string in;
  std::size_t offset = 0;
  while (!stop.load(std::memory_order_relaxed) && stats.bytes_sent < budget) {
    Fd fd = try_connect(path);
    if (!fd) {
      ++stats.connect_failures;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ++stats.connections;
    in.clear();
    bool open = true;
    while (open && !stop.load(std::memory_order_relaxed) && stats.bytes_sent < budget) {
      pollfd p{fd.get(), POLLIN | POLLOUT, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      // Reads everything there is before writing more: jitterd disconnects a client that lets more
      // than limits.max_queued_events replies pile up, and this one wants to go on sending.
      for (bool more = (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0; more && open;) {
        char chunk[65536];
        const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
        more = n == static_cast<ssize_t>(sizeof chunk);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          open = false;
        } else if (n > 0) {
          in.append(chunk, static_cast<std::size_t>(n));
          std::size_t begin = 0;
          for (std::size_t end; (end = in.find('\n', begin)) != std::string::npos;
               begin = end + 1) {
            ++stats.reply_lines;
            const ReplyView v = scan_reply(std::string_view(in).substr(begin, end - begin));
            ++stats.replies_by_code[!v.error_code ? (v.ok.value_or(false) ? "ok" : "?")
                                                  : std::string(to_string(*v.error_code))];
          }
          in.erase(0, begin);
        }
      }
      if (open && (p.revents & POLLOUT)) {
        // At most 64 KiB per write, then read again: the replies to a whole socket buffer of short
        // garbage lines would not fit in the other direction's.
        constexpr std::size_t kMaxWrite = 64 * 1024;
        const std::size_t want = static_cast<std::size_t>(
            std::min<std::uint64_t>({block.size() - offset, budget - stats.bytes_sent, kMaxWrite}));
        const ssize_t n = ::send(fd.get(), block.data() + offset, want, MSG_NOSIGNAL);
        if (n > 0) {
          stats.bytes_sent += static_cast<std::uint64_t>(n);
          offset = (offset + static_cast<std::size_t>(n)) % block.size();
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          open = false;  // EPIPE, ECONNRESET: jitterd closed it (too-large, or a full queue)
        }
      }
    }
    // A nested or wide line cut by a reconnect would start the next connection mid-line: start
    // afresh.
    if (kind == GarbageKind::kNested || kind == GarbageKind::kWide) offset = 0;
  }
  stats.elapsed_ns = monotonic_ns() - start;
}

struct SlowStats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t requests_completed = 0;  // whole requests sent, byte by byte
  std::uint64_t replies_ok = 0;
  std::uint64_t closed_by_daemon = 0;
};

// Sends a valid request one byte per `interval`, reads its reply, and starts again.
void slow_client(const std::string& path, std::chrono::milliseconds interval,
                 const std::atomic<bool>& stop, SlowStats& stats) {
  const std::string request = R"({"id":1,"method":"status"})"
                              "\n";
  Fd fd;
  std::size_t next = 0;
  std::string in;
  while (!stop.load(std::memory_order_relaxed)) {
    if (!fd) {
      fd = try_connect(path);
      next = 0;
      in.clear();
      if (!fd) {
        std::this_thread::sleep_for(interval);
        continue;
      }
    }
    if (::send(fd.get(), request.data() + next, 1, MSG_NOSIGNAL) != 1) {
      ++stats.closed_by_daemon;
      fd = Fd();
      continue;
    }
    ++stats.bytes_sent;
    if (++next == request.size()) {
      next = 0;
      ++stats.requests_completed;
    }
    // Waits out the interval in short steps (to notice the end of the phase), reading replies.
    const std::int64_t until = monotonic_ns() + std::chrono::nanoseconds(interval).count();
    while (fd && !stop.load(std::memory_order_relaxed) && monotonic_ns() < until) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ++stats.closed_by_daemon;
        fd = Fd();
        break;
      }
      if (n > 0) in.append(chunk, static_cast<std::size_t>(n));
      for (std::size_t end; (end = in.find('\n')) != std::string::npos; in.erase(0, end + 1)) {
        if (scan_reply(std::string_view(in).substr(0, end)).ok.value_or(false)) ++stats.replies_ok;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The well-behaved load

struct Options {
  std::string socket;
  pid_t pid = 0;
  std::size_t clients = 1000;
  double rate = 10000;
  double duration_s = 60;
  double grace_s = 5;
  double stall_ms = 100;
  bool hostile = false;
  std::uint64_t garbage_bytes = std::uint64_t{1} << 30;
  // The hostile phase goes on past duration_s, the well-behaved load with it, until the garbage
  // client has sent all of garbage_bytes (at most ten times duration_s).
  bool garbage_whole = false;
  GarbageKind garbage_kind = GarbageKind::kRandom;
  std::string garbage_kind_name = "random";
  // jitterd's default limits.max_request_bytes is 9 MiB; a nested line just under it is parsed.
  std::size_t garbage_line_bytes = 8 << 20;
  std::chrono::milliseconds slow_interval{1000};
  // Read-only methods that need no kernel change (no sessions: `status` reads no counters), taken
  // in turn: two small replies and `metrics`, a larger one (about 2.5 KB of Prometheus text).
  std::vector<std::string> methods = {"status", "version", "metrics"};
};

struct Outstanding {
  std::uint64_t id;
  std::int64_t sent_ns;
  bool written_off = false;  // counted lost when its phase ended; a reply to it is late
};

struct Client {
  Fd fd;
  std::string in;
  std::string out;  // what the socket did not take yet (rare: a full socket buffer)
  bool want_write = false;
  std::deque<Outstanding> outstanding;
};

struct Phase {
  std::string name;
  bool hostile = false;
  std::uint64_t scheduled = 0;
  std::uint64_t sent = 0;
  std::uint64_t replies = 0;
  std::uint64_t errors = 0;
  std::uint64_t out_of_order = 0;  // a reply whose id is not the one expected next
  std::uint64_t lost = 0;          // no reply by the end of the grace period, or never sendable
  std::uint64_t late_replies = 0;  // replies to lost requests that came after the grace period
  std::int64_t late_max_ns = 0;
  std::uint64_t clients_lost = 0;  // connections closed by jitterd, or abandoned with requests owed
  std::map<std::string, std::uint64_t> error_codes;
  std::vector<std::int64_t> latency_ns;
  std::vector<std::int64_t> lag_ns;  // the tool's own: due time to write
  std::int64_t send_window_ns = 0;
  std::int64_t grace_used_ns = 0;
  // The daemon
  std::optional<ProcStatus> memory_start, memory_end;
  long rss_peak_kib = 0;
  std::int64_t daemon_cpu_ns = 0;
  long daemon_nonvoluntary = 0;
  std::optional<DaemonCounters> counters_before, counters_after;
  // The machine
  std::int64_t tool_cpu_ns = 0;
  double steal_percent = 0;
  std::string load_start, load_end;
  std::optional<GarbageStats> garbage;
  std::optional<SlowStats> slow;
};

class Load {
 public:
  explicit Load(const Options& options)
      : options_(options), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    check_syscall(epoll_.get(), "epoll_create1", "load clients");
  }

  // Connects every client and has each answer one `version`, so that the timed phases start with
  // every connection accepted and served. Throws when jitterd refuses or closes a connection.
  void connect_all() {
    clients_.resize(options_.clients);
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      clients_[i].fd = connect_or_throw(options_.socket);
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.u64 = i;
      check_syscall(::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, clients_[i].fd.get(), &e), "epoll_ctl",
                    "client " + std::to_string(i));
    }
    Phase warm_up;
    warm_up.name = "warm-up";
    for (std::size_t i = 0; i < clients_.size(); ++i)
      send(warm_up, i, next_id_++, "version", monotonic_ns());
    const std::int64_t give_up = monotonic_ns() + 30 * kNsPerSecond;
    while (outstanding_ > 0 && monotonic_ns() < give_up && warm_up.clients_lost == 0)
      wait(warm_up, 10'000'000);
    if (warm_up.clients_lost > 0 || outstanding_ > 0 || warm_up.errors > 0) {
      std::string codes;
      for (const auto& [code, n] : warm_up.error_codes)
        codes += " " + code + " ×" + std::to_string(n);
      throw std::runtime_error(
          "warm-up: of " + std::to_string(clients_.size()) + " connections, " +
          std::to_string(warm_up.clients_lost) + " were closed by jitterd, " +
          std::to_string(outstanding_) + " got no reply in 30 s, " +
          std::to_string(warm_up.errors) + " got an error" +
          (codes.empty() ? "" : " (" + codes + ")") +
          "; if it says busy, raise limits.max_connections in jitterd's config above --clients");
    }
  }

  Phase run_phase(const std::string& name, bool hostile) {
    Phase phase;
    phase.name = name;
    phase.hostile = hostile;
    const auto per_duration =
        static_cast<std::uint64_t>(std::llround(options_.rate * options_.duration_s));
    std::uint64_t total = per_duration;
    const std::uint64_t most = hostile && options_.garbage_whole ? 10 * per_duration : per_duration;
    const auto per_second =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(options_.rate)));
    phase.latency_ns.reserve(total);
    phase.lag_ns.reserve(total);
    const CpuTimes host_before = host_cpu_times();
    phase.load_start = load_average();
    if (probe_) phase.counters_before = probe_->read();
    if (options_.pid) {
      phase.memory_start = proc_status(options_.pid);
      if (phase.memory_start) phase.rss_peak_kib = phase.memory_start->vm_rss_kib;
    }
    const std::int64_t daemon_cpu_before = options_.pid ? cpu_ns_of(options_.pid) : 0;
    const std::int64_t tool_cpu_before = own_cpu_ns();

    std::atomic<bool> stop_hostile{false};
    std::atomic<bool> garbage_done{false};
    GarbageStats garbage;
    SlowStats slow;
    std::thread garbage_thread, slow_thread;
    if (hostile) {
      garbage_thread = std::thread([&] {
        garbage_client(options_.socket, options_.garbage_kind, options_.garbage_line_bytes,
                       options_.garbage_bytes, stop_hostile, garbage);
        garbage_done.store(true);
      });
      slow_thread = std::thread(
          [&] { slow_client(options_.socket, options_.slow_interval, stop_hostile, slow); });
    }

    const double interval_ns = 1e9 / options_.rate;
    const std::int64_t start = monotonic_ns();
    std::int64_t next_sample = start + kNsPerSecond;
    std::uint64_t k = 0;
    std::int64_t sending_ended = 0;
    const auto grace_ns = static_cast<std::int64_t>(options_.grace_s * 1e9);
    // A burst of due requests is sent in slices, so that replies are read in between even when the
    // tool itself falls behind.
    constexpr int kMaxSendsPerTurn = 64;
    auto due = [&](std::uint64_t n) {
      return start + static_cast<std::int64_t>(static_cast<double>(n) * interval_ns);
    };
    for (;;) {
      std::int64_t now = monotonic_ns();
      if (options_.pid && now >= next_sample) {
        if (auto m = proc_status(options_.pid))
          phase.rss_peak_kib = std::max(phase.rss_peak_kib, m->vm_rss_kib);
        next_sample += kNsPerSecond;
      }
      for (int sends = 0; k < total && due(k) <= now && sends < kMaxSendsPerTurn; ++sends, ++k) {
        phase.lag_ns.push_back(now - due(k));
        send(phase, k % clients_.size(), next_id_++, options_.methods[k % options_.methods.size()],
             now);
        now = monotonic_ns();
      }
      // --garbage-whole: one more second of the load while the garbage client is not done.
      if (k == total && total < most && hostile && !garbage_done.load()) total += per_second;
      if (k == total && sending_ended == 0) {
        sending_ended = now;
        phase.send_window_ns = now - start;
        stop_hostile.store(true);
      }
      if (sending_ended != 0 && (outstanding_ == 0 || now >= sending_ended + grace_ns)) break;
      std::int64_t timeout = sending_ended != 0 ? sending_ended + grace_ns - now : due(k) - now;
      if (options_.pid) timeout = std::min(timeout, next_sample - now);
      wait(phase, std::max<std::int64_t>(timeout, 0));
    }
    phase.grace_used_ns = monotonic_ns() - sending_ended;
    phase.scheduled = total;
    for (std::thread* t : {&garbage_thread, &slow_thread}) {
      if (t->joinable()) t->join();
    }
    // What is still owed is lost. Its replies may yet come: they are waited for (another grace
    // period, counted as late) so that the next phase starts from quiet connections; a connection
    // that still owes replies then is given up.
    for (Client& c : clients_) {
      for (Outstanding& o : c.outstanding) {
        if (!o.written_off) {
          o.written_off = true;
          ++phase.lost;
          --outstanding_;
          ++written_off_;
        }
      }
    }
    const std::int64_t drain_until = monotonic_ns() + grace_ns;
    while (written_off_ > 0 && monotonic_ns() < drain_until)
      wait(phase, drain_until - monotonic_ns());
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (!clients_[i].outstanding.empty()) drop(phase, i);
    }

    phase.daemon_cpu_ns = options_.pid ? cpu_ns_of(options_.pid) - daemon_cpu_before : 0;
    phase.tool_cpu_ns = own_cpu_ns() - tool_cpu_before;
    if (options_.pid) {
      phase.memory_end = proc_status(options_.pid);
      if (phase.memory_end) {
        phase.rss_peak_kib = std::max(phase.rss_peak_kib, phase.memory_end->vm_rss_kib);
        if (phase.memory_start) {
          phase.daemon_nonvoluntary =
              phase.memory_end->nonvoluntary_switches - phase.memory_start->nonvoluntary_switches;
        }
      }
    }
    if (probe_) phase.counters_after = probe_->read();
    const CpuTimes host_after = host_cpu_times();
    const long long total_ticks = host_after.total - host_before.total;
    phase.steal_percent = total_ticks > 0
                              ? 100.0 * static_cast<double>(host_after.steal - host_before.steal) /
                                    static_cast<double>(total_ticks)
                              : 0.0;
    phase.load_end = load_average();
    if (hostile) {
      phase.garbage = std::move(garbage);
      phase.slow = slow;
    }
    return phase;
  }

  void open_probe() { probe_.emplace(options_.socket); }

 private:
  void send(Phase& phase, std::size_t index, std::uint64_t id, const std::string& method,
            std::int64_t now) {
    Client& c = clients_[index];
    if (!c.fd) {
      ++phase.lost;  // its connection is gone: a request that cannot even be sent is lost
      return;
    }
    char line[96];
    const int n = std::snprintf(line, sizeof line, "{\"id\":%llu,\"method\":\"%s\"}\n",
                                static_cast<unsigned long long>(id), method.c_str());
    c.outstanding.push_back({id, now});
    ++outstanding_;
    ++phase.sent;
    if (!c.out.empty()) {
      c.out.append(line, static_cast<std::size_t>(n));
      return;
    }
    const ssize_t written = ::send(c.fd.get(), line, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    if (written == n) return;
    if (written < 0 && errno != EAGAIN && errno != EINTR) {
      drop(phase, index);
      return;
    }
    c.out.assign(line + std::max<ssize_t>(written, 0),
                 static_cast<std::size_t>(n - std::max<ssize_t>(written, 0)));
    watch(index, EPOLLIN | EPOLLOUT);
  }

  void watch(std::size_t index, std::uint32_t events) {
    Client& c = clients_[index];
    epoll_event e{};
    e.events = events;
    e.data.u64 = index;
    check_syscall(::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &e), "epoll_ctl",
                  "client " + std::to_string(index));
    c.want_write = (events & EPOLLOUT) != 0;
  }

  // Waits up to `timeout_ns` for replies and handles them.
  void wait(Phase& phase, std::int64_t timeout_ns) {
    epoll_event events[256];
    const timespec timeout{static_cast<time_t>(timeout_ns / kNsPerSecond),
                           static_cast<long>(timeout_ns % kNsPerSecond)};
    const int n = ::epoll_pwait2(epoll_.get(), events, 256, &timeout, nullptr);
    if (n < 0 && errno == EINTR) return;
    check_syscall(n, "epoll_pwait2", "load clients");
    for (int i = 0; i < n; ++i) {
      const std::size_t index = events[i].data.u64;
      if (!clients_[index].fd) continue;
      if (events[i].events & EPOLLOUT) flush(phase, index);
      if (clients_[index].fd && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        receive(phase, index);
    }
  }

  void flush(Phase& phase, std::size_t index) {
    Client& c = clients_[index];
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n < 0) {
        drop(phase, index);
        return;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
    }
    watch(index, EPOLLIN);
  }

  void receive(Phase& phase, std::size_t index) {
    Client& c = clients_[index];
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::read(c.fd.get(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        drop(phase, index);
        return;
      }
      const std::int64_t now = monotonic_ns();
      c.in.append(chunk, static_cast<std::size_t>(n));
      std::size_t begin = 0;
      for (std::size_t end; (end = c.in.find('\n', begin)) != std::string::npos; begin = end + 1) {
        reply(phase, c, std::string_view(c.in).substr(begin, end - begin), now);
      }
      c.in.erase(0, begin);
      if (static_cast<std::size_t>(n) < sizeof chunk) break;
    }
  }

  void reply(Phase& phase, Client& c, std::string_view line, std::int64_t now) {
    const ReplyView v = scan_reply(line);
    if (!v.ok.value_or(false)) {
      ++phase.errors;
      ++phase.error_codes[!v.error_code ? std::string("(no code)")
                                        : std::string(to_string(*v.error_code))];
      if (phase.errors == 1) first_error_ = std::string(line.substr(0, 300));
    }
    // A reply must answer the oldest request not yet answered (replies come in request order,
    // docs/protocol.md). One that answers a later one means jitterd passed over the ones before it:
    // they are lost (their replies can no longer come in order); one that answers nothing we sent
    // is counted and dropped.
    const auto it = v.id ? std::find_if(c.outstanding.begin(), c.outstanding.end(),
                                        [&](const Outstanding& o) { return o.id == *v.id; })
                         : c.outstanding.end();
    if (it == c.outstanding.end()) {
      ++phase.out_of_order;
      return;
    }
    if (it != c.outstanding.begin()) {
      for (auto skipped = c.outstanding.begin(); skipped != it; ++skipped) {
        if (skipped->written_off) {
          --written_off_;  // counted lost already, when its phase ended
        } else {
          ++phase.lost;
          --outstanding_;
          ++phase.out_of_order;
        }
      }
      c.outstanding.erase(c.outstanding.begin(), it);
    }
    const Outstanding o = c.outstanding.front();
    c.outstanding.pop_front();
    if (o.written_off) {
      ++phase.late_replies;
      phase.late_max_ns = std::max(phase.late_max_ns, now - o.sent_ns);
      --written_off_;
      return;
    }
    ++phase.replies;
    phase.latency_ns.push_back(now - o.sent_ns);
    --outstanding_;
  }

  // jitterd closed the connection (or it failed), or it still owes replies after the drain: what it
  // owes is lost, and the connection is given up.
  void drop(Phase& phase, std::size_t index) {
    Client& c = clients_[index];
    ++phase.clients_lost;
    for (const Outstanding& o : c.outstanding) {
      if (o.written_off) {
        --written_off_;
      } else {
        ++phase.lost;
        --outstanding_;
      }
    }
    c.outstanding.clear();
    c.fd = Fd();  // closing it takes it out of the epoll set
  }

 public:
  const std::string& first_error() const { return first_error_; }

 private:
  const Options& options_;
  Fd epoll_;
  std::vector<Client> clients_;
  std::uint64_t next_id_ = 1;
  std::uint64_t outstanding_ = 0;  // sent, not answered, not yet counted lost
  std::uint64_t written_off_ = 0;  // counted lost, a reply may still come
  std::optional<MetricsProbe> probe_;
  std::string first_error_;
};

// ---------------------------------------------------------------------------------------------
// Figures

// Quantiles are type 1 (a value that occurred): "p99.9 = 4.1 ms" is a round trip that happened.
struct Latency {
  std::size_t n = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0, mean_us = 0;
};

Latency summarize(std::vector<std::int64_t>& values) {
  Latency l;
  l.n = values.size();
  if (values.empty()) return l;
  std::sort(values.begin(), values.end());
  auto q = [&](double p) {
    const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size())));
    return static_cast<double>(values[std::clamp<std::size_t>(rank, 1, values.size()) - 1]) / 1e3;
  };
  l.p50_us = q(0.5);
  l.p90_us = q(0.9);
  l.p99_us = q(0.99);
  l.p999_us = q(0.999);
  l.max_us = static_cast<double>(values.back()) / 1e3;
  double sum = 0;
  for (auto v : values) sum += static_cast<double>(v);
  l.mean_us = sum / static_cast<double>(values.size()) / 1e3;
  return l;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// "1 234 567", grouped as in docs/benchmarks.md.
std::string grouped(double value) {
  const std::string digits = std::to_string(std::llround(value));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ' ';
    out += digits[i];
  }
  return out;
}

std::string duration_text(double us) {
  if (us < 1000) return fixed(us, us < 100 ? 1 : 0) + " µs";
  if (us < 1e6) return fixed(us / 1e3, us < 1e4 ? 2 : 1) + " ms";
  return fixed(us / 1e6, 2) + " s";
}

std::string mib(long kib) {
  return fixed(static_cast<double>(kib) / 1024.0, 2) + " MiB";
}

std::string ratio(double a, double b) {
  return b > 0 ? fixed(a / b, 2) + "×" : "";
}

struct PhaseFigures {
  Latency latency;
  Latency lag;
  std::uint64_t stalled = 0;
};

PhaseFigures figures_of(Phase& phase, double stall_ms) {
  PhaseFigures f;
  const auto stall_ns = static_cast<std::int64_t>(stall_ms * 1e6);
  f.stalled = static_cast<std::uint64_t>(std::count_if(
      phase.latency_ns.begin(), phase.latency_ns.end(), [&](auto v) { return v > stall_ns; }));
  f.latency = summarize(phase.latency_ns);
  f.lag = summarize(phase.lag_ns);
  return f;
}

void print_table(const Options& options, std::vector<Phase>& phases,
                 const std::vector<PhaseFigures>& figures) {
  std::vector<std::string> header = {
      "",
  };
  for (const auto& p : phases) header.push_back(p.name);
  const bool compare = phases.size() == 2;
  if (compare) header.push_back(phases[1].name + " / " + phases[0].name);
  auto row = [&](const std::string& label, const std::vector<std::string>& cells,
                 const std::string& last = "") {
    std::cout << "| " << label;
    for (const auto& c : cells) std::cout << " | " << c;
    if (compare) std::cout << " | " << last;
    std::cout << " |\n";
  };
  std::cout << "|";
  for (const auto& h : header) std::cout << " " << h << " |";
  std::cout << "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) std::cout << "---|";
  std::cout << "\n";
  auto each = [&](auto cell) {
    std::vector<std::string> cells;
    for (std::size_t i = 0; i < phases.size(); ++i) cells.push_back(cell(phases[i], figures[i]));
    return cells;
  };
  auto latency_row = [&](const std::string& label, double Latency::*field) {
    row(label,
        each([&](const Phase&, const PhaseFigures& f) { return duration_text(f.latency.*field); }),
        compare ? ratio(figures[1].latency.*field, figures[0].latency.*field) : "");
  };
  row("requests sent (scheduled)", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.sent)) + " (" +
               grouped(static_cast<double>(p.scheduled)) + ")";
      }));
  row("replies", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.replies));
      }));
  row("**lost**", each([](const Phase& p, const PhaseFigures&) {
        return "**" + grouped(static_cast<double>(p.lost)) + "**";
      }));
  row("error replies / out of order", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.errors)) + " / " +
               grouped(static_cast<double>(p.out_of_order));
      }));
  row("late replies (to lost requests) / latest", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.late_replies)) +
               (p.late_replies ? " / " + duration_text(static_cast<double>(p.late_max_ns) / 1e3)
                               : "");
      }));
  row("connections lost", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.clients_lost));
      }));
  row("achieved rate", each([](const Phase& p, const PhaseFigures&) {
        return grouped(static_cast<double>(p.sent) * 1e9 /
                       static_cast<double>(std::max<std::int64_t>(p.send_window_ns, 1))) +
               "/s";
      }));
  latency_row("latency p50", &Latency::p50_us);
  latency_row("latency p90", &Latency::p90_us);
  latency_row("latency p99", &Latency::p99_us);
  latency_row("latency p99.9", &Latency::p999_us);
  latency_row("latency max", &Latency::max_us);
  latency_row("latency mean", &Latency::mean_us);
  row("**stalled > " + fixed(options.stall_ms, 0) + " ms**",
      each([](const Phase&, const PhaseFigures& f) {
        return "**" + grouped(static_cast<double>(f.stalled)) + "**";
      }));
  row("load tool's send lag p99 / max", each([](const Phase&, const PhaseFigures& f) {
        return duration_text(f.lag.p99_us) + " / " + duration_text(f.lag.max_us);
      }));
  if (options.pid) {
    row("jitterd CPU (of one CPU)", each([](const Phase& p, const PhaseFigures&) {
          return fixed(100.0 * static_cast<double>(p.daemon_cpu_ns) /
                           static_cast<double>(
                               std::max<std::int64_t>(p.send_window_ns + p.grace_used_ns, 1)),
                       1) +
                 " %";
        }));
    row("jitterd CPU per request", each([](const Phase& p, const PhaseFigures&) {
          return duration_text(static_cast<double>(p.daemon_cpu_ns) / 1e3 /
                               static_cast<double>(std::max<std::uint64_t>(p.sent, 1)));
        }));
    row("jitterd involuntary context switches", each([](const Phase& p, const PhaseFigures&) {
          return grouped(static_cast<double>(p.daemon_nonvoluntary));
        }));
    row("jitterd VmRSS start → peak → end", each([](const Phase& p, const PhaseFigures&) {
          if (!p.memory_start || !p.memory_end) return std::string("?");
          return mib(p.memory_start->vm_rss_kib) + " → " + mib(p.rss_peak_kib) + " → " +
                 mib(p.memory_end->vm_rss_kib);
        }));
    row("jitterd VmHWM at end", each([](const Phase& p, const PhaseFigures&) {
          return p.memory_end ? mib(p.memory_end->vm_hwm_kib) : std::string("?");
        }));
  }
  row("requests jitterd counted (metrics)", each([](const Phase& p, const PhaseFigures&) {
        if (!p.counters_before || !p.counters_after) return std::string("?");
        // Minus the probe's own `metrics` request that read the second figure.
        return grouped(static_cast<double>(p.counters_after->requests_total -
                                           p.counters_before->requests_total - 1));
      }));
  row("load tool CPU (all its threads)", each([](const Phase& p, const PhaseFigures&) {
        return fixed(100.0 * static_cast<double>(p.tool_cpu_ns) /
                         static_cast<double>(
                             std::max<std::int64_t>(p.send_window_ns + p.grace_used_ns, 1)),
                     1) +
               " %";
      }));
  row("host load average start / end",
      each([](const Phase& p, const PhaseFigures&) { return p.load_start + " / " + p.load_end; }));
  row("CPU time stolen by the hypervisor",
      each([](const Phase& p, const PhaseFigures&) { return fixed(p.steal_percent, 1) + " %"; }));
  for (const auto& p : phases) {
    if (p.garbage) {
      const auto& g = *p.garbage;
      std::cout << "\n"
                << p.name << ": garbage client (" << options.garbage_kind_name
                << "): " << fixed(static_cast<double>(g.bytes_sent) / (1 << 20), 1)
                << " MiB sent in " << fixed(static_cast<double>(g.elapsed_ns) / 1e9, 1) << " s ("
                << fixed(static_cast<double>(g.bytes_sent) / (1 << 20) /
                             std::max(1e-9, static_cast<double>(g.elapsed_ns) / 1e9),
                         1)
                << " MiB/s) over " << g.connections << " connection(s) (" << g.connect_failures
                << " connect failures); " << grouped(static_cast<double>(g.reply_lines))
                << " reply lines:";
      for (const auto& [code, n] : g.replies_by_code)
        std::cout << " " << code << " " << grouped(static_cast<double>(n));
      std::cout << "\n";
    }
    if (p.slow) {
      std::cout << p.name << ": slow client (1 byte per " << options.slow_interval.count()
                << " ms): " << p.slow->bytes_sent << " bytes, " << p.slow->requests_completed
                << " whole request(s), " << p.slow->replies_ok << " reply(ies), closed by jitterd "
                << p.slow->closed_by_daemon << " time(s)\n";
    }
  }
}

json summary_json(const Options& options, std::vector<Phase>& phases,
                  const std::vector<PhaseFigures>& figures, bool passed) {
  json out = {{"clients", options.clients},
              {"rate", options.rate},
              {"duration_s", options.duration_s},
              {"stall_ms", options.stall_ms},
              {"passed", passed}};
  json list = json::array();
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const Phase& p = phases[i];
    const PhaseFigures& f = figures[i];
    json j = {{"name", p.name},
              {"sent", p.sent},
              {"replies", p.replies},
              {"lost", p.lost},
              {"errors", p.errors},
              {"out_of_order", p.out_of_order},
              {"late_replies", p.late_replies},
              {"connections_lost", p.clients_lost},
              {"stalled", f.stalled},
              {"latency_us",
               {{"p50", f.latency.p50_us},
                {"p90", f.latency.p90_us},
                {"p99", f.latency.p99_us},
                {"p99.9", f.latency.p999_us},
                {"max", f.latency.max_us},
                {"mean", f.latency.mean_us}}},
              {"send_lag_us", {{"p99", f.lag.p99_us}, {"max", f.lag.max_us}}},
              {"steal_percent", p.steal_percent}};
    if (p.memory_start && p.memory_end) {
      j["rss_kib"] = {{"start", p.memory_start->vm_rss_kib},
                      {"peak", p.rss_peak_kib},
                      {"end", p.memory_end->vm_rss_kib}};
      j["hwm_kib"] = p.memory_end->vm_hwm_kib;
      j["daemon_cpu_s"] = static_cast<double>(p.daemon_cpu_ns) / 1e9;
    }
    if (p.garbage) {
      j["garbage"] = {{"kind", options.garbage_kind_name},
                      {"bytes", p.garbage->bytes_sent},
                      {"seconds", static_cast<double>(p.garbage->elapsed_ns) / 1e9},
                      {"connections", p.garbage->connections},
                      {"replies", p.garbage->replies_by_code}};
    }
    if (p.slow) {
      j["slow"] = {{"bytes", p.slow->bytes_sent},
                   {"replies", p.slow->replies_ok},
                   {"closed", p.slow->closed_by_daemon}};
    }
    list.push_back(j);
  }
  out["phases"] = list;
  return out;
}

constexpr const char* kUsage =
    "usage: load_clients --socket PATH [--pid PID] [--clients 1000] [--rate 10000] [--duration "
    "60]\n"
    "                    [--grace 5] [--stall-ms 100] [--hostile] [--garbage-bytes 1073741824]\n"
    "                    [--garbage-kind random|unterminated|nested|wide] [--garbage-line "
    "8388608]\n"
    "                    [--garbage-whole] [--slow-interval-ms 1000] [--methods "
    "status,version,metrics]\n"
    "\n"
    "  --socket PATH      a running jitterd's control socket (tests/bench/load_test.sh starts "
    "one)\n"
    "  --pid PID          jitterd's pid: sample its VmRSS/VmHWM every second, count its CPU time\n"
    "  --clients N        well-behaved connections, sharing --rate requests/s for --duration "
    "seconds\n"
    "  --methods LIST     the requests, taken in turn (status, version, metrics, list-commands)\n"
    "  --grace S          how long to wait for replies after the last request before calling them "
    "lost\n"
    "  --hostile          a second phase, the same load next to a garbage and a one-byte-a-second "
    "client\n"
    "  --garbage-kind K   random bytes (many short lines), unterminated (no newline), nested ('[' "
    "lines),\n"
    "                     wide ('[0,0,...]' lines), the last two --garbage-line bytes long\n"
    "  --garbage-whole    the hostile phase lasts until all --garbage-bytes are sent (the load "
    "goes on\n"
    "                     with it; at least --duration, at most ten times it)\n"
    "Exit: 0 every request answered, 1 lost/error/out of order, 2 usage, 3 set-up failed.\n";

std::optional<Options> parse_arguments(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--hostile") {
      o.hostile = true;
      continue;
    }
    if (arg == "--garbage-whole") {
      o.garbage_whole = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "load_clients: " << arg << " needs a value (or is unknown)\n" << kUsage;
      return std::nullopt;
    }
    const std::string value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    const bool numeric = end && *end == '\0' && number > 0;
    auto need_number = [&]() {
      if (!numeric)
        std::cerr << "load_clients: " << arg << " needs a positive number, not '" << value << "'\n";
      return numeric;
    };
    if (arg == "--socket") {
      o.socket = value;
    } else if (arg == "--pid") {
      if (!need_number()) return std::nullopt;
      o.pid = static_cast<pid_t>(number);
    } else if (arg == "--clients") {
      if (!need_number()) return std::nullopt;
      o.clients = static_cast<std::size_t>(number);
    } else if (arg == "--rate") {
      if (!need_number()) return std::nullopt;
      o.rate = number;
    } else if (arg == "--duration") {
      if (!need_number()) return std::nullopt;
      o.duration_s = number;
    } else if (arg == "--grace") {
      if (!need_number()) return std::nullopt;
      o.grace_s = number;
    } else if (arg == "--stall-ms") {
      if (!need_number()) return std::nullopt;
      o.stall_ms = number;
    } else if (arg == "--garbage-bytes") {
      if (!need_number()) return std::nullopt;
      o.garbage_bytes = static_cast<std::uint64_t>(number);
    } else if (arg == "--garbage-line") {
      if (!need_number() || number < 2) return std::nullopt;
      o.garbage_line_bytes = static_cast<std::size_t>(number);
    } else if (arg == "--slow-interval-ms") {
      if (!need_number()) return std::nullopt;
      o.slow_interval = std::chrono::milliseconds(static_cast<long>(number));
    } else if (arg == "--methods") {
      o.methods.clear();
      std::istringstream list(value);
      for (std::string m; std::getline(list, m, ',');) {
        if (m != "status" && m != "version" && m != "metrics" && m != "list-commands") {
          std::cerr << "load_clients: --methods takes status, version, metrics and list-commands "
                       "(read-only, "
                       "no kernel change), not '"
                    << m << "'\n";
          return std::nullopt;
        }
        o.methods.push_back(m);
      }
      if (o.methods.empty()) return std::nullopt;
    } else if (arg == "--garbage-kind") {
      const auto kind = garbage_kind_from(value);
      if (!kind) {
        std::cerr << "load_clients: --garbage-kind is random, unterminated, nested or wide, not '"
                  << value << "'\n";
        return std::nullopt;
      }
      o.garbage_kind = *kind;
      o.garbage_kind_name = value;
    } else {
      std::cerr << "load_clients: unknown argument '" << arg << "'\n" << kUsage;
      return std::nullopt;
    }
  }
  if (o.socket.empty()) {
    std::cerr << "load_clients: --socket is required\n" << kUsage;
    return std::nullopt;
  }
  sockaddr_un address{};
  if (o.socket.size() >= sizeof address.sun_path) {
    std::cerr << "load_clients: --socket " << o.socket
              << " is longer than a Unix socket path may be (" << sizeof address.sun_path - 1
              << " bytes); use a shorter folder\n";
    return std::nullopt;
  }
  return o;
}

// One descriptor per client, plus a few: the soft limit is raised to the hard one when needed.
void raise_fd_limit(std::size_t clients) {
  rlimit limit{};
  check_syscall(::getrlimit(RLIMIT_NOFILE, &limit), "getrlimit", "RLIMIT_NOFILE");
  const rlim_t need = clients + 64;  // the epoll fd, the probe, the hostile clients, stdio
  if (limit.rlim_cur >= need) return;
  if (limit.rlim_max < need) {
    throw std::runtime_error("load_clients: " + std::to_string(clients) + " clients need " +
                             std::to_string(need) + " file descriptors, the hard limit is " +
                             std::to_string(limit.rlim_max) +
                             "; raise it (ulimit -Hn as root) or use fewer --clients");
  }
  limit.rlim_cur = need;
  check_syscall(::setrlimit(RLIMIT_NOFILE, &limit), "setrlimit", "RLIMIT_NOFILE");
}

int run(const Options& options) {
  raise_fd_limit(options.clients);
  Load load(options);
  try {
    load.open_probe();
    load.connect_all();
  } catch (const std::exception& e) {
    std::cerr << "load_clients: " << e.what() << '\n';
    return 3;
  }
  std::string methods;
  for (const auto& m : options.methods) methods += (methods.empty() ? "" : ", ") + m;
  std::cout << "# load: " << options.clients << " clients, " << grouped(options.rate)
            << " requests/s (" << methods << " in turn), " << fixed(options.duration_s, 0)
            << " s per phase, grace " << fixed(options.grace_s, 0) << " s; load average "
            << load_average() << "\n";
  std::vector<Phase> phases;
  phases.push_back(load.run_phase("calm", false));
  if (options.hostile) phases.push_back(load.run_phase("hostile", true));
  std::vector<PhaseFigures> figures;
  bool passed = true;
  for (auto& p : phases) {
    figures.push_back(figures_of(p, options.stall_ms));
    if (p.lost || p.errors || p.out_of_order || p.clients_lost) passed = false;
  }
  print_table(options, phases, figures);
  if (!load.first_error().empty()) std::cout << "first error reply: " << load.first_error() << "\n";
  for (std::size_t i = 0; i < phases.size(); ++i) {
    std::cout << phases[i].name << ": no request lost: " << (phases[i].lost == 0 ? "met" : "MISSED")
              << "; none stalled beyond " << fixed(options.stall_ms, 0) << " ms: "
              << (figures[i].stalled == 0 ? "met"
                                          : "MISSED (" + std::to_string(figures[i].stalled) + ")")
              << "\n";
  }
  std::cout << summary_json(options, phases, figures, passed).dump() << std::endl;
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_arguments(argc, argv);
  if (!options) return 2;
  ::signal(SIGPIPE, SIG_IGN);
  try {
    return run(*options);
  } catch (const std::exception& e) {
    std::cerr << "load_clients: " << e.what() << '\n';
    return 3;
  }
}
