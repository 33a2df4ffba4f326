// jitterd: the privileged daemon. Reads its config, removes (or adopts) what a crashed jitterd
// left, listens on the control socket, and runs sessions until SIGTERM or SIGINT, when it removes
// everything it installed. Environment failures reach main() as exceptions and end the process with
// a message.

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "asio.hpp"
#include "config.hpp"
#include "events.hpp"
#include "follows.hpp"
#include "inside_targets.hpp"
#include "kernel_backend.hpp"
#include "ledger.hpp"
#include "logger.hpp"
#include "metrics_server.hpp"
#include "namespace_claim.hpp"
#include "netlink_monitor.hpp"
#include "profile_store.hpp"
#include "protocol.hpp"
#include "protocol/methods.hpp"
#include "server.hpp"
#include "sessions.hpp"
#include "shaper/errors.hpp"
#include "shaper/expected.hpp"
#include "systemd_notify.hpp"

namespace {

constexpr const char* kDefaultConfig = "/etc/jitterd/config.json";

struct Options {
  std::string config = kDefaultConfig;
  bool config_given = false;
  bool check_config = false;
  std::optional<std::string> socket;
  std::optional<std::string> state_dir;
};

constexpr const char* kUsage =
    "usage: jitterd [--config FILE] [--check-config] [--socket PATH] [--state-dir DIR]\n"
    "       jitterd --version | --help\n"
    "\n"
    "  --config FILE     the config (default /etc/jitterd/config.json; without it nothing may be "
    "shaped)\n"
    "  --check-config    validate the config and the profile folders, print what is wrong, and "
    "exit\n"
    "  --socket PATH     listen here instead of socket.path (ignored under socket activation)\n"
    "  --state-dir DIR   keep the ledger here instead of state_dir\n"
    "\n"
    "Exit codes: 0 clean stop, 2 usage, 3 invalid config, 4 environment (netlink, socket, "
    "permissions).\n"
    "The control protocol: docs/protocol.md. Stop with SIGTERM: jitterd removes everything it "
    "installed.\n";

std::optional<Options> parse_arguments(int argc, char** argv, int* exit_code) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      if (i + 1 >= argc) {
        std::cerr << "jitterd: " << name << " needs a value\n" << kUsage;
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      *exit_code = 0;
      return std::nullopt;
    } else if (arg == "--version") {
      std::cout << "jitterd " << JITTERD_VERSION << " (protocol "
                << jitterd::protocol::kProtocolVersion << ")\n";
      *exit_code = 0;
      return std::nullopt;
    } else if (arg == "--check-config") {
      options.check_config = true;
    } else if (arg == "--config") {
      auto v = value("--config");
      if (!v) return std::nullopt;
      options.config = *v;
      options.config_given = true;
    } else if (arg == "--socket") {
      if (!(options.socket = value("--socket"))) return std::nullopt;
    } else if (arg == "--state-dir") {
      if (!(options.state_dir = value("--state-dir"))) return std::nullopt;
    } else {
      std::cerr << "jitterd: unknown argument '" << arg << "'\n" << kUsage;
      return std::nullopt;
    }
  }
  return options;
}

// The config's socket.group (nullopt: none configured), or why it cannot be had.
shaper::Expected<std::optional<gid_t>> socket_group(const jitterd::Config& config) {
  if (config.socket.group.empty()) return std::optional<gid_t>();
  const group* g = ::getgrnam(config.socket.group.c_str());
  if (!g) {
    return shaper::Diagnostics{
        {"/socket/group",
         "socket.group \"" + config.socket.group +
             "\" does not exist; create it (systemd-sysusers, or groupadd --system " +
             config.socket.group + ") or set socket.group to an existing group"}};
  }
  return std::optional<gid_t>(g->gr_gid);
}

// The config with the command line's overrides; nullopt when it cannot be read (`*status` 4) or is
// invalid (3), with the reason printed.
std::optional<jitterd::Config> load_config(const Options& options, int* status) {
  jitterd::ConfigLoad load;
  try {
    load = jitterd::load_config_file(options.config, options.config_given);
  } catch (const shaper::SystemError& e) {
    std::cerr << "jitterd: cannot read the config: " << e.what() << "\n  hint: "
              << (e.error_number() == ENOENT
                      ? "create it (docs/daemon.md lists the keys; jitterd --check-config checks "
                        "it), or name an "
                        "existing file with --config"
                      : "make it readable for jitterd (uid " + std::to_string(::geteuid()) +
                            "), or name another file with --config")
              << '\n';
    *status = 4;
    return std::nullopt;
  }
  if (!load.config) {
    for (const auto& d : load.diagnostics) std::cerr << d.in_file(options.config) << '\n';
    *status = 3;
    return std::nullopt;
  }
  jitterd::Config config = *load.config;
  if (options.socket) config.socket.path = *options.socket;
  if (options.state_dir) config.state_dir = *options.state_dir;
  return config;
}

// --check-config: the config's problems and its profiles', and a summary line; the exit status.
int check_config(const Options& options, const jitterd::Config& config,
                 const std::string& group_error) {
  int status = 0;
  if (!group_error.empty()) {
    std::cerr << options.config << ": /socket/group: " << group_error << '\n';
    status = 3;
  }
  const auto listing = jitterd::ProfileStore(config.profile_dirs).list();
  for (const auto& bad : listing.invalid) {
    for (const auto& e : bad.errors) std::cerr << "profile " << bad.file << ": " << e << '\n';
    status = 3;
  }
  std::cout << options.config << ": " << (status ? "has problems (above)" : "OK") << "; "
            << listing.profiles.size() << " profile(s); interfaces allowed: "
            << (config.allow_interfaces.empty() ? std::string("none (set interfaces.allow)") : [&] {
                 std::string s;
                 for (const auto& p : config.allow_interfaces) s += (s.empty() ? "" : ", ") + p;
                 return s;
               }())
            << '\n';
  return status;
}

// What systemd handed over: the control socket (AF_UNIX) and, if jitterd-metrics.socket is
// enabled, the metrics listener (TCP). Anything else is refused: nullopt, with the reason printed.
struct HandedSockets {
  int control = -1;
  std::string control_path;
  std::optional<int> metrics;
};

std::optional<HandedSockets> sort_handed(const std::vector<int>& handed) {
  HandedSockets sockets;
  int unix_listeners = 0;
  for (const int fd : handed) {
    std::string path;
    if (jitterd::is_unix_stream_listener(fd, &path)) {
      ++unix_listeners;
      sockets.control = fd;
      sockets.control_path = path;
    } else if (jitterd::is_tcp_listener(fd) && !sockets.metrics) {
      sockets.metrics = fd;
    } else {
      unix_listeners = -1;
      break;
    }
  }
  if (unix_listeners != 1) {
    std::cerr << "jitterd: socket activation handed " << handed.size()
              << " fd(s); expected one listening AF_UNIX stream socket (jitterd.socket) and at "
                 "most one listening TCP socket (jitterd-metrics.socket)\n";
    return std::nullopt;
  }
  return sockets;
}

// The HTTP scrape endpoint, when systemd handed its socket or metrics.listen asks for one;
// otherwise nothing. Socket activation's socket wins, as it does for the control socket.
std::unique_ptr<jitterd::MetricsServer> start_metrics(jitterd::asio::io_context& io,
                                                      jitterd::Dispatcher& dispatcher,
                                                      const jitterd::Config& config,
                                                      const std::optional<HandedSockets>& handed,
                                                      jitterd::Logger& log) {
  const bool from_systemd = handed && handed->metrics;
  if (!from_systemd && !config.metrics.listen) return nullptr;
  auto server = std::make_unique<jitterd::MetricsServer>(
      io, [&dispatcher] { return dispatcher.metrics_text(); }, log);
  if (from_systemd) {
    server->adopt_listener(*handed->metrics);
  } else {
    server->bind(*config.metrics.listen);
  }
  server->start();
  log.info("serving /metrics and /healthz on http://" + server->local_address() +
           (from_systemd ? " (from systemd)" : ""));
  return server;
}

// Applies with "follow": true wait in `follows` while their target is gone, and are sent again
// through the dispatcher, as their client sent them, when it is back (follows.hpp).
void follow_through(jitterd::Follows& follows, jitterd::Dispatcher& dispatcher) {
  dispatcher.follow_with(&follows);
  follows.set_apply([&dispatcher](const nlohmann::json& params, const jitterd::Peer& peer) {
    const nlohmann::json request = {{"method", "apply"}, {"params", params}};
    return dispatcher.handle(request.dump(), peer, true).line;
  });
}

int run(const Options& options) {
  jitterd::Logger log(std::cerr);
  int load_status = 0;
  const auto loaded = load_config(options, &load_status);
  if (!loaded) return load_status;
  const jitterd::Config& config = *loaded;

  const auto group_lookup = socket_group(config);
  const std::string group_error =
      group_lookup ? std::string() : group_lookup.diagnostics().front().message;
  const std::optional<gid_t> gid = group_lookup ? *group_lookup : std::nullopt;
  if (options.check_config) return check_config(options, config, group_error);
  if (!group_error.empty()) {
    std::cerr << "jitterd: " << options.config << ": " << group_error << '\n';
    return 3;
  }
  if (config.allow_interfaces.empty()) {
    log.warning("no interface may be shaped: set interfaces.allow in " + options.config);
  }

  auto notifier = jitterd::SystemdNotifier::from_environment();
  const auto handed = jitterd::listen_fds_from_environment();

  // Before anything is touched: the state folder is this process's alone (a second jitterd must not
  // take the first one's qdiscs for leftovers, nor overwrite its ledger), and writable. Then the
  // socket path, for the same reason: a jitterd listening there with another state folder keeps its
  // qdiscs.
  const auto state_lock = jitterd::StateFolderLock::acquire(config.state_dir);
  if (handed.empty()) jitterd::free_socket_path(config.socket.path);
  // And any other jitterd in this network namespace, whatever its folder and socket: its qdiscs
  // carry the same handle, which recovery would take for leftovers.
  const auto namespace_claim = jitterd::NamespaceClaim::acquire();
  for (const auto& warning : namespace_claim.diagnostics()) log.warning(warning.to_string());
  jitterd::asio::io_context io(1);
  // SIGTERM and SIGINT are caught from here on, before the socket is visible: a signal that comes
  // as soon as a client can see jitterd (a supervisor, a test waiting for the socket) is queued
  // until the handler below waits for it, never the default action that leaves the shaping behind.
  jitterd::asio::signal_set signals(io, SIGTERM, SIGINT);
  jitterd::KernelBackend backend(config.switch_gate);
  jitterd::Ledger ledger(config.state_dir);
  jitterd::EventBus bus;
  jitterd::SessionManager sessions(io.get_executor(), backend, ledger, bus, config, log);
  sessions.recover();
  // Target namespaces shaped from inside (--via inside) by an earlier jitterd: each has a ledger
  // of its own naming it by device and inode.
  jitterd::InsideTargets inside(io, bus, config, log);
  inside.recover();
  jitterd::ProfileStore profiles(config.profile_dirs);
  jitterd::ServerStats stats;
  const auto targets = jitterd::make_namespace_resolver(config.targets);
  jitterd::Dispatcher dispatcher(sessions, profiles, backend, config, stats, targets.get(),
                                 &inside);
  jitterd::Follows follows(io.get_executor(), bus, log);
  follow_through(follows, dispatcher);
  jitterd::AccessPolicy policy{
      static_cast<std::uint32_t>(::geteuid()),
      gid ? std::optional<std::uint32_t>(*gid) : std::optional<std::uint32_t>(::getegid())};
  jitterd::ControlServer server(io, dispatcher, profiles, bus, config, policy, stats, log);
  std::optional<HandedSockets> sockets;
  if (!handed.empty()) {
    if (!(sockets = sort_handed(handed))) return 4;
    server.adopt_listener(sockets->control);
    log.info("listening on " + sockets->control_path + " (from systemd)");
  } else {
    server.bind(config.socket.path, config.socket.mode, gid);
    log.info("listening on " + config.socket.path);
  }
  server.start();
  const auto metrics = start_metrics(io, dispatcher, config, sockets, log);
  jitterd::NetlinkMonitor monitor(io, sessions, backend, log);
  monitor.start();

  std::optional<jitterd::asio::steady_timer> watchdog;
  std::function<void()> kick;
  if (auto interval = notifier.watchdog_interval()) {
    watchdog.emplace(io);
    kick = [&, half = *interval / 2] {
      notifier.watchdog();
      watchdog->expires_after(half);
      watchdog->async_wait([&](const boost::system::error_code& ec) {
        if (!ec) kick();
      });
    };
    kick();
  }

  // Clients that do not read their last lines get this long before the daemon exits anyway.
  constexpr auto kFlushLimit = std::chrono::seconds(1);
  jitterd::asio::steady_timer flush_limit(io);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    log.info(std::string("stopping on ") + strsignal(signal) +
             "; removing everything jitterd installed");
    notifier.stopping("removing shaping");
    sessions.shutdown();
    inside.shutdown();
    monitor.stop();
    if (watchdog) watchdog->cancel();
    // Subscribers hear the `cleared` events of the shutdown; then io.run() runs out of work.
    if (metrics) metrics->stop();
    server.finish([&] { flush_limit.cancel(); });
    flush_limit.expires_after(kFlushLimit);
    flush_limit.async_wait([&](const boost::system::error_code& timer) {
      if (!timer) io.stop();
    });
  });
  // A client that disconnects while we write must not kill the daemon.
  ::signal(SIGPIPE, SIG_IGN);

  notifier.ready("listening; " + std::to_string(sessions.session_count()) + " session(s) adopted");
  io.run();
  // Whatever did not flush in time is closed now (the socket file is already gone).
  server.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 2;
  const auto options = parse_arguments(argc, argv, &exit_code);
  if (!options) return exit_code;
  try {
    return run(*options);
  } catch (const shaper::NetlinkError& e) {
    std::cerr << "jitterd: " << e.without_hint()
              << (e.hint().empty() ? "" : "\n  hint: " + e.hint()) << '\n';
  } catch (const shaper::SystemError& e) {
    std::cerr << "jitterd: " << e.what() << (e.hint().empty() ? "" : "\n  hint: " + e.hint())
              << '\n';
  } catch (const std::exception& e) {
    std::cerr << "jitterd: " << e.what() << '\n';
  }
  return 4;
}
