#pragma once
// Watches the kernel's RTNLGRP_LINK and RTNLGRP_TC notifications so that an interface that
// disappears ends its session with an event, and a change someone else makes to jitterd's qdisc is
// noticed. Our own changes are told apart by the netlink port id the kernel copies into each
// notification.

#include <array>
#include <cstdint>

#include "asio.hpp"
#include "logger.hpp"
#include "sessions.hpp"
#include "shaper/files.hpp"
#include "shaping_backend.hpp"

namespace jitterd {

class NetlinkMonitor {
 public:
  NetlinkMonitor(asio::io_context& io, SessionManager& sessions, ShapingBackend& backend,
                 Logger& log);
  // On `socket` from open_socket(), called in another network namespace (create_inside): the
  // monitor watches that namespace.
  NetlinkMonitor(asio::io_context& io, SessionManager& sessions, ShapingBackend& backend,
                 Logger& log, shaper::UniqueFd socket);
  // A NETLINK_ROUTE socket subscribed to link and tc notifications, in the calling thread's
  // network namespace.
  static shaper::UniqueFd open_socket();
  void start();
  void stop();

 private:
  void wait();
  void drain();
  void handle(const struct nlmsghdr& message);
  // After an overflow (ENOBUFS) notifications were lost: compare every session with the kernel.
  void rescan();

  SessionManager& sessions_;
  ShapingBackend& backend_;
  Logger& log_;
  asio::posix::stream_descriptor socket_;
  std::array<char, 64 * 1024> buffer_{};
};

}  // namespace jitterd
