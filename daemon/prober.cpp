#include "prober.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"

namespace jitterd {
namespace {

// The longest the loop sleeps in poll(): `stop` is looked at this often.
constexpr Nanoseconds kStopPoll = std::chrono::milliseconds(100);

Nanoseconds clock_now(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanoseconds(ts.tv_nsec);
}

// One address's socket, connected to it, with its series.
struct Lane {
  shaper::UniqueFd fd;
  ProbeSeries series;
  std::size_t replies = 0;
};

shaper::UniqueFd open_ping_socket(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (fd < 0) {
    const int error = errno;
    std::string hint;
    if (error == EACCES || error == EPERM) {
      hint =
          "probe uses ICMP datagram sockets, which need jitterd's gid inside "
          "net.ipv4.ping_group_range of its network namespace (the kernel's default \"1 0\" "
          "allows nobody): sysctl -w net.ipv4.ping_group_range=\"0 2147483647\", as systemd "
          "sets it";
    }
    throw shaper::SystemError("socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)", "probe " + address,
                              error, hint);
  }
  shaper::UniqueFd owner(fd);
  const int on = 1;
  shaper::check_syscall(::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on),
                        "setsockopt SO_TIMESTAMPNS", "probe " + address);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1)
    throw shaper::SystemError("inet_pton", address, EINVAL);
  shaper::check_syscall(::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to), "connect",
                        "probe " + address);
  return owner;
}

void send_echo(Lane& lane, std::uint16_t seq) {
  unsigned char packet[sizeof(icmphdr) + kProbePayloadBytes] = {};
  icmphdr header{};
  header.type = ICMP_ECHO;
  header.un.echo.sequence = htons(seq);  // the kernel sets the identifier and the checksum
  std::memcpy(packet, &header, sizeof header);
  lane.series.sent.push_back(clock_now(CLOCK_REALTIME));
  lane.series.rtt.emplace_back();
  if (::send(lane.fd.get(), packet, sizeof packet, MSG_NOSIGNAL) < 0) {
    const int error = errno;
    // No route, or the neighbour unresolved yet: the probe is lost, as ping counts it.
    if (error == EHOSTUNREACH || error == ENETUNREACH || error == EAGAIN || error == ENOBUFS)
      return;
    throw shaper::SystemError("send", "probe " + lane.series.address, error);
  }
}

// Reads every reply queued on the lane's socket.
void read_replies(Lane& lane) {
  for (;;) {
    unsigned char packet[sizeof(icmphdr) + kProbePayloadBytes + 64];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    iovec iov{packet, sizeof packet};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(lane.fd.get(), &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      // An ICMP error for an earlier probe (unreachable) is reported on the socket as an error.
      if (errno == EHOSTUNREACH || errno == ENETUNREACH || errno == ECONNREFUSED) {
        ++lane.series.errors;
        continue;
      }
      shaper::check_syscall(-1, "recvmsg", "probe " + lane.series.address);
    }
    if (static_cast<std::size_t>(n) < sizeof(icmphdr)) continue;
    icmphdr header{};
    std::memcpy(&header, packet, sizeof header);
    if (header.type != ICMP_ECHOREPLY) continue;
    const std::size_t seq = ntohs(header.un.echo.sequence);
    if (seq >= lane.series.rtt.size() || lane.series.rtt[seq]) continue;  // stray or duplicate
    std::optional<Nanoseconds> received;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
        received = std::chrono::seconds(ts.tv_sec) + Nanoseconds(ts.tv_nsec);
      }
    }
    // Without the kernel's stamp (it always gives one when asked), the time it was read.
    const Nanoseconds at = received.value_or(clock_now(CLOCK_REALTIME));
    lane.series.rtt[seq] = std::max(Nanoseconds(0), at - lane.series.sent[seq]);
    ++lane.replies;
  }
}

}  // namespace

std::vector<ProbeSeries> run_probes(const ProbeRequest& request, const std::atomic<bool>& stop) {
  std::vector<Lane> lanes;
  lanes.reserve(request.addresses.size());
  for (const auto& address : request.addresses) {
    Lane lane{open_ping_socket(address), {}, 0};
    lane.series.address = address;
    lanes.push_back(std::move(lane));
  }
  std::vector<pollfd> polls(lanes.size());
  for (std::size_t i = 0; i < lanes.size(); ++i) polls[i] = {lanes[i].fd.get(), POLLIN, 0};

  const Nanoseconds start = clock_now(CLOCK_MONOTONIC);
  const Nanoseconds last_send = start + request.interval * (request.count - 1);
  const Nanoseconds end = last_send + request.wait;
  std::uint32_t sent = 0;
  while (!stop.load()) {
    const Nanoseconds now = clock_now(CLOCK_MONOTONIC);
    while (sent < request.count && now >= start + request.interval * sent) {
      for (Lane& lane : lanes) send_echo(lane, static_cast<std::uint16_t>(sent));
      ++sent;
    }
    bool all_in = sent == request.count;
    for (const Lane& lane : lanes) all_in = all_in && lane.replies == request.count;
    if (all_in || now >= end) break;
    const Nanoseconds next = sent < request.count ? start + request.interval * sent : end;
    const Nanoseconds wait = std::clamp(next - now, Nanoseconds(0), kStopPoll);
    // ppoll, not poll: poll's milliseconds would send each probe up to 1 ms late.
    const timespec timeout{static_cast<time_t>(wait.count() / 1'000'000'000),
                           static_cast<long>(wait.count() % 1'000'000'000)};
    const int ready = ::ppoll(polls.data(), polls.size(), &timeout, nullptr);
    if (ready < 0 && errno != EINTR) shaper::check_syscall(-1, "ppoll", "probe sockets");
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      if (polls[i].revents != 0) read_replies(lanes[i]);
    }
  }
  std::vector<ProbeSeries> out;
  out.reserve(lanes.size());
  for (Lane& lane : lanes) out.push_back(std::move(lane.series));
  return out;
}

}  // namespace jitterd
