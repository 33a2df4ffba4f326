#include "cli.hpp"

#include <algorithm>
#include <array>
#include <exception>
#include <limits>

#include "exit_codes.hpp"
#include "fleet.hpp"
#include "fleet_validate.hpp"
#include "offline_commands.hpp"
#include "online_commands.hpp"
#include "proxy.hpp"
#include "shaper/netem_spec.hpp"

namespace jitterctl {

namespace {

using enum ValueType;

// validate --probes: a hundred million probes is ~6 GiB of series; the default is a million.
constexpr std::uint64_t kMaxValidationProbes = 100'000'000;

// ---- The options of each command ---------------------------------------------------------------

constexpr Option kGlobalOptions[] = {
    {.name = "--socket",
     .value = "PATH",
     .type = kText,
     .help = "jitterd's socket (default: $JITTERD_SOCKET, else /run/jitterd/jitterd.sock)"},
    {.name = "--host",
     .value = "ssh://[USER@]HOST[:PORT][/SOCKET]|k8s://NODE[/SOCKET]",
     .type = kText,
     .help = "jitterd on another host, through ssh and `jitterctl proxy` there, or through "
             "`kubectl exec` into the jitterd pod of Kubernetes node NODE ($JITTERD_KUBECTL, "
             "$JITTERD_K8S_NAMESPACE) (default: $JITTERD_HOST)"},
    {.name = "--json",
     .help = "print the reply's result as JSON (subscribe: one compact event per line)"},
    {.name = "--timeout",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "how long to wait for jitterd (default 10s)"},
};

// One table of options after another: a command's own, then those it shares.
template <std::size_t N, std::size_t M>
constexpr std::array<Option, N + M> concat(const std::array<Option, N>& a,
                                           const std::array<Option, M>& b) {
  std::array<Option, N + M> all{};
  std::copy(a.begin(), a.end(), all.begin());
  std::copy(b.begin(), b.end(), all.begin() + N);
  return all;
}

// The lane options: a command that names an interface acts on every lane of it unless narrowed;
// and the target options: the interface is one a namespace, process or container sees (eth0 when
// not named), shaped where `--via` says.
constexpr std::array<Option, 10> lane_options(std::string_view directions) {
  return {{
      {.name = "--direction",
       .value = directions,
       .type = kChoice,
       .help = "one direction of the interface"},
      {.name = "--egress", .help = "short for --direction egress"},
      {.name = "--ingress", .help = "short for --direction ingress"},
      {.name = "--set",
       .value = "NAME",
       .type = kText,
       .help = "one rule set (apply --set NAME --match ...)"},
      {.name = "--netns",
       .value = "NAME",
       .type = kText,
       .help = "the interface is in `ip netns` namespace NAME (default eth0)"},
      {.name = "--netns-path",
       .value = "PATH",
       .type = kText,
       .help = "... in the namespace of file PATH (/proc/PID/ns/net, a bind mount)"},
      {.name = "--pid",
       .value = "PID",
       .type = kWholeNumber,
       .help = "... in the namespace of process PID",
       .min = 1,
       .max = 4194304,
       .expected = "a process ID"},
      {.name = "--container",
       .value = "NAME",
       .type = kText,
       .help = "... in Docker or Podman container NAME (or ID)"},
      {.name = "--pod",
       .value = "NAMESPACE/NAME",
       .type = kText,
       .help = "... in Kubernetes pod NAMESPACE/NAME's sandbox (through the CRI socket)"},
      {.name = "--via",
       .value = "inside|host-veth",
       .type = kChoice,
       .help = "how a target is shaped: in its namespace or on its veth's host side"},
  }};
}

constexpr auto kLaneOptions = lane_options("egress|ingress");

constexpr auto kApplyOptions = concat(
    std::to_array<Option>({
        {.name = "--file",
         .value = "F",
         .type = kText,
         .help = "the profile in this JSON file, sent inline"},
        {.name = "--phase", .value = "P", .type = kText, .help = "hold phase P"},
        {.name = "--no-schedule", .help = "do not run the profile's schedule"},
        {.name = "--schedule", .help = "run the profile's schedule (the default without --phase)"},
        {.name = "--start",
         .value = "now|+2s|RFC3339",
         .type = kStartTime,
         .help = "start then; pending until"},
        {.name = "--lease",
         .value = "DURATION",
         .type = kDuration,
         .help = "remove the shaping unless renewed within DURATION"},
        {.name = "--force", .help = "replace a root qdisc that is not jitterd's"},
        {.name = "--match",
         .value = "RULE",
         .type = kText,
         .help = "shape only packets that match (with --set; rules are ORed): "
                 "dst=10.0.0.0/8,proto=tcp,dport=6379",
         .repeatable = true},
        {.name = "--confirm",
         .value = "DURATION",
         .type = kDuration,
         .help = "roll back unless `jitterctl confirm` comes within DURATION"},
        {.name = "--offloads",
         .value = "off|keep",
         .type = kChoice,
         .help = "off: TSO, GSO and GRO off until the last lane is cleared"},
        {.name = "--no-ssh-guard",
         .help = "shape SSH too (on an interface with the default route)"},
        {.name = "--follow",
         .help = "with --container, --pod or --netns: apply again when the target comes back"},
    }),
    lane_options("egress|ingress|both"));

constexpr auto kSwitchOptions = concat(std::to_array<Option>({
                                           {.name = "--at",
                                            .value = "now|+1s|RFC3339",
                                            .type = kStartTime,
                                            .help = "switch then (default now)"},
                                       }),
                                       kLaneOptions);

constexpr auto kSkipOptions =
    concat(std::to_array<Option>({
               {.name = "--phase", .value = "P", .type = kText, .help = "the next step of phase P"},
               {.name = "--step",
                .value = "N",
                .type = kWholeNumber,
                .help = "step N (0-based)",
                .expected = "a step number (0, 1, 2 ...)"},
           }),
           kLaneOptions);

constexpr auto kClearOptions = concat(std::to_array<Option>({
                                          {.name = "--all", .help = "every session"},
                                      }),
                                      kLaneOptions);

constexpr auto kRenewOptions = concat(std::to_array<Option>({
                                          {.name = "--lease",
                                           .value = "DURATION",
                                           .type = kDuration,
                                           .help = "the new lease (default: the last one)"},
                                      }),
                                      kLaneOptions);

constexpr Option kSubscribeOptions[] = {
    {.name = "--interface",
     .value = "X",
     .type = kText,
     .help = "only events of interface X",
     .repeatable = true},
    {.name = "--event",
     .value = "E",
     .type = kText,
     .help = "only events named E (applied, cleared ...)",
     .repeatable = true},
    {.name = "--count", .value = "N", .type = kWholeNumber, .help = "stop after N events"},
};

constexpr Option kWatchOptions[] = {
    {.name = "--interval",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "redraw this often (default 1s)"},
    {.name = "--once", .help = "print one frame and exit"},
};

// Both compile and validate read captures.
constexpr auto kCaptureOptions = std::to_array<Option>({
    {.name = "--format",
     .value = "FORMAT",
     .type = kText,
     .help = "the capture format: auto (default), ping, fping, mtr-report, mtr-json, iperf3-json, "
             "epoch-rtt, "
             "csv, tsv"},
    {.name = "--interval",
     .value = "DURATION",
     .type = kDuration,
     .help = "the probe interval of captures without timestamps"},
    {.name = "--host",
     .value = "TARGET",
     .type = kText,
     .help = "which target of an fping capture"},
});

constexpr auto kCompileOptions = concat(
    std::to_array<Option>({
        {.name = "--output",
         .value = "PROFILE.json",
         .type = kText,
         .help = "where to write the profile",
         .short_name = 'o'},
        {.name = "--name",
         .value = "NAME",
         .type = kText,
         .help = "the profile's name (default capture)"},
        {.name = "--description",
         .value = "TEXT",
         .type = kText,
         .help = "the profile's description"},
        {.name = "--baseline",
         .value = "min|none|pNN|DURATION",
         .type = kText,
         .help = "what is subtracted from every RTT (default min)"},
        {.name = "--halves", .help = "halve every delay, to shape both directions of the link"},
        {.name = "--regimes",
         .value = "single|percentiles|K",
         .type = kText,
         .help = "one phase, p50/p95/p99.9 phases, or K regimes (1 to 16) found by clustering"},
        {.name = "--window",
         .value = "DURATION",
         .type = kDuration,
         .help = "the window of --regimes K (default 10s)"},
        {.name = "--step",
         .value = "DURATION",
         .type = kDuration,
         .help = "how long each phase of --regimes percentiles lasts (default 30s)"},
        {.name = "--replay", .help = "follow the capture's time line, window by window"},
        {.name = "--replay-window",
         .value = "DURATION",
         .type = kDuration,
         .help = "replay with this window (implies --replay)"},
        {.name = "--once", .help = "with --replay: play the time line once"},
        {.name = "--spike",
         .value = "EXTRA:PACKETS:EVERY",
         .type = kText,
         .help = "a periodic spike phase, e.g. 100ms:2:30s"},
        {.name = "--no-reorder", .help = "keep packet order (a netem rate on every phase)"},
        {.name = "--packet-rate",
         .value = "PPS",
         .type = kNumber,
         .help = "the packet rate the link carries, which sizes netem's limit (default 100000)",
         .above = 0,
         .expected = "a packet rate; give packets per second above 0"},
        {.name = "--entries",
         .value = "N",
         .type = kWholeNumber,
         .help = "delay table entries",
         .min = 1,
         .max = shaper::kMaxTableEntries},
    }),
    kCaptureOptions);

constexpr Option kProxyOptions[] = {
    {.name = "--socket",
     .value = "PATH",
     .type = kText,
     .help = "jitterd's socket (default: $JITTERD_SOCKET, else /run/jitterd/jitterd.sock)"},
    {.name = "--timeout",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "how long connecting may take (default 10s)"},
};

constexpr Option kInspectOptions[] = {
    {.name = "--json", .help = "print the profile as JSON"},
};

constexpr auto kValidateOptions = concat(
    std::to_array<Option>({
        {.name = "--shaped",
         .value = "SHAPED_TRACE",
         .type = kText,
         .help = "a trace taken through the shaped link"},
        {.name = "--link-calibration",
         .value = "TRACE",
         .type = kText,
         .help = "the same probes through a constant netem delay: the link's own noise"},
        {.name = "--calibration-delay",
         .value = "D",
         .type = kDuration,
         .help = "the round trip that constant netem added (e.g. 500us): the link's own base is "
                 "then measured, "
                 "not estimated from the shaped trace"},
        {.name = "--phase",
         .value = "P",
         .type = kText,
         .help = "judge a shaped trace taken while phase P held"},
        {.name = "--json", .help = "one JSON object instead of the table"},
        {.name = "--plot",
         .value = "FILE.svg",
         .type = kText,
         .help = "write the verdict, the CDFs, the tail (1 - F, log) and the time series"},
        {.name = "--timeline",
         .value = "FILE.svg",
         .type = kText,
         .help = "write delay over time: the capture's probes against the schedule's windows"},
        {.name = "--log", .help = "the plots' delay axes on a log scale"},
        {.name = "--seed",
         .value = "N",
         .type = kWholeNumber,
         .help = "the simulation's seed (default 1)"},
        {.name = "--probes",
         .value = "N",
         .type = kWholeNumber,
         .help = "probes to simulate (default 1000000)",
         .min = 1,
         .max = kMaxValidationProbes},
        {.name = "--alpha",
         .value = "P",
         .type = kNumber,
         .help = "how often a faithful profile or link may fail by chance, per comparison (default "
                 "0.05)",
         .above = 0,
         .at_most = 0.5,
         .expected =
             "a level; give how often a faithful link may fail by chance, above 0 and at most 0.5 "
             "(default 0.05)"},
    }),
    kCaptureOptions);

constexpr Option kFleetOptions[] = {
    {.name = "--inventory",
     .value = "FILE",
     .type = kText,
     .help = "the hosts: JSON, docs/operations.md \"Fleets\""},
    {.name = "--phase", .value = "P", .type = kText, .help = "apply: hold phase P"},
    {.name = "--lead",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "apply, switch: the deadline this far after every host is ready (default 2s; "
             "validate's switches: 1s)"},
    {.name = "--ack-wait",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "apply, switch, validate's switches: how long after the deadline to wait for every "
             "host to report its transition before the change counts as not taken and every host "
             "is put back (default 10s)"},
    {.name = "--count",
     .value = "N",
     .type = kWholeNumber,
     .help = "subscribe: stop after N events (of all hosts); validate: probes per pair (default "
             "1000, at most 10000)",
     .min = 1,
     .max = 10000},
    {.name = "--reorder-window",
     .value = "DURATION",
     .type = kDuration,
     .help = "subscribe: hold an event at most this long for the other hosts' streams to pass its "
             "time (default 500ms; 0: as they arrive)"},
    {.name = "--profiles",
     .value = "DIR",
     .type = kText,
     .help = "validate: the folder of the profiles the hosts run (DIR/NAME.json)"},
    {.name = "--pairs",
     .value = "all|ring",
     .type = kText,
     .help = "validate: every ordered pair (default), or each host to the next"},
    {.name = "--interval",
     .value = "DURATION",
     .type = kPositiveDuration,
     .help = "validate: between a pair's probes (default 20ms; 1ms to 10s)"},
    {.name = "--alpha",
     .value = "P",
     .type = kNumber,
     .help = "validate: how often a faithful fleet may fail by chance, all pairs together "
             "(default 0.05)",
     .above = 0,
     .at_most = 0.5,
     .expected = "a level above 0 and at most 0.5 (default 0.05)"},
    {.name = "--seed",
     .value = "N",
     .type = kWholeNumber,
     .help = "validate: the simulation's seed (default 1)"},
    {.name = "--save",
     .value = "FILE",
     .type = kText,
     .help = "validate: also write the probes and each host's phase (for --calibration)"},
    {.name = "--calibration",
     .value = "FILE",
     .type = kText,
     .help = "validate: a --save of the same pairs through constant delays: each pair's base and "
             "noise"},
    {.name = "--calibration-phase",
     .value = "C",
     .type = kText,
     .help = "validate: calibrate in blocks between the judged ones, switching every host to its "
             "profile's constant phase C and back"},
    {.name = "--blocks",
     .value = "N",
     .type = kWholeNumber,
     .help = "validate: calibration and judged blocks with --calibration-phase (default 4)",
     .min = 1,
     .max = 100},
    {.name = "--probes",
     .value = "FILE",
     .type = kText,
     .help = "validate: judge a --save file instead of probing"},
};

// `fleet validate` is judged in this layer (libshaper's validation); every other action is the
// client's.
int fleet_entry(const Invocation& inv) {
  const auto& words = inv.args.operands(2);
  if (!words.empty() && words[0] == "validate") {
    if (words.size() != 1) throw UsageError("validate takes no operand");
    return fleet_validate_command(inv);
  }
  return fleet_command(inv);
}

// ---- The registry ------------------------------------------------------------------------------

constexpr Command kCommands[] = {
    {"list-commands", "", "", "the methods jitterd offers", {}, true, list_commands_command},
    {"version", "", "", "jitterd's version, pid and kernel", {}, true, version_command},
    {"interfaces",
     "",
     "",
     "interfaces, their root qdisc, whether jitterd may shape them",
     {},
     true,
     interfaces_command},
    {"profiles",
     "",
     "",
     "profiles in jitterd's folders (and invalid files)",
     {},
     true,
     profiles_command},
    {"apply", "", "INTERFACE PROFILE|--file F", "start shaping (replaces a session in place)",
     kApplyOptions, true, apply_command},
    {"switch", "", "INTERFACE PHASE",
     "hold PHASE on every lane of the interface at once (or one lane); pauses schedules",
     kSwitchOptions, true, switch_command},
    {"confirm", "", "INTERFACE", "keep a commit-confirmed apply", kLaneOptions, true,
     confirm_command},
    {"pause", "", "INTERFACE", "freeze the schedule", kLaneOptions, true, pause_command},
    {"resume", "", "INTERFACE", "continue the schedule", kLaneOptions, true, resume_command},
    {"skip", "", "INTERFACE --phase P|--step N", "start that schedule step now", kSkipOptions, true,
     skip_command},
    {"status", "", "[INTERFACE]", "sessions: phase, next transition, lease, counters", kLaneOptions,
     true, status_command},
    {"clear", "", "INTERFACE|--all", "stop shaping, restore the kernel's default qdisc",
     kClearOptions, true, clear_command},
    {"renew", "", "INTERFACE", "extend the session's lease", kRenewOptions, true, renew_command},
    {"subscribe", "events", "", "print events as they happen", kSubscribeOptions, true,
     subscribe_command},
    {"metrics", "", "", "Prometheus metrics text", {}, true, metrics_command},
    {"watch", "", "[INTERFACE]...", "live table of sessions and events (Ctrl-C quits)",
     kWatchOptions, true, watch_command},
    {"fleet", "", "apply [PROFILE]|switch PHASE|clear|status|subscribe|validate",
     "one change on every host of an inventory: staged everywhere, then at one deadline; or "
     "probes between the hosts judged per pair",
     kFleetOptions, true, fleet_entry},
    {"proxy", "", "", "copy stdin/stdout to and from jitterd's socket (what --host runs over ssh)",
     kProxyOptions, false, proxy_command},
    {"compile", "", "TRACE... -o PROFILE.json", "compile captures into a profile", kCompileOptions,
     false, compile_command},
    {"inspect", "", "PROFILE", "show a profile's phases, schedule and digest", kInspectOptions,
     false, inspect_command},
    {"validate", "", "PROFILE [TRACE]", "compare capture, profile (simulated) and shaped link",
     kValidateOptions, false, validate_command},
};

const Command* find_command(std::string_view word) {
  for (const auto& c : kCommands) {
    if (c.name == word || (!c.alias.empty() && c.alias == word)) return &c;
  }
  return nullptr;
}

const Option* find_global(std::string_view word) {
  const auto name = word.substr(0, word.find('='));
  for (const auto& o : kGlobalOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

bool is_help(std::string_view word) {
  return word == "--help" || word == "-h";
}

// Wraps `words` (" [--a A] [--b]...") into lines of `indent` spaces and at most kWidth columns.
void print_wrapped(const std::string& words, std::size_t indent, std::ostream& out) {
  constexpr std::size_t kWidth = 100;
  std::string line;
  for (std::size_t at = 0; at < words.size();) {
    // Each synopsis item starts with " [".
    auto next = words.find(" [", at + 1);
    if (next == std::string::npos) next = words.size();
    const std::string item = words.substr(at, next - at);
    if (!line.empty() && indent + line.size() + item.size() > kWidth) {
      out << std::string(indent, ' ') << line.substr(1) << '\n';
      line.clear();
    }
    line += item;
    at = next;
  }
  if (!line.empty()) out << std::string(indent, ' ') << line.substr(1) << '\n';
}

constexpr const char* kExitCodes = R"(
Exit codes:
  0 ok
  1 validation verdict "fail"
  2 usage
  3 bad input: a capture or profile with errors, or a request jitterd rejected
  4 environment: a file, jitterd unreachable, too slow or failing, the kernel refused
  5 jitterd denied permission
  6 conflict: the interface's root qdisc is not jitterd's (apply --force)
  7 fleet: a host that took a change could not be rolled back (the fleet is not whole)
)";

void print_command_lines(bool online, std::ostream& out) {
  // Name and form, then the summary in a column (on a line of its own when the form is too long);
  // the options' synopsis on indented lines below.
  constexpr std::size_t kSummaryColumn = 37;
  for (const auto& c : kCommands) {
    if (c.online != online) continue;
    std::string left = "  " + std::string(c.name);
    if (!c.operands.empty()) left += " " + std::string(c.operands);
    std::string summary(c.summary);
    if (!c.alias.empty()) summary += " (alias: " + std::string(c.alias) + ")";
    if (left.size() + 1 <= kSummaryColumn) {
      out << left << std::string(kSummaryColumn - left.size(), ' ') << summary << '\n';
    } else {
      out << left << '\n' << std::string(kSummaryColumn, ' ') << summary << '\n';
    }
    print_wrapped(options_synopsis(c.operands, c.options), 6, out);
  }
}

// Runs the command after its words were found: parse, then the handler; a UsageError from either
// is printed with the command's usage line.
int run_command(const Command& command, const std::vector<std::string>& words,
                const Environment& env, std::ostream& out, std::ostream& err) {
  const std::string name(command.name);
  try {
    const ParsedArgs args = command.online ? parse_options(words, {command.options, kGlobalOptions})
                                           : parse_options(words, {command.options});
    return command.handler(
        {command.name, args, env.socket, out, err, env.host, &env.remote_commands});
  } catch (const UsageError& e) {
    err << "jitterctl " << name << ": " << e.what() << "\nusage: " << usage_line(command) << '\n';
    return kExitUsage;
  } catch (const std::exception& e) {
    // Environment failures of the offline commands (a file that cannot be read or written) end
    // here; the online commands report their own.
    err << "jitterctl: " << e.what() << '\n';
    return kExitEnvironment;
  }
}

}  // namespace

std::span<const Command> commands() {
  return kCommands;
}

std::span<const Option> global_options() {
  return kGlobalOptions;
}

std::string usage_line(const Command& command) {
  std::string line = "jitterctl " + std::string(command.name);
  if (!command.operands.empty()) line += " " + std::string(command.operands);
  return line + options_synopsis(command.operands, command.options);
}

void print_command_usage(const Command& command, std::ostream& out) {
  out << "usage: " << usage_line(command) << "\n  " << command.summary << '\n';
  if (!command.options.empty()) {
    out << "options:\n";
    print_option_list(command.options, out);
  }
  if (command.online) {
    out << "global options:\n";
    print_option_list(kGlobalOptions, out);
  }
}

void print_usage(std::ostream& out) {
  out << "usage: jitterctl [--socket PATH | --host ssh://HOST|k8s://NODE] [--json] "
         "[--timeout DURATION] "
         "COMMAND [ARGS]\n\n"
         "Talking to jitterd (global options may also follow the command):\n";
  print_command_lines(true, out);
  out << '\n';
  print_option_list(kGlobalOptions, out);
  out << "\nOffline (no daemon needed):\n";
  print_command_lines(false, out);
  out << "\n`jitterctl COMMAND --help` explains each option.\n" << kExitCodes;
}

int run_jitterctl(const std::vector<std::string>& args, const std::string& default_socket,
                  std::ostream& out, std::ostream& err) {
  return run_jitterctl(args, Environment{default_socket, "", {}}, out, err);
}

int run_jitterctl(const std::vector<std::string>& args, const Environment& env, std::ostream& out,
                  std::ostream& err) {
  if (args.empty() || is_help(args.front())) {
    print_usage(out);
    return args.empty() ? kExitUsage : kExitOk;
  }
  // Global options may come before the command: the command is the first word that is not one of
  // them or its value.
  std::size_t at = 0;
  while (at < args.size()) {
    const Option* global = find_global(args[at]);
    if (!global) break;
    const bool separate_value = global->type != kFlag && args[at].find('=') == std::string::npos;
    at += separate_value ? 2 : 1;
  }
  std::vector<std::string> words(
      args.begin(), args.begin() + static_cast<std::ptrdiff_t>(std::min(at, args.size())));
  if (at >= args.size()) {
    try {
      parse_options(words, {kGlobalOptions});  // a global option without its value
    } catch (const UsageError& e) {
      err << "jitterctl: " << e.what() << '\n';
      return kExitUsage;
    }
    err << "jitterctl: which command? (jitterctl --help lists them)\n";
    return kExitUsage;
  }
  const Command* command = find_command(args[at]);
  if (!command) {
    err << "jitterctl: unknown command \"" << args[at] << "\" (jitterctl --help lists them)\n";
    return kExitUsage;
  }
  // Before an offline command, --host would name a jitterd it never talks to, yet compile and
  // validate have a --host of their own (an fping capture's target): refuse rather than guess.
  const auto names_host = [](const std::string& w) {
    return w == "--host" || w.starts_with("--host=");
  };
  if (!command->online && std::any_of(words.begin(), words.end(), names_host)) {
    err << "jitterctl: " << command->name
        << " runs here, offline, so --host before it (a remote jitterd) means nothing; to pick a "
           "target of an fping capture, put --host after the command: jitterctl "
        << command->name << " --host TARGET ...\n";
    return kExitUsage;
  }
  const auto rest = std::next(args.begin(), static_cast<std::ptrdiff_t>(at) + 1);
  const auto end_of_options = std::find(rest, args.end(), "--");
  if (std::any_of(rest, end_of_options, [](const std::string& w) { return is_help(w); })) {
    print_command_usage(*command, out);
    return kExitOk;
  }
  words.insert(words.end(), rest, args.end());
  return run_command(*command, words, env, out, err);
}

}  // namespace jitterctl
