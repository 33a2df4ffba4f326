#include "shaper/netlink.hpp"

#include <linux/netlink.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>
#include <algorithm>

#include "shaper/errors.hpp"

namespace shaper {

void NlSockDeleter::operator()(nl_sock* sock) const { nl_socket_free(sock); }
void NlMsgDeleter::operator()(nl_msg* msg) const { nlmsg_free(msg); }
void RtnlLinkDeleter::operator()(rtnl_link* link) const { rtnl_link_put(link); }

NlMsgPtr make_message(int type, int flags, std::size_t payload_hint) {
  // Room for the headers on top of the payload; libnl never grows a message by itself.
  NlMsgPtr msg(nlmsg_alloc_size(payload_hint + 1024));
  if (!msg) throw SystemError("nlmsg_alloc_size", std::to_string(payload_hint) + " bytes", ENOMEM);
  if (!nlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, type, 0, flags)) {
    throw SystemError("nlmsg_put", "netlink header", ENOMEM);
  }
  return msg;
}

namespace {

// State shared with libnl's callbacks while one request is in flight.
struct Exchange {
  int error = 0;             // positive errno from NLMSG_ERROR, 0 on success
  std::string ext_ack;       // NLMSGERR_ATTR_MSG, with or without an error
  bool acked = false;
  bool done = false;         // ACK, error or NLMSG_DONE seen: the exchange is over
  const std::function<void(const nlmsghdr&)>* on_message = nullptr;
  // An exception thrown by on_message must not unwind through libnl's C frames: it is parked here,
  // the rest of the dump is read and ignored (so the socket stays in step), then rethrown.
  std::exception_ptr callback_failure;
};

// Extracts NLMSGERR_ATTR_MSG from an NLMSG_ERROR message. With NETLINK_CAP_ACK the original request is
// not echoed (NLM_F_CAPPED), so the TLVs start right after struct nlmsgerr; otherwise after the echo.
std::string extended_ack_text(const nlmsghdr* hdr) {
  if (!(hdr->nlmsg_flags & NLM_F_ACK_TLVS)) return {};
  const auto* err = static_cast<const nlmsgerr*>(nlmsg_data(hdr));
  std::size_t offset = NLMSG_HDRLEN + sizeof(nlmsgerr);
  if (!(hdr->nlmsg_flags & NLM_F_CAPPED)) offset += err->msg.nlmsg_len - NLMSG_HDRLEN;
  if (offset >= hdr->nlmsg_len) return {};
  const auto* base = reinterpret_cast<const char*>(hdr);
  const char* pos = base + offset;
  const char* end = base + hdr->nlmsg_len;
  while (pos + sizeof(nlattr) <= end) {
    const auto* attr = reinterpret_cast<const nlattr*>(pos);
    if (attr->nla_len < sizeof(nlattr) || pos + attr->nla_len > end) break;
    if ((attr->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG) {
      const char* text = pos + NLA_HDRLEN;
      const std::size_t len = attr->nla_len - NLA_HDRLEN;
      return std::string(text, strnlen(text, len));
    }
    pos += NLA_ALIGN(attr->nla_len);
  }
  return {};
}

int on_error(sockaddr_nl*, nlmsgerr* err, void* arg) {
  auto* exchange = static_cast<Exchange*>(arg);
  const auto* hdr = reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(err) - NLMSG_HDRLEN);
  exchange->error = -err->error;
  exchange->ext_ack = extended_ack_text(hdr);
  exchange->done = true;
  return NL_STOP;
}

int on_ack(nl_msg* msg, void* arg) {
  auto* exchange = static_cast<Exchange*>(arg);
  exchange->acked = true;
  exchange->done = true;
  exchange->ext_ack = extended_ack_text(nlmsg_hdr(msg));
  return NL_STOP;
}

int on_finish(nl_msg*, void* arg) {
  static_cast<Exchange*>(arg)->done = true;
  return NL_STOP;
}

int on_valid(nl_msg* msg, void* arg) {
  auto* exchange = static_cast<Exchange*>(arg);
  if (exchange->on_message && !exchange->callback_failure) {
    try {
      (*exchange->on_message)(*nlmsg_hdr(msg));
    } catch (...) {
      exchange->callback_failure = std::current_exception();
    }
  }
  return NL_OK;
}

std::string hint_for(int error_number) {
  if (error_number == EPERM) {
    return "Shaping needs CAP_NET_ADMIN in the interface's network namespace: run as root, or "
           "with AmbientCapabilities=CAP_NET_ADMIN";
  }
  return {};
}

void run_exchange(nl_sock* sock, nl_msg* msg, Exchange& exchange, const std::string& operation,
                  const std::string& object) {
  struct CbDeleter {
    void operator()(nl_cb* cb) const { nl_cb_put(cb); }
  };
  std::unique_ptr<nl_cb, CbDeleter> cb(nl_cb_alloc(NL_CB_DEFAULT));
  if (!cb) throw SystemError("nl_cb_alloc", operation, ENOMEM);
  nl_cb_err(cb.get(), NL_CB_CUSTOM, on_error, &exchange);
  nl_cb_set(cb.get(), NL_CB_ACK, NL_CB_CUSTOM, on_ack, &exchange);
  nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_valid, &exchange);
  nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, on_finish, &exchange);

  check_libnl(nl_send_auto(sock, msg), "send " + operation, object);
  // Keep receiving until the kernel's ACK, error or NLMSG_DONE ends the exchange.
  while (!exchange.done) {
    const int rc = nl_recvmsgs(sock, cb.get());
    if (exchange.error != 0) {
      throw NetlinkError(operation, object, exchange.error, exchange.ext_ack, hint_for(exchange.error));
    }
    if (rc < 0) check_libnl(rc, "receive " + operation, object);
  }
  if (exchange.callback_failure) std::rethrow_exception(exchange.callback_failure);
}

}  // namespace

RouteSocket::RouteSocket() : sock_(nl_socket_alloc()) {
  if (!sock_) throw SystemError("nl_socket_alloc", "NETLINK_ROUTE", ENOMEM);
  check_libnl(nl_connect(sock_.get(), NETLINK_ROUTE), "connect", "NETLINK_ROUTE socket");
  const int fd = nl_socket_get_fd(sock_.get());
  const int one = 1;
  // Extended ACKs carry the kernel's reason ("netem: ..."); CAP_ACK stops the kernel from echoing our
  // whole request (up to 64 KiB with tables) back in every error.
  check_syscall(setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one),
                "setsockopt NETLINK_EXT_ACK", "NETLINK_ROUTE socket");
  check_syscall(setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one),
                "setsockopt NETLINK_CAP_ACK", "NETLINK_ROUTE socket");
  // Dumps of qdiscs with stats can exceed a page per message; let libnl size reads by peeking.
  nl_socket_enable_msg_peek(sock_.get());
}

NetlinkAck RouteSocket::request(nl_msg* msg, const std::string& operation, const std::string& object) {
  nlmsg_hdr(msg)->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  Exchange exchange;
  run_exchange(sock_.get(), msg, exchange, operation, object);
  if (!exchange.acked) {
    throw NetlinkError(operation, object, EPROTO, "the kernel ended the exchange without an ACK");
  }
  return NetlinkAck{exchange.ext_ack};
}

void RouteSocket::dump(nl_msg* msg, const std::string& operation, const std::string& object,
                       const std::function<void(const nlmsghdr&)>& on_message) {
  nlmsg_hdr(msg)->nlmsg_flags |= NLM_F_REQUEST | NLM_F_DUMP;
  Exchange exchange;
  exchange.on_message = &on_message;
  run_exchange(sock_.get(), msg, exchange, operation, object);
}

void RouteSocket::dump_parsed(nl_msg* msg, const std::string& operation, const std::string& object,
                              int reply_type, std::size_t header_size, int max_attr,
                              const std::function<void(const nlmsghdr& hdr, nlattr* const* attrs)>& on_message) {
  std::vector<nlattr*> attrs(static_cast<std::size_t>(max_attr) + 1);
  dump(msg, operation, object, [&](const nlmsghdr& hdr) {
    if (hdr.nlmsg_type != reply_type) return;
    std::fill(attrs.begin(), attrs.end(), nullptr);
    if (nlmsg_parse(const_cast<nlmsghdr*>(&hdr), static_cast<int>(header_size), attrs.data(), max_attr, nullptr) < 0) {
      throw NetlinkError(operation, object, EPROTO,
                         "a reply (netlink message type " + std::to_string(reply_type) + ") does not parse");
    }
    on_message(hdr, attrs.data());
  });
}

}  // namespace shaper

namespace shaper {

std::uint32_t RouteSocket::local_port() const { return nl_socket_get_local_port(sock_.get()); }

}  // namespace shaper
