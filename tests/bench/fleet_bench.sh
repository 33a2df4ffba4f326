#!/usr/bin/env bash
# tests/bench/fleet_bench.sh [--hosts "4 16"] [--switches N] [--lead DURATION]
#                            [--transport "socket ssh"] [--jitterd [LABEL=]PATH]...
#                            [--jitterctl [LABEL=]PATH]... [--out DIR]
#
# The fleet's switch skew (issue 24; docs/benchmarks.md, "Fleet switch skew"), in the VM test bed
# (netem is only there). For each host count of --hosts (default "4 16"), each transport of
# --transport (default "socket"), each --jitterd given (default $JITTERD_BUILD_DIR/daemon/jitterd)
# and each --jitterctl (default $JITTERD_BUILD_DIR/ctl/jitterctl) (give several, e.g. --jitterd
# before=OLD --jitterd after=NEW, to compare builds side by side in one run, alternating), it starts
# that many jitterds, each in a network namespace of its own shaping its own veth (state and socket
# on the guest's tmpfs /tmp, as /run/jitterd is on a real host), writes an inventory, applies a
# two-phase profile with `jitterctl fleet apply`, subscribes with `jitterctl fleet --json subscribe`
# for the whole run, and runs --switches (default 100) `jitterctl fleet --json switch` between its
# two phases, one after another, each with the deadline --lead (default 500ms) after its commits.
# Transport `socket`: the inventory's hosts are local sockets (so that ssh is not what is measured).
# Transport `ssh`: each host's namespace also runs Debian's sshd (tests/bench/bed_sshd.sh) on a
# second veth to a client namespace (198.18.I.1 in host I, 198.18.I.2 in the client's), the
# inventory's hosts are ssh://root@198.18.I.1:2222/SOCKET, and every `jitterctl fleet` runs in the
# client namespace with one key pair.
#
# Per switch and host: the lateness (the kernel's acknowledgement minus the deadline, by the host's
# CLOCK_MONOTONIC: the report's late_ns) and, from each jitterd's status, the apply time of that
# transition (the netlink batch: acknowledgement minus the moment it was sent), so that the
# lateness splits into "before the send" (timer wake-up, planning, the ledger) and the send itself.
# Per switch: the skew (the last host's acknowledgement minus the first's, realtime: skew_ns), the
# client's wall time (the whole `jitterctl fleet switch`, process start to exit) and the jitterds'
# CPU time (their /proc/PID/schedstat, summed over the N daemons, per switch; it includes what the
# client asks besides the change: five clock exchanges, stage, commit and status per host, and the
# subscription's events). Per run: the `fleet apply`'s wall time, the clock offsets and round trips
# the switches reported, and the subscription's stream: events per host, whether every host's
# transition of every switch arrived (matched by its acknowledgement time), whether the stream is
# in non-decreasing client-clock order (at_client_ns), and how many were marked late.
# Prints two tables; keeps every report under --out (default $JITTERD_BUILD_DIR/fleet_bench).
#
# Builds nothing: build jitterd and jitterctl first (any build type; figures are for an optimised
# one). Needs what tests/vm/run needs (docs/testing.md), and for ssh openssh-server and -client;
# JITTERD_BUILD_DIR defaults to build/bench.
# Exit status: 0 when every switch committed on every host and every stream was whole; 1 otherwise;
# 2 on a usage error.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
self=$repo/tests/bench/fleet_bench.sh
# shellcheck source=tests/bench/bench_common.sh
. "$repo/tests/bench/bench_common.sh"
build=${JITTERD_BUILD_DIR:-$repo/build/bench}
hosts="4 16"
switches=100
lead=500ms
transports=socket
daemons=()
clients=()
out=""
in_bed=false
usage() {
  sed -n '2,40p' "$self" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while (($#)); do
  case $1 in
  --hosts)
    hosts=${2:?--hosts needs host counts, e.g. \"4 16\"}
    shift 2
    ;;
  --switches)
    switches=${2:?--switches needs a number}
    shift 2
    ;;
  --lead)
    lead=${2:?--lead needs a duration}
    shift 2
    ;;
  --transport)
    transports=${2:?--transport needs socket, ssh or both}
    shift 2
    ;;
  --jitterd)
    daemons+=("${2:?--jitterd needs [LABEL=]PATH}")
    shift 2
    ;;
  --jitterctl)
    clients+=("${2:?--jitterctl needs [LABEL=]PATH}")
    shift 2
    ;;
  --out)
    out=${2:?--out needs a folder}
    shift 2
    ;;
  --in-bed)
    in_bed=true
    shift
    ;;
  *) usage ;;
  esac
done
bench_whole_number fleet_bench.sh --switches "$switches"
for n in $hosts; do bench_whole_number fleet_bench.sh "each of --hosts" "$n" 64; done
for t in $transports; do
  [[ $t == socket || $t == ssh ]] || {
    echo "fleet_bench.sh: --transport takes socket and ssh, not '$t'" >&2
    exit 2
  }
done
((${#daemons[@]})) || daemons=("jitterd=$build/daemon/jitterd")
((${#clients[@]})) || clients=("jitterctl=$build/ctl/jitterctl")
[[ -n $out ]] || out=$build/fleet_bench
# split_labels LABELS PATHS ITEM...: each ITEM, LABEL=PATH or PATH (label: the file's name), onto
# the arrays named LABELS and PATHS.
split_labels() {
  local -n split_l=$1 split_p=$2
  local d
  for d in "${@:3}"; do
    if [[ $d == *=* ]]; then
      split_l+=("${d%%=*}") split_p+=("$(realpath -m "${d#*=}")")
    else
      split_l+=("$(basename "$d")") split_p+=("$(realpath -m "$d")")
    fi
  done
}
labels=() paths=() ctl_labels=() ctl_paths=()
split_labels labels paths "${daemons[@]}"
split_labels ctl_labels ctl_paths "${clients[@]}"
bench_executables fleet_bench.sh 2 "$build" "${paths[@]}" "${ctl_paths[@]}"

if ! $in_bed; then
  # On this machine: say what state it is in, then run the rest in the bed.
  out=$(bench_visible_dir fleet_bench.sh "$out" "use --out")
  echo "# fleet switch skew, $(bench_revision): hosts $hosts, transports $transports," \
    "$switches switches each, lead $lead"
  for i in "${!labels[@]}"; do echo "#   ${labels[$i]}: ${paths[$i]}"; done
  for i in "${!ctl_labels[@]}"; do echo "#   ${ctl_labels[$i]}: ${ctl_paths[$i]}"; done
  echo "# machine: $(bench_machine); uptime: $(uptime)"
  args=(--in-bed --hosts "$hosts" --switches "$switches" --lead "$lead" --transport "$transports" --out "$out")
  for i in "${!labels[@]}"; do args+=(--jitterd "${labels[$i]}=${paths[$i]}"); done
  for i in "${!ctl_labels[@]}"; do args+=(--jitterctl "${ctl_labels[$i]}=${ctl_paths[$i]}"); done
  status=0
  JITTERD_VM_TIMEOUT=${JITTERD_VM_TIMEOUT:-3600} "$repo/tests/vm/run" "$self" "${args[@]}" || status=$?
  echo "# machine after: load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); uptime: $(uptime)"
  exit "$status"
fi

# ---- In the bed --------------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || {
  echo "fleet_bench.sh: the bed runs this as root; run it through tests/vm/run" >&2
  exit 2
}
# shellcheck source=tests/bench/bed_sshd.sh
. "$repo/tests/bench/bed_sshd.sh"
work=/tmp/fleet-bench
ssh_port=2222 # as the kernel tests': never mistaken for a real sshd
pids=()       # the jitterds (their CPU time is measured)
others=()     # sshds and the subscriber
namespaces=()
stop_all() {
  local pid ns
  for pid in "${others[@]}" "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${others[@]}" "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  pids=() others=() namespaces=()
}
trap stop_all EXIT

# CPU time of a process so far, in ns: schedstat's first field (on-CPU time), else utime + stime.
cpu_ns() {
  local first rest
  if read -r first rest <"/proc/$1/schedstat" 2>/dev/null; then
    echo "$first"
  else
    local -a f
    read -r -a f <"/proc/$1/stat"
    echo $(((f[13] + f[14]) * 1000000000 / $(getconf CLK_TCK)))
  fi
}
cpu_all() {
  local pid sum=0
  for pid in "${pids[@]}"; do sum=$((sum + $(cpu_ns "$pid"))); done
  echo "$sum"
}

profile='{"version": 1, "name": "fleetbench", "description": "fleet_bench.sh: two delay levels",
  "phases": {"low": {"delay": {"latency": "5ms"}}, "high": {"delay": {"latency": "50ms"}}},
  "schedule": {"steps": [{"phase": "low", "duration": "1s"}, {"phase": "high", "duration": "1s"}],
               "loop": true}}'

# Host I's namespace fb$I, its jitterd (shaping fba, a veth of its own) and, over ssh, its sshd on
# fbs (198.18.I.1) with its peer fbc$I (198.18.I.2) in the client's namespace fbc. Sets `entry` to
# the inventory's entry for it (not printed: it adds to pids, others and namespaces).
start_host() {
  local transport=$1 jitterd=$2 jitterctl=$3 i=$4
  local ns=fb$i dir=$work/h$i
  mkdir -p "$dir/profiles" "$dir/state"
  printf '%s\n' "$profile" >"$dir/profiles/fleetbench.json"
  printf '{"socket": {"path": "%s"}, "state_dir": "%s", "profile_dirs": ["%s"], "interfaces": {"allow": ["fba"]}}\n' \
    "$dir/jitterd.sock" "$dir/state" "$dir/profiles" >"$dir/config.json"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$ns" link add fba type veth peer name fbb
  ip -n "$ns" link set fba up
  ip -n "$ns" link set fbb up
  ip netns exec "$ns" "$jitterd" --config "$dir/config.json" >"$dir/jitterd.log" 2>&1 &
  pids+=($!)
  if [[ $transport == socket ]]; then
    entry="{\"name\": \"h$i\", \"socket\": \"$dir/jitterd.sock\", \"interface\": \"fba\"}"
    return
  fi
  ip -n "$ns" link add fbs type veth peer name "fbc$i" netns fbc
  ip -n "$ns" addr add "198.18.$i.1/24" dev fbs
  ip -n "$ns" link set fbs up
  ip -n fbc addr add "198.18.$i.2/24" dev "fbc$i"
  ip -n fbc link set "fbc$i" up
  bed_sshd_start "$dir" "$ns" "198.18.$i.1" "$ssh_port" "$work/client_key.pub" "$jitterctl" >&2
  others+=("$BED_SSHD_PID")
  entry="{\"name\": \"h$i\", \"host\": \"ssh://root@198.18.$i.1:$ssh_port$dir/jitterd.sock\", \"interface\": \"fba\"}"
}

# Lines in a file (0 when it is not there yet).
lines_in() { if [[ -f $1 ]]; then wc -l <"$1"; else echo 0; fi; }

# One run: N hosts, one daemon, one client, one transport. Reports in $out/$name/.
run_one() {
  local name=$1 transport=$2 jitterd=$3 jitterctl=$4 n=$5 i
  local runout=$out/$name entry
  rm -rf "$work" "$runout"
  mkdir -p "$work" "$runout"
  local fleet=("$jitterctl" fleet --inventory "$work/inventory.json" --timeout 60s)
  if [[ $transport == ssh ]]; then
    ip netns add fbc
    namespaces+=(fbc)
    ip -n fbc link set lo up
    bed_ssh_key "$work/client_key"
    fleet=(ip netns exec fbc env "JITTERD_SSH=$(bed_ssh_command "$work/client_key" "$work/known_hosts")"
      "${fleet[@]}")
  fi
  local inventory='{"version": 1, "hosts": ['
  for ((i = 0; i < n; ++i)); do
    ((i)) && inventory+=', '
    start_host "$transport" "$jitterd" "$jitterctl" "$i"
    inventory+=$entry
  done
  printf '%s]}\n' "$inventory" >"$work/inventory.json"
  for ((i = 0; i < n; ++i)); do
    local tries=0
    until "$jitterctl" --socket "$work/h$i/jitterd.sock" version >/dev/null 2>&1; do
      ((++tries < 300)) || {
        echo "fleet_bench.sh: jitterd h$i did not answer within 30 s:" >&2
        cat "$work/h$i/jitterd.log" >&2
        return 1
      }
      sleep 0.1
    done
  done
  # An apply whose commit went out everywhere goes on even when the client missed a host's
  # acknowledgement (seen once under load 9: 3 of 16 hosts, a switch then finds out for sure).
  local t0 t1 applied=0
  t0=$(date +%s%N)
  "${fleet[@]}" --json apply fleetbench --phase low --lead "$lead" >"$runout/apply.json" || applied=$?
  t1=$(date +%s%N)
  echo "$((t1 - t0))" >"$runout/apply_wall_ns"
  if ((applied)); then
    if [[ $(jq -r .committed "$runout/apply.json" 2>/dev/null) != true ]]; then
      echo "fleet_bench.sh: fleet apply failed on $n hosts ($name):" >&2
      cat "$runout/apply.json" >&2
      return 1
    fi
    echo "fleet_bench.sh: fleet apply on $n hosts ($name) committed, but not every acknowledgement was read:" \
      "$(jq -c '[.hosts[] | select(has("late_ns") | not) | .name]' "$runout/apply.json")" >&2
  fi
  # One stream for the whole run; the switches start once it carries an event of every host (the
  # warm-up switches, not counted: the first of a run also pays for cold caches), in phase high.
  "${fleet[@]}" --json subscribe >"$runout/subscribe.jsonl" 2>"$runout/subscribe.err" &
  local subscriber=$!
  others+=("$subscriber")
  local warm=0 phase=low
  until [[ $phase == high ]] && (($(jq -r .host "$runout/subscribe.jsonl" | sort -u | wc -l) == n)); do
    ((warm < 20)) || {
      echo "fleet_bench.sh: fleet subscribe on $n hosts ($name) did not carry every host's events:" >&2
      cat "$runout/subscribe.err" >&2
      return 1
    }
    [[ $phase == low ]] && phase=high || phase=low
    warm=$((warm + 1))
    "${fleet[@]}" --json switch "$phase" --lead "$lead" >"$runout/warm-up-$warm.json" || true
    sleep 1 # the stream's reorder window (500 ms) holds the last events
  done
  local k c0 c1 failed=0
  : >"$runout/runs.csv"
  for ((k = 1; k <= switches; ++k)); do
    ((k % 2)) && phase=low || phase=high
    c0=$(cpu_all)
    t0=$(date +%s%N)
    "${fleet[@]}" --json switch "$phase" --lead "$lead" >"$runout/switch-$k.json" || failed=$((failed + 1))
    t1=$(date +%s%N)
    c1=$(cpu_all)
    echo "$k,$((t1 - t0)),$((c1 - c0))" >>"$runout/runs.csv"
    # Each status keeps the last 32 transitions: read them every 25 switches and at the end.
    if ((k % 25 == 0 || k == switches)); then
      for ((i = 0; i < n; ++i)); do
        "$jitterctl" --socket "$work/h$i/jitterd.sock" --json status \
          >"$runout/status-h$i-$k.json" || true
      done
    fi
  done
  # The stream's last events out (the reorder window), then the subscriber ends (SIGTERM: it
  # closes its connections and exits 0).
  local before=-1
  while (($(lines_in "$runout/subscribe.jsonl") != before)); do
    before=$(lines_in "$runout/subscribe.jsonl")
    sleep 2
  done
  kill -TERM "$subscriber"
  wait "$subscriber" && echo 0 >"$runout/subscribe_status" || echo $? >"$runout/subscribe_status"
  for ((i = 0; i < n; ++i)); do
    cp "$work/h$i/jitterd.log" "$runout/jitterd-h$i.log"
    [[ $transport == socket ]] || cp "$work/h$i/sshd.log" "$runout/sshd-h$i.log"
  done
  stop_all
  echo "$failed" >"$runout/failed"
}

status=0
runs=()
for n in $hosts; do
  for transport in $transports; do
    for i in "${!labels[@]}"; do
      for c in "${!ctl_labels[@]}"; do
        name=$transport
        ((${#labels[@]} == 1)) || name+=-${labels[$i]}
        ((${#ctl_labels[@]} == 1)) || name+=-${ctl_labels[$c]}
        name+=-$n
        runs+=("$name")
        echo "# $(date -u +%T) $name: $n hosts over $transport, ${labels[$i]}, ${ctl_labels[$c]}," \
          "$switches switches, guest load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        run_one "$name" "$transport" "${paths[$i]}" "${ctl_paths[$c]}" "$n" || status=1
      done
    done
  done
done
python3 "$repo/tests/bench/fleet_bench_report.py" --lead "$lead" "$out" "${runs[@]}" || status=1
exit "$status"
