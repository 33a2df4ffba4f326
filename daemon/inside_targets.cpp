#include "inside_targets.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "kernel_backend.hpp"
#include "ledger.hpp"
#include "namespace_claim.hpp"
#include "netlink_monitor.hpp"
#include "shaper/errors.hpp"
#include "shaper/target_watch.hpp"

namespace jitterd {
namespace {

std::string key_of(const shaper::NamespaceIdentity& identity) {
  return std::to_string(identity.device) + "-" + std::to_string(identity.inode);
}

// "netns blue (net:[4026532281])", for the log.
std::string describe(const LedgerTarget& target) {
  return target.kind + " " + target.name + " (net:[" + std::to_string(target.inode) + "])";
}

}  // namespace

// Declared in the order they are made; destroyed the other way round: the watch and the monitor
// (which call the sessions) first, the sessions before the ledger and the backend they use, the
// backend's sockets before the claim and the namespace.
struct InsideTargets::Place {
  explicit Place(shaper::NetworkNamespace n, LedgerTarget t)
      : ns(std::move(n)), target(std::move(t)) {}
  shaper::NetworkNamespace ns;
  LedgerTarget target;
  std::optional<NamespaceClaim> claim;
  std::unique_ptr<KernelBackend> backend;
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<SessionManager> sessions;
  std::unique_ptr<NetlinkMonitor> monitor;
  std::optional<shaper::TargetWatch> watch;
  // On a duplicate of the watch's descriptor (a stream_descriptor closes what it holds).
  std::unique_ptr<asio::posix::stream_descriptor> watch_wait;
};

InsideTargets::InsideTargets(asio::io_context& io, EventBus& bus, const Config& config, Logger& log)
    : io_(io), bus_(bus), config_(config), log_(log) {
  // A session inside a target is started by a request naming the target; an earlier jitterd's
  // qdisc there has no target to adopt it under.
  config_.recovery = Recovery::kRemove;
  // Sessions inside a target also end without a request (a lease, a rollback, the end of a
  // schedule, the interface going): each such end may leave its place empty.
  subscription_ = bus_.subscribe([this](const Event& e) {
    if (e.target && e.target->via == protocol::kViaInside) release_idle_soon();
  });
}

InsideTargets::~InsideTargets() {
  bus_.unsubscribe(subscription_);
}

std::unique_ptr<InsideTargets::Place> InsideTargets::make_place(shaper::NetworkNamespace ns,
                                                                const LedgerTarget& target) {
  auto place = std::make_unique<Place>(std::move(ns), target);
  auto claim = place->ns.create_inside([] { return NamespaceClaim::acquire(); });
  for (const auto& warning : claim.diagnostics()) log_.warning(warning.to_string());
  place->claim.emplace(std::move(*claim));
  place->backend = std::make_unique<KernelBackend>(
      place->ns.create_inside([] { return shaper::RouteSocket(); }), config_.switch_gate);
  place->ledger = std::make_unique<Ledger>(config_.state_dir, target);
  place->sessions = std::make_unique<SessionManager>(io_.get_executor(), *place->backend,
                                                     *place->ledger, bus_, config_, log_);
  place->monitor =
      std::make_unique<NetlinkMonitor>(io_, *place->sessions, *place->backend, log_,
                                       place->ns.create_inside(&NetlinkMonitor::open_socket));
  place->monitor->start();
  return place;
}

Outcome<SessionManager*> InsideTargets::open(ResolvedTarget& target) {
  const std::string key = key_of(target.inside->identity());
  if (auto it = places_.find(key); it != places_.end()) return it->second->sessions.get();
  const std::string what = target.info.kind + " " + target.info.name;
  if (target.inside->is_current()) {
    return RequestError{ErrorCode::kInvalidParams, what + " is jitterd's own network namespace",
                        "/params/target",
                        "name the interface without a target: jitterd shapes its own namespace "
                        "directly"};
  }
  LedgerTarget named;
  named.kind = target.info.kind;
  named.name = target.info.name;
  named.path = target.inside->path();
  named.device = target.inside->identity().device;
  named.inode = target.inside->identity().inode;
  named.cookie = target.inside->cookie().value_or(0);
  std::optional<shaper::TargetWatch> watch;
  try {
    if (target.pid > 0) {
      watch = shaper::TargetWatch::process(target.pid);
    } else if (named.path.starts_with("/run/netns/")) {
      watch = shaper::TargetWatch::named(*target.inside);
    }
  } catch (const shaper::SystemError& e) {
    if (e.error_number() != ESRCH) throw;
    return RequestError{ErrorCode::kNotFound, what + " has gone: " + e.what(), "/params/target",
                        ""};
  }
  std::unique_ptr<Place> place;
  try {
    place = make_place(std::move(*target.inside), named);
  } catch (const shaper::SystemError& e) {
    if (e.error_number() != EADDRINUSE) throw;
    // Its qdiscs would carry the same handle as ours: each would take the other's for leftovers.
    return RequestError{ErrorCode::kConflict, what + ": " + e.what(), "/params/target",
                        "shape it through the jitterd that runs there, or give \"via\": "
                        "\"host-veth\""};
  }
  target.inside.reset();
  place->watch = std::move(watch);
  log_.info("shaping inside " + describe(named) + " through sockets created there");
  Place& held = *(places_[key] = std::move(place));
  watch_target(held, key);
  return held.sessions.get();
}

SessionManager* InsideTargets::find(const ResolvedTarget& target) {
  auto it = places_.find(key_of(target.inside->identity()));
  return it == places_.end() ? nullptr : it->second->sessions.get();
}

std::vector<SessionManager*> InsideTargets::all() {
  std::vector<SessionManager*> out;
  for (auto& [key, place] : places_) out.push_back(place->sessions.get());
  return out;
}

void InsideTargets::watch_target(Place& place, const std::string& key) {
  if (!place.watch) return;
  if (!place.watch_wait) {
    const int fd = static_cast<int>(
        shaper::check_syscall(::fcntl(place.watch->fd(), F_DUPFD_CLOEXEC, 0), "dup",
                              "the watch on " + place.watch->description()));
    place.watch_wait = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  }
  place.watch_wait->async_wait(asio::posix::stream_descriptor::wait_read,
                               [this, key](const boost::system::error_code& ec) {
                                 if (ec) return;  // closed with its place
                                 auto it = places_.find(key);
                                 if (it == places_.end()) return;
                                 if (it->second->watch->gone()) {
                                   on_target_gone(key);
                                 } else {
                                   watch_target(*it->second, key);
                                 }
                               });
}

void InsideTargets::on_target_gone(const std::string& key) {
  Place& place = *places_.at(key);
  log_.info(describe(place.target) + " has gone; ending its sessions");
  place.sessions->end_target();
  release_idle_soon();
}

SessionMetrics InsideTargets::metrics() const {
  SessionMetrics sum = closed_;
  for (const auto& [key, place] : places_) sum += place->sessions->metrics();
  return sum;
}

void InsideTargets::release_idle_soon() {
  if (release_posted_) return;
  release_posted_ = true;
  asio::post(io_, [this] {
    release_posted_ = false;
    release_idle();
  });
}

void InsideTargets::release_idle() {
  for (auto it = places_.begin(); it != places_.end();) {
    if (it->second->sessions->session_count() != 0) {
      ++it;
      continue;
    }
    log_.info("nothing shaped inside " + describe(it->second->target) + " any more; let go of it");
    it->second->monitor->stop();
    it->second->ledger->discard();
    closed_ += it->second->sessions->metrics();
    it = places_.erase(it);
  }
}

void InsideTargets::shutdown() {
  for (auto& [key, place] : places_) {
    place->sessions->shutdown();
    place->monitor->stop();
    place->ledger->discard();
  }
  places_.clear();
}

void InsideTargets::recover() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(config_.state_dir.c_str()), &::closedir);
  if (!dir) return;  // no state folder yet: nothing was left
  std::vector<std::string> files;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name.starts_with(Ledger::kTargetPrefix) && name.ends_with(".json")) {
      files.push_back(config_.state_dir + "/" + name);
    }
  }
  for (const std::string& path : files) recover_file(path);
}

void InsideTargets::recover_file(const std::string& path) {
  try {
    const auto loaded = Ledger::load_file(path);
    for (const auto& warning : loaded.diagnostics()) log_.warning(warning.to_string());
    if (!loaded->target) {
      log_.warning(path + " names no target namespace; removing it");
      ::unlink(path.c_str());
      return;
    }
    const LedgerTarget& target = *loaded->target;
    const shaper::NamespaceIdentity identity{static_cast<dev_t>(target.device),
                                             static_cast<ino_t>(target.inode)};
    auto ns = shaper::NetworkNamespace::find(identity, target.path);
    // The inode of a freed namespace is given to the next one: the cookie says which it is.
    const bool reused = ns && target.cookie != 0 && ns->cookie().value_or(0) != target.cookie;
    if (!ns || reused || ns->is_current()) {
      log_.info("recovery: " + describe(target) +
                ", shaped from inside by an earlier jitterd, is gone" +
                (reused ? " (its inode now names a newer namespace, left alone)" : "") +
                "; what was installed in it went with it, nothing is left to remove");
      ::unlink(path.c_str());
      return;
    }
    log_.info("recovery: " + describe(target) + " is still there (as " + ns->path() +
              "); removing what an earlier jitterd installed in it");
    const auto place = make_place(std::move(*ns), target);
    place->sessions->recover();
    place->monitor->stop();
    place->ledger->discard();
  } catch (const std::exception& e) {
    log_.error("recovery of " + path + " failed: " + e.what() +
               "; the file stays for the next start");
  }
}

}  // namespace jitterd
