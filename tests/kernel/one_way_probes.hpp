#pragma once
// One-way probes for judging when a switch reached the datapath, packet by packet. Every sender
// and the receiver live in network namespaces of one kernel, so a datagram's send and arrival are
// read on one kernel's clocks. A kernel-timed switch (shaper::GatedNetem) classifies a packet by
// bpf_ktime_get_ns (CLOCK_MONOTONIC) as it enters the device's root qdisc; of that instant, t,
// one datagram tells (OneWayProbe):
//   - t is at or after its send began, and at or after the kernel's SCM_TSTAMP_SCHED stamp
//     (SO_TIMESTAMPING, taken in __dev_queue_xmit just before the qdisc's enqueue) where the
//     prober asked for one;
//   - t is at or before its send returned, and at or before its arrival less the delay of the
//     phase it met: netem holds a packet at least its delay from its own enqueue, which follows
//     the classification, and the receiver's stamp is taken as the veth hands the packet over;
//     in a batch, t is before the next send's queue stamp (Prober::take says why).
// A switch's landing lies after the instants of the datagrams that met the old phase and at or
// before those of the datagrams that met the new one; judge_switches bounds it from both sides.

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
  ProbeClock::time_point before;  // just before its send was asked for (sendto(2) or io_uring)
  ProbeClock::time_point after;   // just after that returned
  std::optional<ProbeClock::time_point> queued;  // the kernel's stamp as it entered the qdisc
  // In a batch, the next send's queue stamp, where the sends are known to have run one after
  // another: this datagram was classified before it.
  std::optional<ProbeClock::time_point> next_queued;
  std::optional<ProbeClock::time_point> arrived;
};

// The kernel's stamps are CLOCK_REALTIME; they are taken back to CLOCK_MONOTONIC by the clocks'
// offset, which is read between two monotonic reads: it is known within half their distance.
struct ClockOffset {
  std::chrono::nanoseconds offset{0};  // CLOCK_REALTIME less CLOCK_MONOTONIC
  std::chrono::nanoseconds error{0};
};

struct OneWayRun {
  std::vector<OneWayProbe> probes;
  std::chrono::nanoseconds stamp_error{0};  // how far `queued` and `arrived` may be off
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
  // A deadline (CLOCK_MONOTONIC, ns since boot; 0: none): within kProbeFocus of it the prober
  // sends in batches, one io_uring_enter(2) for kProbeBatch datagrams over every path in turn,
  // each stamped by the kernel as it enters the qdisc, batch after batch without a sleep. A
  // sendto(2) costs 0.1-0.9 ms in a UML guest (a syscall is a host context switch); a datagram
  // in a batch, about 2 µs.
  std::atomic<std::int64_t> focus_ns{0};
  // Datagrams sent so far (the prober is running once it is not 0).
  std::atomic<std::size_t> sent{0};
};
inline constexpr std::chrono::milliseconds kProbeFocus{3};
// How long before a focus the prober stops sleeping between rounds and spins (at its real-time
// priority), beginning no round that could run into the focus. A wake-up in a loaded UML guest was
// seen 0.9 and 4.8 ms late: the guest's kernel is PREEMPT_NONE with HZ=100, so a woken task waits
// for whatever holds the CPU in the kernel.
inline constexpr std::chrono::milliseconds kProbeWake{10};
inline constexpr std::size_t kProbeBatch = 256;

// One thread (the caller's, at SCHED_FIFO priority 10 where it may) sends a datagram on every path
// in turn, then sleeps `interval`, until `until` (or `control->stop`); near a focus, batches (see
// ProbeControl), the one that spans the focus centred on it. JITTERD_PROBE_DUMP=FILE appends every
// focus and every datagram to FILE (one_way_probes.cpp, dump). A receiver bound to `port` in
// `receiver_netns` records each arrival by the kernel's receive time stamp (until 200 ms after the
// last send). Throws shaper::SystemError when a socket cannot be made or a send fails. A path's
// netem must hold several thousand packets (its limit) when the prober focuses while it delays them
// long.
OneWayRun probe_one_way(const std::vector<OneWayPath>& paths, const std::string& receiver_netns,
                        std::uint16_t port, ProbeClock::time_point until,
                        std::chrono::microseconds interval, ProbeControl* control = nullptr);

// CLOCK_REALTIME less CLOCK_MONOTONIC in this process, from the closest of twenty back-to-back
// reads (the receiver's stamps are realtime; a fleet's deadline is too).
ClockOffset measure_realtime_offset();
inline std::chrono::nanoseconds realtime_offset() {
  return measure_realtime_offset().offset;
}

// The two phases a path alternates between: low before the first deadline, then high, low, ...
// Each is a constant delay (no jitter): a datagram is high when its one-way delay is at least
// `high`; emulation only ever makes a datagram late, so a high one is never below it, and a low
// one reaches it only when late by the difference.
struct PhaseDelays {
  std::chrono::nanoseconds low{0};
  std::chrono::nanoseconds high{0};
};

// Of one path's datagrams, against switches at `deadlines` (ascending, seconds apart).
struct SwitchJudgement {
  int judged = 0;      // arrived, so their phase is known
  int straddling = 0;  // of them, ones whose instant may lie on either side of a deadline
  int stamped = 0;     // of them, ones with the kernel's queue stamp
  int lost = 0;
  int wrong = 0;  // met a phase that their instant rules out
  std::string first_wrong;
  // Per deadline d (in ms; 1e9 where no datagram bounds it): the landing is shown to lie in
  // (d - before_ms, d + after_ms]. It came after every datagram that met the old phase was
  // classified, so after the latest of their "no earlier than" instants (before_ms is d less
  // that); and at or before every one that met the new phase was, so at or before the earliest of
  // their "no later than" instants (after_ms is that less d). Both allow for the stamps' error.
  // With wrong == 0 the landing is consistent with d itself.
  std::vector<double> before_ms;
  std::vector<double> after_ms;
};
SwitchJudgement judge_switches(const OneWayRun& run, std::size_t path,
                               const std::vector<ProbeClock::time_point>& deadlines,
                               PhaseDelays phases);

}  // namespace jitterd_test
