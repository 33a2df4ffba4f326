#include "netlink_monitor.hpp"

#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shaper/errors.hpp"

namespace jitterd {

using shaper::check_syscall;

shaper::UniqueFd NetlinkMonitor::open_socket() {
  shaper::UniqueFd fd(static_cast<int>(
      check_syscall(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE),
                    "socket", "netlink monitor")));
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_groups = RTMGRP_LINK | RTMGRP_TC;
  check_syscall(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), "bind",
                "netlink monitor (RTNLGRP_LINK, RTNLGRP_TC)");
  // Bursts of notifications (an interface with many qdiscs going away) should not overflow.
  const int size = 1 << 20;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  return fd;
}

NetlinkMonitor::NetlinkMonitor(asio::io_context& io, SessionManager& sessions,
                               ShapingBackend& backend, Logger& log)
    : NetlinkMonitor(io, sessions, backend, log, open_socket()) {}

NetlinkMonitor::NetlinkMonitor(asio::io_context& io, SessionManager& sessions,
                               ShapingBackend& backend, Logger& log, shaper::UniqueFd socket)
    : sessions_(sessions), backend_(backend), log_(log), socket_(io, socket.release()) {}

void NetlinkMonitor::start() {
  wait();
}

void NetlinkMonitor::stop() {
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void NetlinkMonitor::wait() {
  socket_.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this](const boost::system::error_code& ec) {
                       if (ec) return;  // closed
                       drain();
                       wait();
                     });
}

void NetlinkMonitor::drain() {
  for (;;) {
    const long n = ::recv(socket_.native_handle(), buffer_.data(), buffer_.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      if (errno == ENOBUFS) {
        log_.warning("netlink monitor overflowed; comparing every session with the kernel");
        rescan();
        continue;
      }
      log_.error(std::string("netlink monitor: recv: ") + std::strerror(errno));
      return;
    }
    int remaining = static_cast<int>(n);
    for (auto* message = reinterpret_cast<nlmsghdr*>(buffer_.data()); nlmsg_ok(message, remaining);
         message = nlmsg_next(message, &remaining)) {
      handle(*message);
    }
  }
}

void NetlinkMonitor::handle(const nlmsghdr& message) {
  if (message.nlmsg_type == RTM_DELLINK) {
    const auto* info = static_cast<const ifinfomsg*>(nlmsg_data(&message));
    sessions_.on_interface_gone(info->ifi_index);
    return;
  }
  if (message.nlmsg_type != RTM_NEWQDISC && message.nlmsg_type != RTM_DELQDISC) return;
  const auto* tcm = static_cast<const tcmsg*>(nlmsg_data(&message));
  if (tcm->tcm_parent != TC_H_ROOT || !sessions_.has_session(tcm->tcm_ifindex)) return;
  // Our own request: the kernel copies the requester's port id into the notification.
  if (message.nlmsg_pid != 0 && message.nlmsg_pid == backend_.netlink_port()) return;
  const bool is_ours = (tcm->tcm_handle >> 16) == shaper::kJitterdHandleMajor;
  if (message.nlmsg_type == RTM_DELQDISC && !is_ours) return;  // a qdisc we replaced, or never ours
  // The kernel is the authority on what the root is now (a replace arrives as a deletion of ours
  // and an addition in one batch: ask, rather than act on the first half).
  const shaper::Interface interface { tcm->tcm_ifindex, "" };
  std::optional<shaper::QdiscInfo> root;
  try {
    root = backend_.root_qdisc(interface);
  } catch (const std::exception&) {
    root.reset();  // the interface vanished in between; RTM_DELLINK follows
  }
  const bool still_ours = root && root->is_jitterd();
  const std::string port = " (netlink port " + std::to_string(message.nlmsg_pid) + ")";
  std::string what;
  if (still_ours) {
    what = "jitterd's netem qdisc was changed by another program" + port +
           "; the next transition sends the full state again";
  } else if (root && !root->is_default()) {
    what = "the root qdisc was replaced by " + root->kind + " " +
           shaper::format_handle(root->handle) + port;
  } else {
    what = "jitterd's netem qdisc was deleted" + port;
  }
  sessions_.on_external_change(tcm->tcm_ifindex, what, still_ours);
}

void NetlinkMonitor::rescan() {
  try {
    const auto interfaces = backend_.interfaces();
    const auto roots = backend_.root_qdiscs();
    auto status = sessions_.status("");
    auto* list = status ? &*status : nullptr;
    if (!list) return;
    for (const auto& s : *list) {
      const bool present =
          std::any_of(interfaces.begin(), interfaces.end(),
                      [&](const shaper::Interface& i) { return i.index == s.index; });
      if (!present) {
        sessions_.on_interface_gone(s.index);
        continue;
      }
      const bool ours = std::any_of(roots.begin(), roots.end(), [&](const shaper::QdiscInfo& q) {
        return q.ifindex == s.index && q.is_jitterd();
      });
      if (!ours && s.state != "pending") {
        sessions_.on_external_change(
            s.index, "jitterd's qdisc is no longer the root (found after an overflow)", false);
      }
    }
  } catch (const std::exception& e) {
    log_.error(std::string("netlink monitor rescan: ") + e.what());
  }
}

}  // namespace jitterd
