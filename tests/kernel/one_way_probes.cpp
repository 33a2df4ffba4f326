#include "one_way_probes.hpp"

#include <arpa/inet.h>
#include <liburing.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "test_network.hpp"

namespace jitterd_test {

namespace {

// What a datagram carries: its index into the probes, behind a mark that tells it from anything
// else on the port. The kernel's queue stamp comes back with the whole packet, whose last bytes
// these are.
struct Datagram {
  std::uint64_t mark;
  std::uint64_t index;
};
constexpr std::uint64_t kMark = 0x6a69747465726470;  // "jitterdp"

ProbeClock::time_point monotonic_of(const timespec& realtime, std::chrono::nanoseconds offset) {
  return ProbeClock::time_point(std::chrono::seconds(realtime.tv_sec) +
                                std::chrono::nanoseconds(realtime.tv_nsec) - offset);
}

// A UDP socket made by a thread inside `netns` (a socket belongs to the namespace it was created
// in), so the caller stays where it is.
shaper::UniqueFd udp_socket_in(const std::string& netns) {
  shaper::UniqueFd out;
  std::exception_ptr failure;
  std::thread make([&] {
    try {
      NetnsGuard inside(netns);
      out = shaper::UniqueFd(static_cast<int>(shaper::check_syscall(
          ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), "socket", "udp in " + netns)));
    } catch (...) {
      failure = std::current_exception();
    }
  });
  make.join();
  if (failure) std::rethrow_exception(failure);
  return out;
}

// A sender whose datagrams may ask for the kernel's queue stamp (a control message on the send;
// the socket's own flag only says how stamps are reported). Its buffers hold a focus's worth of
// datagrams held in netem (charged to the sender until they leave) and of stamps.
shaper::UniqueFd sender_in(const std::string& netns) {
  shaper::UniqueFd fd = udp_socket_in(netns);
  const int report = SOF_TIMESTAMPING_SOFTWARE;
  shaper::check_syscall(setsockopt(fd.get(), SOL_SOCKET, SO_TIMESTAMPING, &report, sizeof report),
                        "setsockopt SO_TIMESTAMPING", "udp in " + netns);
  const int buffer = 8 << 20;
  shaper::check_syscall(setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer),
                        "setsockopt SO_SNDBUFFORCE", "udp in " + netns);
  shaper::check_syscall(setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer),
                        "setsockopt SO_RCVBUFFORCE", "udp in " + netns);
  return fd;
}

sockaddr_in address_of(const std::string& address, std::uint16_t port) {
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &out.sin_addr) != 1)
    throw std::invalid_argument("not an IPv4 address: " + address);
  return out;
}

// The owner of an io_uring (liburing's), for batches of sends.
class SendRing {
 public:
  explicit SendRing(unsigned entries) {
    if (const int e = io_uring_queue_init(entries, &ring_, 0); e < 0)
      throw shaper::SystemError("io_uring_queue_init", std::to_string(entries) + " entries", -e);
  }
  ~SendRing() { io_uring_queue_exit(&ring_); }
  SendRing(const SendRing&) = delete;
  SendRing& operator=(const SendRing&) = delete;
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
};

// Everything the prober sends with, and what it has sent. A batch's sends, and the probes of the
// batches near one deadline, live in memory touched when the prober is made: a page's first touch
// is a fault that a UML guest pays its host for (preparing 256 sends in fresh memory took 0.8 ms,
// longer than sending them).
class Prober {
 public:
  Prober(const std::vector<OneWayPath>& paths, std::uint16_t port, std::chrono::nanoseconds offset,
         ProbeControl* control)
      : paths_(paths),
        offset_(offset),
        control_(control),
        slots_(paths.empty() ? 0
                             : std::max<std::size_t>(1, kProbeBatch / paths.size()) * paths.size()),
        staged_(kStaged) {
    static_assert(kProbeBatch > 0);
    if (paths.empty()) throw std::invalid_argument("probe_one_way: no path");
    for (const auto& p : paths) {
      senders_.push_back(sender_in(p.netns));
      targets_.push_back(address_of(p.to_address, port));
    }
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      Slot& s = slots_[k];
      const std::size_t i = k % paths.size();
      s.data = iovec{&s.d, sizeof s.d};
      s.msg.msg_name = &targets_[i];
      s.msg.msg_namelen = sizeof targets_[i];
      s.msg.msg_iov = &s.data;
      s.msg.msg_iovlen = 1;
      s.msg.msg_control = s.ancillary.data();
      s.msg.msg_controllen = s.ancillary.size();
      cmsghdr* c = CMSG_FIRSTHDR(&s.msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SO_TIMESTAMPING;
      c->cmsg_len = CMSG_LEN(sizeof(std::uint32_t));
      const std::uint32_t record = SOF_TIMESTAMPING_TX_SCHED;
      std::memcpy(CMSG_DATA(c), &record, sizeof record);
    }
  }

  Prober(const Prober&) = delete;  // its sends point into it
  Prober& operator=(const Prober&) = delete;

  // Datagrams sent so far.
  std::size_t count() const { return probes_.size() + staged_count_; }
  std::size_t batch_size() const { return slots_.size(); }
  // How long the last batch took (send to return), or an estimate before the first.
  ProbeClock::duration last_batch_wall() const { return last_wall_; }
  // How long the last round took.
  ProbeClock::duration last_round_wall() const { return last_round_wall_; }

  // One datagram on every path, each a sendto(2), none stamped.
  void round() {
    flush();
    const auto start = ProbeClock::now();
    for (std::size_t i = 0; i < paths_.size(); ++i) {
      OneWayProbe p;
      p.path = i;
      const Datagram d{kMark, probes_.size()};
      p.before = ProbeClock::now();
      shaper::check_syscall(
          ::sendto(senders_[i].get(), &d, sizeof d, 0,
                   reinterpret_cast<const sockaddr*>(&targets_[i]), sizeof targets_[i]),
          "sendto", paths_[i].to_address);
      p.after = ProbeClock::now();
      probes_.push_back(p);
      sent(1);
    }
    last_round_wall_ = ProbeClock::now() - start;
  }

  // batch_size() datagrams over every path in turn, in one io_uring_enter(2), each asking for
  // the kernel's queue stamp.
  void batch(SendRing& ring) {
    if (staged_count_ + slots_.size() > staged_.size()) flush();
    const std::size_t first = count();
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      Slot& s = slots_[k];
      s.d = Datagram{kMark, first + k};
      io_uring_sqe* sqe = io_uring_get_sqe(ring.get());
      if (!sqe) throw std::logic_error("the send ring is smaller than a batch");
      // Never blocks: the send buffer holds a focus's datagrams; a full one fails the run.
      io_uring_prep_sendmsg(sqe, senders_[k % paths_.size()].get(), &s.msg, MSG_DONTWAIT);
      io_uring_sqe_set_data64(sqe, k);
    }
    const auto before = ProbeClock::now();
    if (const int e = io_uring_submit_and_wait(ring.get(), static_cast<unsigned>(slots_.size()));
        e < 0)
      throw shaper::SystemError("io_uring_enter", "a batch of sends", -e);
    const auto after = ProbeClock::now();
    last_wall_ = after - before;
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    int failure = 0;
    std::size_t failed_path = 0;
    bool in_order = true;
    io_uring_for_each_cqe(ring.get(), head, cqe) {
      in_order = in_order && cqe->user_data == seen;
      ++seen;
      if (cqe->res < 0 && failure == 0) {
        failure = -cqe->res;
        failed_path = cqe->user_data % paths_.size();
      }
    }
    io_uring_cq_advance(ring.get(), seen);
    if (failure != 0)
      throw shaper::SystemError("sendmsg (io_uring)", paths_[failed_path].to_address, failure);
    if (in_order) batches_.push_back({first, slots_.size()});
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      OneWayProbe& p = staged_[staged_count_++];
      p = OneWayProbe{};
      p.path = k % paths_.size();
      p.before = before;
      p.after = after;
    }
    sent(slots_.size());
    stamps_waiting_ = true;
  }

  // The queue stamps waiting on every sender's error queue, onto their probes (recvmmsg(2), 64 at
  // a time). A stamp is queued before its send returns, so after a batch they are all there.
  void collect_stamps() {
    flush();
    if (!stamps_waiting_) return;
    stamps_waiting_ = false;
    constexpr std::size_t kAtOnce = 64;
    struct Returned {
      std::array<char, 256> packet;
      iovec data;
      alignas(cmsghdr) std::array<char, 256> ancillary;
    };
    std::vector<Returned> slots(kAtOnce);
    std::vector<mmsghdr> msgs(kAtOnce);
    for (std::size_t i = 0; i < senders_.size(); ++i) {
      for (;;) {
        for (std::size_t k = 0; k < kAtOnce; ++k) {
          slots[k].data = iovec{slots[k].packet.data(), slots[k].packet.size()};
          msgs[k] = mmsghdr{};
          msgs[k].msg_hdr.msg_iov = &slots[k].data;
          msgs[k].msg_hdr.msg_iovlen = 1;
          msgs[k].msg_hdr.msg_control = slots[k].ancillary.data();
          msgs[k].msg_hdr.msg_controllen = slots[k].ancillary.size();
        }
        const int n = ::recvmmsg(senders_[i].get(), msgs.data(), kAtOnce,
                                 MSG_ERRQUEUE | MSG_DONTWAIT, nullptr);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        shaper::check_syscall(n, "recvmmsg MSG_ERRQUEUE", paths_[i].netns);
        for (int k = 0; k < n; ++k) take_stamp(msgs[static_cast<std::size_t>(k)]);
        if (n < static_cast<int>(kAtOnce)) break;
      }
    }
  }

  // The probes so far, with the queue stamps waiting on every sender's error queue.
  //
  // In a batch whose sends all completed in their order (their completions came in it), each send
  // ran to its end in this thread before the next began: io_uring issues a batch's requests one
  // after another in the thread that submits them, and a UDP send that finds room in the socket's
  // buffer (16 MiB here) returns only after its packet is through the qdisc's enqueue, the gate's
  // classification among it. (One that found no room would be retried when there is, after the
  // ones behind it: its completion out of order.) The next send's queue stamp is then an upper
  // bound of that classification.
  std::vector<OneWayProbe> take() {
    collect_stamps();
    std::vector<OneWayProbe> out(probes_.begin(), probes_.end());
    for (const auto& [first, size] : batches_) {
      for (std::size_t k = first; k + 1 < first + size; ++k) {
        const auto& [here, next] = std::tie(out[k].queued, out[k + 1].queued);
        if (here && next && *here <= *next) out[k].next_queued = next;
      }
    }
    return out;
  }

 private:
  // The batches' probes, into the rest.
  void flush() {
    probes_.insert(probes_.end(), staged_.begin(),
                   staged_.begin() + static_cast<std::ptrdiff_t>(staged_count_));
    staged_count_ = 0;
  }

  struct Slot {
    Datagram d{};
    iovec data{};
    msghdr msg{};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(std::uint32_t))> ancillary{};
  };
  static constexpr std::size_t kStaged = 8192;

  void sent(std::size_t n) {
    if (control_) control_->sent += n;
  }

  void take_stamp(mmsghdr& m) {
    if (m.msg_len < sizeof(Datagram)) return;
    Datagram d{};
    const auto* data = static_cast<const char*>(m.msg_hdr.msg_iov->iov_base);
    std::memcpy(&d, data + m.msg_len - sizeof d, sizeof d);
    if (d.mark != kMark || d.index >= probes_.size()) return;
    std::optional<timespec> stamp;
    bool sched = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr); c; c = CMSG_NXTHDR(&m.msg_hdr, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPING) {
        std::array<timespec, 3> ts{};
        std::memcpy(ts.data(), CMSG_DATA(c), sizeof ts);
        stamp = ts[0];  // software
      } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) {
        sock_extended_err e{};
        std::memcpy(&e, CMSG_DATA(c), sizeof e);
        sched = e.ee_origin == SO_EE_ORIGIN_TIMESTAMPING && e.ee_info == SCM_TSTAMP_SCHED;
      }
    }
    if (stamp && sched) probes_[d.index].queued = monotonic_of(*stamp, offset_);
  }

  const std::vector<OneWayPath>& paths_;
  std::chrono::nanoseconds offset_;
  ProbeControl* control_;
  std::vector<shaper::UniqueFd> senders_;
  std::vector<sockaddr_in> targets_;
  std::deque<OneWayProbe> probes_;
  std::vector<Slot> slots_;  // a batch's sends; msg_name points into targets_
  std::vector<OneWayProbe> staged_;
  std::size_t staged_count_ = 0;
  ProbeClock::duration last_wall_ = std::chrono::microseconds(700);
  ProbeClock::duration last_round_wall_{0};
  bool stamps_waiting_ = false;  // batches were sent since the stamps were last collected
  // The batches whose sends completed in their order: first probe and size.
  std::vector<std::pair<std::size_t, std::size_t>> batches_;
};

// JITTERD_PROBE_DUMP=FILE: every focus ("F ns") and every datagram ("P path before after queued
// arrived", CLOCK_MONOTONIC ns, -1 where unknown), appended: the raw material of a judgement,
// for a look at where a prober's bound came from (a stall, a batch that ran long).
void dump(const OneWayRun& run, const std::vector<std::int64_t>& focuses, const char* to) {
  std::ofstream out(to, std::ios::app);
  const auto ns = [](const std::optional<ProbeClock::time_point>& t) -> long long {
    return t ? static_cast<long long>(t->time_since_epoch().count()) : -1;
  };
  out << "R " << run.probes.size() << '\n';
  for (const auto f : focuses) out << "F " << f << '\n';
  for (const auto& p : run.probes)
    out << "P " << p.path << ' ' << ns(p.before) << ' ' << ns(p.after) << ' ' << ns(p.queued) << ' '
        << ns(p.arrived) << '\n';
  if (!out) std::cerr << "JITTERD_PROBE_DUMP: could not write " << to << '\n';
}

}  // namespace

OneWayRun probe_one_way(const std::vector<OneWayPath>& paths, const std::string& receiver_netns,
                        std::uint16_t port, ProbeClock::time_point until,
                        std::chrono::microseconds interval, ProbeControl* control) {
  shaper::UniqueFd receiver = udp_socket_in(receiver_netns);
  const sockaddr_in any = address_of("0.0.0.0", port);
  shaper::check_syscall(::bind(receiver.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any),
                        "bind", "udp in " + receiver_netns);
  // Arrivals are the kernel's receive time stamps (CLOCK_REALTIME, taken back to CLOCK_MONOTONIC
  // by the clocks' offset), not when the receiver thread got to them.
  const int on = 1;
  shaper::check_syscall(setsockopt(receiver.get(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on),
                        "setsockopt SO_TIMESTAMPNS", "udp in " + receiver_netns);
  // Room for every datagram the receiver is late for, a focus's batches among them (16 MiB;
  // SO_RCVBUFFORCE, as root, past rmem_max).
  const int buffer = 16 << 20;
  setsockopt(receiver.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  const ClockOffset clocks = measure_realtime_offset();
  timeval timeout{0, 50'000};
  shaper::check_syscall(
      setsockopt(receiver.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout),
      "setsockopt SO_RCVTIMEO", "udp in " + receiver_netns);
  Prober prober(paths, port, clocks.offset, control);
  SendRing ring(static_cast<unsigned>(prober.batch_size()));

  // Sized for the longest run at one round per interval (the sleep is never shorter) and batches
  // near deadlines up to kFocusBudget datagrams (about 1500 a deadline): the receiver indexes into
  // it. Past the budget, the prober no longer batches.
  constexpr std::size_t kFocusBudget = 100'000;
  const auto span = std::max(until - ProbeClock::now(), ProbeClock::duration(0));
  const std::size_t capacity =
      paths.size() *
          (static_cast<std::size_t>(span / std::max(interval, std::chrono::microseconds(1))) + 16) +
      kFocusBudget;
  std::vector<std::optional<ProbeClock::time_point>> arrivals(capacity);
  std::atomic<bool> stop{false};
  // The sender and the receiver run at a real-time priority where they may (root): the datagrams
  // then leave on their pace beside a loaded guest's sshds and daemons, so every deadline is
  // approached closely, and none is dropped for a full receive buffer. The receiver above the
  // sender, which would otherwise hold the one CPU through its batches. Neither does long work at
  // that priority (no copy of a grown vector: the probes are a deque), which would starve
  // ksoftirqd and with it netem's releases.
  // Whatever has arrived, up to kAtOnce datagrams, per recvmmsg(2): a batch's datagrams that
  // arrive together (through a netem that delays them all alike, or none) cost a few system calls,
  // not one each. One each cost the guest ~50 us apiece on a slower host, and the receiver's 13 ms
  // for a batch of 256 arriving at once held the prober off its CPU across a deadline.
  std::thread receive([&] {
    const RealtimePriority priority(11);
    constexpr std::size_t kAtOnce = 64;
    struct Slot {
      Datagram d{};
      iovec data{};
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(timespec))> ancillary{};
    };
    std::vector<Slot> slots(kAtOnce);
    std::vector<mmsghdr> msgs(kAtOnce);
    while (!stop) {
      for (std::size_t k = 0; k < kAtOnce; ++k) {
        slots[k].data = iovec{&slots[k].d, sizeof slots[k].d};
        msgs[k] = mmsghdr{};
        msgs[k].msg_hdr.msg_iov = &slots[k].data;
        msgs[k].msg_hdr.msg_iovlen = 1;
        msgs[k].msg_hdr.msg_control = slots[k].ancillary.data();
        msgs[k].msg_hdr.msg_controllen = slots[k].ancillary.size();
      }
      const int n = ::recvmmsg(receiver.get(), msgs.data(), kAtOnce, MSG_WAITFORONE, nullptr);
      for (int k = 0; k < n; ++k) {
        const Datagram& d = slots[static_cast<std::size_t>(k)].d;
        msghdr& msg = msgs[static_cast<std::size_t>(k)].msg_hdr;
        if (msgs[static_cast<std::size_t>(k)].msg_len != sizeof d || d.mark != kMark ||
            d.index >= arrivals.size())
          continue;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
          if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
          timespec stamp{};
          std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
          arrivals[d.index] = monotonic_of(stamp, clocks.offset);
        }
      }
    }
  });
  std::vector<std::int64_t> focuses;  // every focus the prober was given, in order
  try {
    const RealtimePriority priority(10);
    const auto in_focus = [&](ProbeClock::time_point now, std::int64_t focus_ns) {
      const ProbeClock::time_point focus{std::chrono::nanoseconds(focus_ns)};
      return focus_ns != 0 && now >= focus - kProbeFocus && now <= focus + kProbeFocus;
    };
    const auto stopped = [&] { return control && control->stop; };
    const auto spin_until = [&](ProbeClock::time_point t) {
      while (ProbeClock::now() < t && !stopped()) {
      }
    };
    while (ProbeClock::now() < until && prober.count() + paths.size() <= capacity && !stopped()) {
      const std::int64_t focus_ns = control ? control->focus_ns.load() : 0;
      if (focus_ns != 0 && (focuses.empty() || focuses.back() != focus_ns))
        focuses.push_back(focus_ns);
      const ProbeClock::time_point focus{std::chrono::nanoseconds(focus_ns)};
      const auto now = ProbeClock::now();
      if (in_focus(now, focus_ns) &&
          prober.count() + prober.batch_size() + paths.size() <= capacity) {
        // The batch that would run past half a batch before the deadline starts there instead, so
        // that the deadline lies in the middle of one batch, where every path's datagrams come a
        // turn round the paths apart (tens of µs), not between two batches (0.1-0.3 ms apart in
        // the guest) or at the end of one that ran long.
        const auto start = focus - prober.last_batch_wall() / 2;
        if (now < start && now + prober.last_batch_wall() > start) spin_until(start);
        prober.batch(ring);
        continue;
      }
      // In the kProbeWake before a focus, rounds with spins between them, but none that could run
      // into the focus (a round of 16 sendto(2)s takes 2-3 ms in the guest, and one begun just
      // before the focus ran 2.6 ms into it). The rounds stay: a guest held off its CPU by its
      // host through the focus (seen beside a compiler on both of the host's CPUs) keeps its
      // bounds from the last round, not from before kProbeWake.
      const auto wake = focus - kProbeFocus - kProbeWake;
      const bool waking = focus_ns != 0 && now >= wake && now < focus - kProbeFocus;
      if (waking && now + 2 * prober.last_round_wall() > focus - kProbeFocus) {
        spin_until(focus - kProbeFocus);
        continue;
      }
      prober.round();
      prober.collect_stamps();
      auto next = ProbeClock::now() + interval;
      if (waking) {
        spin_until(std::min(next, focus - kProbeFocus));
        continue;
      }
      if (focus_ns != 0 && now < wake) next = std::min(next, wake);
      std::this_thread::sleep_until(next);
    }
  } catch (...) {
    stop = true;
    receive.join();
    throw;
  }
  std::this_thread::sleep_until(ProbeClock::now() + std::chrono::milliseconds(200));
  stop = true;
  receive.join();
  OneWayRun out;
  out.stamp_error = clocks.error;
  out.probes = prober.take();
  for (std::size_t k = 0; k < out.probes.size(); ++k) out.probes[k].arrived = arrivals[k];
  if (const char* to = std::getenv("JITTERD_PROBE_DUMP")) dump(out, focuses, to);
  return out;
}

ClockOffset measure_realtime_offset() {
  const auto ns = [](const timespec& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  ClockOffset out;
  std::chrono::nanoseconds best = std::chrono::nanoseconds::max();
  for (int k = 0; k < 20; ++k) {
    timespec m1{}, r{}, m2{};
    clock_gettime(CLOCK_MONOTONIC, &m1);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m2);
    if (ns(m2) - ns(m1) < best) {
      best = ns(m2) - ns(m1);
      out.offset = ns(r) - (ns(m1) + (ns(m2) - ns(m1)) / 2);
      out.error = (ns(m2) - ns(m1)) / 2 + std::chrono::nanoseconds(1);
    }
  }
  return out;
}

SwitchJudgement judge_switches(const OneWayRun& run, std::size_t path,
                               const std::vector<ProbeClock::time_point>& deadlines,
                               PhaseDelays phases) {
  SwitchJudgement out;
  const auto n = deadlines.size();
  std::vector<ProbeClock::time_point> latest_old(n, ProbeClock::time_point::min());
  std::vector<ProbeClock::time_point> earliest_new(n, ProbeClock::time_point::max());
  auto passed = [&](ProbeClock::time_point t) {
    return static_cast<std::size_t>(std::upper_bound(deadlines.begin(), deadlines.end(), t) -
                                    deadlines.begin());
  };
  using Ms = std::chrono::duration<double, std::milli>;
  for (std::size_t k = 0; k < run.probes.size(); ++k) {
    const OneWayProbe& p = run.probes[k];
    if (p.path != path) continue;
    if (!p.arrived) {
      ++out.lost;
      continue;
    }
    ++out.judged;
    const auto delay = *p.arrived - p.before;
    const bool high = delay >= phases.high;
    // When the gate classified it: no earlier than `earliest`, no later than `latest`.
    auto earliest = p.before;
    if (p.queued) {
      ++out.stamped;
      earliest = std::max(earliest, *p.queued - run.stamp_error);
    }
    auto latest =
        std::min(p.after, *p.arrived - (high ? phases.high : phases.low) + run.stamp_error);
    if (p.next_queued) latest = std::min(latest, *p.next_queued + run.stamp_error);
    // The phase at an instant after `passed` deadlines is high when that count is odd.
    const std::size_t from = passed(earliest), to = passed(latest);
    if (from != to) ++out.straddling;
    bool possible = false;
    for (std::size_t c = from; c <= to && !possible; ++c) possible = (c % 2 == 1) == high;
    if (!possible && out.wrong++ == 0) {
      out.first_wrong = "datagram " + std::to_string(k) + " classified between " +
                        std::to_string(from) + " and " + std::to_string(to) +
                        " deadlines passed met the " + (high ? "high" : "low") + " phase (" +
                        std::to_string(Ms(delay).count()) + " ms)";
    }
    // The phase it met is the old one of the first deadline after its earliest instant, or the
    // new one of the last deadline before its latest: each it is, it bounds that landing.
    if (from < n && (from % 2 == 1) == high)
      latest_old[from] = std::max(latest_old[from], earliest);
    if (to > 0 && (to % 2 == 1) == high)
      earliest_new[to - 1] = std::min(earliest_new[to - 1], latest);
  }
  for (std::size_t i = 0; i < n; ++i) {
    out.before_ms.push_back(latest_old[i] == ProbeClock::time_point::min()
                                ? 1e9
                                : Ms(deadlines[i] - latest_old[i]).count());
    out.after_ms.push_back(earliest_new[i] == ProbeClock::time_point::max()
                               ? 1e9
                               : Ms(earliest_new[i] - deadlines[i]).count());
  }
  return out;
}

}  // namespace jitterd_test
