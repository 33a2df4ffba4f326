#!/usr/bin/env bash
# tests/bench/fleet_bench.sh [--hosts "4 16"] [--switches N] [--lead DURATION]
#                            [--transport "socket ssh"] [--jitterd [LABEL=]PATH]...
#                            [--jitterctl [LABEL=]PATH]... [--kernels "one per-host"] [--out DIR]
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
# --kernels (default "one"): `one` runs every host in ONE UML guest as above (one kernel, one CPU
# for all the jitterds: docs/benchmarks.md says why that cannot meet 1 ms); `per-host` boots one UML
# guest per fleet host instead (each a host process of its own: its own kernel, scheduler and
# timers), each with a vec0 device on a tap (198.18.0.I+1/24 for host I) of a bridge (198.18.0.254)
# in a network namespace this script makes, its jitterd and sshd (tests/bench/bed_sshd.sh) as above,
# and drives the fleet over ssh from this machine's side of the bridge (a plain host process: the
# cheapest client, and one kernel fewer competing for the CPUs). Its runs are named per-host-ssh-N
# and ignore --transport. The namespace is unshare(1)'s, with its own pid and mount namespaces and a
# tmpfs /tmp: when the script ends, even killed, the kernel removes the taps, the bridge, every
# guest and every temporary file. With both, the modes alternate per host count. Each guest is a
# host process: more than the machine's CPUs of them contend for its CPUs. Per-host runs' CPU/switch
# is the guests' host CPU time (each UML kernel and its processes, reaped ones tick-counted).
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
kernels=one
per_host_bed=false
guest_host="" # --guest-host I: this is fleet host I's guest (per-host)
runout=""
usage() {
  sed -n '2,52p' "$self" | sed 's/^# \{0,1\}//' >&2
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
  --kernels)
    kernels=${2:?--kernels needs one, per-host or both}
    shift 2
    ;;
  --in-bed)
    in_bed=true
    shift
    ;;
  --per-host-bed)
    per_host_bed=true
    shift
    ;;
  --guest-host)
    guest_host=${2:?}
    runout=${3:?}
    shift 3
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
for k in $kernels; do
  [[ $k == one || $k == per-host ]] || {
    echo "fleet_bench.sh: --kernels takes one and per-host, not '$k'" >&2
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

if ! $in_bed && ! $per_host_bed && [[ -z $guest_host ]]; then
  # On this machine: say what state it is in, then run each host count in the bed(s); the tables
  # cover every run the beds listed in $out/runs.list.
  out=$(bench_visible_dir fleet_bench.sh "$out" "use --out")
  if [[ " $kernels " == *" per-host "* ]]; then
    # The per-host bed mounts a private tmpfs on /tmp: the checkout, the binaries and --out must be
    # elsewhere, or its guests would not find them.
    for p in "$repo" "$out" "${paths[@]}" "${ctl_paths[@]}"; do
      [[ $(realpath -m "$p")/ != /tmp/* ]] || {
        echo "fleet_bench.sh: --kernels per-host: $p is under /tmp, which the per-host bed replaces with" \
          "a tmpfs of its own; use a checkout, build tree and --out outside /tmp" >&2
        exit 2
      }
    done
  fi
  echo "# fleet switch skew, $(bench_revision): hosts $hosts, kernels $kernels, transports" \
    "$transports, $switches switches each, lead $lead"
  for i in "${!labels[@]}"; do echo "#   ${labels[$i]}: ${paths[$i]}"; done
  for i in "${!ctl_labels[@]}"; do echo "#   ${ctl_labels[$i]}: ${ctl_paths[$i]}"; done
  echo "# machine: $(bench_machine); uptime: $(uptime)"
  args=(--switches "$switches" --lead "$lead" --transport "$transports" --out "$out")
  for i in "${!labels[@]}"; do args+=(--jitterd "${labels[$i]}=${paths[$i]}"); done
  for i in "${!ctl_labels[@]}"; do args+=(--jitterctl "${ctl_labels[$i]}=${ctl_paths[$i]}"); done
  status=0
  : >"$out/runs.list"
  for n in $hosts; do
    for k in $kernels; do
      if [[ $k == one ]]; then
        JITTERD_VM_TIMEOUT=${JITTERD_VM_TIMEOUT:-3600} "$repo/tests/vm/run" "$self" --in-bed \
          --hosts "$n" "${args[@]}" || status=1
      else
        # --kill-child: when this script ends, its namespace's pid 1 and with it every guest end.
        unshare --net --pid --mount --fork --kill-child --mount-proc --propagation private \
          "$self" --per-host-bed --hosts "$n" "${args[@]}" || status=1
      fi
    done
  done
  mapfile -t runs <"$out/runs.list"
  python3 "$repo/tests/bench/fleet_bench_report.py" --lead "$lead" "$out" "${runs[@]}" || status=1
  echo "# machine after: load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); uptime: $(uptime)"
  exit "$status"
fi

# ---- In the bed (one guest, or one per host), or in the per-host bed's namespace ----------------
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
guests=()     # per-host: the tests/vm/run of each host's guest
stop_file=""  # per-host: the file whose creation tells the guests to copy their logs and stop
stop_all() {
  local pid ns tries=0
  if ((${#guests[@]})); then
    : >"$stop_file"
    while kill -0 "${guests[@]}" 2>/dev/null && ((++tries < 600)); do sleep 0.1; done
    kill -TERM "${guests[@]}" 2>/dev/null || true
  fi
  for pid in "${others[@]}" "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${others[@]}" "${pids[@]}" "${guests[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  pids=() others=() namespaces=() guests=()
}
trap stop_all EXIT

# CPU time of a process so far, in ns: schedstat's first field (on-CPU time), else utime + stime.
cpu_ns() {
  local first rest
  if read -r first rest 2>/dev/null <"/proc/$1/schedstat"; then
    echo "$first"
  else
    local -a f=()
    read -r -a f 2>/dev/null <"/proc/$1/stat" || true # 0 when it has gone meanwhile
    echo $(((${f[13]:-0} + ${f[14]:-0}) * 1000000000 / $(getconf CLK_TCK)))
  fi
}
cpu_all() {
  local pid sum=0 comm
  for pid in "${pids[@]}"; do sum=$((sum + $(cpu_ns "$pid"))); done
  if ((${#guests[@]})); then
    # Per-host: every UML process of the pid namespace (each kernel and the host processes of its
    # guest's address spaces), plus what each has reaped (the stat's cutime and cstime, in ticks).
    local -a f
    for pid in /proc/[0-9]*; do
      { read -r comm <"$pid/comm" && [[ $comm == linux.uml ]] && read -r -a f <"$pid/stat"; } 2>/dev/null ||
        continue # not UML, or gone
      sum=$((sum + $(cpu_ns "${pid#/proc/}") + (f[15] + f[16]) * 1000000000 / $(getconf CLK_TCK)))
    done
  fi
  echo "$sum"
}

profile='{"version": 1, "name": "fleetbench", "description": "fleet_bench.sh: two delay levels",
  "phases": {"low": {"delay": {"latency": "5ms"}}, "high": {"delay": {"latency": "50ms"}}},
  "schedule": {"steps": [{"phase": "low", "duration": "1s"}, {"phase": "high", "duration": "1s"}],
               "loop": true}}'

# Host I's namespace fb$I, its jitterd (shaping fba, a veth of its own) and, over ssh, its sshd on
# fbs (198.18.I.1) with its peer fbc$I (198.18.I.2) in the client's namespace fbc; per-host (in host
# I's guest), its sshd on the guest's vec0 (198.18.0.I+1), moved into fb$I. Sets `entry` to the
# inventory's entry for it (not printed: it adds to pids, others and namespaces).
start_host() {
  local transport=$1 jitterd=$2 jitterctl=$3 i=$4 client_pub=$5
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
  local address=198.18.$i.1 link=fbs
  if [[ $transport == per-host ]]; then
    address=198.18.0.$((i + 1)) link=vec0
    ip link set vec0 netns "$ns"
    ip -n "$ns" addr add "$address/24" dev vec0
  else
    ip -n "$ns" link add fbs type veth peer name "fbc$i" netns fbc
    ip -n "$ns" addr add "$address/24" dev fbs
    ip -n fbc addr add "198.18.$i.2/24" dev "fbc$i"
    ip -n fbc link set "fbc$i" up
  fi
  ip -n "$ns" link set "$link" up
  bed_sshd_start "$dir" "$ns" "$address" "$ssh_port" "$client_pub" "$jitterctl" >&2
  others+=("$BED_SSHD_PID")
  entry="{\"name\": \"h$i\", \"host\": \"ssh://root@$address:$ssh_port$dir/jitterd.sock\", \"interface\": \"fba\"}"
}

# Per-host, in the namespace: host I's guest, booted on tap fbt$I of the bridge fbbr, runs this
# script with --guest-host (its start_host, then it waits for $stop_file). Sets `entry`.
start_guest() {
  local jitterd=$1 jitterctl=$2 i=$3 runout=$4
  ip tuntap add "fbt$i" mode tap
  ip link set "fbt$i" master fbbr
  ip link set "fbt$i" up
  # 512M: jitterd, sshd and the proxies need far less; UML's memory file is sparse anyway.
  JITTERD_VM_MEM=512M JITTERD_VM_UML_ARGS="vec0:transport=tap,ifname=fbt$i" \
    "$repo/tests/vm/run" "$self" --guest-host "$i" "$runout" --jitterd "$jitterd" \
    --jitterctl "$jitterctl" >"$runout/guest-h$i.log" 2>&1 &
  guests+=($!)
  entry="{\"name\": \"h$i\", \"host\": \"ssh://root@198.18.0.$((i + 1)):$ssh_port$work/h$i/jitterd.sock\", \"interface\": \"fba\"}"
}

# jitterctl ARGS for host I: over its socket, or per-host over ssh.
ctl_host() {
  local jitterctl=$1 transport=$2 i=$3
  if [[ $transport == per-host ]]; then
    "$jitterctl" --host "ssh://root@198.18.0.$((i + 1)):$ssh_port$work/h$i/jitterd.sock" "${@:4}"
  else
    "$jitterctl" --socket "$work/h$i/jitterd.sock" "${@:4}"
  fi
}

# Waits until host I's jitterd answers (in its own kernel: before the guest says it is ready).
wait_jitterd() {
  local jitterctl=$1 i=$2 tries=0
  until "$jitterctl" --socket "$work/h$i/jitterd.sock" version >/dev/null 2>&1; do
    ((++tries < 300)) || {
      echo "fleet_bench.sh: jitterd h$i did not answer within 30 s:" >&2
      cat "$work/h$i/jitterd.log" >&2
      return 1
    }
    sleep 0.1
  done
}

# Lines in a file (0 when it is not there yet).
lines_in() { if [[ -f $1 ]]; then wc -l <"$1"; else echo 0; fi; }

# One run: N hosts, one daemon, one client, one transport. Reports in $out/$name/.
run_one() {
  local name=$1 transport=$2 jitterd=$3 jitterctl=$4 n=$5 i
  local runout=$out/$name entry
  rm -rf "$work" "$runout"
  mkdir -p "$work" "$runout"
  echo "$name" >>"$out/runs.list"
  local fleet=("$jitterctl" fleet --inventory "$work/inventory.json" --timeout 60s)
  if [[ $transport == per-host ]]; then
    bed_ssh_key "$work/client_key"
    cp "$work/client_key.pub" "$runout/client_key.pub"
    export JITTERD_SSH
    JITTERD_SSH=$(bed_ssh_command "$work/client_key" "$work/known_hosts")
    stop_file=$runout/stop
  elif [[ $transport == ssh ]]; then
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
    if [[ $transport == per-host ]]; then
      start_guest "$jitterd" "$jitterctl" "$i" "$runout"
    else
      start_host "$transport" "$jitterd" "$jitterctl" "$i" "$work/client_key.pub"
    fi
    inventory+=$entry
  done
  printf '%s]}\n' "$inventory" >"$work/inventory.json"
  for ((i = 0; i < n; ++i)); do
    if [[ $transport != per-host ]]; then
      wait_jitterd "$jitterctl" "$i" || return 1
      continue
    fi
    local tries=0 why=""
    until [[ -e $runout/ready-h$i ]]; do
      if ! kill -0 "${guests[$i]}" 2>/dev/null; then
        why="ended before it was ready"
      elif ((++tries >= 1800)); then
        why="was not ready within 180 s"
      fi
      if [[ -n $why ]]; then
        echo "fleet_bench.sh: the guest of h$i $why:" >&2
        cat "$runout/guest-h$i.log" >&2
        return 1
      fi
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
        ctl_host "$jitterctl" "$transport" "$i" --json status >"$runout/status-h$i-$k.json" || true
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
    [[ $transport != per-host ]] || break # each guest copies its own when it stops
    cp "$work/h$i/jitterd.log" "$runout/jitterd-h$i.log"
    [[ $transport == socket ]] || cp "$work/h$i/sshd.log" "$runout/sshd-h$i.log"
  done
  stop_all
  echo "$failed" >"$runout/failed"
}

if [[ -n $guest_host ]]; then
  # Host I's guest: its jitterd and sshd until the driver creates $runout/stop, then its logs.
  start_host per-host "${paths[0]}" "${ctl_paths[0]}" "$guest_host" "$runout/client_key.pub"
  wait_jitterd "${ctl_paths[0]}" "$guest_host"
  : >"$runout/ready-h$guest_host"
  until [[ -e $runout/stop ]]; do sleep 1; done # a stat a second: far from the switches' cost
  cp "$work/h$guest_host/jitterd.log" "$runout/jitterd-h$guest_host.log"
  cp "$work/h$guest_host/sshd.log" "$runout/sshd-h$guest_host.log"
  exit 0
fi
if $per_host_bed; then
  # unshare's namespaces: pid 1 here; a private /tmp (tests/vm/run's folders and the client's key go
  # with the namespace); the bridge the guests' taps join.
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  ip link set lo up
  ip link add fbbr type bridge
  ip addr add 198.18.0.254/24 dev fbbr
  ip link set fbbr up
  transports=per-host
fi
status=0
for n in $hosts; do
  for transport in $transports; do
    for i in "${!labels[@]}"; do
      for c in "${!ctl_labels[@]}"; do
        name=$transport
        [[ $transport != per-host ]] || name=per-host-ssh
        ((${#labels[@]} == 1)) || name+=-${labels[$i]}
        ((${#ctl_labels[@]} == 1)) || name+=-${ctl_labels[$c]}
        name+=-$n
        echo "# $(date -u +%T) $name: $n hosts over $transport, ${labels[$i]}, ${ctl_labels[$c]}," \
          "$switches switches, guest load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        run_one "$name" "$transport" "${paths[$i]}" "${ctl_paths[$c]}" "$n" || status=1
      done
    done
  done
done
exit "$status"
