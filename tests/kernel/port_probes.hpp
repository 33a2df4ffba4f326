#pragma once
// Probes with ports, for tests of rules that match protocols and ports (ping has neither): echo
// servers bound inside one network namespace and clients in another, sending side by side. Sockets
// are created with the creating thread moved into the namespace for the moment of socket(2) (a
// socket belongs to the namespace it was created in), so the test process itself stays where it is.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shaper/files.hpp"

namespace jitterd_test {

enum class Transport { kUdp, kTcp };

// Answers every UDP datagram, or every byte on every accepted TCP connection, on `address`:`port`
// in namespace `netns` with the same bytes, from a thread of its own until destroyed. `address` is
// "::" (both families) or one address. A UDP server on "::" answers from whichever address the
// kernel picks for the reply, which on a side with several addresses need not be the one the probe
// went to (the prober's connected socket then drops the answer): give each address a UDP server of
// its own.
class EchoServer {
 public:
  EchoServer(const std::string& netns, Transport transport, std::uint16_t port,
             const std::string& address = "::");
  ~EchoServer();
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

 private:
  void serve();

  Transport transport_;
  shaper::UniqueFd socket_;
  shaper::UniqueFd stop_;  // eventfd: the destructor's signal to the thread
  std::thread thread_;
};

// One probe target: an echo server at `address`:`port`, reached over `transport` from a socket in
// the prober's namespace bound to `source_port` (0: any).
struct ProbeTarget {
  Transport transport = Transport::kUdp;
  std::string address;
  std::uint16_t port = 0;
  std::uint16_t source_port = 0;
  std::string label() const;  // "udp 198.18.0.2:6379"
};

// One round trip: when the probe left (since the first round) and its RTT (from the send to the
// kernel's receive timestamp of the answer), or nullopt if no answer came within the timeout.
struct ProbeSample {
  std::chrono::nanoseconds sent_at{};
  std::optional<double> rtt_ms;
};

// Probes every target side by side from namespace `netns`: each round sends one probe to every
// target at once, then collects the answers (up to `timeout`) before the next round starts,
// `interval` after this one. Returns one series per target, in the order given. TCP targets are
// connected once, before the first round. Throws std::runtime_error (naming the target) when a
// socket cannot be set up. `stop` (optional) ends the rounds early when it becomes true.
std::vector<std::vector<ProbeSample>> probe_side_by_side(
    const std::string& netns, const std::vector<ProbeTarget>& targets, int rounds,
    std::chrono::milliseconds interval, std::chrono::milliseconds timeout = std::chrono::seconds(2),
    const std::atomic<bool>* stop = nullptr);

// The smallest RTT of a series (ms); throws std::runtime_error when no probe was answered.
double min_rtt(const std::vector<ProbeSample>& series, const std::string& label);
// How many probes of a series got no answer.
std::size_t lost(const std::vector<ProbeSample>& series);
// One line per target: its label and every probe's RTT in whole ms (or "lost"), for failure
// messages.
std::string describe(const std::vector<ProbeTarget>& targets,
                     const std::vector<std::vector<ProbeSample>>& series);

}  // namespace jitterd_test
