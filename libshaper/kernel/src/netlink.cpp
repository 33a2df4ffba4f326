#include "shaper/netlink.hpp"

#include <linux/netlink.h>
#include <netlink/errno.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

#include "shaper/errors.hpp"

namespace shaper {

int check_libnl(int result, const std::string& operation, const std::string& object) {
  if (result >= 0) return result;
  // libnl reports its own NLE_* codes; keep its text, and map to the closest errno for callers.
  const int nle = -result;
  int error_number = EIO;
  switch (nle) {
    case NLE_NOMEM:
      error_number = ENOMEM;
      break;
    case NLE_PERM:
      error_number = EPERM;
      break;
    case NLE_NODEV:
      error_number = ENODEV;
      break;
    case NLE_OBJ_NOTFOUND:
      error_number = ENOENT;
      break;
    case NLE_INVAL:
      error_number = EINVAL;
      break;
    case NLE_MSGSIZE:
      error_number = EMSGSIZE;
      break;
    case NLE_ATTRSIZE:
      error_number = E2BIG;
      break;
    case NLE_BUSY:
      error_number = EBUSY;
      break;
    default:
      break;
  }
  throw NetlinkError(operation, object, error_number, std::string("libnl: ") + nl_geterror(result));
}

void NlSockDeleter::operator()(nl_sock* sock) const {
  nl_socket_free(sock);
}
void NlMsgDeleter::operator()(nl_msg* msg) const {
  nlmsg_free(msg);
}
void RtnlLinkDeleter::operator()(rtnl_link* link) const {
  rtnl_link_put(link);
}

namespace {

// At most this many requests are in flight at once. The kernel handles a sendmsg's messages inside
// the call and queues an ACK for each on our socket before it returns; an ACK that finds the
// receive buffer full is dropped (ENOBUFS on the next read), and its request's fate is then
// unknown. libnl sizes the buffer to 32 KiB, which the kernel doubles; an ACK without the echoed
// request (CAP_ACK) but with an extended-ACK text costs about 1 KiB of it, so 32 of them fit with
// room to spare.
constexpr std::size_t kMaxRequestsInFlight = 32;
// sendmsg refuses (EMSGSIZE) a datagram larger than the send buffer less this (netlink_sendmsg).
constexpr std::size_t kSendBufferSlack = 32;
// Room for one ACK: with NETLINK_CAP_ACK it is the header, struct nlmsgerr and a few attributes
// (the kernel's message, an offset, a policy), a few hundred bytes at most.
constexpr std::size_t kAckSize = 4096;

// One request in flight, and what the kernel has said about it so far.
struct Exchange {
  std::uint32_t seq = 0;
  int error = 0;        // positive errno from NLMSG_ERROR, 0 on success
  std::string ext_ack;  // NLMSGERR_ATTR_MSG, with or without an error
  bool acked = false;
  bool done = false;  // ACK, error or NLMSG_DONE seen: the exchange is over
  const std::function<void(const nlmsghdr&)>* on_message = nullptr;
  // An exception thrown by on_message must not unwind through libnl's C frames: it is parked here,
  // the rest of the dump is read and ignored (so the socket stays in step), then rethrown.
  std::exception_ptr callback_failure;
};

// The requests of one send, shared with libnl's callbacks, which find each answer's request by its
// sequence number. An answer to none of them (left over from an exchange that a failure cut short)
// is skipped, so the socket is in step again at the next request.
struct Conversation {
  std::vector<Exchange> exchanges;
  std::size_t open = 0;  // exchanges not done yet

  Exchange* find(std::uint32_t seq) {
    for (auto& e : exchanges) {
      if (e.seq == seq && !e.done) return &e;
    }
    return nullptr;
  }
  void finish(Exchange& e) {
    e.done = true;
    --open;
  }
};

// Extracts NLMSGERR_ATTR_MSG from an NLMSG_ERROR message. With NETLINK_CAP_ACK the original request
// is not echoed (NLM_F_CAPPED), so the TLVs start right after struct nlmsgerr; otherwise after the
// echo.
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

// Replaces libnl's own check (one expected sequence number at a time) for several requests in
// flight.
int on_seq_check(nl_msg* msg, void* arg) {
  return static_cast<Conversation*>(arg)->find(nlmsg_hdr(msg)->nlmsg_seq) ? NL_OK : NL_SKIP;
}

// An NLMSG_ERROR (an ACK when its error is 0) for one of the conversation's requests ends that
// exchange; an answer to none of them is ignored.
void take_answer(Conversation& conversation, const nlmsghdr* hdr) {
  if (hdr->nlmsg_len < NLMSG_HDRLEN + sizeof(nlmsgerr)) return;
  Exchange* exchange = conversation.find(hdr->nlmsg_seq);
  if (!exchange) return;
  const auto* err =
      reinterpret_cast<const nlmsgerr*>(reinterpret_cast<const char*>(hdr) + NLMSG_HDRLEN);
  exchange->error = -err->error;
  exchange->acked = err->error == 0;
  exchange->ext_ack = extended_ack_text(hdr);
  conversation.finish(*exchange);
}

int on_error(sockaddr_nl*, nlmsgerr* err, void* arg) {
  take_answer(*static_cast<Conversation*>(arg),
              reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(err) - NLMSG_HDRLEN));
  // NL_OK, not NL_STOP: the answers to the requests after it are read on.
  return NL_OK;
}

int on_ack(nl_msg* msg, void* arg) {
  take_answer(*static_cast<Conversation*>(arg), nlmsg_hdr(msg));
  return NL_OK;
}

int on_finish(nl_msg* msg, void* arg) {
  auto* conversation = static_cast<Conversation*>(arg);
  if (Exchange* exchange = conversation->find(nlmsg_hdr(msg)->nlmsg_seq))
    conversation->finish(*exchange);
  return NL_STOP;
}

int on_valid(nl_msg* msg, void* arg) {
  Exchange* exchange = static_cast<Conversation*>(arg)->find(nlmsg_hdr(msg)->nlmsg_seq);
  if (exchange && exchange->on_message && !exchange->callback_failure) {
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

// How a send of several requests is named when the socket refuses it.
std::string describe_send(std::span<const NetlinkRequest> requests) {
  std::string out = "send " + requests.front().operation;
  if (requests.size() > 1) out += " and " + std::to_string(requests.size() - 1) + " more requests";
  return out;
}

// Sends `requests` (already completed: port, sequence number, flags) in one sendmsg.
void send_all(nl_sock* sock, std::span<const NetlinkRequest> requests) {
  std::vector<iovec> iov;
  for (const auto& r : requests) {
    nlmsghdr* hdr = nlmsg_hdr(r.msg);
    iov.push_back(iovec{hdr, hdr->nlmsg_len});
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  msghdr message{};
  message.msg_name = &kernel;
  message.msg_namelen = sizeof kernel;
  message.msg_iov = iov.data();
  message.msg_iovlen = iov.size();
  const int fd = nl_socket_get_fd(sock);
  long sent;
  do {
    sent = sendmsg(fd, &message, 0);
  } while (sent == -1 && errno == EINTR);
  check_syscall(sent, describe_send(requests), requests.front().object);
}

// Reads a dump's replies with libnl (multi-part, each message's size found by peeking) until its
// NLMSG_DONE or error.
void read_dump(nl_sock* sock, Conversation& conversation, const std::string& operation,
               const std::string& object) {
  struct CbDeleter {
    void operator()(nl_cb* cb) const { nl_cb_put(cb); }
  };
  std::unique_ptr<nl_cb, CbDeleter> cb(nl_cb_alloc(NL_CB_DEFAULT));
  if (!cb) throw SystemError("nl_cb_alloc", operation, ENOMEM);
  nl_cb_err(cb.get(), NL_CB_CUSTOM, on_error, &conversation);
  nl_cb_set(cb.get(), NL_CB_SEQ_CHECK, NL_CB_CUSTOM, on_seq_check, &conversation);
  nl_cb_set(cb.get(), NL_CB_ACK, NL_CB_CUSTOM, on_ack, &conversation);
  nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_valid, &conversation);
  nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, on_finish, &conversation);
  while (conversation.open > 0) {
    const int rc = nl_recvmsgs(sock, cb.get());
    if (rc < 0) check_libnl(rc, "receive " + operation, object);
  }
}

// Reads the ACKs of a send of requests until each is answered, as many datagrams to a recvmmsg as
// are queued: the kernel queued every ACK before sendmsg returned, so one call usually takes them
// all (libnl reads one per call). `buffer` is kept between calls.
void read_acks(int fd, Conversation& conversation, std::vector<char>& buffer,
               const std::string& operation, const std::string& object) {
  while (conversation.open > 0) {
    const std::size_t count = conversation.open;
    buffer.resize(count * kAckSize);
    std::vector<iovec> iov(count);
    std::vector<mmsghdr> datagrams(count);
    for (std::size_t i = 0; i < count; ++i) {
      iov[i] = iovec{buffer.data() + i * kAckSize, kAckSize};
      datagrams[i] = mmsghdr{};
      datagrams[i].msg_hdr.msg_iov = &iov[i];
      datagrams[i].msg_hdr.msg_iovlen = 1;
    }
    int received;
    do {
      received =
          recvmmsg(fd, datagrams.data(), static_cast<unsigned>(count), MSG_WAITFORONE, nullptr);
    } while (received == -1 && errno == EINTR);
    check_syscall(received, "receive " + operation, object);
    for (std::size_t i = 0; i < static_cast<std::size_t>(received); ++i) {
      const char* pos = buffer.data() + i * kAckSize;
      const char* end = pos + datagrams[i].msg_len;
      if (datagrams[i].msg_hdr.msg_flags & MSG_TRUNC) {
        // Larger than any ACK: a reply left over from a dump cut short, or a request's answer that
        // cannot be read (then that request fails, and says why).
        if (datagrams[i].msg_len < sizeof(nlmsghdr)) continue;
        if (Exchange* e = conversation.find(reinterpret_cast<const nlmsghdr*>(pos)->nlmsg_seq)) {
          e->error = EMSGSIZE;
          e->ext_ack = "its answer is larger than " + std::to_string(kAckSize) + " bytes";
          conversation.finish(*e);
        }
        continue;
      }
      while (pos + sizeof(nlmsghdr) <= end) {
        const auto* hdr = reinterpret_cast<const nlmsghdr*>(pos);
        if (hdr->nlmsg_len < sizeof(nlmsghdr) || pos + hdr->nlmsg_len > end) break;
        if (hdr->nlmsg_type == NLMSG_ERROR) take_answer(conversation, hdr);
        pos += NLMSG_ALIGN(hdr->nlmsg_len);
      }
    }
  }
}

}  // namespace

RouteSocket::RouteSocket() : sock_(nl_socket_alloc()) {
  if (!sock_) throw SystemError("nl_socket_alloc", "NETLINK_ROUTE", ENOMEM);
  check_libnl(nl_connect(sock_.get(), NETLINK_ROUTE), "connect", "NETLINK_ROUTE socket");
  const int fd = nl_socket_get_fd(sock_.get());
  const int one = 1;
  // Extended ACKs carry the kernel's reason ("netem: ..."); CAP_ACK stops the kernel from echoing
  // our whole request (up to 64 KiB with tables) back in every error.
  check_syscall(setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one),
                "setsockopt NETLINK_EXT_ACK", "NETLINK_ROUTE socket");
  check_syscall(setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one),
                "setsockopt NETLINK_CAP_ACK", "NETLINK_ROUTE socket");
}

NetlinkAck RouteSocket::request(nl_msg* msg, const std::string& operation,
                                const std::string& object) {
  const NetlinkRequest one{msg, operation, object};
  NetlinkReply reply = std::move(request_batch({&one, 1}).front());
  if (reply.error) throw *reply.error;
  return reply.ack;
}

std::vector<NetlinkReply> RouteSocket::request_batch(std::span<const NetlinkRequest> requests) {
  std::vector<NetlinkReply> replies(requests.size());
  int send_buffer = 0;
  socklen_t size = sizeof send_buffer;
  check_syscall(
      getsockopt(nl_socket_get_fd(sock_.get()), SOL_SOCKET, SO_SNDBUF, &send_buffer, &size),
      "getsockopt SO_SNDBUF", "NETLINK_ROUTE socket");
  const std::size_t send_limit = static_cast<std::size_t>(send_buffer) - kSendBufferSlack;
  std::size_t first = 0;
  while (first < requests.size()) {
    // As many as fit one sendmsg and the receive buffer's room for their ACKs (a message alone too
    // large goes alone, and the kernel says so).
    std::size_t end = first;
    std::size_t bytes = 0;
    Conversation conversation;
    while (end < requests.size() && end - first < kMaxRequestsInFlight) {
      nl_msg* msg = requests[end].msg;
      nlmsghdr* hdr = nlmsg_hdr(msg);
      if (end > first && bytes + hdr->nlmsg_len > send_limit) break;
      hdr->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
      // Our port, and a sequence number of our own: libnl's counters stay for the exchanges it
      // reads itself (dumps, rtnl_link_get_kernel), whose expected number must not run ahead of
      // them.
      hdr->nlmsg_pid = nl_socket_get_local_port(sock_.get());
      hdr->nlmsg_seq = next_seq_++;
      bytes += hdr->nlmsg_len;
      Exchange exchange;
      exchange.seq = hdr->nlmsg_seq;
      conversation.exchanges.push_back(std::move(exchange));
      ++end;
    }
    conversation.open = conversation.exchanges.size();
    send_all(sock_.get(), requests.subspan(first, end - first));
    read_acks(nl_socket_get_fd(sock_.get()), conversation, ack_buffer_, requests[first].operation,
              requests[first].object);
    for (std::size_t i = first; i < end; ++i) {
      const Exchange& exchange = conversation.exchanges[i - first];
      const NetlinkRequest& request = requests[i];
      if (exchange.error != 0) {
        replies[i].error.emplace(request.operation, request.object, exchange.error,
                                 exchange.ext_ack, hint_for(exchange.error));
      } else if (!exchange.acked) {
        replies[i].error.emplace(request.operation, request.object, EPROTO,
                                 "the kernel ended the exchange without an ACK");
      } else {
        replies[i].ack.warning = exchange.ext_ack;
      }
    }
    first = end;
  }
  return replies;
}

void RouteSocket::dump(nl_msg* msg, const std::string& operation, const std::string& object,
                       const std::function<void(const nlmsghdr&)>& on_message) {
  nlmsg_hdr(msg)->nlmsg_flags |= NLM_F_REQUEST | NLM_F_DUMP;
  nl_complete_msg(sock_.get(), msg);
  Conversation conversation;
  Exchange exchange;
  exchange.seq = nlmsg_hdr(msg)->nlmsg_seq;
  exchange.on_message = &on_message;
  conversation.exchanges.push_back(std::move(exchange));
  conversation.open = 1;
  const NetlinkRequest request{msg, operation, object};
  // Dumps of qdiscs with stats can exceed a page per message: libnl sizes each read by peeking
  // first (a second recvmsg per message, which the ACKs of requests, far below a page, do without).
  struct PeekOff {
    nl_sock* sock;
    ~PeekOff() { nl_socket_disable_msg_peek(sock); }
  } peek_off{sock_.get()};
  nl_socket_enable_msg_peek(sock_.get());
  send_all(sock_.get(), {&request, 1});
  read_dump(sock_.get(), conversation, operation, object);
  const Exchange& answer = conversation.exchanges.front();
  if (answer.error != 0) {
    throw NetlinkError(operation, object, answer.error, answer.ext_ack, hint_for(answer.error));
  }
  if (answer.callback_failure) std::rethrow_exception(answer.callback_failure);
}

void RouteSocket::dump_parsed(
    nl_msg* msg, const std::string& operation, const std::string& object, int reply_type,
    std::size_t header_size, int max_attr,
    const std::function<void(const nlmsghdr& hdr, nlattr* const* attrs)>& on_message) {
  std::vector<nlattr*> attrs(static_cast<std::size_t>(max_attr) + 1);
  dump(msg, operation, object, [&](const nlmsghdr& hdr) {
    if (hdr.nlmsg_type != reply_type) return;
    std::fill(attrs.begin(), attrs.end(), nullptr);
    if (nlmsg_parse(const_cast<nlmsghdr*>(&hdr), static_cast<int>(header_size), attrs.data(),
                    max_attr, nullptr) < 0) {
      throw NetlinkError(
          operation, object, EPROTO,
          "a reply (netlink message type " + std::to_string(reply_type) + ") does not parse");
    }
    on_message(hdr, attrs.data());
  });
}

}  // namespace shaper

namespace shaper {

std::uint32_t RouteSocket::local_port() const {
  return nl_socket_get_local_port(sock_.get());
}

}  // namespace shaper
