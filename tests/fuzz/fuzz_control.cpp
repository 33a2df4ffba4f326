// libFuzzer target for the control protocol (docs/protocol.md), framing and dispatch: the bytes a
// client sends, cut into reads, go through the server's RequestFramer, and every request line
// through a real Dispatcher wired to a SessionManager, ProfileStore, Ledger and EventBus on the
// protocol tests' FakeBackend (no kernel), as ControlServer wires them. After each request the
// io_context runs what is ready, up to 16 handlers (never waiting: a schedule step or lease that
// falls due meanwhile runs, later ones do not).
//
// Input: the first byte says who the client is and how its bytes arrive: bit 0 set, a peer that may
// not use jitterd; bits 1-7, the size of each read (0: everything in one read). The rest is the
// stream.
//
// What must hold, each an abort with the offending text:
//  - the framer hands out the lines the framing rules give read plainly, whatever the read sizes;
//  - every reply is one line holding a JSON object with a boolean "ok": "result" (an object) on
//    success, "error" with a code the dispatcher may give (docs/protocol.md: never
//    "internal-error", the daemon's word for its own bug) and a message on failure; the request's
//    id when it had a readable one, and no id otherwise; only a subscribe's success starts an event
//    stream;
//  - every event serialises to one line holding a JSON object with "event", "seq", "interface" and
//    "at", and never "ok";
//  - a peer that may not use jitterd is never served and never reaches the backend;
//  - the backend holds a lane for each started session and nothing more, and an interface without a
//    session keeps neither jitterd's qdisc nor offloads turned off;
//  - after {"method": "clear", "params": {"all": true}} nothing is left: no session or successor,
//  no
//    lane, no qdisc of ours, offloads back on, an empty ledger.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "asio.hpp"
#include "config.hpp"
#include "events.hpp"
#include "fake_backend.hpp"
#include "framing.hpp"
#include "ledger.hpp"
#include "logger.hpp"
#include "profile_store.hpp"
#include "protocol.hpp"
#include "sessions.hpp"

namespace jitterd {
namespace {

using json = nlohmann::json;
using testing::FakeBackend;

// Small enough that libFuzzer's inputs (4096 bytes unless a seed is longer) reach past it; large
// enough for an apply with an inline profile. The framing does not depend on the figure.
constexpr std::size_t kMaxRequestBytes = 1024;

// The codes docs/protocol.md lists that Dispatcher::handle may answer with: not "too-large" and
// "busy" (the server's, for lines never parsed), and not "internal-error" (a bug in jitterd).
const std::set<std::string> kRequestErrorCodes = {
    "parse-error", "invalid-request", "unknown-method", "invalid-params", "permission-denied",
    "not-found",   "conflict",        "kernel-error",   "system-error"};

// Any bytes as a printable JSON string.
std::string shown(std::string_view bytes) {
  return json(std::string(bytes)).dump(-1, ' ', true, json::error_handler_t::replace);
}

[[noreturn]] void fail(std::string_view what, std::string_view subject) {
  std::fprintf(stderr, "fuzz_control: %.*s\n  in: %s\n", static_cast<int>(what.size()), what.data(),
               shown(subject).c_str());
  std::abort();
}

void expect(bool holds, std::string_view what, std::string_view subject) {
  if (!holds) fail(what, subject);
}

// Folders made once per process and removed at exit: the state folder (the ledger is rewritten,
// with fsync, on every install: on tmpfs that costs nothing) and a profile folder.
class Folders {
 public:
  Folders() {
    std::string pattern = (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp") +
                          std::string("/jitterd-fuzz-control-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr)
      fail("mkdtemp failed; is /dev/shm or /tmp writable?", pattern);
    root = pattern;
    state = root + "/state";
    profiles = root + "/profiles";
    std::filesystem::create_directories(state);
    std::filesystem::create_directories(profiles);
    // Phases a, b, c; a held one, a looping schedule and one that runs out. Steps are the shortest
    // a profile may have (1 ms), so that a step sometimes falls due while a run goes on.
    const std::string phases =
        R"("phases": {"a": {"delay": {"latency": "10ms"}}, "b": {"delay": {"latency": "20ms", "jitter": "5ms"}},
                      "c": {"loss": {"model": "random", "probability": 0.01}}})";
    write("held.json", R"({"version": 1, "name": "held", )" + phases + "}");
    write("cycle.json",
          R"({"version": 1, "name": "cycle", )" + phases +
              R"(, "schedule": {"loop": true, "steps": [{"phase": "a", "duration": "1ms"},
                                {"phase": "b", "duration": "1ms"}, {"phase": "c", "duration": "2ms"}]}})");
    write("once.json",
          R"({"version": 1, "name": "once", )" + phases +
              R"(, "schedule": {"loop": false, "steps": [{"phase": "b", "duration": "1ms"}]}})");
    write(
        "broken.json",
        R"({"version": 1, "name": "broken", "phases": {"a": {"loss": {"model": "random", "probability": 1.7}}}})");
    // A name that leads outside the folder: the store must refuse it.
    std::error_code ignored;
    std::filesystem::create_symlink("/etc/hostname", profiles + "/escape.json", ignored);
  }
  Folders(const Folders&) = delete;
  Folders& operator=(const Folders&) = delete;
  ~Folders() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  std::string root;
  std::string state;
  std::string profiles;

 private:
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(profiles + "/" + name, std::ios::binary);
    out << text;
    if (!out) fail("cannot write a test profile", profiles + "/" + name);
  }
};

Config fuzz_config(const Folders& folders) {
  Config config;
  config.state_dir = folders.state;
  config.profile_dirs = {folders.profiles};
  config.allow_interfaces = {"veth*", "test[0-9]"};
  config.allow_force = true;
  config.limits.max_request_bytes = kMaxRequestBytes;
  return config;
}

// One daemon per input, wired as main() wires it, with fresh state.
struct Daemon {
  explicit Daemon(const Folders& folders)
      : config(fuzz_config(folders)),
        ledger(folders.state),
        log(log_text),
        sessions(io.get_executor(), backend, ledger, bus, config, log),
        profiles(config.profile_dirs),
        dispatcher(sessions, profiles, backend, config, stats) {
    backend.add_interface("veth0", 5);
    backend.add_interface("veth1", 6);
    backend.set_default_route(6, true);  // the SSH guard's interface
    backend.add_interface("eth0", 2);    // not in the allowlist
    backend.add_interface("test1", 7,
                          FakeBackend::Root::kForeign);  // someone else's htb: needs force
    backend.set_ssh_ports({22, 2222});
  }

  // At most kMaxHandlers: a loop of 1 ms steps whose every step takes longer than 1 ms (a build at
  // -O0 with sanitizers) always has the next one due, and poll() would never return.
  void run_ready() {
    static constexpr int kMaxHandlers = 16;
    io.restart();
    for (int n = 0; n < kMaxHandlers && io.poll_one() > 0; ++n) {
    }
  }

  asio::io_context io;
  Config config;
  FakeBackend backend;
  Ledger ledger;
  EventBus bus;
  std::ostringstream log_text;
  Logger log;
  SessionManager sessions;
  ProfileStore profiles;
  ServerStats stats;
  Dispatcher dispatcher;
};

// The framing rules of docs/protocol.md read plainly, all at once: lines end at '\n'; one longer
// than the limit (its '\r' counted) ends everything; a '\r' before the '\n' is dropped; blank lines
// are skipped; bytes after the last '\n' are not a line.
struct Framing {
  std::vector<std::string> lines;
  bool too_large = false;
};

Framing frame_plainly(std::string_view stream, std::size_t max) {
  Framing out;
  for (;;) {
    const std::size_t end = stream.find('\n');
    std::string_view line = stream.substr(0, end);
    if (line.size() > max) {
      out.too_large = true;
      return out;
    }
    if (end == std::string_view::npos) return out;
    stream.remove_prefix(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) out.lines.emplace_back(line);
  }
}

// One line holding a JSON object with a boolean "ok", and either "result" or an "error" whose code
// is one of `codes`. Returns the parsed reply.
json check_reply_shape(const std::string& line, const std::set<std::string>& codes) {
  expect(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos,
         "a reply holds a raw line break", line);
  const json reply = json::parse(line, nullptr, false);
  expect(!reply.is_discarded() && reply.is_object(), "a reply is not a JSON object", line);
  const auto ok = reply.find("ok");
  expect(ok != reply.end() && ok->is_boolean(), "a reply has no boolean \"ok\"", line);
  const std::string body = ok->get<bool>() ? "result" : "error";
  for (const auto& [key, value] : reply.items()) {
    expect(key == "ok" || key == "id" || key == body,
           "a reply has a member beyond id, ok and " + body, line);
  }
  expect(reply.contains(body) && reply[body].is_object(), "a reply has no \"" + body + "\" object",
         line);
  if (!ok->get<bool>()) {
    const json& error = reply["error"];
    expect(error.contains("code") && error["code"].is_string(), "an error has no code", line);
    expect(codes.contains(error["code"].get<std::string>()),
           "an error code the dispatcher may not give", line);
    expect(error.contains("message") && error["message"].is_string() && !error["message"].empty(),
           "an error has no message", line);
    for (const char* optional : {"where", "hint"}) {
      expect(!error.contains(optional) || error[optional].is_string(),
             "an error's where or hint is not a string", line);
    }
  }
  return reply;
}

void check_reply(std::string_view request, const Reply& reply, bool authorized) {
  const json r = check_reply_shape(reply.line, kRequestErrorCodes);
  const bool ok = r["ok"].get<bool>();
  expect(authorized || !ok, "a peer that may not use jitterd was served", reply.line);
  // docs/protocol.md, "Envelope": the id is echoed whenever the request had one jitterd can echo
  // exactly (a string or a 64-bit integer, given once, in an object that is JSON); a repeated key
  // anywhere, or a NUL byte, is never served. Read here with nlohmann's own callback parser, not
  // with jitterd's reader.
  std::vector<std::set<std::string>> open_objects;
  std::size_t ids = 0;
  bool repeated = false;
  const json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const auto key = parsed.get<std::string>();
      repeated |= !open_objects.back().insert(key).second;
      if (depth == 1 && key == "id") ++ids;
    }
    return true;
  };
  const bool nul = request.find('\0') != std::string_view::npos;
  const json parsed = nul ? json(json::value_t::discarded) : json::parse(request, callback, false);
  std::optional<json> id;
  if (parsed.is_object() && ids == 1) {
    if (auto it = parsed.find("id");
        it != parsed.end() && (it->is_string() || it->is_number_integer()))
      id = *it;
  }
  expect(!(ok && (nul || repeated)), "a request with a NUL byte or a repeated key was served",
         reply.line);
  if (!ok) {
    const json& error = r["error"];
    expect(error["message"].get<std::string>().size() <= 2048 &&
               error.value("where", "").size() <= 16384,
           "an error quotes more than an excerpt", reply.line);
  }
  if (id) {
    expect(r.contains("id") && r["id"] == *id, "a reply lacks its request's id", reply.line);
  } else {
    expect(!r.contains("id"), "a reply has an id its request did not have", reply.line);
  }
  expect(!reply.subscribe || (ok && r["result"] == json{{"subscribed", true}}),
         "a reply that is not a subscribe's success starts an event stream", reply.line);
}

void check_event(const Event& event) {
  const std::string line = Dispatcher::event_line(event);
  expect(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos,
         "an event holds a raw line break", line);
  const json e = json::parse(line, nullptr, false);
  expect(!e.is_discarded() && e.is_object(), "an event is not a JSON object", line);
  expect(e.contains("event") && e["event"] == std::string(to_string(event.type)),
         "an event has the wrong name", line);
  expect(e.contains("seq") && e["seq"].is_number_unsigned(), "an event has no seq", line);
  expect(e.contains("interface") && e["interface"].is_string(), "an event has no interface", line);
  expect(e.contains("at") && e["at"].is_object(), "an event has no time", line);
  expect(!e.contains("ok"), "an event looks like a reply", line);
}

// The kernel (the fake) holds one lane for each started session and nothing more.
void check_backend(Daemon& d, std::string_view after) {
  const auto status = d.sessions.status(Target{});
  const auto* list = status ? &*status : nullptr;
  expect(list != nullptr, "status of every session failed", after);
  std::map<std::pair<int, Direction>, std::size_t> started;
  for (const auto& s : *list) {
    if (s.state != "pending") ++started[{s.index, s.direction}];
  }
  for (const auto& i : d.backend.interfaces()) {
    for (Direction direction : {Direction::kEgress, Direction::kIngress}) {
      const std::size_t lanes = d.backend.layout_on(i.index, direction).lanes.size();
      expect(lanes == started[{i.index, direction}],
             "the kernel holds " + std::to_string(lanes) + " lanes on " + i.name + " " +
                 to_string(direction) + " for " + std::to_string(started[{i.index, direction}]) +
                 " started sessions",
             after);
    }
    if (!d.sessions.has_session(i.index)) {
      expect(d.backend.root_of(i.index) != FakeBackend::Root::kJitterd,
             "jitterd's qdisc stayed on " + i.name + " without a session", after);
      expect(!d.backend.offloads_off(i.index),
             "offloads stayed off on " + i.name + " without a session", after);
    }
  }
}

}  // namespace
}  // namespace jitterd

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace jitterd;
  if (size == 0) return 0;
  static const Folders folders;
  const bool authorized = (data[0] & 1) == 0;
  const std::size_t read_size = data[0] >> 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const Peer peer{1000, 1000, 4242, "fuzz"};
  // FUZZ_CONTROL_TRACE=1: every request and reply on stderr, to read what a saved input does.
  static const bool trace = std::getenv("FUZZ_CONTROL_TRACE") != nullptr;

  Daemon d(folders);
  d.bus.subscribe(check_event);

  RequestFramer framer(d.config.limits.max_request_bytes);
  Framing framed;
  std::string_view rest = stream;
  while (!rest.empty() && !framed.too_large) {
    const std::string_view piece = rest.substr(0, read_size == 0 ? rest.size() : read_size);
    rest.remove_prefix(piece.size());
    const std::size_t ends = framer.feed(piece);
    expect(ends == static_cast<std::size_t>(std::count(piece.begin(), piece.end(), '\n')),
           "feed() miscounted the line ends of a read", piece);
    for (;;) {
      const RequestFramer::Next next = framer.next();
      if (next.status == RequestFramer::Status::kNeedMore) break;
      if (next.status == RequestFramer::Status::kTooLarge) {
        framed.too_large = true;
        // What the server sends before it closes.
        check_reply_shape(
            Dispatcher::error_line("too-large", "the request line is longer than the limit"),
            {"too-large"});
        break;
      }
      framed.lines.emplace_back(next.line);
      const Reply reply = d.dispatcher.handle(next.line, peer, authorized);
      if (trace) std::fprintf(stderr, "> %s\n< %s\n", shown(next.line).c_str(), reply.line.c_str());
      check_reply(next.line, reply, authorized);
      d.run_ready();
      check_backend(d, next.line);
    }
  }
  const Framing plain = frame_plainly(stream, d.config.limits.max_request_bytes);
  expect(framed.lines == plain.lines && framed.too_large == plain.too_large,
         "the framer's lines differ from the framing rules' (read size " +
             std::to_string(read_size) + ")",
         stream);
  if (!authorized)
    expect(d.backend.calls().empty(), "a peer that may not use jitterd reached the backend",
           stream);

  // Whatever happened, clearing everything leaves nothing behind.
  const Peer root{0, 0, 1, "fuzz"};
  const std::string clear_all = R"({"method": "clear", "params": {"all": true}})";
  const Reply cleared = d.dispatcher.handle(clear_all, root, true);
  check_reply(clear_all, cleared, true);
  expect(json::parse(cleared.line)["ok"] == true, "clear all failed", cleared.line);
  d.run_ready();
  const auto status = d.sessions.status(Target{});
  const auto* left = status ? &*status : nullptr;
  expect(left != nullptr && left->empty() && d.sessions.session_count() == 0,
         "sessions survived clear all", stream);
  for (const auto& i : d.backend.interfaces()) {
    expect(!d.backend.installed(i), "the backend still holds " + i.name + " after clear all",
           stream);
    expect(d.backend.root_of(i.index) != FakeBackend::Root::kJitterd,
           "jitterd's qdisc stayed on " + i.name + " after clear all", stream);
    expect(!d.backend.offloads_off(i.index),
           "offloads stayed off on " + i.name + " after clear all", stream);
  }
  expect(d.ledger.entries().empty(), "the ledger names sessions after clear all", stream);
  return 0;
}
