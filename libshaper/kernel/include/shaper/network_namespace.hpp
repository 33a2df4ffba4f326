#pragma once
// A network namespace to shape in other than jitterd's own (issue 23): an `ip netns` name, a
// process's namespace, or any nsfs file (a bind mount a runtime keeps, /proc/PID/ns/net).
//
// It is held by an open file descriptor, so the namespace checked at open is the one used later
// even if the name is reused, and it is identified by the device and inode of its nsfs file, which
// is what `ip netns identify` compares and what /proc/PID/ns/net reads as "net:[INODE]": a
// restarted container has a new namespace, hence a new inode, under the same name.
//
// Nothing stays inside it. Sockets belong to the namespace they were created in, for their whole
// life: a NETLINK_ROUTE socket created there talks to that namespace's links and qdiscs, an
// AF_UNIX socket created there resolves interface names (ethtool ioctls) there. create_inside()
// runs such a constructor on a short-lived thread that entered the namespace with setns(2), and
// hands the result back; no thread of the daemon stays in another namespace and no process
// (nsenter, tc) is started.

#include <sys/types.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "shaper/files.hpp"

namespace shaper {

struct NamespaceIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  friend bool operator==(const NamespaceIdentity&, const NamespaceIdentity&) = default;
  // "net:[4026532281]", as readlink(/proc/PID/ns/net) shows it.
  std::string to_string() const;
};

// Why `name` cannot be an `ip netns` name, or nullopt: iproute2 keeps them as files in /run/netns,
// so a name is one non-empty path component ("." and ".." and anything with '/' are refused).
std::optional<std::string> netns_name_problem(std::string_view name);

class NetworkNamespace {
 public:
  // The calling thread's own namespace.
  static NetworkNamespace own();
  // `ip netns add NAME`'s: /run/netns/NAME. `name` must pass netns_name_problem.
  static NetworkNamespace named(std::string_view name);
  // The namespace process `pid` is in: /proc/PID/ns/net (needs ptrace access to that process).
  static NetworkNamespace of_process(pid_t pid);
  // Any nsfs file of a network namespace: a runtime's bind mount, /proc/PID/ns/net, a path under
  // /run/netns.
  static NetworkNamespace at_path(const std::string& path);
  // The namespace whose nsfs file has `identity`, if anything still holds it: `first` (where it
  // was last seen: /run/netns/NAME, /proc/PID/ns/net) if that still gives it, else any `ip netns`
  // name or process that is in it (a scan of /run/netns and /proc). nullopt: nothing this process
  // can see holds it, so it is gone (an nsfs inode is reused only after its namespace is freed).
  // Crash recovery uses it to re-enter a target by its identity, not by a name that may now name
  // another namespace.
  static std::optional<NetworkNamespace> find(const NamespaceIdentity& identity,
                                              const std::string& first);

  NetworkNamespace(NetworkNamespace&&) noexcept = default;
  NetworkNamespace& operator=(NetworkNamespace&&) noexcept = default;
  NetworkNamespace(const NetworkNamespace&) = delete;
  NetworkNamespace& operator=(const NetworkNamespace&) = delete;
  ~NetworkNamespace() = default;

  const NamespaceIdentity& identity() const { return identity_; }
  // How the user named it, for messages: "netns blue", "pid 4242", "/var/run/docker/netns/3f2a".
  const std::string& description() const { return description_; }
  // The file it was opened from.
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

  // Whether this is the namespace the calling thread is in.
  bool is_current() const;

  // The kernel's cookie of this namespace (SO_NETNS_COOKIE, Linux 5.14), read from a socket created
  // inside it: unlike the inode, which the next namespace may be given as soon as this one is
  // freed (`ip netns del x; ip netns add x` often gets the same number), a cookie is never reused
  // while the machine runs. nullopt on kernels without it. Throws like create_inside.
  std::optional<std::uint64_t> cookie() const;

  // `make()` called on a thread that entered this namespace; its result (a socket, say) is handed
  // back, its exception rethrown here. Throws SystemError naming the namespace when it cannot be
  // entered (EPERM: entering another network namespace needs CAP_SYS_ADMIN).
  template <class F>
  auto create_inside(F&& make) const -> decltype(make());

 private:
  NetworkNamespace(UniqueFd fd, std::string path, std::string description);
  // setns(2) into this namespace, from the calling thread; throws SystemError.
  void enter_from_this_thread() const;

  UniqueFd fd_;
  std::string path_;
  std::string description_;
  NamespaceIdentity identity_;
};

template <class F>
auto NetworkNamespace::create_inside(F&& make) const -> decltype(make()) {
  using Result = decltype(make());
  std::optional<Result> result;
  std::exception_ptr failure;
  // A thread of its own, so that the caller's thread never changes namespace; it ends here, so
  // nothing outlives this call inside the namespace but what `make` created.
  std::thread worker([&] {
    try {
      enter_from_this_thread();
      result.emplace(make());
    } catch (...) {
      failure = std::current_exception();
    }
  });
  worker.join();
  if (failure) std::rethrow_exception(failure);
  return std::move(*result);
}

}  // namespace shaper
