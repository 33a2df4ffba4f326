#pragma once
// Move-only owners for libnl handles, and RouteSocket: one NETLINK_ROUTE socket with extended ACKs
// on, that sends requests (one, or a batch back to back as `tc -batch` does) and returns only when
// the kernel has answered each, turning refusals into NetlinkError with the kernel's text.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shaper/errors.hpp"

struct nl_sock;
struct nl_msg;
struct nlmsghdr;
struct nlattr;
struct rtnl_link;

namespace shaper {

struct NlSockDeleter {
  void operator()(nl_sock* sock) const;
};
struct NlMsgDeleter {
  void operator()(nl_msg* msg) const;
};
struct RtnlLinkDeleter {
  void operator()(rtnl_link* link) const;
};
using NlSockPtr = std::unique_ptr<nl_sock, NlSockDeleter>;
using NlMsgPtr = std::unique_ptr<nl_msg, NlMsgDeleter>;
using RtnlLinkPtr = std::unique_ptr<rtnl_link, RtnlLinkDeleter>;

// The one checker for libnl calls that return 0 or a negative NLE_* code (not kernel errnos; those
// go through RouteSocket, which keeps the extended ACK). Here, not in errors.hpp, so that only the
// kernel layer needs libnl.
int check_libnl(int result, const std::string& operation, const std::string& object);

// What the kernel said about one request.
struct NetlinkAck {
  std::string warning;  // extended-ACK text sent with a success, if any
};

// One request of a batch: the message (not owned; NLM_F_REQUEST|NLM_F_ACK and a sequence number are
// added) and what a refusal names: "<operation> (<object>)".
struct NetlinkRequest {
  nl_msg* msg = nullptr;
  std::string operation;
  std::string object;
};

// The kernel's answer to one request of a batch: its ACK, or its refusal as request() would throw
// it.
struct NetlinkReply {
  NetlinkAck ack;
  std::optional<NetlinkError> error;
  bool ok() const { return !error; }
};

class RouteSocket {
 public:
  // Opens and connects a NETLINK_ROUTE socket in the calling thread's network namespace.
  RouteSocket();
  RouteSocket(RouteSocket&&) noexcept = default;
  RouteSocket& operator=(RouteSocket&&) noexcept = default;
  RouteSocket(const RouteSocket&) = delete;
  RouteSocket& operator=(const RouteSocket&) = delete;
  ~RouteSocket() = default;

  // Sends `msg` (NLM_F_ACK is added) and waits for the kernel's answer. On refusal, throws
  // NetlinkError("<operation> (<object>)", errno, extended-ACK text, hint from `hint_for`).
  // A batch of one.
  NetlinkAck request(nl_msg* msg, const std::string& operation, const std::string& object);

  // Sends every request before reading any answer (several to a sendmsg, as many as the socket's
  // buffers hold at once), then reads every ACK, matched to its request by sequence number. The
  // kernel judges each message on its own, in order, and goes on after a refusal; so does this:
  // reply i says what became of request i. Throws only when the socket itself fails (send or
  // receive), when which requests the kernel took is not known.
  std::vector<NetlinkReply> request_batch(std::span<const NetlinkRequest> requests);

  // Sends a dump request and calls `on_message` for every reply message until NLMSG_DONE.
  void dump(nl_msg* msg, const std::string& operation, const std::string& object,
            const std::function<void(const nlmsghdr&)>& on_message);

  // dump() keeping the replies of type `reply_type`, each parsed: its fixed header of `header_size`
  // bytes, then its top-level attributes into `attrs` (indexed 0 to `max_attr`). A reply that does
  // not parse throws NetlinkError naming `operation` and `object`.
  void dump_parsed(
      nl_msg* msg, const std::string& operation, const std::string& object, int reply_type,
      std::size_t header_size, int max_attr,
      const std::function<void(const nlmsghdr& hdr, nlattr* const* attrs)>& on_message);

  nl_sock* get() const { return sock_.get(); }

  // The socket's netlink port id: the kernel puts it in the notifications it sends about this
  // socket's own requests (RTNLGRP_TC), which is how the daemon tells its changes from others'.
  std::uint32_t local_port() const;

 private:
  NlSockPtr sock_;
  // Sequence numbers of request_batch's requests: far below libnl's own (which start at the time of
  // day in seconds), so an answer is never taken for another's.
  std::uint32_t next_seq_ = 1;
  std::vector<char> ack_buffer_;  // request_batch's receive buffers, kept between calls
};

}  // namespace shaper
