# shellcheck shell=bash
# Sourced by the benchmark scripts of tests/bench: the checks and header lines they share. Each
# function takes the calling script's name first, for its messages. The caller sets $repo, the
# checkout's absolute path.
# shellcheck disable=SC2154

# bench_whole_number TOOL OPTION VALUE [MAX]: exits 2 unless VALUE is a whole number from 1 to MAX.
bench_whole_number() {
  local tool=$1 option=$2 value=$3 max=${4:-}
  if ! [[ $value =~ ^[1-9][0-9]*$ ]] || { [[ -n $max ]] && ((value > max)); }; then
    echo "$tool: $option must be a whole number${max:+ from 1 to $max}, not '$value'" >&2
    exit 2
  fi
}

# bench_executables TOOL STATUS BUILD PATH...: exits STATUS unless every PATH is an executable.
bench_executables() {
  local tool=$1 status=$2 build=$3 binary
  shift 3
  for binary; do
    [[ -x $binary ]] || {
      echo "$tool: $binary is not an executable; build it (cmake --build $build) or name it with" \
        "the script's option for it" >&2
      exit "$status"
    }
  done
}

# bench_visible_dir TOOL DIR HOW: creates DIR and prints its absolute path; exits 2 when it is under
# /tmp outside the checkout ($repo), which tests/vm/run's guests cannot see. HOW says how to move it.
bench_visible_dir() {
  local tool=$1 dir=$2 how=$3
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  case $dir/ in
  /tmp/*)
    [[ $dir/ == "$repo"/* ]] || {
      echo "$tool: $dir is under /tmp outside this checkout, which the VM cannot see; $how" >&2
      exit 2
    }
    ;;
  esac
  printf '%s\n' "$dir"
}

# The checkout's revision, and the machine's state, for the header lines of a benchmark's output.
bench_revision() { git -C "$repo" describe --always --dirty 2>/dev/null || echo '?'; }
bench_machine() {
  echo "$(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
}
