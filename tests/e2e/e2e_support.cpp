#include "e2e_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace jitterd_e2e {

namespace {

using namespace std::chrono_literals;

std::runtime_error system_failure(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

// argv[0] as execve needs it, looked up before vfork (the child only makes system calls).
std::string resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw std::runtime_error(name + ": not found in PATH");
}

int open_cloexec(const std::string& path, int flags, mode_t mode = 0) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) throw system_failure("open " + path);
  return fd;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    throw system_failure("fcntl O_NONBLOCK");
}

// In the child, between vfork and exec: system calls only (no allocation, no locks).
[[noreturn]] void child_fail(const char* what) {
  const int error = errno;
  const char* text = std::strerror(error);
  [[maybe_unused]] auto ignored = ::write(2, "spawn: ", 7);
  ignored = ::write(2, what, std::strlen(what));
  ignored = ::write(2, ": ", 2);
  ignored = ::write(2, text, std::strlen(text));
  ignored = ::write(2, "\n", 1);
  ::_exit(127);
}

bool can_connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_failure("socket AF_UNIX");
  const test_support::UnixAddress address = test_support::unix_address(path);
  const bool ok = ::connect(fd, address.get(), address.length) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Files

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// Processes

Process Process::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) throw std::invalid_argument("spawn: empty argv");
  // Everything the child needs is prepared here; after vfork it only makes system calls.
  const std::string executable = resolve_executable(argv[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int null_in = open_cloexec("/dev/null", O_RDONLY);
  const int netns_fd =
      options.netns.empty() ? -1 : open_cloexec("/run/netns/" + options.netns, O_RDONLY);
  const int file_fd = options.output_file.empty()
                          ? -1
                          : open_cloexec(options.output_file, O_WRONLY | O_CREAT | O_APPEND, 0644);
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (file_fd < 0 && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    throw system_failure("pipe2");
  }
  const pid_t parent = ::getpid();
  // vfork, not fork: the child borrows this process's memory until its execve, so nothing is
  // copied. A fork of a test process holds its memory map's lock while it copies the page tables
  // and leaves every page to fault on its next write: in a UML guest that stalled the one-way
  // prober's thread for milliseconds at a switch's deadline. The child's credentials change by
  // raw system calls, which change the calling task's only (glibc's wrappers would signal the
  // threads of the process whose memory the child shares).
  const pid_t pid = ::vfork();
  if (pid < 0) throw system_failure("vfork " + argv[0]);
  if (pid == 0) {
    // A test that dies must not leave a jitterd shaping (or a ping probing) behind.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail("prctl PR_SET_PDEATHSIG");
    if (::getppid() != parent) ::_exit(127);
    if (netns_fd >= 0 && ::setns(netns_fd, CLONE_NEWNET) != 0) child_fail("setns");
    if (options.credentials) {
      const Credentials& c = *options.credentials;
      if (::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) != 0) child_fail("setgroups");
      if (::syscall(SYS_setgid, c.gid) != 0) child_fail("setgid");
      if (::syscall(SYS_setuid, c.uid) != 0) child_fail("setuid");
    }
    const int out = file_fd >= 0 ? file_fd : out_pipe[1];
    const int err = file_fd >= 0 ? file_fd : err_pipe[1];
    if (::dup2(null_in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) child_fail("dup2");
    ::execve(executable.c_str(), args.data(), environ);
    child_fail(executable.c_str());
  }
  ::close(null_in);
  if (netns_fd >= 0) ::close(netns_fd);
  if (file_fd >= 0) ::close(file_fd);
  Process p;
  p.pid_ = pid;
  p.name_ = argv[0];
  if (file_fd < 0) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    p.out_fd_ = out_pipe[0];
    p.err_fd_ = err_pipe[0];
    set_nonblocking(p.out_fd_);
    set_nonblocking(p.err_fd_);
  }
  return p;
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      name_(std::move(other.name_)),
      out_fd_(std::exchange(other.out_fd_, -1)),
      err_fd_(std::exchange(other.err_fd_, -1)),
      out_(std::move(other.out_)),
      err_(std::move(other.err_)),
      exit_code_(other.exit_code_) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    close_fds();
    pid_ = std::exchange(other.pid_, -1);
    name_ = std::move(other.name_);
    out_fd_ = std::exchange(other.out_fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    out_ = std::move(other.out_);
    err_ = std::move(other.err_);
    exit_code_ = other.exit_code_;
  }
  return *this;
}

Process::~Process() {
  kill_and_reap();
  close_fds();
}

void Process::kill_and_reap() {
  if (pid_ <= 0 || exit_code_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = 128 + SIGKILL;
}

void Process::close_fds() {
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
  out_fd_ = err_fd_ = -1;
}

bool Process::pump(Clock::time_point deadline, bool until_line) {
  for (;;) {
    if (until_line && out_.find('\n') != std::string::npos) return true;
    if (out_fd_ < 0 && err_fd_ < 0) return true;
    pollfd fds[2];
    nfds_t n = 0;
    if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) return false;
    const int ready =
        ::poll(fds, n, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw system_failure("poll");
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
      std::string& sink = fds[i].fd == out_fd_ ? out_ : err_;
      char buffer[65536];
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got > 0) {
        sink.append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(fd);
        fd = -1;
      }
    }
  }
}

std::optional<std::string> Process::read_line(Clock::time_point deadline) {
  pump(deadline, true);
  const auto newline = out_.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  std::string line = out_.substr(0, newline);
  out_.erase(0, newline + 1);
  return line;
}

void Process::signal(int signal_number) const {
  if (pid_ > 0 && !exit_code_ && ::kill(pid_, signal_number) != 0) {
    throw system_failure("kill " + std::to_string(pid_));
  }
}

std::optional<int> Process::wait(Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!exit_code_) {
    // Draining the pipes first: a child blocked on a full pipe would never end.
    pump(std::min(deadline, Clock::now() + 10ms), false);
    if (!running()) break;
    if (Clock::now() >= deadline) return std::nullopt;
    if (out_fd_ < 0 && err_fd_ < 0) std::this_thread::sleep_for(5ms);
  }
  // What the pipes still hold (the child has ended; a grandchild keeping them open gets 1 s).
  pump(Clock::now() + 1s, false);
  return exit_code_;
}

bool Process::running() {
  if (pid_ <= 0 || exit_code_) return false;
  int status = 0;
  const pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == 0) return true;
  if (done < 0) throw system_failure("waitpid " + std::to_string(pid_));
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return false;
}

std::string Process::take_stdout() {
  return std::exchange(out_, {});
}

Completed run_to_completion(const std::vector<std::string>& argv, const SpawnOptions& options,
                            Clock::duration timeout) {
  Process p = Process::spawn(argv, options);
  const auto code = p.wait(timeout);
  if (!code) {
    throw std::runtime_error(
        command_line(argv) + ": still running after " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
        " s; killed. stdout so far:\n" + p.take_stdout() + "\nstderr:\n" + p.err_text());
  }
  return Completed{*code, p.take_stdout(), p.err_text()};
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

Json parse_json(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("not JSON: " + text);
  return j;
}

std::string jitterd_binary() {
  return JITTERD_E2E_JITTERD;
}
std::string jitterctl_binary() {
  return JITTERD_E2E_JITTERCTL;
}

std::int64_t realtime_ns(const Json& time) {
  return time.at("realtime_ns").get<std::int64_t>();
}
std::int64_t monotonic_ns(const Json& time) {
  return time.at("monotonic_ns").get<std::int64_t>();
}

Clock::time_point monotonic_point(const Json& time) {
  return Clock::time_point(std::chrono::nanoseconds(monotonic_ns(time)));
}

// ---------------------------------------------------------------------------------------------
// Events

std::optional<Json> EventStream::next(Clock::duration timeout) {
  const auto line = process_.read_line(Clock::now() + timeout);
  if (!line) return std::nullopt;
  seen_.push_back(parse_json(*line));
  return seen_.back();
}

std::optional<Json> EventStream::wait_for(const std::string& type, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto event = next(deadline - Clock::now());
    if (!event) return std::nullopt;
    if (event->value("event", "") == type) return event;
  }
  return std::nullopt;
}

const std::vector<Json>& EventStream::drain(Clock::duration quiet) {
  while (next(quiet)) {
  }
  return seen_;
}

std::vector<Json> EventStream::of_type(const std::string& type) const {
  std::vector<Json> out;
  for (const auto& e : seen_) {
    if (e.value("event", "") == type) out.push_back(e);
  }
  return out;
}

std::string EventStream::describe() const {
  std::string text = "events read (" + std::to_string(seen_.size()) + "):\n";
  for (const auto& e : seen_) text += "  " + e.dump() + "\n";
  if (!process_.err_text().empty()) text += "subscriber stderr: " + process_.err_text();
  return text;
}

// ---------------------------------------------------------------------------------------------
// The daemon

Daemon::Daemon(std::string netns, const TempDir& dir, std::string socket_group,
               const std::string& metrics_listen)
    : netns_(std::move(netns)),
      socket_(dir.file("jitterd.sock")),
      state_dir_(dir.file("state")),
      log_dir_(dir.file("logs")) {
  Json config = {
      {"socket", {{"path", socket_}, {"group", socket_group}}},
      {"state_dir", state_dir_},
      {"profile_dirs", {dir.file("profiles")}},
      {"interfaces", {{"allow", {jitterd_test::VethPair::kDevA, jitterd_test::VethPair::kDevB}}}},
      // Network namespaces as targets (target_test.cpp); containers are not allowed.
      {"targets", {{"allow", {"netns:*", "netns-path:*", "pid:*"}}}},
  };
  if (!metrics_listen.empty()) config["metrics"] = {{"listen", metrics_listen}};
  config_ = dir.write("config.json", config.dump(2) + "\n");
  std::filesystem::create_directories(log_dir_);
}

Daemon::~Daemon() {
  try {
    if (running() && !stop(10s)) process_.reset();  // SIGKILL
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stopping jitterd: %s\n", e.what());
  }
}

std::string Daemon::log() const {
  if (runs_ == 0) return {};
  try {
    return read_file(log_dir_ + "/jitterd-" + std::to_string(runs_) + ".log");
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string Daemon::all_logs() const {
  std::string text;
  for (int run = 1; run <= runs_; ++run) {
    const std::string path = log_dir_ + "/jitterd-" + std::to_string(run) + ".log";
    text += "---- " + path + "\n";
    try {
      text += read_file(path);
    } catch (const std::exception& e) {
      text += e.what() + std::string("\n");
    }
  }
  return text;
}

void Daemon::start() {
  if (running()) throw std::logic_error("jitterd is already running");
  ++runs_;
  process_.emplace(Process::spawn(
      {jitterd_binary(), "--config", config_},
      {netns_, std::nullopt, log_dir_ + "/jitterd-" + std::to_string(runs_) + ".log"}));
  // Leftovers are removed before jitterd binds its socket, so a socket that accepts means recovery
  // is done. 30 s: a program starts in ~0.1 s in the emulated machine, seconds while the host
  // builds.
  const auto deadline = Clock::now() + 30s;
  while (!can_connect(socket_)) {
    if (!process_->running()) {
      throw std::runtime_error("jitterd ended while starting (exit " +
                               std::to_string(*process_->wait(0s)) + "):\n" + log());
    }
    if (Clock::now() > deadline)
      throw std::runtime_error("jitterd did not listen within 30 s:\n" + log());
    std::this_thread::sleep_for(20ms);
  }
  const Completed version =
      run_to_completion({jitterctl_binary(), "--socket", socket_, "--json", "version"}, {}, 30s);
  if (version.exit_code != 0) {
    throw std::runtime_error("jitterctl version failed (exit " + std::to_string(version.exit_code) +
                             "): " + version.err + "\njitterd's log:\n" + log());
  }
  const Json reply = parse_json(version.out);
  if (reply.at("pid").get<pid_t>() != process_->pid()) {
    throw std::runtime_error("another jitterd answers at " + socket_ + ": " + version.out);
  }
}

void Daemon::kill_hard() {
  if (!process_) throw std::logic_error("jitterd never started");
  process_->signal(SIGKILL);
  if (!process_->wait(10s)) throw std::runtime_error("jitterd survived SIGKILL for 10 s");
}

std::optional<int> Daemon::stop(Clock::duration timeout) {
  if (!process_) throw std::logic_error("jitterd never started");
  process_->signal(SIGTERM);
  return process_->wait(timeout);
}

bool Daemon::running() {
  return process_ && process_->running();
}

pid_t Daemon::pid() const {
  return process_ ? process_->pid() : -1;
}

// ---------------------------------------------------------------------------------------------
// The bed

std::string two_phase_profile() {
  const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; };
  const std::string step = std::to_string(std::chrono::milliseconds(kStepDuration).count()) + "ms";
  const Json profile = {
      {"version", 1},
      {"name", kProfileName},
      {"description", "end-to-end tests: two delay levels, alternating"},
      {"phases",
       {{"low", {{"delay", {{"latency", ms(kLowDelay)}}}}},
        {"high", {{"delay", {{"latency", ms(kHighDelay)}}}}}}},
      {"schedule",
       {{"steps",
         {{{"phase", "low"}, {"duration", step}}, {{"phase", "high"}, {"duration", step}}}},
        {"loop", true}}},
  };
  return profile.dump(2) + "\n";
}

Bed::Bed(const BedOptions& options)
    : daemon(net.ns_a(), dir, options.socket_group, options.metrics_listen) {
  dir.write(std::string("profiles/") + kProfileName + ".json", two_phase_profile());
  if (options.start) daemon.start();
}

Completed Bed::ctl(const std::vector<std::string>& args, const std::optional<Credentials>& as) {
  std::string binary = jitterctl_binary();
  if (as) {
    // Another user may not reach the build tree (scripts/test builds a checkout under /tmp in
    // ~/.cache, inside root's 0700 home): run a copy from the bed's own 0755 folder.
    const std::filesystem::path copy = dir.file("bin/jitterctl");
    if (!std::filesystem::exists(copy)) {
      std::filesystem::create_directories(copy.parent_path());
      std::filesystem::copy_file(binary, copy);
      std::filesystem::permissions(copy, std::filesystem::perms(0755));
      std::filesystem::permissions(copy.parent_path(), std::filesystem::perms(0755));
    }
    binary = copy.string();
  }
  std::vector<std::string> argv = {binary, "--socket", daemon.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_to_completion(argv, {std::string(), as, std::string()}, 60s);
}

Json Bed::ctl_json(const std::vector<std::string>& args) {
  std::vector<std::string> with_json = {"--json"};
  with_json.insert(with_json.end(), args.begin(), args.end());
  const Completed done = ctl(with_json);
  if (done.exit_code != 0) {
    throw std::runtime_error("jitterctl " + command_line(with_json) + " failed (exit " +
                             std::to_string(done.exit_code) + "): " + done.err);
  }
  return parse_json(done.out);
}

EventStream Bed::subscribe() {
  EventStream events(Process::spawn({jitterctl_binary(), "--socket", daemon.socket(), "--json",
                                     "subscribe", "--interface", jitterd_test::VethPair::kDevA}));
  // jitterctl sends `subscribe` right after it connects and prints nothing until an event comes, so
  // the daemon's count of open connections is what says it is there. The count includes the asking
  // `jitterctl metrics`; earlier jitterctl runs have ended and jitterd saw their EOF long before a
  // new process starts (~0.1 s in the emulated machine).
  wait_for_connections(2);
  return events;
}

void Bed::wait_for_connections(int count) {
  const auto deadline = Clock::now() + 10s;
  std::string last;
  while (Clock::now() < deadline) {
    const Completed metrics = ctl({"metrics"});
    last = metrics.out + metrics.err;
    std::istringstream lines(metrics.out);
    std::string line;
    while (std::getline(lines, line)) {
      static const std::string kName = "jitterd_connections ";
      if (line.rfind(kName, 0) == 0 && std::stoi(line.substr(kName.size())) >= count) return;
    }
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("jitterd did not count " + std::to_string(count) +
                           " connections within 10 s:\n" + last);
}

Json Bed::root_qdisc_by_tc() const {
  for (const auto& q : parse_json(jitterd_test::tc_json(net))) {
    if (q.value("root", false)) return q;
  }
  return Json();
}

Json Bed::ledger() const {
  return parse_json(read_file(daemon.ledger_path()));
}

std::string Bed::in_ns_a(const std::string& command) const {
  return jitterd_test::run("ip netns exec " + net.ns_a() + " " + command);
}

// ---------------------------------------------------------------------------------------------
// The fixture

void E2eTest::SetUp() {
  JITTERD_REQUIRE_NETEM_KERNEL();
  bed_ = std::make_unique<Bed>(bed_options());
}

void E2eTest::TearDown() {
  const char* always = std::getenv("JITTERD_E2E_LOGS");
  if (bed_ && (HasFailure() || (always && *always == '1')))
    std::fprintf(stderr, "jitterd's logs:\n%s\n", bed_->daemon.all_logs().c_str());
  bed_.reset();
}

}  // namespace jitterd_e2e
