#include "port_probes.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "shaper/errors.hpp"
#include "test_network.hpp"

namespace jitterd_test {
namespace {

using Clock = std::chrono::steady_clock;

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

SocketAddress socket_address(const std::string& address, std::uint16_t port) {
  SocketAddress out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out.length = sizeof(sockaddr_in6);
  } else {
    throw std::runtime_error("not an IP address: " + address);
  }
  return out;
}

// A socket of namespace `netns` (see the header).
shaper::UniqueFd socket_in(const std::string& netns, int family, Transport transport) {
  NetnsGuard inside(netns);
  const int type = (transport == Transport::kUdp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC;
  return shaper::UniqueFd(
      static_cast<int>(shaper::check_syscall(socket(family, type, 0), "socket", netns)));
}

void set_option(int fd, int level, int name, int value, const std::string& what) {
  shaper::check_syscall(setsockopt(fd, level, name, &value, sizeof value), "setsockopt", what);
}

void set_nonblocking(int fd) {
  // Blocking sockets would let one silent target stall the others' rounds.
  shaper::check_syscall(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), "fcntl",
                        "probe socket");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Echo server

EchoServer::EchoServer(const std::string& netns, Transport transport, std::uint16_t port,
                       const std::string& address)
    : transport_(transport) {
  const SocketAddress local = socket_address(address, port);
  socket_ = socket_in(netns, local.family(), transport);
  const std::string what =
      (transport == Transport::kUdp ? "udp " : "tcp ") + address + " port " + std::to_string(port);
  set_option(socket_.get(), SOL_SOCKET, SO_REUSEADDR, 1, what);
  if (local.family() == AF_INET6) set_option(socket_.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0, what);
  shaper::check_syscall(bind(socket_.get(), local.get(), local.length), "bind", what);
  if (transport == Transport::kTcp)
    shaper::check_syscall(listen(socket_.get(), 16), "listen", what);
  stop_ = shaper::UniqueFd(
      static_cast<int>(shaper::check_syscall(eventfd(0, EFD_CLOEXEC), "eventfd", what)));
  thread_ = std::thread([this] { serve(); });
}

EchoServer::~EchoServer() {
  const std::uint64_t one = 1;
  if (write(stop_.get(), &one, sizeof one) != sizeof one)
    std::abort();  // the thread would never end
  thread_.join();
}

void EchoServer::serve() {
  std::vector<shaper::UniqueFd> clients;
  std::vector<char> buffer(65536);
  for (;;) {
    std::vector<pollfd> fds{{stop_.get(), POLLIN, 0}, {socket_.get(), POLLIN, 0}};
    for (const auto& c : clients) fds.push_back({c.get(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      if (transport_ == Transport::kUdp) {
        sockaddr_storage peer{};
        socklen_t peer_length = sizeof peer;
        const ssize_t n = recvfrom(socket_.get(), buffer.data(), buffer.size(), 0,
                                   reinterpret_cast<sockaddr*>(&peer), &peer_length);
        if (n > 0)
          sendto(socket_.get(), buffer.data(), static_cast<std::size_t>(n), 0,
                 reinterpret_cast<sockaddr*>(&peer), peer_length);
      } else {
        const int c = accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          set_option(c, IPPROTO_TCP, TCP_NODELAY, 1, "accepted connection");
          clients.emplace_back(c);
        }
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer.data(), buffer.size());
      if (n <= 0 || write(fds[i].fd, buffer.data(), static_cast<std::size_t>(n)) != n) {
        const int dead = fds[i].fd;
        clients.erase(std::remove_if(clients.begin(), clients.end(),
                                     [dead](const shaper::UniqueFd& f) { return f.get() == dead; }),
                      clients.end());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Probes

std::string ProbeTarget::label() const {
  const bool v6 = address.find(':') != std::string::npos;
  return std::string(transport == Transport::kUdp ? "udp " : "tcp ") +
         (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

std::vector<std::vector<ProbeSample>> probe_side_by_side(const std::string& netns,
                                                         const std::vector<ProbeTarget>& targets,
                                                         int rounds,
                                                         std::chrono::milliseconds interval,
                                                         std::chrono::milliseconds timeout,
                                                         const std::atomic<bool>* stop) {
  struct Link {
    shaper::UniqueFd fd;
    std::string pending;  // TCP: bytes of a round number not yet complete
  };
  std::vector<Link> links;
  for (const auto& t : targets) {
    const SocketAddress remote = socket_address(t.address, t.port);
    Link link{socket_in(netns, remote.family(), t.transport), {}};
    if (t.source_port != 0) {
      set_option(link.fd.get(), SOL_SOCKET, SO_REUSEADDR, 1, t.label());
      const SocketAddress local =
          socket_address(remote.family() == AF_INET ? "0.0.0.0" : "::", t.source_port);
      shaper::check_syscall(bind(link.fd.get(), local.get(), local.length), "bind", t.label());
    }
    if (t.transport == Transport::kTcp)
      set_option(link.fd.get(), IPPROTO_TCP, TCP_NODELAY, 1, t.label());
    set_option(link.fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, 1, t.label());
    shaper::check_syscall(connect(link.fd.get(), remote.get(), remote.length), "connect",
                          t.label());
    set_nonblocking(link.fd.get());
    links.push_back(std::move(link));
  }

  std::vector<std::vector<ProbeSample>> series(targets.size());
  std::vector<std::vector<std::chrono::system_clock::time_point>> sent(targets.size());
  const auto start = Clock::now();
  int next_round = 0;
  Clock::time_point last_send = start;
  // Arrival times come from the kernel (SO_TIMESTAMPNS: when the answer reached the socket), not
  // from when this thread got to read it, so a busy process (a fork for jitterctl, say) does not
  // inflate the RTTs. The timestamps are CLOCK_REALTIME, and so are the send times they are
  // compared with.
  const auto receive = [&](std::size_t i) {
    char buffer[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    for (;;) {
      iovec iov{buffer, sizeof buffer};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(links[i].fd.get(), &msg, 0);
      if (n <= 0) return;
      auto arrived = std::chrono::system_clock::now();
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
          timespec ts;
          std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
          arrived = std::chrono::system_clock::time_point(
              std::chrono::duration_cast<std::chrono::system_clock::duration>(
                  std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
        }
      }
      // UDP: one datagram is one round number; TCP: a stream of them.
      std::string& pending = links[i].pending;
      if (targets[i].transport == Transport::kUdp) pending.clear();
      pending.append(buffer, static_cast<std::size_t>(n));
      std::size_t at = 0;
      for (; at + sizeof(std::uint32_t) <= pending.size(); at += sizeof(std::uint32_t)) {
        std::uint32_t round;
        std::memcpy(&round, pending.data() + at, sizeof round);
        if (round < series[i].size() && !series[i][round].rtt_ms) {
          series[i][round].rtt_ms =
              std::chrono::duration<double, std::milli>(arrived - sent[i][round]).count();
        }
      }
      pending.erase(0, at);
    }
  };
  for (;;) {
    const bool sending = next_round < rounds && !(stop && stop->load());
    const auto now = Clock::now();
    if (!sending && now - last_send >= timeout) break;
    const auto send_at = start + next_round * interval;
    if (sending && now >= send_at) {
      const auto round = static_cast<std::uint32_t>(next_round++);
      for (std::size_t i = 0; i < links.size(); ++i) {
        series[i].push_back({Clock::now() - start, std::nullopt});
        sent[i].push_back(std::chrono::system_clock::now());
        if (write(links[i].fd.get(), &round, sizeof round) != sizeof round) {
          // A full send buffer or a refused datagram: the probe counts as lost.
        }
      }
      last_send = Clock::now();
      continue;
    }
    const auto wake = sending ? send_at : last_send + timeout;
    const auto wait_ms = std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count());
    std::vector<pollfd> fds;
    for (const auto& l : links) fds.push_back({l.fd.get(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(wait_ms, 1000))) < 0 &&
        errno != EINTR) {
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLERR)) receive(i);
    }
    if (!sending) {
      const bool all = std::all_of(series.begin(), series.end(), [](const auto& s) {
        return std::all_of(s.begin(), s.end(),
                           [](const ProbeSample& p) { return p.rtt_ms.has_value(); });
      });
      if (all) break;
    }
  }
  return series;
}

double min_rtt(const std::vector<ProbeSample>& series, const std::string& label) {
  std::optional<double> best;
  for (const auto& s : series) {
    if (s.rtt_ms && (!best || *s.rtt_ms < *best)) best = s.rtt_ms;
  }
  if (!best)
    throw std::runtime_error("no probe to " + label + " was answered (" +
                             std::to_string(series.size()) + " sent)");
  return *best;
}

std::size_t lost(const std::vector<ProbeSample>& series) {
  return static_cast<std::size_t>(
      std::count_if(series.begin(), series.end(), [](const ProbeSample& s) { return !s.rtt_ms; }));
}

std::string describe(const std::vector<ProbeTarget>& targets,
                     const std::vector<std::vector<ProbeSample>>& series) {
  std::string out;
  for (std::size_t i = 0; i < targets.size() && i < series.size(); ++i) {
    out += targets[i].label() + ":";
    for (const auto& s : series[i])
      out += s.rtt_ms ? " " + std::to_string(static_cast<int>(*s.rtt_ms)) : " lost";
    out += "\n";
  }
  return out;
}

}  // namespace jitterd_test
