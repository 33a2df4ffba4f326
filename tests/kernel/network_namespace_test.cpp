// NetworkNamespace against the real kernel: named namespaces made with `ip netns` (an independent
// tool), sockets created inside one that keep talking to it, identities, and the errors users meet.
// Needs root and network namespaces, not netem: runs on the development and CI hosts (label host)
// and skips elsewhere, saying why.
#include "shaper/network_namespace.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>

#include "../support/system_error_of.hpp"
#include "shaper/errors.hpp"
#include "shaper/host_veth.hpp"
#include "shaper/ifb.hpp"
#include "shaper/netlink.hpp"
#include "shaper/target_watch.hpp"
#include "test_network.hpp"

using namespace shaper;
using jitterd_test::run;
using test_support::system_error_of;

namespace {

std::optional<std::string> namespaces_unavailable() {
  if (geteuid() != 0) return "needs root to create network namespaces";
  try {
    run("ip netns add jdt-probe-" + std::to_string(getpid()));
    run("ip netns del jdt-probe-" + std::to_string(getpid()));
  } catch (const std::runtime_error& e) {
    return std::string("cannot create a network namespace with ip netns: ") + e.what();
  }
  return std::nullopt;
}

#define REQUIRE_NAMESPACES()                            \
  do {                                                  \
    if (const auto reason = namespaces_unavailable()) { \
      GTEST_SKIP() << *reason;                          \
    }                                                   \
  } while (0)

// A named namespace with one end of a veth pair in it ("jdtin"), the other ("jdtout") left in ours;
// removed at the end.
class NamedNamespace {
 public:
  NamedNamespace() : name_("jdt-" + std::to_string(getpid())) {
    run("ip netns add " + name_);
    run("ip link add jdtout type veth peer name jdtin netns " + name_);
  }
  ~NamedNamespace() {
    try {
      run("ip link del jdtout");
    } catch (const std::runtime_error&) {
    }
    try {
      run("ip netns del " + name_);
    } catch (const std::runtime_error&) {
    }
  }
  NamedNamespace(const NamedNamespace&) = delete;
  NamedNamespace& operator=(const NamedNamespace&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

bool has_link(RouteSocket& socket, const std::string& name) {
  const auto links = dump_links(socket);
  return std::any_of(links.begin(), links.end(),
                     [&](const LinkInfo& link) { return link.interface.name == name; });
}

}  // namespace

TEST(NetworkNamespace, ASocketCreatedInsideTalksToThatNamespace) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  const NetworkNamespace ns = NetworkNamespace::named(target.name());
  EXPECT_EQ(ns.description(), "netns " + target.name());
  EXPECT_EQ(ns.path(), "/run/netns/" + target.name());
  EXPECT_FALSE(ns.is_current());

  RouteSocket inside = ns.create_inside([] { return RouteSocket(); });
  RouteSocket here;
  EXPECT_TRUE(has_link(inside, "jdtin"));
  EXPECT_FALSE(has_link(inside, "jdtout"));
  EXPECT_TRUE(has_link(here, "jdtout"));
  EXPECT_FALSE(has_link(here, "jdtin"));
  // The caller's thread never moved.
  EXPECT_TRUE(NetworkNamespace::own().is_current());
}

TEST(NetworkNamespace, IdentityIsTheNsfsInodeAndOutlivesTheName) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  const NetworkNamespace ns = NetworkNamespace::named(target.name());
  struct stat status {};
  ASSERT_EQ(::stat(ns.path().c_str(), &status), 0);
  EXPECT_EQ(ns.identity(), (NamespaceIdentity{status.st_dev, status.st_ino}));
  EXPECT_EQ(ns.identity().to_string(), "net:[" + std::to_string(status.st_ino) + "]");
  EXPECT_NE(ns.identity(), NetworkNamespace::own().identity());

  // The same namespace reached another way has the same identity.
  const NetworkNamespace again = NetworkNamespace::at_path(ns.path());
  EXPECT_EQ(again.identity(), ns.identity());

  // Held open, the namespace survives its name: a socket created now still reaches its links.
  run("ip netns del " + target.name());
  RouteSocket inside = ns.create_inside([] { return RouteSocket(); });
  EXPECT_TRUE(has_link(inside, "jdtin"));
}

TEST(NetworkNamespace, OwnAndProcessNamespacesAreTheCurrentOne) {
  REQUIRE_NAMESPACES();
  EXPECT_TRUE(NetworkNamespace::own().is_current());
  const NetworkNamespace self = NetworkNamespace::of_process(getpid());
  EXPECT_TRUE(self.is_current());
  EXPECT_EQ(self.description(), "pid " + std::to_string(getpid()));
  EXPECT_EQ(self.identity(), NetworkNamespace::own().identity());
}

TEST(NetworkNamespace, ExceptionsFromInsideReachTheCaller) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  const NetworkNamespace ns = NetworkNamespace::named(target.name());
  EXPECT_THROW(ns.create_inside([]() -> int { throw std::logic_error("inside"); }),
               std::logic_error);
  EXPECT_EQ(ns.create_inside([] { return 42; }), 42);
}

TEST(NetworkNamespace, BadTargetsSayWhatIsWrongAndHowToFindTheRightOne) {
  REQUIRE_NAMESPACES();
  const auto [missing_errno, missing] =
      system_error_of([] { NetworkNamespace::named("jdt-no-such-namespace"); });
  EXPECT_EQ(missing_errno, ENOENT);
  EXPECT_NE(missing.find("open network namespace netns jdt-no-such-namespace "
                         "(/run/netns/jdt-no-such-namespace): No such file or directory"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("ip netns list"), std::string::npos) << missing;

  const auto [slash_errno, slash] = system_error_of([] { NetworkNamespace::named("a/b"); });
  EXPECT_EQ(slash_errno, EINVAL);
  EXPECT_NE(slash.find("cannot contain '/'"), std::string::npos) << slash;

  const auto [file_errno, file] =
      system_error_of([] { NetworkNamespace::at_path("/etc/hostname"); });
  EXPECT_EQ(file_errno, EINVAL);
  EXPECT_NE(file.find("not a namespace file"), std::string::npos) << file;

  const auto [kind_errno, kind] =
      system_error_of([] { NetworkNamespace::at_path("/proc/self/ns/uts"); });
  EXPECT_EQ(kind_errno, EINVAL);
  EXPECT_NE(kind.find("another kind of namespace"), std::string::npos) << kind;

  const auto [pid_errno, pid] = system_error_of([] { NetworkNamespace::of_process(0x3fffffff); });
  EXPECT_EQ(pid_errno, ENOENT);
  EXPECT_NE(pid.find("pid 1073741823 (/proc/1073741823/ns/net)"), std::string::npos) << pid;
}

TEST(NetworkNamespace, NameRules) {
  EXPECT_FALSE(netns_name_problem("blue"));
  EXPECT_FALSE(netns_name_problem("cni-1c6e2a4f-0d7b-83a2-5c1e-2f0e0a9d1b3c"));
  EXPECT_TRUE(netns_name_problem(""));
  EXPECT_TRUE(netns_name_problem("."));
  EXPECT_TRUE(netns_name_problem(".."));
  EXPECT_TRUE(netns_name_problem("../etc"));
  EXPECT_TRUE(netns_name_problem(std::string(256, 'n')));
  EXPECT_TRUE(netns_name_problem(std::string("a\0b", 3)));
}

TEST(HostVeth, TheContainersDeviceLeadsToItsPeerInOurNamespace) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  const NetworkNamespace ns = NetworkNamespace::named(target.name());
  RouteSocket inside = ns.create_inside([] { return RouteSocket(); });
  RouteSocket host;
  const HostVeth pair = find_host_veth(inside, "jdtin", host, ns.description());
  EXPECT_EQ(pair.inside.name, "jdtin");
  EXPECT_EQ(pair.host.name, "jdtout");
  // The indexes are the ones each namespace reports (an independent reader: ip's own numbering).
  const std::string host_line = run("ip -o link show jdtout");
  EXPECT_EQ(host_line.rfind(std::to_string(pair.host.index) + ": jdtout@", 0), 0u) << host_line;
  const std::string inside_line = run("ip -n " + target.name() + " -o link show jdtin");
  EXPECT_EQ(inside_line.rfind(std::to_string(pair.inside.index) + ": jdtin@", 0), 0u)
      << inside_line;
}

TEST(HostVeth, DevicesWithoutAHostSideAreRefusedWithWhatToDoInstead) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  const std::string n = target.name();
  run("ip -n " + n + " link add jdtl type veth peer name jdtr");  // both ends inside
  // A veth between the target and a third namespace, not ours.
  const std::string third = n + "-x";
  run("ip netns add " + third);
  struct Remove {
    std::string name;
    ~Remove() {
      try {
        run("ip netns del " + name);
      } catch (const std::runtime_error&) {
      }
    }
  } remove_third{third};
  run("ip -n " + n + " link add jdtx type veth peer name jdty netns " + third);
  const NetworkNamespace ns = NetworkNamespace::named(n);
  RouteSocket inside = ns.create_inside([] { return RouteSocket(); });
  RouteSocket host;
  const auto refusal = [&](const std::string& device) {
    return system_error_of([&] { find_host_veth(inside, device, host, ns.description()); });
  };

  const auto [none_errno, none] = refusal("eth9");
  EXPECT_EQ(none_errno, ENODEV);
  EXPECT_NE(none.find("find host-side veth (dev eth9 in netns " + n + ")"), std::string::npos)
      << none;
  EXPECT_NE(none.find("ip -n NAME link"), std::string::npos) << none;

  const auto [lo_errno, lo] = refusal("lo");
  EXPECT_EQ(lo_errno, EOPNOTSUPP);
  EXPECT_NE(lo.find("a physical or loopback device, not a veth"), std::string::npos) << lo;

  const auto [same_errno, same] = refusal("jdtl");
  EXPECT_EQ(same_errno, ENODEV);
  EXPECT_NE(same.find("peer is in the same namespace"), std::string::npos) << same;

  const auto [other_errno, other] = refusal("jdtx");
  EXPECT_EQ(other_errno, ENODEV);
  EXPECT_NE(other.find("not in jitterd's namespace"), std::string::npos) << other;
}

namespace {

// Whether `fd` becomes readable within `timeout_ms`.
bool readable_within(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

}  // namespace

TEST(TargetWatch, AProcessTargetIsGoneWhenTheProcessExits) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  TargetWatch watch = TargetWatch::process(child);
  EXPECT_EQ(watch.description(), "pid " + std::to_string(child));
  EXPECT_FALSE(readable_within(watch.fd(), 50));
  EXPECT_FALSE(watch.gone());
  ::kill(child, SIGKILL);
  EXPECT_TRUE(readable_within(watch.fd(), 5000));
  EXPECT_TRUE(watch.gone());
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(watch.gone());

  const auto [number, text] = system_error_of([&] { TargetWatch::process(child); });
  EXPECT_EQ(number, ESRCH);
  EXPECT_NE(text.find("already exited"), std::string::npos) << text;
}

TEST(TargetWatch, ANamedTargetIsGoneWhenItsNameIsRemovedOrReused) {
  REQUIRE_NAMESPACES();
  NamedNamespace target;
  {
    const NetworkNamespace ns = NetworkNamespace::named(target.name());
    TargetWatch watch = TargetWatch::named(ns);
    EXPECT_EQ(watch.description(), "netns " + target.name());
    EXPECT_FALSE(watch.gone());
    // Another namespace's name coming and going is not this one's end.
    run("ip netns add " + target.name() + "-other");
    run("ip netns del " + target.name() + "-other");
    EXPECT_FALSE(watch.gone());
    run("ip netns del " + target.name());
    EXPECT_TRUE(readable_within(watch.fd(), 5000));
    EXPECT_TRUE(watch.gone());
  }
  // The same name given to a new namespace (a restarted container's): still gone.
  run("ip netns add " + target.name());
  const NetworkNamespace first = NetworkNamespace::named(target.name());
  TargetWatch watch = TargetWatch::named(first);
  run("ip netns del " + target.name() + " && ip netns add " + target.name());
  EXPECT_TRUE(readable_within(watch.fd(), 5000));
  EXPECT_TRUE(watch.gone());
}
