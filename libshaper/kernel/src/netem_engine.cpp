#include "shaper/netem_engine.hpp"

#include <linux/gen_stats.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/route/link.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "shaper/distribution_tables.hpp"
#include "shaper/errors.hpp"
#include "shaper/ifb.hpp"
#include "shaper/kernel_units.hpp"
#include "shaper/netlink_message.hpp"

namespace shaper {

namespace {

std::string describe(const Interface& interface) {
  return "dev " + interface.name + " handle " + format_handle(kJitterdRootHandle);
}

std::string hint_for_netem(int error_number, const std::string& kernel_message) {
  // A kernel without sch_netem answers ENOENT ("Specified qdisc kind is unknown") once module
  // auto-loading has failed.
  if (error_number == ENOENT || kernel_message.find("unknown") != std::string::npos) {
    return "This kernel has no netem qdisc: load it with `modprobe sch_netem` (on Ubuntu, install "
           "linux-modules-extra-$(uname -r) first; on Debian it comes with linux-image-$(uname "
           "-r))";
  }
  return {};
}

NetlinkError with_netem_hint(const NetlinkError& e) {
  const std::string hint = hint_for_netem(e.error_number(), e.kernel_message());
  if (hint.empty() || !e.hint().empty()) return e;
  return NetlinkError(e.operation(), e.object(), e.error_number(), e.kernel_message(), hint);
}

QdiscStats decode_stats(const nlattr* stats2) {
  QdiscStats out;
  nlattr* tb[TCA_STATS_MAX + 1] = {};
  if (nla_parse_nested(tb, TCA_STATS_MAX, const_cast<nlattr*>(stats2), nullptr) < 0) return out;
  if (tb[TCA_STATS_BASIC] &&
      nla_len(tb[TCA_STATS_BASIC]) >= static_cast<int>(sizeof(gnet_stats_basic))) {
    gnet_stats_basic basic;
    std::memcpy(&basic, nla_data(tb[TCA_STATS_BASIC]), sizeof basic);
    out.bytes = basic.bytes;
    out.packets = basic.packets;
  }
  // The basic block's packet count is 32-bit; kernels since 5.x add the full 64-bit count.
  if (tb[TCA_STATS_PKT64] && nla_len(tb[TCA_STATS_PKT64]) >= 8) {
    std::memcpy(&out.packets, nla_data(tb[TCA_STATS_PKT64]), 8);
  }
  if (tb[TCA_STATS_QUEUE] &&
      nla_len(tb[TCA_STATS_QUEUE]) >= static_cast<int>(sizeof(gnet_stats_queue))) {
    gnet_stats_queue queue;
    std::memcpy(&queue, nla_data(tb[TCA_STATS_QUEUE]), sizeof queue);
    out.qlen = queue.qlen;
    out.backlog = queue.backlog;
    out.drops = queue.drops;
    out.requeues = queue.requeues;
    out.overlimits = queue.overlimits;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// NetemQdisc

NetemQdisc::NetemQdisc(NetemEngine& engine, Interface interface, NetemSpec applied,
                       bool tables_known)
    : engine_(&engine),
      interface_(std::move(interface)),
      applied_(std::move(applied)),
      tables_known_(tables_known) {}

NetemQdisc::NetemQdisc(NetemQdisc&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      interface_(std::move(other.interface_)),
      applied_(std::move(other.applied_)),
      tables_known_(other.tables_known_) {}

NetemQdisc& NetemQdisc::operator=(NetemQdisc&& other) noexcept {
  if (this != &other) {
    remove_quietly();
    engine_ = std::exchange(other.engine_, nullptr);
    interface_ = std::move(other.interface_);
    applied_ = std::move(other.applied_);
    tables_known_ = other.tables_known_;
  }
  return *this;
}

NetemQdisc::~NetemQdisc() {
  remove_quietly();
}

void NetemQdisc::remove_quietly() noexcept {
  if (!engine_) return;
  try {
    remove();
  } catch (const std::exception& e) {
    // Never throw from a destructor or a move; the interface may be gone already, which is fine.
    std::fprintf(stderr, "jitterd: cleanup: %s\n", e.what());
  }
}

void NetemQdisc::change(const NetemSpec& spec) {
  if (!engine_) throw OwnershipError("netem change (" + describe(interface_) + "): not owned");
  std::vector<PreparedChange> one;
  one.push_back(prepare_change(spec));
  if (auto error = engine_->change(one).front()) throw *error;
}

PreparedChange NetemQdisc::prepare_change(const NetemSpec& spec) {
  if (!engine_) throw OwnershipError("netem change (" + describe(interface_) + "): not owned");
  auto diagnostics = validate(spec);
  if (!diagnostics.empty()) throw std::invalid_argument(to_string(diagnostics));
  ChangePlan plan = plan_change(applied_, spec, tables_known_);
  PreparedChange prepared;
  // Flags 0: change in place. Without NLM_F_CREATE the kernel refuses (ENOENT) if our handle is no
  // longer there, so a qdisc someone else put in its place is never touched.
  prepared.message = build_netem_message(interface_.index, kJitterdRootHandle, TC_H_ROOT, 0,
                                         plan.to_send, plan.encode);
  prepared.object = describe(interface_);
  prepared.applied = [this, sent = std::move(plan.to_send)]() mutable {
    applied_ = std::move(sent);
    tables_known_ = true;
  };
  prepared.explain = with_netem_hint;
  return prepared;
}

void NetemQdisc::remove() {
  if (!engine_) return;
  NetemEngine* engine = std::exchange(engine_, nullptr);
  engine->delete_root(interface_);
}

// ---------------------------------------------------------------------------------------------
// NetemEngine

Interface NetemEngine::resolve(const InterfaceRef& ref) {
  rtnl_link* raw = nullptr;
  const int index = std::holds_alternative<int>(ref) ? std::get<int>(ref) : 0;
  const std::string name =
      std::holds_alternative<std::string>(ref) ? std::get<std::string>(ref) : "";
  const std::string object = index ? "ifindex " + std::to_string(index) : "dev " + name;
  if (!index && (name.empty() || name.size() >= 16)) {
    throw NetlinkError("resolve interface", object, EINVAL,
                       "interface names are 1 to 15 characters");
  }
  const int rc = rtnl_link_get_kernel(socket_->get(), index, index ? nullptr : name.c_str(), &raw);
  RtnlLinkPtr link(raw);
  if (rc < 0) {
    throw NetlinkError("resolve interface", object, ENODEV,
                       "no such interface in this network namespace (libnl: " +
                           std::string(nl_geterror(rc)) + ")");
  }
  return Interface{rtnl_link_get_ifindex(link.get()), rtnl_link_get_name(link.get())};
}

std::vector<QdiscInfo> NetemEngine::dump_qdiscs(int ifindex, const std::string& object) {
  NetlinkMessage msg(RTM_GETQDISC, 0, "qdisc dump");
  msg.append_tcmsg(ifindex, 0, 0);

  std::vector<QdiscInfo> out;
  socket_->dump_parsed(msg.get(), "qdisc dump", object, RTM_NEWQDISC, sizeof(tcmsg), TCA_MAX,
                       [&](const nlmsghdr& hdr, nlattr* const* tb) {
                         const auto* t = static_cast<const tcmsg*>(nlmsg_data(&hdr));
                         // Kernels dump every device's qdiscs whatever the filter says; keep the
                         // one asked for.
                         if (ifindex != 0 && t->tcm_ifindex != ifindex) return;
                         QdiscInfo info;
                         info.ifindex = t->tcm_ifindex;
                         info.handle = t->tcm_handle;
                         info.parent = t->tcm_parent;
                         if (tb[TCA_KIND]) info.kind = nla_get_string(tb[TCA_KIND]);
                         if (tb[TCA_STATS2]) info.stats = decode_stats(tb[TCA_STATS2]);
                         if (info.kind == "netem" && tb[TCA_OPTIONS]) {
                           const auto* data =
                               static_cast<const std::byte*>(nla_data(tb[TCA_OPTIONS]));
                           info.netem = decode_netem_options(
                               {data, static_cast<std::size_t>(nla_len(tb[TCA_OPTIONS]))},
                               "qdisc dump", object + " handle " + format_handle(info.handle));
                         }
                         out.push_back(std::move(info));
                       });
  return out;
}

std::vector<QdiscInfo> NetemEngine::qdiscs(const Interface& interface) {
  return dump_qdiscs(interface.index, "dev " + interface.name);
}

std::vector<QdiscInfo> NetemEngine::all_qdiscs() {
  return dump_qdiscs(0, "all devices");
}

std::vector<QdiscInfo> NetemEngine::all_root_qdiscs() {
  std::vector<QdiscInfo> out;
  for (auto& q : dump_qdiscs(0, "all devices")) {
    if (q.is_root()) out.push_back(std::move(q));
  }
  return out;
}

std::vector<Interface> NetemEngine::interfaces() {
  std::vector<Interface> out;
  for (auto& link : dump_links(*socket_)) out.push_back(std::move(link.interface));
  return out;
}

std::optional<QdiscInfo> NetemEngine::root_qdisc(const Interface& interface) {
  for (auto& q : qdiscs(interface)) {
    if (q.is_root()) return std::move(q);
  }
  return std::nullopt;
}

void NetemEngine::send_netem(const Interface& interface, const NetemSpec& spec,
                             const NetemEncodePlan& plan, int flags, const char* operation) {
  NlMsgPtr msg =
      build_netem_message(interface.index, kJitterdRootHandle, TC_H_ROOT, flags, spec, plan);
  try {
    socket_->request(msg.get(), operation, describe(interface));
  } catch (const NetlinkError& e) {
    throw with_netem_hint(e);
  }
}

std::vector<std::optional<NetlinkError>> NetemEngine::change(std::vector<PreparedChange>& changes) {
  std::vector<NetlinkRequest> requests;
  requests.reserve(changes.size());
  for (const auto& c : changes)
    requests.push_back(NetlinkRequest{c.message.get(), "netem change", c.object});
  std::vector<NetlinkReply> replies = socket_->request_batch(requests);
  std::vector<std::optional<NetlinkError>> out(changes.size());
  for (std::size_t i = 0; i < changes.size(); ++i) {
    if (replies[i].ok()) {
      changes[i].applied();
    } else {
      out[i] = changes[i].explain ? changes[i].explain(*replies[i].error) : *replies[i].error;
    }
  }
  return out;
}

NetemQdisc NetemEngine::install(const Interface& interface, const NetemSpec& spec,
                                const InstallOptions& options) {
  auto diagnostics = validate(spec);
  if (!diagnostics.empty()) throw std::invalid_argument(to_string(diagnostics));

  const int flags =
      root_install_flags(interface, options, "netem install (" + describe(interface) + ")",
                         "; change it, or adopt it after a restart");
  NetemEncodePlan plan;  // fresh qdisc: every table, full loss model
  send_netem(interface, spec, plan, flags, "netem install");
  return NetemQdisc(*this, interface, spec, /*tables_known=*/true);
}

int NetemEngine::root_install_flags(const Interface& interface, const InstallOptions& options,
                                    const std::string& what, const std::string& ours_hint) {
  auto root = root_qdisc(interface);
  if (!root) return NLM_F_CREATE | NLM_F_EXCL;
  if (root->is_jitterd())
    throw OwnershipError(what + ": jitterd's qdisc is already installed there" + ours_hint);
  if (root->is_default()) return NLM_F_CREATE | NLM_F_EXCL;
  if (!options.force) {
    throw OwnershipError(what + ": the root qdisc is " + root->kind + " " +
                         format_handle(root->handle) +
                         ", installed by someone else; jitterd leaves it alone. Remove it "
                         "yourself, or force the install to replace it (its queue is dropped)");
  }
  // Replace grafts our qdisc in place of theirs in one step.
  return NLM_F_CREATE | NLM_F_REPLACE;
}

std::optional<NetemQdisc> NetemEngine::adopt(const Interface& interface) {
  auto root = root_qdisc(interface);
  if (!root || !root->is_jitterd() || !root->netem) return std::nullopt;
  return NetemQdisc(*this, interface, root->netem->spec, /*tables_known=*/false);
}

bool NetemEngine::remove_if_ours(const Interface& interface) {
  auto root = root_qdisc(interface);
  if (!root || !root->is_jitterd()) return false;
  delete_root(interface);
  return true;
}

void NetemEngine::delete_root(const Interface& interface) {
  NetlinkMessage msg(RTM_DELQDISC, 0, "netem remove");
  // Naming our handle makes the kernel refuse ("Specified qdisc handle not found" or similar) if
  // the root is not ours, instead of deleting whatever is there.
  msg.append_tcmsg(interface.index, kJitterdRootHandle, TC_H_ROOT);
  socket_->request(msg.get(), "netem remove", describe(interface));
}

}  // namespace shaper
