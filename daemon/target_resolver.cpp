#include "target_resolver.hpp"

#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include "container_engine.hpp"
#include "pod_target.hpp"
#include "shaper/errors.hpp"
#include "shaper/host_veth.hpp"
#include "shaper/netlink.hpp"
#include "shaper/network_namespace.hpp"

namespace jitterd {
namespace {

using protocol::ErrorCode;
using Refusal = protocol::Error;
template <typename T>
using Result = shaper::Expected<T, Refusal>;

// A SystemError about the target that the user can act on, as a refusal; nullopt for the rest
// (those are environment failures, thrown on).
std::optional<Refusal> refusal_of(const shaper::SystemError& e, const std::string& where) {
  switch (e.error_number()) {
    case ENOENT:
    case ENODEV:
    case ESRCH:
      return Refusal{ErrorCode::kNotFound, e.what(), where, e.hint()};
    case EPERM:
    case EACCES:
      return Refusal{ErrorCode::kPermissionDenied, e.what(), where, e.hint()};
    case EOPNOTSUPP:
    case EINVAL:
      return Refusal{ErrorCode::kInvalidParams, e.what(), where, e.hint()};
    default:
      return std::nullopt;
  }
}

// The target's namespace, and the process whose exit ends it (0: none, the target is a name).
struct Opened {
  shaper::NetworkNamespace ns;
  pid_t pid = 0;
};

// N of "/proc/N/ns/net", or 0.
pid_t pid_of_proc_path(const std::string& path) {
  constexpr std::string_view kPrefix = "/proc/";
  constexpr std::string_view kSuffix = "/ns/net";
  if (path.size() <= kPrefix.size() + kSuffix.size() || !path.starts_with(kPrefix) ||
      !path.ends_with(kSuffix)) {
    return 0;
  }
  const char* first = path.data() + kPrefix.size();
  const char* last = path.data() + path.size() - kSuffix.size();
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(first, last, pid);
  return error == std::errc() && end == last && pid > 0 ? pid : 0;
}

class NamespaceResolver final : public TargetResolver {
 public:
  explicit NamespaceResolver(const TargetsConfig& config)
      : sockets_(config.engine_sockets.empty() ? default_engine_sockets() : config.engine_sockets),
        cri_sockets_(config.cri_sockets.empty() ? default_cri_sockets() : config.cri_sockets),
        cri_timeout_(config.cri_timeout) {}

  Result<ResolvedTarget> resolve(const TargetRequest& target,
                                 const std::string& interface) override {
    const std::string via = target.via.empty() ? default_via() : target.via;
    if (via != protocol::kViaHostVeth && via != protocol::kViaInside) {
      return Refusal{ErrorCode::kInvalidParams,
                     "via \"" + via + "\" is not a way to reach a target", "/target/via",
                     "give \"inside\" (shape in the target's own namespace) or \"host-veth\" "
                     "(shape the target's veth peer in jitterd's namespace)"};
    }
    if (via == protocol::kViaInside && !can_enter_namespaces()) {
      return Refusal{ErrorCode::kPermissionDenied,
                     "via inside needs CAP_SYS_ADMIN (to enter the target's network namespace), "
                     "which this jitterd (uid " +
                         std::to_string(::geteuid()) + ") does not have",
                     "/target/via",
                     "grant it (the drop-in systemd/jitterd-targets.conf does), or give \"via\": "
                     "\"host-veth\" where the target has a veth peer in jitterd's namespace"};
    }
    auto opened = open_namespace(target);
    if (!opened) return std::move(opened.error());
    ResolvedTarget out;
    out.host_interface = interface;
    out.info = {target.kind,
                target.name,
                interface,
                protocol::Direction::kEgress,
                opened->ns.identity().to_string(),
                via};
    if (via == protocol::kViaInside) {
      out.pid = opened->pid;
      out.inside = std::move(opened->ns);
      return out;
    }
    try {
      shaper::RouteSocket inside = opened->ns.create_inside([] { return shaper::RouteSocket(); });
      shaper::RouteSocket host;
      const shaper::HostVeth pair =
          shaper::find_host_veth(inside, interface, host, opened->ns.description());
      out.host_interface = pair.host.name;
      return out;
    } catch (const shaper::SystemError& e) {
      const std::string where = e.operation() == "find host-side veth" ? "/interface" : "/target";
      if (auto refusal = refusal_of(e, where)) return std::move(*refusal);
      throw;
    }
  }

 private:
  Result<Opened> open_namespace(const TargetRequest& target) const {
    try {
      if (target.kind == "netns") {
        if (auto problem = shaper::netns_name_problem(target.name)) {
          return Refusal{ErrorCode::kInvalidParams, *problem, "/target/netns",
                         "give a name `ip netns list` shows"};
        }
        return Opened{shaper::NetworkNamespace::named(target.name), 0};
      }
      if (target.kind == "netns-path") {
        if (target.name.empty() || target.name.front() != '/') {
          return Refusal{ErrorCode::kInvalidParams,
                         "\"" + target.name + "\" is not an absolute path", "/target/netns_path",
                         "give the namespace's file, e.g. /proc/4242/ns/net or /run/netns/blue"};
        }
        return Opened{shaper::NetworkNamespace::at_path(target.name),
                      pid_of_proc_path(target.name)};
      }
      if (target.kind == "pid") return open_pid(target.name);
      if (target.kind == "pod") return open_pod(target.name);
      return open_container(target.name);
    } catch (const shaper::SystemError& e) {
      if (auto refusal = refusal_of(e, "/target")) return std::move(*refusal);
      throw;
    }
  }

  static Result<Opened> open_pid(const std::string& text) {
    pid_t pid = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
    if (error != std::errc() || end != text.data() + text.size() || pid <= 0) {
      return Refusal{ErrorCode::kInvalidParams, "\"" + text + "\" is not a process ID",
                     "/target/pid", "give a positive whole number"};
    }
    return Opened{shaper::NetworkNamespace::of_process(pid), pid};
  }

  // The container's namespace: the one its first process is in now (Docker keeps a SandboxKey of
  // a stopped container's old namespace, so the PID is what is trusted). When no Docker or Podman
  // socket knows it (none answers, or every one that answers says 404), the CRI runtime is asked
  // (pod_target.hpp: find_cri_container): a CRI container's namespace is its pod sandbox's.
  Result<Opened> open_container(const std::string& name) const {
    EnginesAsked engines;
    if (name.find('/') != std::string::npos) {  // NAMESPACE/POD/CONTAINER: only CRI knows pods
      if (auto problem = pod_container_problem(name)) {
        return Refusal{ErrorCode::kInvalidParams, *problem, "/target/container",
                       "give a name or ID `docker ps`, `podman ps` or `crictl ps` shows, or "
                       "NAMESPACE/POD/CONTAINER"};
      }
      return open_cri_container(name, engines);
    }
    if (auto problem = container_name_problem(name)) {
      return Refusal{ErrorCode::kInvalidParams, *problem, "/target/container",
                     "give the name or ID `docker ps`, `podman ps` or `crictl ps` shows"};
    }
    for (const std::string& socket : sockets_) {
      struct stat st {};
      if (::stat(socket.c_str(), &st) != 0) {
        engines.tried = joined(engines.tried, socket + ": no such socket");
        continue;
      }
      std::optional<ContainerInfo> info;
      try {
        info = EngineClient(socket).inspect(name);
      } catch (const shaper::SystemError& e) {  // no runtime answering there: the next one
        engines.tried = joined(engines.tried, e.what());
        engines.denied = engines.denied || e.error_number() == EACCES || e.error_number() == EPERM;
        continue;
      }
      engines.answered = true;
      if (!info) {
        engines.tried = joined(engines.tried, socket + ": no such container (404)");
        continue;
      }
      if (!info->running || info->pid <= 0) {
        return Refusal{ErrorCode::kConflict, "container " + name + " is not running",
                       "/target/container", "start it first (its namespace exists only then)"};
      }
      return Opened{shaper::NetworkNamespace::of_process(info->pid), info->pid};
    }
    return open_cri_container(name, engines);
  }

  Result<Opened> open_cri_container(const std::string& name, const EnginesAsked& engines) const {
    auto found = find_cri_container(cri_sockets_, name, engines, cri_timeout_);
    if (!found) return std::move(found.error());
    return open_sandbox(found->sandbox, "container " + name + " (pod " + found->pod + ")",
                        "/target/container");
  }

  Result<Opened> open_pod(const std::string& pod) const {
    auto found = find_pod_sandbox(cri_sockets_, pod, cri_timeout_);
    if (!found) return std::move(found.error());
    return open_sandbox(*found, "pod " + pod, "/target/pod");
  }

  // A pod sandbox's namespace: through its pid (the sandbox's process, watched for its end),
  // cross-checked with the path the runtime's spec names (pod_target.hpp says why). `what` names
  // the target in the refusal, `where` is its pointer.
  static Result<Opened> open_sandbox(const PodSandboxFound& found, const std::string& what,
                                     const std::string& where) {
    const SandboxInfo& info = found.info;
    if (info.pid <= 0) return Opened{shaper::NetworkNamespace::at_path(info.netns_path), 0};
    shaper::NetworkNamespace ns = shaper::NetworkNamespace::of_process(info.pid);
    if (!info.netns_path.empty()) {
      std::optional<shaper::NetworkNamespace> named;
      try {
        named = shaper::NetworkNamespace::at_path(info.netns_path);
      } catch (const shaper::SystemError&) {
        // Not visible here (a DaemonSet without the node's /run/netns): the pid alone decides.
      }
      if (named && named->identity() != ns.identity()) {
        return Refusal{ErrorCode::kConflict,
                       what + "'s sandbox process " + std::to_string(info.pid) +
                           " is not in the namespace its runtime names (" + info.netns_path + ", " +
                           named->identity().to_string() + "; the process is in " +
                           ns.identity().to_string() + ")",
                       where,
                       "jitterd must see the node's processes: run it in the node's PID namespace "
                       "(hostPID: true, as deploy/kubernetes/targets does)"};
      }
    }
    return Opened{std::move(ns), info.pid};
  }

  static std::string joined(const std::string& a, const std::string& b) {
    return a.empty() ? b : a + "; " + b;
  }

  std::vector<std::string> sockets_;
  std::vector<std::string> cri_sockets_;
  std::chrono::milliseconds cri_timeout_;
};

}  // namespace

bool can_enter_namespaces() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;  // this process
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  shaper::check_syscall(::syscall(SYS_capget, &header, data), "capget", "jitterd's capabilities");
  return (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}

std::string default_via() {
  return std::string(can_enter_namespaces() ? protocol::kViaInside : protocol::kViaHostVeth);
}

std::unique_ptr<TargetResolver> make_namespace_resolver(const TargetsConfig& config) {
  return std::make_unique<NamespaceResolver>(config);
}

}  // namespace jitterd
