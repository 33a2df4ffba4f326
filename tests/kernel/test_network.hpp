#pragma once
// Test bed for kernel tests: two fresh network namespaces joined by a veth pair, built with `ip`
// (tests may use iproute2 as an independent tool; product code never does), entered by the test
// thread with setns(2), and torn down afterwards. Plus ping and `tc -j` readers.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "shaper/netem_engine.hpp"

namespace jitterd_test {

// Runs a shell command; returns its stdout. Throws std::runtime_error with the output on failure.
std::string run(const std::string& command);

// Why kernel tests cannot run here, or nullopt if they can (root, netns support, a netem kernel).
std::optional<std::string> kernel_unavailable_reason();

// Why the kernel-timed switch's gate (shaper::GateProgram: bpf(2), CAP_BPF) cannot load here, or
// nullopt if it can.
std::optional<std::string> gate_unavailable_reason();

// Skips the current test with the reason when there is no netem kernel here.
#define JITTERD_REQUIRE_NETEM_KERNEL()                               \
  do {                                                               \
    if (auto reason = ::jitterd_test::kernel_unavailable_reason()) { \
      GTEST_SKIP() << *reason;                                       \
    }                                                                \
  } while (0)

// Moves the calling thread into a network namespace for the guard's lifetime.
class NetnsGuard {
 public:
  explicit NetnsGuard(const std::string& netns_name);
  ~NetnsGuard();
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;

 private:
  int previous_fd_;
};

// Namespaces "<prefix>a" and "<prefix>b"; veth "jta" (in a, 198.18.0.1/24, kMacA) and "jtb" (in b,
// 198.18.0.2/24, kMacB); IPv6 off in both. 198.18.0.0/15 is RFC 2544's benchmarking range: never
// routed anywhere. Neighbour entries are permanent so that ARP, which netem would also delay and
// drop, plays no part.
class VethPair {
 public:
  VethPair();
  ~VethPair();
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  const std::string& ns_a() const { return ns_a_; }
  const std::string& ns_b() const { return ns_b_; }
  static constexpr const char* kDevA = "jta";
  static constexpr const char* kDevB = "jtb";
  static constexpr const char* kAddrA = "198.18.0.1";
  static constexpr const char* kAddrB = "198.18.0.2";
  static constexpr const char* kMacA = "02:6a:74:00:00:0a";
  static constexpr const char* kMacB = "02:6a:74:00:00:0b";

 private:
  std::string ns_a_;
  std::string ns_b_;
};

// One kernel test's world: a fresh veth pair, the test thread inside namespace a (so the socket
// below talks to that namespace's kernel), an engine on it, and the interface jta. Members are
// built in this order on purpose.
struct NetemBed {
  VethPair net;
  NetnsGuard in_a{net.ns_a()};
  shaper::RouteSocket socket;
  shaper::NetemEngine engine{socket};
  shaper::Interface dev = engine.resolve(std::string(VethPair::kDevA));
};

struct PingResult {
  int transmitted = 0;
  std::vector<int> received_seq;  // in arrival order, duplicates removed
  std::vector<double> rtt_ms;     // same order
  std::vector<bool> lost;         // index seq-1: true if no reply came
};

// Pings kAddrB from namespace a: `count` probes every `interval`. Parses iputils output.
PingResult ping(const VethPair& net, int count, std::chrono::microseconds interval,
                int deadline_s = 0);

// `tc -j -s qdisc show dev jta` run in namespace a, as text (parsed by the tests with
// nlohmann_json).
std::string tc_json(const VethPair& net);

}  // namespace jitterd_test
