#include "one_way_probes.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
                                       std::chrono::microseconds interval) {
  shaper::UniqueFd receiver = udp_socket_in(receiver_netns);
  const sockaddr_in any = address_of("0.0.0.0", port);
  shaper::check_syscall(::bind(receiver.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any),
                        "bind", "udp in " + receiver_netns);
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

  // Sized for the longest run at one datagram per path per 100 µs: the receiver indexes into it.
  const auto span = std::max(until - ProbeClock::now(), ProbeClock::duration(0));
  const std::size_t capacity =
      paths.size() *
      (static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::microseconds>(span).count() /
                                100) +
       16);
  std::vector<OneWayProbe> probes;
  probes.reserve(capacity);
  std::vector<std::optional<ProbeClock::time_point>> arrivals(capacity);
  std::atomic<bool> stop{false};
  std::thread receive([&] {
    while (!stop) {
      Datagram d{};
      const ssize_t n = ::recv(receiver.get(), &d, sizeof d, 0);
      const auto now = ProbeClock::now();
      if (n == static_cast<ssize_t>(sizeof d) && d.index < arrivals.size()) arrivals[d.index] = now;
    }
  });
  try {
    while (ProbeClock::now() < until && probes.size() + paths.size() <= capacity) {
      for (std::size_t i = 0; i < paths.size(); ++i) {
        OneWayProbe p;
        p.path = i;
        const Datagram d{probes.size()};
        p.before = ProbeClock::now();
        shaper::check_syscall(::sendto(senders[i].get(), &d, sizeof d, 0,
                                       reinterpret_cast<const sockaddr*>(&targets[i]),
                                       sizeof targets[i]),
                              "sendto", paths[i].to_address);
        p.after = ProbeClock::now();
        probes.push_back(p);
      }
      std::this_thread::sleep_for(interval);
    }
  } catch (...) {
    stop = true;
    receive.join();
    throw;
  }
  std::this_thread::sleep_until(ProbeClock::now() + std::chrono::milliseconds(200));
  stop = true;
  receive.join();
  for (std::size_t k = 0; k < probes.size(); ++k) probes[k].arrived = arrivals[k];
  return probes;
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
