#!/usr/bin/env bash
# tests/bench/fleet_bench.sh [--hosts "4 16"] [--switches N] [--lead DURATION]
#                            [--jitterd [LABEL=]PATH]... [--jitterctl PATH] [--out DIR]
#
# The fleet's switch skew (issue 24; docs/benchmarks.md, "Fleet switch skew"), in the VM test bed
# (netem is only there). For each host count of --hosts (default "4 16") and each --jitterd given
# (default $JITTERD_BUILD_DIR/daemon/jitterd; give several, e.g. --jitterd before=OLD --jitterd
# after=NEW, to compare daemons side by side in one run, alternating), it starts that many jitterds,
# each in a network namespace of its own shaping its own veth (state and socket on the guest's
# tmpfs /tmp, as /run/jitterd is on a real host), writes an inventory of local `socket` hosts (so
# that ssh is not what is measured), applies a two-phase profile with `jitterctl fleet apply`, and
# runs --switches (default 100) `jitterctl fleet --json switch` between its two phases, one after
# another, each with the deadline --lead (default 500ms) after its commits.
#
# Per switch and host: the lateness (the kernel's acknowledgement minus the deadline, by the host's
# CLOCK_MONOTONIC: the report's late_ns) and, from each jitterd's status, the apply time of that
# transition (the netlink batch: acknowledgement minus the moment it was sent), so that the
# lateness splits into "before the send" (timer wake-up, planning, the ledger) and the send itself.
# Per switch: the skew (the last host's acknowledgement minus the first's, realtime: skew_ns), the
# client's wall time (the whole `jitterctl fleet switch`, process start to exit) and the jitterds'
# CPU time (their /proc/PID/schedstat, summed over the N daemons, per switch; it includes what the
# client asks besides the change: five clock exchanges, stage, commit and status per host).
# Prints one table; keeps every report under --out (default $JITTERD_BUILD_DIR/fleet_bench).
#
# Builds nothing: build jitterd and jitterctl first (any build type; figures are for an optimised
# one). Needs what tests/vm/run needs (docs/testing.md); JITTERD_BUILD_DIR defaults to build/bench.
# Exit status: 0 when every switch committed on every host; 1 otherwise; 2 on a usage error.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
self=$repo/tests/bench/fleet_bench.sh
# shellcheck source=tests/bench/bench_common.sh
. "$repo/tests/bench/bench_common.sh"
build=${JITTERD_BUILD_DIR:-$repo/build/bench}
hosts="4 16"
switches=100
lead=500ms
daemons=()
jitterctl=""
out=""
in_bed=false
usage() {
  sed -n '2,27p' "$self" | sed 's/^# \{0,1\}//' >&2
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
  --jitterd)
    daemons+=("${2:?--jitterd needs [LABEL=]PATH}")
    shift 2
    ;;
  --jitterctl)
    jitterctl=${2:?--jitterctl needs a path}
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
((${#daemons[@]})) || daemons=("jitterd=$build/daemon/jitterd")
[[ -n $jitterctl ]] || jitterctl=$build/ctl/jitterctl
[[ -n $out ]] || out=$build/fleet_bench
labels=()
paths=()
for d in "${daemons[@]}"; do
  if [[ $d == *=* ]]; then
    labels+=("${d%%=*}") paths+=("$(realpath -m "${d#*=}")")
  else
    labels+=("$(basename "$d")") paths+=("$(realpath -m "$d")")
  fi
done
jitterctl=$(realpath -m "$jitterctl")
bench_executables fleet_bench.sh 2 "$build" "${paths[@]}" "$jitterctl"

if ! $in_bed; then
  # On this machine: say what state it is in, then run the rest in the bed.
  out=$(bench_visible_dir fleet_bench.sh "$out" "use --out")
  echo "# fleet switch skew, $(bench_revision): hosts $hosts, $switches switches each, lead $lead"
  for i in "${!labels[@]}"; do echo "#   ${labels[$i]}: ${paths[$i]}"; done
  echo "# machine: $(bench_machine)"
  args=(--in-bed --hosts "$hosts" --switches "$switches" --lead "$lead" --jitterctl "$jitterctl" --out "$out")
  for i in "${!labels[@]}"; do args+=(--jitterd "${labels[$i]}=${paths[$i]}"); done
  status=0
  JITTERD_VM_TIMEOUT=${JITTERD_VM_TIMEOUT:-3600} "$repo/tests/vm/run" "$self" "${args[@]}" || status=$?
  echo "# machine after: load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
  exit "$status"
fi

# ---- In the bed --------------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || {
  echo "fleet_bench.sh: the bed runs this as root; run it through tests/vm/run" >&2
  exit 2
}
work=/tmp/fleet-bench
pids=()
namespaces=()
stop_all() {
  local pid ns
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  pids=() namespaces=()
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

# One run: N hosts, one daemon. Reports in $out/$label-$n/.
run_one() {
  local label=$1 jitterd=$2 n=$3 i dir ns
  local runout=$out/$label-$n
  rm -rf "$work" "$runout"
  mkdir -p "$work" "$runout"
  local inventory='{"version": 1, "hosts": ['
  for ((i = 0; i < n; ++i)); do
    ns=fb$i dir=$work/h$i
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
    ((i)) && inventory+=', '
    inventory+="{\"name\": \"h$i\", \"socket\": \"$dir/jitterd.sock\", \"interface\": \"fba\"}"
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
  local fleet=("$jitterctl" fleet --inventory "$work/inventory.json" --timeout 60s)
  # An apply whose commit went out everywhere goes on even when the client missed a host's
  # acknowledgement (seen once under load 9: 3 of 16 hosts, a switch then finds out for sure).
  if ! "${fleet[@]}" --json apply fleetbench --phase low --lead "$lead" >"$runout/apply.json"; then
    if [[ $(jq -r .committed "$runout/apply.json" 2>/dev/null) != true ]]; then
      echo "fleet_bench.sh: fleet apply failed on $n hosts ($label):" >&2
      cat "$runout/apply.json" >&2
      return 1
    fi
    echo "fleet_bench.sh: fleet apply on $n hosts ($label) committed, but not every acknowledgement was read:" \
      "$(jq -c '[.hosts[] | select(has("late_ns") | not) | .name]' "$runout/apply.json")" >&2
  fi
  # One switch not counted: the first of a run pays for cold caches.
  "${fleet[@]}" --json switch high --lead "$lead" >"$runout/warm-up.json" || true
  local k phase t0 t1 c0 c1 failed=0
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
  for ((i = 0; i < n; ++i)); do cp "$work/h$i/jitterd.log" "$runout/jitterd-h$i.log"; done
  stop_all
  echo "$failed" >"$runout/failed"
}

status=0
for n in $hosts; do
  for i in "${!labels[@]}"; do
    echo "# $(date -u +%T) ${labels[$i]}: $n hosts, $switches switches, guest load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    run_one "${labels[$i]}" "${paths[$i]}" "$n" || status=1
  done
done
runs=()
for n in $hosts; do
  for label in "${labels[@]}"; do runs+=("$label-$n"); done
done
python3 "$repo/tests/bench/fleet_bench_report.py" --lead "$lead" "$out" "${runs[@]}" || status=1
exit "$status"
