#pragma once
// `--container NAME` (issue 23): the container's network namespace, asked of the runtime that runs
// it through its own API, never by running its command-line tool. Docker and Podman both serve the
// Docker Engine API on a Unix socket (Podman's is its compatible service, `podman system service`);
// `GET /containers/{name}/json` gives the container's full ID, its state, the PID of its first
// process (whose /proc/PID/ns/net is the namespace) and NetworkSettings.SandboxKey, the namespace's
// bind mount where the runtime keeps one (Docker's /var/run/docker/netns/..., Podman's
// /run/netns/netns-...). containerd and CRI-O speak CRI over gRPC instead: pod_target.hpp.
//
// The client is synchronous and bounded: every call has a deadline (a runtime that hangs cannot
// hang the daemon for longer), and a reply's size is capped.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"

namespace jitterd {

// Where Docker and Podman put their API sockets by default, in the order they are tried: Docker's
// (/run/docker.sock, and its /var/run alias for systems without the /run symlink), then rootful
// Podman's. Rootless Podman's socket lives under the user's XDG_RUNTIME_DIR and is not probed:
// a rootless container's namespace belongs to a user namespace the daemon cannot enter with
// CAP_SYS_ADMIN alone (docs/operations.md).
std::vector<std::string> default_engine_sockets();

// What jitterd needs of a container.
struct ContainerInfo {
  std::string id;    // the full ID
  std::string name;  // without Docker's leading '/'
  bool running = false;
  pid_t pid = 0;            // State.Pid; 0 when not running
  std::string sandbox_key;  // NetworkSettings.SandboxKey; empty when the runtime keeps none
  std::string runtime;      // "docker" or "podman", from the reply's Server header
};

// Reads a `GET /containers/{name}/json` reply body. A member that is missing or of the wrong type
// is a diagnostic naming its JSON pointer ("/State/Pid: expected a whole number"); nullopt then.
std::optional<ContainerInfo> read_container_info(std::string_view body,
                                                 shaper::Diagnostics& diagnostics);

struct HttpReply {
  unsigned status = 0;  // 200, 404...
  std::string body;
  std::string server;  // the Server header: "Libpod/4.3.1 (linux)", "Docker/20.10.24+dfsg1 (linux)"
};

class EngineClient {
 public:
  // Talks to the API socket at `socket_path`; each request must be answered within `timeout`.
  explicit EngineClient(std::string socket_path,
                        std::chrono::milliseconds timeout = std::chrono::seconds{5});

  const std::string& socket_path() const { return socket_path_; }

  // One GET over a fresh connection. Throws shaper::SystemError naming the socket and the request
  // when the socket cannot be reached (ENOENT: no runtime there; EACCES: the daemon may not use
  // it), when the runtime does not answer in time (ETIMEDOUT) or answers with something that is
  // not HTTP (EPROTO).
  HttpReply get(const std::string& target) const;

  // The container named (or with the ID, or the unique ID prefix) `name_or_id`; nullopt when the
  // runtime knows no such container (404). Throws SystemError as get() does, and EPROTO when the
  // reply cannot be read (its diagnostics in the hint).
  std::optional<ContainerInfo> inspect(std::string_view name_or_id) const;

 private:
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
};

// The path part of a container name or ID in a request target: letters, digits and "_.-" are
// what Docker and Podman allow in names and IDs; anything else is refused before it is sent.
std::optional<std::string> container_name_problem(std::string_view name_or_id);

}  // namespace jitterd
