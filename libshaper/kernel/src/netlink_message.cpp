#include "shaper/netlink_message.hpp"

#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "shaper/errors.hpp"

namespace shaper {

NetlinkMessage::NetlinkMessage(int type, int flags, std::string what, std::size_t payload_hint)
    // Room for the headers on top of the payload; libnl never grows a message by itself (a full
    // delay table needs ~33 KiB, libnl's default page-sized buffer would make nla_put fail).
    : msg_(nlmsg_alloc_size(payload_hint + 1024)), what_(std::move(what)) {
  if (!msg_) throw SystemError("nlmsg_alloc_size", std::to_string(payload_hint) + " bytes", ENOMEM);
  if (!nlmsg_put(msg_.get(), NL_AUTO_PORT, NL_AUTO_SEQ, type, 0, flags)) {
    throw SystemError("nlmsg_put", "netlink header", ENOMEM);
  }
}

void NetlinkMessage::fail(int type, int error_number, const std::string& why) const {
  throw NetlinkError("encode " + what_, "attribute " + std::to_string(type & NLA_TYPE_MASK),
                     error_number, why);
}

void NetlinkMessage::append(const void* data, std::size_t size, const char* name) {
  // nlmsg_append copies from a non-const pointer but does not write through it.
  if (nlmsg_append(msg_.get(), const_cast<void*>(data), size, NLMSG_ALIGNTO) < 0) {
    throw NetlinkError("encode " + what_, name, EMSGSIZE, "message full");
  }
}

void NetlinkMessage::append_tcmsg(int ifindex, std::uint32_t handle, std::uint32_t parent,
                                  std::uint32_t info) {
  tcmsg tcm{};
  tcm.tcm_family = AF_UNSPEC;
  tcm.tcm_ifindex = ifindex;
  tcm.tcm_handle = handle;
  tcm.tcm_parent = parent;
  tcm.tcm_info = info;
  append(tcm, "tcmsg");
}

void NetlinkMessage::put(int type, const void* data, std::size_t size) {
  if (nla_put(msg_.get(), type, static_cast<int>(size), data) < 0)
    fail(type, EMSGSIZE, "message full");
}

void NetlinkMessage::put_string(int type, const std::string& value) {
  // As nla_put_string: up to the first NUL, and the NUL.
  put(type, value.c_str(), std::strlen(value.c_str()) + 1);
}

NetlinkMessage::Nest NetlinkMessage::begin_nest(int type) {
  nlattr* start = nla_nest_start(msg_.get(), type);
  if (!start) fail(type, EMSGSIZE, "message full");
  return Nest{start, type};
}

void NetlinkMessage::end_nest(Nest nest, bool keep_empty) {
  // Fails only when the nest outgrew nla_len's 16 bits, and then has trimmed it away.
  const int rc = keep_empty ? nla_nest_end_keep_empty(msg_.get(), nest.start)
                            : nla_nest_end(msg_.get(), nest.start);
  if (rc < 0) fail(nest.type, E2BIG, "longer than the 65535 bytes of one netlink attribute");
}

}  // namespace shaper
