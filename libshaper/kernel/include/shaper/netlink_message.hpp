#pragma once
// NetlinkMessage: the one builder of the kernel layer's requests. It owns the nl_msg and knows what
// it encodes ("netem qdisc"), so whatever does not fit fails the same way in every message:
// NetlinkError("encode netem qdisc", "attribute 13", EMSGSIZE, "message full"). Move-only; the
// message leaves it with release() for RouteSocket.

#include <linux/rtnetlink.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "shaper/netlink.hpp"

struct nlattr;

namespace shaper {

class NetlinkMessage {
 public:
  // An nlmsghdr of `type` and `flags` (NLM_F_REQUEST, NLM_F_ACK, the port and the sequence number
  // are RouteSocket's), with room for `payload_hint` bytes after it. `what` names the message in
  // errors: "encode <what>".
  NetlinkMessage(int type, int flags, std::string what, std::size_t payload_hint = 4096);

  // The family header after the nlmsghdr, or a bare struct at the head of an attribute's payload
  // (netem's tc_netem_qopt): `size` bytes, padded to NLMSG_ALIGNTO. `name` is the object of an
  // error.
  void append(const void* data, std::size_t size, const char* name);
  template <typename T>
  void append(const T& value, const char* name) {
    append(&value, sizeof value, name);
  }
  // A tcmsg (family AF_UNSPEC) as the family header.
  void append_tcmsg(int ifindex, std::uint32_t handle, std::uint32_t parent,
                    std::uint32_t info = 0);

  // One attribute: `size` bytes of `data`, a value's bytes, or a NUL-terminated string.
  void put(int type, const void* data, std::size_t size);
  template <typename T>
  void put_value(int type, const T& value) {
    put(type, &value, sizeof value);
  }
  void put_string(int type, const std::string& value);

  // A nest: attributes put between begin_nest and end_nest go inside it. end_nest sets its length;
  // a nest left empty is dropped (libnl's rule) unless `keep_empty`, and one longer than a netlink
  // attribute can be (65535 bytes) is an error.
  struct Nest {
    nlattr* start;
    int type;
  };
  Nest begin_nest(int type);
  void end_nest(Nest nest, bool keep_empty = false);

  nl_msg* get() const { return msg_.get(); }
  NlMsgPtr release() && { return std::move(msg_); }

 private:
  [[noreturn]] void fail(int type, int error_number, const std::string& why) const;

  NlMsgPtr msg_;
  std::string what_;
};

}  // namespace shaper
