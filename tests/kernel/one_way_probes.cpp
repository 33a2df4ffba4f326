#include "one_way_probes.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <deque>
#include <stdexcept>
#include <thread>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "test_network.hpp"

namespace jitterd_test {

namespace {

struct Datagram {
  std::uint64_t index;  // into the probes
};

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

sockaddr_in address_of(const std::string& address, std::uint16_t port) {
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &out.sin_addr) != 1)
    throw std::invalid_argument("not an IPv4 address: " + address);
  return out;
}

}  // namespace

std::vector<OneWayProbe> probe_one_way(const std::vector<OneWayPath>& paths,
                                       const std::string& receiver_netns, std::uint16_t port,
                                       ProbeClock::time_point until,
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
  // Room for every datagram the receiver is late for (4 MiB; SO_RCVBUFFORCE, as root, past
  // rmem_max).
  const int buffer = 4 << 20;
  setsockopt(receiver.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  const std::chrono::nanoseconds offset = realtime_offset();
  timeval timeout{0, 50'000};
  shaper::check_syscall(
      setsockopt(receiver.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout),
      "setsockopt SO_RCVTIMEO", "udp in " + receiver_netns);
  std::vector<shaper::UniqueFd> senders;
  std::vector<sockaddr_in> targets;
  for (const auto& p : paths) {
    senders.push_back(udp_socket_in(p.netns));
    targets.push_back(address_of(p.to_address, port));
  }

  // Sized for the longest run at one round per interval (the sleep is never shorter): the receiver
  // indexes into it.
  const auto span = std::max(until - ProbeClock::now(), ProbeClock::duration(0));
  const std::size_t capacity =
      paths.size() *
          (static_cast<std::size_t>(span / std::max(interval, std::chrono::microseconds(1))) + 16) +
      paths.size() * 100'000;  // the rounds back to back near focused deadlines
  std::deque<OneWayProbe> probes;
  std::vector<std::optional<ProbeClock::time_point>> arrivals(capacity);
  std::atomic<bool> stop{false};
  // The sender and the receiver run at a real-time priority where they may (root): the datagrams
  // then leave on their pace beside a loaded guest's sshds and daemons, so every deadline is
  // approached closely, and none is dropped for a full receive buffer. The receiver above the
  // sender, which would otherwise hold the one CPU through its back-to-back rounds. Neither does
  // long work at that priority (no copy of a grown vector: the probes are a deque), which would
  // starve ksoftirqd and with it netem's releases.
  std::thread receive([&] {
    const RealtimePriority priority(11);
    while (!stop) {
      Datagram d{};
      iovec data{&d, sizeof d};
      alignas(cmsghdr) char ancillary[CMSG_SPACE(sizeof(timespec))];
      msghdr msg{};
      msg.msg_iov = &data;
      msg.msg_iovlen = 1;
      msg.msg_control = ancillary;
      msg.msg_controllen = sizeof ancillary;
      const ssize_t n = ::recvmsg(receiver.get(), &msg, 0);
      if (n != static_cast<ssize_t>(sizeof d) || d.index >= arrivals.size()) continue;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
        timespec stamp{};
        std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
        arrivals[d.index] = ProbeClock::time_point(
            std::chrono::seconds(stamp.tv_sec) + std::chrono::nanoseconds(stamp.tv_nsec) - offset);
      }
    }
  });
  try {
    const RealtimePriority priority(10);
    const auto in_focus = [&](ProbeClock::time_point now, std::int64_t focus_ns) {
      const ProbeClock::time_point focus{std::chrono::nanoseconds(focus_ns)};
      return focus_ns != 0 && now >= focus - kProbeFocus && now <= focus + kProbeFocus;
    };
    while (ProbeClock::now() < until && probes.size() + paths.size() <= capacity &&
           !(control && control->stop)) {
      const std::int64_t focus_ns = control ? control->focus_ns.load() : 0;
      const std::uint64_t group = control ? control->focus_paths.load() : 0;
      const bool focused = in_focus(ProbeClock::now(), focus_ns);
      for (std::size_t i = 0; i < paths.size(); ++i) {
        if (focused && group != 0 && (i >= 64 || (group >> i & 1) == 0)) continue;
        OneWayProbe p;
        p.path = i;
        const Datagram d{probes.size()};
        p.before = ProbeClock::now();
        shaper::check_syscall(
            ::sendto(senders[i].get(), &d, sizeof d, 0,
                     reinterpret_cast<const sockaddr*>(&targets[i]), sizeof targets[i]),
            "sendto", paths[i].to_address);
        p.after = ProbeClock::now();
        probes.push_back(p);
        if (control) ++control->sent;
      }
      // Back to back near the focus; elsewhere the interval, never sleeping into the focus.
      const auto now = ProbeClock::now();
      if (in_focus(now, focus_ns)) continue;
      const ProbeClock::time_point focus{std::chrono::nanoseconds(focus_ns)};
      std::this_thread::sleep_until(focus_ns != 0 && now < focus - kProbeFocus
                                        ? std::min(now + interval, focus - kProbeFocus)
                                        : now + interval);
    }
  } catch (...) {
    stop = true;
    receive.join();
    throw;
  }
  std::this_thread::sleep_until(ProbeClock::now() + std::chrono::milliseconds(200));
  stop = true;
  receive.join();
  std::vector<OneWayProbe> out(probes.begin(), probes.end());
  for (std::size_t k = 0; k < out.size(); ++k) out[k].arrived = arrivals[k];
  return out;
}

std::chrono::nanoseconds realtime_offset() {
  const auto ns = [](const timespec& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  std::chrono::nanoseconds best = std::chrono::nanoseconds::max(), offset{0};
  for (int k = 0; k < 20; ++k) {
    timespec m1{}, r{}, m2{};
    clock_gettime(CLOCK_MONOTONIC, &m1);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m2);
    if (ns(m2) - ns(m1) < best) {
      best = ns(m2) - ns(m1);
      offset = ns(r) - (ns(m1) + (ns(m2) - ns(m1)) / 2);
    }
  }
  return offset;
}

SwitchJudgement judge_switches(const std::vector<OneWayProbe>& probes, std::size_t path,
                               const std::vector<ProbeClock::time_point>& deadlines,
                               std::chrono::microseconds threshold) {
  SwitchJudgement out;
  out.before_ms.assign(deadlines.size(), 1e9);
  out.after_ms.assign(deadlines.size(), 1e9);
  auto passed = [&](ProbeClock::time_point t) {
    return static_cast<int>(std::upper_bound(deadlines.begin(), deadlines.end(), t) -
                            deadlines.begin());
  };
  using Ms = std::chrono::duration<double, std::milli>;
  for (std::size_t k = 0; k < probes.size(); ++k) {
    const OneWayProbe& p = probes[k];
    if (p.path != path) continue;
    if (!p.arrived) {
      ++out.lost;
      continue;
    }
    // Deadlines passed when the sendto began, and when it ended (a deadline equal to `after`
    // may have come after the enqueue).
    const int before = passed(p.before);
    const int after = passed(p.after - std::chrono::nanoseconds(1));
    if (before != after) {
      ++out.straddling;
      continue;
    }
    ++out.judged;
    const auto delay = *p.arrived - p.before;
    const bool high = delay >= threshold;
    if (high != (before % 2 == 1) && out.wrong++ == 0) {
      out.first_wrong = "datagram " + std::to_string(k) + " sent after " + std::to_string(before) +
                        " of the deadlines took " + std::to_string(Ms(delay).count()) + " ms";
    }
    for (std::size_t i = 0; i < deadlines.size(); ++i) {
      const double to = Ms(deadlines[i] - p.after).count();
      const double from = Ms(p.before - deadlines[i]).count();
      if (to > 0) out.before_ms[i] = std::min(out.before_ms[i], to);
      if (from >= 0) out.after_ms[i] = std::min(out.after_ms[i], from);
    }
  }
  return out;
}

}  // namespace jitterd_test
