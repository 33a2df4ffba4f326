#pragma once
// `--via inside` (issue 23, part 2): shaping in a target's own network namespace without starting
// anything. Each target namespace in use (by device and inode) is a Place holding, until its last
// session ends:
//  - the namespace, open, and the claim "@jitterd/netns" bound inside it (namespace_claim.hpp), so
//    that a jitterd started in there refuses, and a jitterd already running there makes this refuse
//    (both would take the other's 1a7e: qdiscs for leftovers);
//  - a KernelBackend and a NetlinkMonitor on NETLINK_ROUTE sockets created by a short-lived thread
//    that entered the namespace (NetworkNamespace::create_inside): a socket stays bound to the
//    namespace it was created in, so every request and notification is that namespace's, and an
//    ingress IFB is created there;
//  - a SessionManager of its own, with a ledger file of its own that names the namespace by device
//    and inode (ledger.hpp), for recovery after kill -9;
//  - a watch on the target's end (shaper::TargetWatch: the process exits, the `ip netns` name
//  goes).
//    The open sockets keep the namespace alive, so its end is seen there, not as its interfaces
//    going: the sessions end with `target-gone`, what they installed is removed, and the place is
//    closed, which lets the namespace go.
// Everything runs on the io_context thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "asio.hpp"
#include "config.hpp"
#include "events.hpp"
#include "inside_places.hpp"
#include "logger.hpp"

namespace jitterd {

class InsideTargets final : public InsidePlaces {
 public:
  InsideTargets(asio::io_context& io, EventBus& bus, const Config& config, Logger& log);
  InsideTargets(const InsideTargets&) = delete;
  InsideTargets& operator=(const InsideTargets&) = delete;
  ~InsideTargets() override;

  Outcome<SessionManager*> open(ResolvedTarget& target) override;
  SessionManager* find(const ResolvedTarget& target) override;
  std::vector<SessionManager*> all() override;
  SessionMetrics metrics() const override;
  void release_idle_soon() override;

  // Startup: every target ledger an earlier jitterd left in the state folder. A namespace that
  // still exists (found by its device and inode, wherever it is now) is entered and what that
  // jitterd installed there is removed; one that is gone is said to be gone (what was inside went
  // with it). Either way the file goes. Failures are logged, never thrown.
  void recover();
  // SIGTERM: every place's sessions removed, every place closed.
  void shutdown();
  std::size_t places() const { return places_.size(); }

 private:
  struct Place;
  // A place for namespace `ns` (`target` names it in the ledger), without a watch: throws on
  // environment failures, SystemError EBUSY when another jitterd holds the namespace.
  std::unique_ptr<Place> make_place(shaper::NetworkNamespace ns, const LedgerTarget& target);
  // Waits for the target's end (re-armed after a false alarm: another name in /run/netns).
  void watch_target(Place& place, const std::string& key);
  void on_target_gone(const std::string& key);
  void release_idle();
  void recover_file(const std::string& path);

  asio::io_context& io_;
  EventBus& bus_;
  Config config_;  // the daemon's, with recovery "remove": nothing inside a target is adopted
  Logger& log_;
  std::map<std::string, std::unique_ptr<Place>> places_;  // by "device-inode"
  SessionMetrics closed_;                                 // what the places closed so far counted
  bool release_posted_ = false;
  std::uint64_t subscription_ = 0;
};

}  // namespace jitterd
