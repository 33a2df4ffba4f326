#include "target_resolver.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <optional>
#include <utility>

#include "container_engine.hpp"
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

class NamespaceResolver final : public TargetResolver {
 public:
  explicit NamespaceResolver(const TargetsConfig& config)
      : sockets_(config.engine_sockets.empty() ? default_engine_sockets() : config.engine_sockets) {
  }

  Result<ResolvedTarget> resolve(const TargetRequest& target,
                                 const std::string& interface) override {
    if (target.via != "host-veth") {
      return Refusal{ErrorCode::kInvalidParams,
                     "via \"" + target.via + "\" is not a way to reach a target", "/target/via",
                     "give \"host-veth\" (shape the target's veth peer in jitterd's namespace); "
                     "shaping inside the target's namespace is not built yet"};
    }
    auto ns = open_namespace(target);
    if (!ns) return std::move(ns.error());
    try {
      shaper::RouteSocket inside = ns->create_inside([] { return shaper::RouteSocket(); });
      shaper::RouteSocket host;
      const shaper::HostVeth pair =
          shaper::find_host_veth(inside, interface, host, ns->description());
      ResolvedTarget out;
      out.host_interface = pair.host.name;
      out.info = {target.kind,
                  target.name,
                  interface,
                  protocol::Direction::kEgress,
                  ns->identity().to_string(),
                  target.via};
      return out;
    } catch (const shaper::SystemError& e) {
      const std::string where = e.operation() == "find host-side veth" ? "/interface" : "/target";
      if (auto refusal = refusal_of(e, where)) return std::move(*refusal);
      throw;
    }
  }

 private:
  Result<shaper::NetworkNamespace> open_namespace(const TargetRequest& target) const {
    try {
      if (target.kind == "netns") {
        if (auto problem = shaper::netns_name_problem(target.name)) {
          return Refusal{ErrorCode::kInvalidParams, *problem, "/target/netns",
                         "give a name `ip netns list` shows"};
        }
        return shaper::NetworkNamespace::named(target.name);
      }
      if (target.kind == "netns-path") {
        if (target.name.empty() || target.name.front() != '/') {
          return Refusal{ErrorCode::kInvalidParams,
                         "\"" + target.name + "\" is not an absolute path", "/target/netns_path",
                         "give the namespace's file, e.g. /proc/4242/ns/net or /run/netns/blue"};
        }
        return shaper::NetworkNamespace::at_path(target.name);
      }
      if (target.kind == "pid") return open_pid(target.name);
      return open_container(target.name);
    } catch (const shaper::SystemError& e) {
      if (auto refusal = refusal_of(e, "/target")) return std::move(*refusal);
      throw;
    }
  }

  static Result<shaper::NetworkNamespace> open_pid(const std::string& text) {
    pid_t pid = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
    if (error != std::errc() || end != text.data() + text.size() || pid <= 0) {
      return Refusal{ErrorCode::kInvalidParams, "\"" + text + "\" is not a process ID",
                     "/target/pid", "give a positive whole number"};
    }
    return shaper::NetworkNamespace::of_process(pid);
  }

  // The container's namespace: the one its first process is in now (Docker keeps a SandboxKey of
  // a stopped container's old namespace, so the PID is what is trusted).
  Result<shaper::NetworkNamespace> open_container(const std::string& name) const {
    if (auto problem = container_name_problem(name)) {
      return Refusal{ErrorCode::kInvalidParams, *problem, "/target/container",
                     "give the name or ID `docker ps` or `podman ps` shows"};
    }
    std::string asked;
    for (const std::string& socket : sockets_) {
      struct stat st {};
      if (::stat(socket.c_str(), &st) != 0) continue;  // no runtime there
      asked += (asked.empty() ? "" : ", ") + socket;
      const EngineClient engine(socket);
      const auto info = engine.inspect(name);
      if (!info) continue;
      if (!info->running || info->pid <= 0) {
        return Refusal{ErrorCode::kConflict, "container " + name + " is not running",
                       "/target/container", "start it first (its namespace exists only then)"};
      }
      return shaper::NetworkNamespace::of_process(info->pid);
    }
    if (asked.empty()) {
      std::string tried;
      for (const auto& s : sockets_) tried += (tried.empty() ? "" : ", ") + s;
      return Refusal{ErrorCode::kNotFound,
                     "no container runtime socket found (tried " + tried + ")", "/target/container",
                     "start Docker or Podman's API service (`systemctl start podman.socket`), "
                     "or list its socket in targets.engine_sockets in the config"};
    }
    return Refusal{ErrorCode::kNotFound, "no container " + name + " (asked " + asked + ")",
                   "/target/container", "`docker ps -a` or `podman ps -a` lists the containers"};
  }

  std::vector<std::string> sockets_;
};

}  // namespace

std::unique_ptr<TargetResolver> make_namespace_resolver(const TargetsConfig& config) {
  return std::make_unique<NamespaceResolver>(config);
}

}  // namespace jitterd
