#!/usr/bin/env bash
# `jitterctl compile` of a seeded 72 h, 10 Hz `ping -D` capture (2.592 M lines) next to mawk summing
# its time= field, the floor of reading those bytes once (issue 20): each run alternates the two so
# that both see the same machine load; prints every run and the medians. Wall time and peak RSS from
# /usr/bin/time. Figures: docs/benchmarks.md, "Trace parsing".
#
#   tests/bench/compile_vs_mawk.sh --build build/rel [--runs 5] [--probes 2592000] [--jitterctl PATH]
# (--jitterctl times another jitterctl, e.g. an older build, on the same capture.)
set -euo pipefail

build=build/rel
jitterctl=
runs=5
probes=2592000
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --probes) probes=$2; shift 2 ;;
    --jitterctl) jitterctl=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--runs N] [--probes N] [--jitterctl PATH]" >&2; exit 2 ;;
  esac
done
jitterctl=${jitterctl:-$build/ctl/jitterctl}
make_capture=$build/tests/bench/make_capture
for tool in "$jitterctl" "$make_capture" /usr/bin/time mawk; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing (build jitterctl and make_capture)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
capture=$work/ping-D.txt
"$make_capture" ping-d "$probes" "$capture"
echo "capture: $(wc -l <"$capture") lines, $(($(stat -c %s "$capture") / 1048576)) MiB"
cat "$capture" >/dev/null  # in the page cache for every run alike

# Prints "seconds max_rss_kib" of one command; its output goes to $work/out.
measure() {
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
    echo "$0: failed: $*" >&2; cat "$work/err" >&2; exit 1; }
  cat "$work/time"
}

: >"$work/mawk" ; : >"$work/compile"
for ((i = 1; i <= runs; i++)); do
  read -r m_s m_kib < <(measure mawk -F'time=' '{s+=$2} END{print s}' "$capture")
  read -r c_s c_kib < <(measure "$jitterctl" compile "$capture" -o "$work/profile.json")
  printf 'run %d: mawk %.2f s %d MiB   jitterctl compile %.2f s %d MiB   ratio %.2f\n' \
    "$i" "$m_s" $((m_kib / 1024)) "$c_s" $((c_kib / 1024)) "$(echo "$c_s / $m_s" | bc -l)"
  echo "$m_s $m_kib" >>"$work/mawk"
  echo "$c_s $c_kib" >>"$work/compile"
done
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
m=$(cut -d' ' -f1 "$work/mawk" | median)
c=$(cut -d' ' -f1 "$work/compile" | median)
c_rss=$(cut -d' ' -f2 "$work/compile" | median)
printf 'median: mawk %.2f s, jitterctl compile %.2f s (%d MiB peak RSS); ratio %.2f\n' \
  "$m" "$c" $((c_rss / 1024)) "$(echo "$c / $m" | bc -l)"
