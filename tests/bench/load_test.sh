#!/usr/bin/env bash
# tests/bench/load_test.sh [--jitterd PATH] [--load-clients PATH] [LOAD_CLIENTS_OPTIONS...]
#
# The load test of issue 7 (docs/benchmarks.md, "Load"): starts a jitterd of its own and runs
# load_clients against it. Options other than the two below go to load_clients (its defaults:
# --clients 1000 --rate 10000 --duration 60; --hostile adds the phase with hostile clients).
#
#   --jitterd PATH        the daemon (default $JITTERD_BUILD_DIR/daemon/jitterd, build dir "build")
#   --load-clients PATH   the load tool (default $JITTERD_BUILD_DIR/tests/bench/load_clients)
#
# The daemon gets a temporary folder (socket, state, an empty profile folder), nothing it may shape
# (no interfaces.allow: no netem, no tc, no root needed for the requests the load sends) and limits
# sized for the load: limits.max_connections = clients + 64, the other limits at their defaults. It
# runs in a network namespace of its own (root: unshare --net; others: unshare --user
# --map-root-user --net where user namespaces are allowed), because at start jitterd removes any
# jitterd qdisc it finds in its namespace, and this one must not touch a real jitterd's. The open-file
# limit is raised for both processes (one descriptor per connection each).
# Exit status: load_clients' (0: every request answered; 1: a request lost or answered wrongly), or 4
# when jitterd could not be started or did not stop cleanly.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
# shellcheck source=tests/bench/bench_common.sh
. "$repo/tests/bench/bench_common.sh"
build=${JITTERD_BUILD_DIR:-$repo/build}
jitterd=$build/daemon/jitterd
load_clients=$build/tests/bench/load_clients
args=()
clients=1000
while (($#)); do
  case $1 in
  --jitterd)
    jitterd=${2:?--jitterd needs a path}
    shift 2
    ;;
  --load-clients)
    load_clients=${2:?--load-clients needs a path}
    shift 2
    ;;
  -h | --help)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  --clients)
    clients=${2:?--clients needs a number}
    args+=("$1" "$2")
    shift 2
    ;;
  *)
    args+=("$1")
    shift
    ;;
  esac
done
bench_executables load_test.sh 4 "$build" "$jitterd" "$load_clients"
bench_whole_number load_test.sh --clients "$clients"
# limits.max_connections may be at most 4096 (daemon/config.cpp); the 64 spare are for the metrics
# probe, the hostile clients and their reconnections.
max_connections=$((clients + 64))
((max_connections <= 4096)) || {
  echo "load_test.sh: $clients clients need limits.max_connections $max_connections; jitterd allows at most" \
    "4096, so use at most 4032 clients" >&2
  exit 2
}

# Each process holds one descriptor per connection, plus its own (netlink, epoll, logs).
need_files=$((clients + 256))
if (($(ulimit -Sn) < need_files)); then
  if ! ulimit -Sn "$need_files" 2>/dev/null; then
    echo "load_test.sh: $clients clients need $need_files open files, and the hard limit is $(ulimit -Hn);" \
      "raise it (as root: ulimit -Hn $need_files) or use fewer --clients" >&2
    exit 4
  fi
fi

work=$(mktemp -d /tmp/jitterd-load-XXXXXX)
pid=""
stop_daemon() {
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local status=0
  wait "$pid" || status=$?
  pid=""
  return "$status"
}
cleanup() {
  stop_daemon || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/profiles"
cat >"$work/config.json" <<EOF
{
  "socket": {"path": "$work/jitterd.sock"},
  "state_dir": "$work/state",
  "profile_dirs": ["$work/profiles"],
  "limits": {"max_connections": $max_connections}
}
EOF

if ((EUID == 0)); then
  namespace=(unshare --net --)
  how="as root, in a network namespace of its own (unshare --net)"
elif unshare --user --map-root-user --net true 2>/dev/null; then
  namespace=(unshare --user --map-root-user --net --)
  how="as uid $EUID, in a user and network namespace of its own (unshare --user --map-root-user --net)"
else
  # Without CAP_NET_ADMIN it cannot remove anyone's qdisc; it serves the load's requests all the same.
  namespace=()
  how="as uid $EUID in this namespace (user namespaces are not allowed here; it has no CAP_NET_ADMIN)"
fi
# unshare execs jitterd, so $! is jitterd's pid (for the memory samples).
"${namespace[@]}" "$jitterd" --config "$work/config.json" >"$work/jitterd.log" 2>&1 &
pid=$!
for ((i = 0; i < 200; i++)); do
  [[ -S $work/jitterd.sock ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "load_test.sh: jitterd exited at start:" >&2
    cat "$work/jitterd.log" >&2
    pid=""
    exit 4
  fi
  sleep 0.05
done
[[ -S $work/jitterd.sock ]] || {
  echo "load_test.sh: jitterd did not create $work/jitterd.sock in 10 s:" >&2
  cat "$work/jitterd.log" >&2
  exit 4
}
echo "# jitterd $("$jitterd" --version | cut -d' ' -f2-), pid $pid, $how;" \
  "limits.max_connections $max_connections, open files $(ulimit -Sn);" \
  "kernel $(bench_machine)"

status=0
"$load_clients" --socket "$work/jitterd.sock" --pid "$pid" "${args[@]}" || status=$?

if ! kill -0 "$pid" 2>/dev/null; then
  echo "load_test.sh: jitterd died during the load:" >&2
  cat "$work/jitterd.log" >&2
  pid=""
  exit 4
fi
daemon_status=0
stop_daemon || daemon_status=$?
if ((daemon_status != 0)); then
  echo "load_test.sh: jitterd exited with $daemon_status after SIGTERM:" >&2
  cat "$work/jitterd.log" >&2
  exit 4
fi
# What jitterd logged (refused connections, disconnected clients), counted by kind.
if [[ -s $work/jitterd.log ]]; then
  echo "# jitterd log: $(wc -l <"$work/jitterd.log") lines; the most frequent:"
  sed -E 's/[0-9]+/N/g' "$work/jitterd.log" | sort | uniq -c | sort -rn | head -5 | sed 's/^/#   /'
fi
exit "$status"
