#include "container_engine.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <limits>

#include "asio.hpp"
#include "shaper/errors.hpp"
#include "shaper/json_reader.hpp"

namespace jitterd {

namespace {

namespace http = boost::beast::http;
using local = asio::local::stream_protocol;

// The Engine API version asked for: 1.40 is Docker 19.03's, which Docker 20 and later and Podman's
// compatible service (4.x: up to 1.41) all still serve.
constexpr std::string_view kApiVersion = "/v1.40";
// An inspect reply is a few KiB; a runtime that sends more is not one.
constexpr std::uint64_t kMaxReplyBytes = 4 * 1024 * 1024;

std::string connect_hint(int error) {
  switch (error) {
    case ENOENT:
    case ECONNREFUSED:
      return "no container runtime answers there: start it (Docker: `systemctl start docker`; "
             "Podman: `systemctl start podman.socket`) or name the socket it listens on";
    case EACCES:
    case EPERM:
      return "jitterd may not use this socket: its owner or group must let jitterd's user in";
    default:
      return {};
  }
}

// errno of a Boost error from a socket call; EPROTO for Beast's own (a reply that is not HTTP).
int errno_of(const boost::system::error_code& error) {
  if (error.category() == boost::system::system_category()) return error.value();
  return EPROTO;
}

// Podman's compatible API answers with "Server: Libpod/VERSION"; Docker's with "Docker/VERSION".
// (Asking GET /version instead costs a request that Podman answers by running every OCI tool's
// --version: seconds in the bed.)
std::string runtime_of(std::string_view server) {
  return server.starts_with("Libpod") ? "podman" : "docker";
}

}  // namespace

std::vector<std::string> default_engine_sockets() {
  return {"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock"};
}

std::optional<std::string> container_name_problem(std::string_view name_or_id) {
  if (name_or_id.empty()) return "a container name or ID cannot be empty";
  if (name_or_id.size() > 253) return "a container name or ID is at most 253 characters";
  for (const char c : name_or_id) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!allowed) {
      return "a container name or ID has only letters, digits, '_', '.' and '-' (Docker's and "
             "Podman's rule); \"" +
             shaper::text_excerpt(name_or_id) + "\" has others";
    }
  }
  if (name_or_id.front() == '.' || name_or_id.front() == '-')
    return "a container name starts with a letter, a digit or '_'";
  return std::nullopt;
}

std::optional<ContainerInfo> read_container_info(std::string_view body,
                                                 shaper::Diagnostics& diagnostics) {
  const std::optional<nlohmann::json> document =
      shaper::parse_json_object(body, "the reply", diagnostics);
  if (!document) return std::nullopt;
  const nlohmann::json& root = *document;
  shaper::JsonReader reader(diagnostics);
  const std::size_t before = diagnostics.size();
  ContainerInfo info;
  if (const auto id = reader.string(root, "", "Id", true, 256)) info.id = *id;
  if (const auto name = reader.string(root, "", "Name", true, 256)) {
    info.name = name->starts_with('/') ? name->substr(1) : *name;
  }
  if (const nlohmann::json* state = reader.member(root, "", "State", true)) {
    if (!state->is_object()) {
      reader.error("/State", "expected an object, found " + shaper::json_excerpt(*state));
    } else {
      if (const auto running = reader.boolean(*state, "/State", "Running", false))
        info.running = *running;
      if (const auto pid = reader.integer<pid_t>(*state, "/State", "Pid", 0,
                                                 std::numeric_limits<pid_t>::max(), 0)) {
        info.pid = *pid;
      }
    }
  }
  if (const nlohmann::json* settings = reader.member(root, "", "NetworkSettings", false);
      settings != nullptr && !settings->is_null()) {
    if (!settings->is_object()) {
      reader.error("/NetworkSettings",
                   "expected an object, found " + shaper::json_excerpt(*settings));
    } else if (const auto key =
                   reader.string(*settings, "/NetworkSettings", "SandboxKey", false, 4096)) {
      info.sandbox_key = *key;
    }
  }
  if (info.running && info.pid == 0) {
    reader.error("/State/Pid", "a running container has the PID of its first process; found 0");
  }
  if (diagnostics.size() != before) return std::nullopt;
  return info;
}

EngineClient::EngineClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

HttpReply EngineClient::get(const std::string& target) const {
  const std::string request_target = std::string(kApiVersion) + target;
  const std::string object = socket_path_ + " GET " + request_target;
  // Asynchronous operations on a private io_context run for at most the deadline: the synchronous
  // ones would wait for ever (Asio polls again when a receive timeout fires).
  asio::io_context io;
  local::socket socket(io);
  http::request<http::empty_body> request{http::verb::get, request_target, 11};
  request.set(http::field::host, "localhost");
  request.set(http::field::user_agent, "jitterd");
  request.set(http::field::connection, "close");
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  const char* stage = "connect to the container runtime";
  boost::system::error_code failure;
  bool done = false;
  const auto finish = [&](const boost::system::error_code& error) {
    failure = error;
    done = true;
  };
  socket.async_connect(
      local::endpoint(socket_path_), [&](const boost::system::error_code& connected) {
        if (connected) return finish(connected);
        stage = "ask the container runtime";
        http::async_write(
            socket, request, [&](const boost::system::error_code& written, std::size_t) {
              if (written) return finish(written);
              http::async_read(
                  socket, buffer, parser,
                  [&](const boost::system::error_code& read, std::size_t) { finish(read); });
            });
      });
  io.run_for(timeout_);
  if (!done) {
    throw shaper::SystemError(
        stage, object, ETIMEDOUT,
        "the runtime did not answer within " + std::to_string(timeout_.count()) + " ms");
  }
  if (failure) {
    const int number = errno_of(failure);
    std::string hint = connect_hint(number);
    if (number == EPROTO) {
      hint = "the reply is not HTTP (" + failure.message() +
             "): is this a Docker or Podman API socket?";
    }
    throw shaper::SystemError(stage, object, number, hint);
  }
  const auto server = parser.get().find(http::field::server);
  return HttpReply{parser.get().result_int(), std::move(parser.get().body()),
                   server == parser.get().end() ? std::string() : std::string(server->value())};
}

std::optional<ContainerInfo> EngineClient::inspect(std::string_view name_or_id) const {
  // The caller checks user input first; this keeps anything else out of the request line.
  if (const auto problem = container_name_problem(name_or_id)) {
    throw shaper::SystemError("inspect container", socket_path_, EINVAL, *problem);
  }
  const HttpReply reply = get("/containers/" + std::string(name_or_id) + "/json");
  if (reply.status == 404) return std::nullopt;
  const std::string object = socket_path_ + " container " + std::string(name_or_id);
  if (reply.status != 200) {
    throw shaper::SystemError("inspect container", object, EPROTO,
                              "the runtime answered HTTP " + std::to_string(reply.status) + ": " +
                                  shaper::text_excerpt(reply.body, 200));
  }
  shaper::Diagnostics diagnostics;
  auto info = read_container_info(reply.body, diagnostics);
  if (!info) {
    throw shaper::SystemError(
        "inspect container", object, EPROTO,
        "the runtime's reply cannot be read: " + shaper::to_string(diagnostics));
  }
  info->runtime = runtime_of(reply.server);
  return info;
}

}  // namespace jitterd
