#!/usr/bin/env bash
# tests/bench/daemon_bench.sh [--duration SECONDS] [--only rtt|lateness|memory]... [--interfaces N]
#                             [--start together|spread|apply] [--soak]
#
# jitterd's benchmarks, all of them (docs/benchmarks.md, "jitterd daemon"):
#   rtt       on this machine: request round trip and requests/s next to an echo server (no root);
#   lateness  in the VM test bed (real netem): a 10 Hz schedule for --duration seconds (default 600)
#             on --interfaces veths (default 1, one session each), started --start (default together);
#   memory    in the VM test bed: VmRSS/VmHWM idle, with 100 shaped interfaces, after clearing them.
# --soak is issue 7's soak: --only lateness --interfaces 16 --duration 3600 (about 65 minutes).
# Builds jitterd, jitterctl and daemon_bench first if needed, and compiles the memory run's profile
# (tests/fixtures/captures/multimodal.txt, a 4096-entry exact table) with jitterctl.
#
# Environment: JITTERD_BUILD_DIR (default build/bench; under /tmp only inside this checkout).
# The VM parts need what tests/vm/run needs (root, qemu, a Debian kernel with netem; docs/testing.md).
# Output: the tables on stdout, also kept in $JITTERD_BUILD_DIR/daemon_bench.log; every transition of
# the lateness run in $JITTERD_BUILD_DIR/daemon_bench-lateness.csv, jitterd's memory every 10 s in
# daemon_bench-lateness-memory.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd -P)
# shellcheck source=tests/bench/bench_common.sh
. "$repo/tests/bench/bench_common.sh"
build=${JITTERD_BUILD_DIR:-build/bench}
duration=600
interfaces=1
start=together
only=()
while (($#)); do
  case $1 in
  --duration)
    duration=${2:?--duration needs a number of seconds}
    shift 2
    ;;
  --interfaces)
    interfaces=${2:?--interfaces needs a number of interfaces}
    shift 2
    ;;
  --start)
    start=${2:?--start needs together, spread or apply}
    shift 2
    ;;
  --soak)
    only+=(lateness) interfaces=16 duration=3600
    shift
    ;;
  --only)
    only+=("${2:?--only needs rtt, lateness or memory}")
    shift 2
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
done
bench_whole_number daemon_bench.sh "--duration (seconds)" "$duration"
[[ $start == together || $start == spread || $start == apply ]] || {
  echo "daemon_bench.sh: --start must be together, spread or apply" >&2
  exit 2
}
bench_whole_number daemon_bench.sh --interfaces "$interfaces" 250
((${#only[@]})) || only=(rtt lateness memory)
wanted() { [[ " ${only[*]} " == *" $1 "* ]]; }

build=$(bench_visible_dir daemon_bench.sh "$build" "set JITTERD_BUILD_DIR")
[[ -f $build/build.ninja ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" jitterd jitterctl daemon_bench >/dev/null

bench=$build/tests/bench/daemon_bench
jitterd=$build/daemon/jitterd
log=$build/daemon_bench.log
: >"$log"
say() { printf '%s\n' "$*" | tee -a "$log"; }
# This machine may itself be a VM on a shared host: the CPU time stolen by the hypervisor since the
# previous line (the "cpu" line of /proc/stat, field 8) says how much of the noise came from outside.
cpu_total=0 cpu_steal=0
host() {
  local -a t
  read -r -a t </proc/stat
  local total=$((t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7] + t[8])) steal=${t[8]} since=""
  if ((cpu_total && total > cpu_total)); then
    since=", CPU time stolen by the hypervisor since the previous line: $((100 * (steal - cpu_steal) / (total - cpu_total))) %"
  fi
  cpu_total=$total cpu_steal=$steal
  say "## host: $(bench_machine)$since"
}

say "# jitterd daemon benchmarks, $(bench_revision), build $build"
status=0
if wanted rtt; then
  host
  "$bench" rtt --jitterd "$jitterd" 2>&1 | tee -a "$log" || status=1
fi

if wanted memory; then
  profile=$build/tests/bench/multimodal-4096.json
  capture=$repo/tests/fixtures/captures/multimodal.txt
  if [[ ! -s $profile || $profile -ot $capture || $profile -ot $build/ctl/jitterctl ]]; then
    "$build/ctl/jitterctl" compile "$capture" --entries 4096 --name multimodal-4096 -o "$profile" >/dev/null
  fi
  host
  (cd "$build" && "$repo/tests/vm/run" "$bench" memory --jitterd "$jitterd" --profile "$profile") 2>&1 |
    tee -a "$log" || status=1
fi

if wanted lateness; then
  host
  # The VM's own limit must outlast the run: boot, set-up and tear-down take well under 5 minutes,
  # plus the start margin the sessions get (5 s + 0.5 s per interface).
  (cd "$build" && JITTERD_VM_TIMEOUT=$((duration + 600 + interfaces)) "$repo/tests/vm/run" "$bench" lateness \
    --jitterd "$jitterd" --duration "$duration" --interfaces "$interfaces" --start "$start" \
    --csv "$build/daemon_bench-lateness.csv") 2>&1 | tee -a "$log" || status=1
fi
host
say "# full output: $log"
exit "$status"
