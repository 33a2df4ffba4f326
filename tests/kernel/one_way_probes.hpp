#pragma once
// One-way probes for judging when a switch reached the datapath, packet by packet. Every sender
// and the receiver live in network namespaces of one kernel, so a datagram's send and arrival are
// read on one CLOCK_MONOTONIC: the clock a kernel-timed switch (shaper::GatedNetem) compares with.
// A datagram whose sendto(2) returned before a deadline was enqueued before it; one whose sendto
// began at or after it, after it. No tolerance is needed between the two.

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace jitterd_test {

using ProbeClock = std::chrono::steady_clock;

// Where datagrams go: from a socket created in `netns` to `to_address`:port.
struct OneWayPath {
  std::string netns;
  std::string to_address;
};

struct OneWayProbe {
  std::size_t path = 0;
  ProbeClock::time_point before;  // just before sendto(2)
  ProbeClock::time_point after;   // just after it returned
  std::optional<ProbeClock::time_point> arrived;
};

// The calling thread at SCHED_FIFO `priority` while this lives, where it may be (root); its
// policy before, after.
class RealtimePriority {
 public:
  explicit RealtimePriority(int priority) {
    sched_param param{};
    param.sched_priority = priority;
    raised_ = pthread_getschedparam(pthread_self(), &policy_, &previous_) == 0 &&
              pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
  }
  ~RealtimePriority() {
    if (raised_) pthread_setschedparam(pthread_self(), policy_, &previous_);
  }
  RealtimePriority(const RealtimePriority&) = delete;
  RealtimePriority& operator=(const RealtimePriority&) = delete;

 private:
  int policy_ = SCHED_OTHER;
  sched_param previous_{};
  bool raised_ = false;
};

// What another thread may tell a running prober.
struct ProbeControl {
  std::atomic<bool> stop{false};
  // A deadline (CLOCK_MONOTONIC, ns since boot; 0: none): within kProbeFocus of it, rounds follow
  // each other without the interval's sleep, so that the instant is probed as densely as sendto(2)
  // allows.
  std::atomic<std::int64_t> focus_ns{0};
  // Which paths the rounds near the focus send on (bit i: path i; 0: every path). With many paths
  // on the guest's one CPU a round of all of them is too slow to approach the instant closely on
  // each; a smaller group is approached on its pace, and the others on the interval's.
  std::atomic<std::uint64_t> focus_paths{0};
  // Datagrams sent so far (the prober is running once it is not 0).
  std::atomic<std::size_t> sent{0};
};
inline constexpr std::chrono::milliseconds kProbeFocus{3};

// One thread (the caller's, at SCHED_FIFO priority 10 where it may) sends a datagram on every path
// in turn (on the focus paths only, near a focus), then sleeps `interval`, until `until` (or
// `control->stop`); a receiver bound to `port` in `receiver_netns` records each arrival by the
// kernel's receive time stamp (until 200 ms after the last send). Throws shaper::SystemError when a
// socket cannot be made.
std::vector<OneWayProbe> probe_one_way(const std::vector<OneWayPath>& paths,
                                       const std::string& receiver_netns, std::uint16_t port,
                                       ProbeClock::time_point until,
                                       std::chrono::microseconds interval,
                                       ProbeControl* control = nullptr);

// CLOCK_REALTIME less CLOCK_MONOTONIC in this process, from the closest of twenty back-to-back
// reads (the receiver's stamps are realtime; a fleet's deadline is too).
std::chrono::nanoseconds realtime_offset();

// Of one path's datagrams, against switches at `deadlines` (ascending) alternating between a low
// phase (before the first) and a high one: a datagram is high when its one-way delay is at least
// `threshold`. Give the high phase's delay: emulation only ever makes a datagram late, so a high
// one is never below it, and a low one reaches it only when late by the difference.
struct SwitchJudgement {
  int judged = 0;
  int straddling = 0;  // sendto ran across a deadline: either phase is right
  int lost = 0;
  int wrong = 0;
  std::string first_wrong;
  // Per deadline: how close before it (the end of a sendto) and after it (the start of one) a
  // datagram was judged, in ms; the switch landed within their sum, at the deadline if wrong == 0.
  std::vector<double> before_ms;
  std::vector<double> after_ms;
};
SwitchJudgement judge_switches(const std::vector<OneWayProbe>& probes, std::size_t path,
                               const std::vector<ProbeClock::time_point>& deadlines,
                               std::chrono::microseconds threshold);

}  // namespace jitterd_test
