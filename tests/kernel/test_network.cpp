#include "test_network.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/netem_gate.hpp"

namespace jitterd_test {

static std::optional<std::string> probe_kernel();

std::string run(const std::string& command) {
  struct PipeCloser {
    void operator()(FILE* f) const { pclose(f); }
  };
  std::string out;
  FILE* raw = popen((command + " 2>&1").c_str(), "r");
  if (!raw) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), raw)) > 0) out.append(buf.data(), n);
  const int status = pclose(raw);
  if (status != 0)
    throw std::runtime_error("command failed (" + std::to_string(status) + "): " + command + "\n" +
                             out);
  return out;
}

std::optional<std::string> kernel_unavailable_reason() {
  // The answer cannot change while a test binary runs; probe once.
  static const std::optional<std::string> reason = probe_kernel();
  return reason;
}

std::optional<std::string> gate_unavailable_reason() {
  try {
    shaper::GateProgram::load();
  } catch (const shaper::SystemError& e) {
    return std::string("the kernel-timed switch cannot load its gate here: ") + e.what() + " (" +
           e.hint() + ")";
  }
  return std::nullopt;
}

static std::optional<std::string> probe_kernel() {
  if (geteuid() != 0)
    return "kernel tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces)";
  // Probe in a private namespace on a private thread so nothing of the caller's changes: install a
  // netem on lo and see whether the kernel knows the kind.
  std::optional<std::string> reason;
  std::thread probe([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      reason = std::string("cannot create a network namespace: ") + std::strerror(errno);
      return;
    }
    try {
      shaper::RouteSocket socket;
      shaper::NetemEngine engine(socket);
      auto lo = engine.resolve(std::string("lo"));
      auto qdisc = engine.install(lo, shaper::NetemSpec{});
    } catch (const shaper::NetlinkError& e) {
      reason = std::string("no netem in this kernel (") + e.what() +
               "); run the kernel suite through tests/vm/run, as scripts/test does";
    } catch (const std::exception& e) {
      reason = std::string("netem probe failed: ") + e.what();
    }
  });
  probe.join();
  return reason;
}

NetnsGuard::NetnsGuard(const std::string& netns_name)
    : previous_fd_(static_cast<int>(
          shaper::check_syscall(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), "open",
                                "/proc/thread-self/ns/net"))) {
  const std::string path = "/run/netns/" + netns_name;
  const int fd = static_cast<int>(
      shaper::check_syscall(open(path.c_str(), O_RDONLY | O_CLOEXEC), "open", path));
  const int rc = setns(fd, CLONE_NEWNET);
  const int saved = errno;
  close(fd);
  if (rc != 0) {
    close(previous_fd_);
    throw shaper::SystemError("setns", path, saved);
  }
}

NetnsGuard::~NetnsGuard() {
  if (setns(previous_fd_, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "setns back to the original namespace failed: %s\n", std::strerror(errno));
    std::abort();  // every later test would run in the wrong namespace
  }
  close(previous_fd_);
}

namespace {

// Each `ip` below runs a batch (-b): under the VM bed's emulated CPU every process started costs
// ~0.2 s, and a pair is built before every kernel test (one command per step took ~4 s a test).
std::string ip_batch(const std::string& options, std::initializer_list<std::string> commands) {
  std::string script = "printf '%s\\n'";
  for (const auto& command : commands) script += " '" + command + "'";
  return run(script + " | ip " + options + " -batch -");
}

// IPv6 off in the namespace, for the devices there and those made later: its router solicitations
// and MLD reports would pass through netem too and upset tests that count packets. Written from
// this thread inside the namespace (a net sysctl belongs to the namespace of the thread that opens
// it).
void disable_ipv6(const std::string& netns_name) {
  NetnsGuard inside(netns_name);
  for (const char* path : {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                           "/proc/sys/net/ipv6/conf/default/disable_ipv6"}) {
    shaper::UniqueFd fd(open(path, O_WRONLY | O_CLOEXEC));
    if (!fd && errno == ENOENT) return;  // a kernel without IPv6: nothing to turn off
    shaper::check_syscall(fd.get(), "open", path);
    if (write(fd.get(), "1", 1) != 1) throw shaper::SystemError("write", path, errno);
  }
}

}  // namespace

VethPair::VethPair() {
  static std::atomic<int> counter{0};
  const std::string prefix = "jt" + std::to_string(getpid()) + "n" + std::to_string(counter++);
  ns_a_ = prefix + "a";
  ns_b_ = prefix + "b";
  ip_batch("", {"netns add " + ns_a_, "netns add " + ns_b_});
  disable_ipv6(ns_a_);
  disable_ipv6(ns_b_);
  // Fixed, locally administered MACs, so each side's neighbour entry for the other is written with
  // the pair (permanent: ARP, which netem would also delay and drop, plays no part).
  const std::string addr_a = std::string(kAddrA) + "/24";
  const std::string addr_b = std::string(kAddrB) + "/24";
  ip_batch("-n " + ns_a_,
           {"link add " + std::string(kDevA) + " address " + kMacA + " type veth peer name " +
                kDevB + " address " + kMacB + " netns " + ns_b_,
            "addr add " + addr_a + " dev " + kDevA, "link set " + std::string(kDevA) + " up",
            "link set lo up",
            "neigh replace " + std::string(kAddrB) + " lladdr " + kMacB + " dev " + kDevA +
                " nud permanent"});
  ip_batch("-n " + ns_b_, {"addr add " + addr_b + " dev " + kDevB,
                           "link set " + std::string(kDevB) + " up", "link set lo up",
                           "neigh replace " + std::string(kAddrA) + " lladdr " + kMacA + " dev " +
                               kDevB + " nud permanent"});
}

VethPair::~VethPair() {
  try {
    ip_batch("", {"netns del " + ns_a_, "netns del " + ns_b_});  // the veth pair goes with them
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test network cleanup: %s\n", e.what());
  }
}

PingResult ping(const VethPair& net, int count, std::chrono::microseconds interval,
                int deadline_s) {
  char interval_text[32];
  std::snprintf(interval_text, sizeof interval_text, "%.6f",
                static_cast<double>(interval.count()) / 1e6);
  // Per-probe lines are what we parse, so no -q; -n keeps them free of name lookups.
  std::string command = "ip netns exec " + net.ns_a() + " ping -n -c " + std::to_string(count) +
                        " -i " + interval_text + " -W 2 ";
  if (deadline_s > 0) command += "-w " + std::to_string(deadline_s) + " ";
  command += VethPair::kAddrB;
  std::string out;
  try {
    out = run(command);
  } catch (const std::runtime_error& e) {
    // ping exits 1 when some probes got no reply; the output is still what we want.
    out = e.what();
  }
  PingResult result;
  result.lost.assign(static_cast<std::size_t>(count), true);
  static const std::regex reply(R"(icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms)");
  static const std::regex summary(R"((\d+) packets transmitted)");
  std::istringstream lines(out);
  std::string line;
  std::set<int> seen;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, reply)) {
      const int seq = std::stoi(m[1]);
      if (line.find("DUP!") != std::string::npos || !seen.insert(seq).second) continue;
      result.received_seq.push_back(seq);
      result.rtt_ms.push_back(std::stod(m[2]));
      if (seq >= 1 && seq <= count) result.lost[static_cast<std::size_t>(seq - 1)] = false;
    } else if (std::regex_search(line, m, summary)) {
      result.transmitted = std::stoi(m[1]);
    }
  }
  if (result.transmitted == 0) throw std::runtime_error("ping printed no summary:\n" + out);
  result.lost.resize(static_cast<std::size_t>(result.transmitted), true);
  return result;
}

std::string tc_json(const VethPair& net) {
  return run("ip netns exec " + net.ns_a() + " tc -j -s qdisc show dev " + VethPair::kDevA);
}

}  // namespace jitterd_test
