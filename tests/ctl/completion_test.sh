#!/usr/bin/env bash
# Tests ctl/completion/jitterctl.bash: sources it into this shell, sets COMP_WORDS, COMP_CWORD,
# COMP_LINE and COMP_POINT as bash does for a command line, calls _jitterctl and compares COMPREPLY
# (sorted) with the exact expected set. Self-contained: no bash-completion package needed.
#
# usage: tests/ctl/completion_test.sh JITTERCTL_BINARY
#   JITTERCTL_BINARY: the built jitterctl; the completion runs `jitterctl inspect` on a profile to
#   offer its phases (profiles/lab-regimes.json has regime-1 and regime-2).
set -uo pipefail

if (($# != 1)) || [[ ! -x $1 ]]; then
    echo "usage: $0 JITTERCTL_BINARY" >&2
    exit 2
fi
jitterctl=$(cd -- "$(dirname -- "$1")" && pwd -P)/$(basename -- "$1")
source_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
profile=$source_dir/profiles/lab-regimes.json

# The script must work whatever the user's shell options are: extglob off, as bash starts.
shopt -u extglob
# shellcheck disable=SC1091 # the completion under test, found from this script's folder
source "$source_dir/ctl/completion/jitterctl.bash"

failures=0
cases=0

# (Folders come back without their "/": bash adds it for -o filenames when it shows them.)
# A scratch folder with profiles and other files, and a profile folder of our own in place of
# jitterd's defaults (the completion reads _jitterctl_profile_dirs).
scratch=$(mktemp -d)
trap 'rm -rf -- "$scratch"' EXIT
mkdir -p "$scratch/work/sub" "$scratch/profiles"
touch "$scratch/work/a.json" "$scratch/work/b.json" "$scratch/work/notes.txt" "$scratch/work/plot.svg"
cp "$profile" "$scratch/profiles/lab-regimes.json"
cp "$profile" "$scratch/profiles/wan.json"
_jitterctl_profile_dirs=("$scratch/profiles" "$scratch/missing")
cd "$scratch/work" || exit 2

# The interfaces of this network namespace, as the completion must list them (directories only).
interfaces=""
for d in /sys/class/net/*; do
    [[ -d $d ]] && interfaces+="${d##*/} "
done
# Every namespace has lo; a test that finds none would prove nothing.
if [[ " $interfaces " != *" lo "* ]]; then
    echo "FAIL: no lo in /sys/class/net: cannot test interface completion" >&2
    exit 1
fi

sorted() {
    printf '%s\n' "$@" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//'
}

# run LINE WORD...: COMP_LINE is LINE with the cursor at its end, COMP_WORDS the words bash made of
# it (the last one is the word being completed, "" after a space).
run() {
    COMP_LINE=$1
    COMP_POINT=${#COMP_LINE}
    shift
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _jitterctl
}

# judge NAME LINE EXPECTED: counts a case; COMPREPLY, sorted, must be EXPECTED (already sorted).
judge() {
    local got
    got=$(sorted "${COMPREPLY[@]}")
    cases=$((cases + 1))
    if [[ $got != "$3" ]]; then
        echo "FAIL: $1: '$2'"
        echo "  expected: [$3]"
        echo "  got:      [$got]"
        failures=$((failures + 1))
    fi
}

# expect NAME EXPECTED LINE: LINE split at blanks the way bash splits it when no COMP_WORDBREAKS
# character other than blanks occurs; the first word is replaced by the jitterctl under test.
expect() {
    local name=$1 expected line=$3
    # shellcheck disable=SC2086 # the expected words, split
    expected=$(sorted $2)
    local -a words
    read -r -a words <<<"$line"
    [[ $line == *" " ]] && words+=("")
    words[0]=$jitterctl
    run "$jitterctl ${line#* }" "${words[@]}"
    judge "$name" "$line" "$expected"
}

# expect_words NAME EXPECTED LINE WORD...: for lines bash splits at ":" or "=" too.
expect_words() {
    local name=$1 expected line=$3
    # shellcheck disable=SC2086 # the expected words, split
    expected=$(sorted $2)
    shift 3
    run "$line" "$@"
    judge "$name" "$line" "$expected"
}

online="list-commands version interfaces profiles apply switch confirm pause resume skip status clear renew
subscribe events metrics watch fleet"
offline="compile inspect validate proxy"
globals="--socket --host --json --timeout"
lane="--direction --ingress --egress --set --netns --netns-path --pid --container --pod --via"

# Commands.
expect "every command" "$online $offline" "jitterctl "
expect "command prefix" "status subscribe switch skip" "jitterctl s"
expect "global options first" "$globals --help" "jitterctl -"
expect "after a global option only online commands" "$online" "jitterctl --json "
expect "offline commands only come first" "" "jitterctl --socket /x comp"
expect "--socket takes a path" "sub" "jitterctl --socket su"

# Options per command.
expect "apply options" "--file --phase --no-schedule --schedule --start --lease --force $lane --match --confirm
--offloads --no-ssh-guard --follow --help $globals" "jitterctl apply lo -"
expect "switch options" "--at $lane --help $globals" "jitterctl switch lo -"
expect "skip options" "--phase --step $lane --help $globals" "jitterctl skip lo -"
expect "clear options" "--all $lane --help $globals" "jitterctl clear -"
expect "renew options" "--lease $lane --help $globals" "jitterctl renew lo -"
expect "subscribe options" "--interface --event --count --help $globals" "jitterctl subscribe -"
expect "events is subscribe" "--interface --event --count --help $globals" "jitterctl events -"
expect "watch options" "--interval --once --help $globals" "jitterctl watch -"
expect "fleet options" "--inventory --phase --lead --ack-wait --reorder-window --count --profiles --pairs --interval --alpha --seed --save --calibration --calibration-phase --blocks --probes --help $globals" "jitterctl fleet -"
expect "fleet actions" "apply switch clear status subscribe validate" "jitterctl fleet --inventory f.json "
expect "fleet lead" "500ms 1s 2s 5s" "jitterctl fleet switch high --lead "
expect "fleet ack wait" "2s 10s 30s" "jitterctl fleet switch high --ack-wait "
expect "fleet reorder window" "0 100ms 500ms 1s" "jitterctl fleet subscribe --reorder-window "
expect "version options" "--help $globals" "jitterctl version -"
expect "compile options, no global ones" "-o --output --format --interval --host --name --description --baseline
--halves --regimes --window --step --spike --no-reorder --packet-rate --entries --replay --replay-window --once
--help" "jitterctl compile -"
expect "inspect options" "--json --help" "jitterctl inspect -"
expect "validate options" "--shaped --link-calibration --calibration-delay --phase --json --plot --timeline --log --seed --probes --alpha
--format --interval --host --help" "jitterctl validate a.json -"
expect "option prefix" "--no-schedule --no-ssh-guard" "jitterctl apply lo wan --no"

# Interfaces.
expect "apply: interface first" "$interfaces" "jitterctl apply "
expect "status: interface" "$interfaces" "jitterctl status "
expect "watch: any number of interfaces" "$interfaces" "jitterctl watch lo "
expect "subscribe --interface" "$interfaces" "jitterctl subscribe --interface "
expect "interface prefix" "lo" "jitterctl pause l"
expect "clear --all takes no interface" "--all $lane --help $globals" "jitterctl clear --all "
expect "global option values are skipped" "$interfaces" "jitterctl --socket /run/x.sock --timeout 5s renew "
expect "--host takes an ssh or k8s URL" "ssh:// k8s://" "jitterctl --host "
expect "--host k8s prefix" "k8s://" "jitterctl --host k"
expect "--host value is skipped" "$interfaces" "jitterctl --host ssh://lab renew "
expect "compile --host is the fping target, not a URL" "" "jitterctl compile x --host "

# Profiles: names from the profile folders; files for --file, inspect and validate.
expect "apply: profile names" "lab-regimes wan" "jitterctl apply lo "
expect "apply: profile name prefix" "wan" "jitterctl apply lo w"
expect "apply --file: json files and folders" "a.json b.json sub" "jitterctl apply lo --file "
expect "no profile name after --file" "--file --phase --no-schedule --schedule --start --lease --force $lane
--match --confirm --offloads --no-ssh-guard --follow --help $globals" "jitterctl apply lo --file a.json "
expect "inspect: json files" "a.json b.json sub" "jitterctl inspect "
expect "validate: profile, then any trace" "a.json b.json notes.txt plot.svg sub" "jitterctl validate a.json "
expect "validate --plot: svg files" "plot.svg sub" "jitterctl validate a.json notes.txt --plot "
expect "validate --timeline: svg files" "plot.svg sub" "jitterctl validate a.json notes.txt --timeline "
expect "compile -o: json files" "a.json b.json sub" "jitterctl compile notes.txt -o "

# Phases, read from the profile with `jitterctl inspect`.
expect "validate --phase" "regime-1 regime-2" "jitterctl validate $profile --phase "
expect "apply --file --phase" "regime-2" "jitterctl apply lo --file $profile --phase regime-2"
expect "apply NAME --phase" "regime-1 regime-2" "jitterctl apply lo lab-regimes --phase "
expect "no phases from a file that is not a profile" "" "jitterctl validate notes.txt --phase "

# Values.
expect "direction of apply" "egress ingress both" "jitterctl apply lo --direction "
expect "direction of other commands" "egress ingress" "jitterctl switch lo --direction "
expect "a target is reached from inside or by its host veth" "inside host-veth" "jitterctl switch eth0 --container redis0 --via "
expect "--via inside completes" "inside" "jitterctl switch eth0 --netns blue --via in"
expect "the target options take their value" "" "jitterctl status --container "
expect "lease durations" "10s 30s 60s 5m 1h" "jitterctl apply lo wan --lease "
expect "confirm durations" "10s 30s 60s 5m 1h" "jitterctl apply lo wan --confirm "
expect "start times" "now +1s +10s +1m" "jitterctl apply lo wan --start "
expect "switch --at" "now +1s +10s +1m" "jitterctl switch lo regime-2 --at "
expect "offloads" "off keep" "jitterctl apply lo wan --offloads "
expect "match keys" "src= dst= proto= sport= dport= all" "jitterctl apply lo wan --set r --match "
expect "events" "phase-changed" "jitterctl subscribe --event ph"
expect "target events" "target-gone target-followed" "jitterctl subscribe --event target-"
expect "formats" "auto ping fping mtr-report mtr-json iperf3-json epoch-rtt csv tsv" "jitterctl compile --format "
expect "regimes" "single percentiles 2 3 4" "jitterctl compile x.txt --regimes "
expect "timeout" "5s 10s 30s 1m" "jitterctl --timeout "
expect "timeout after the command" "5s 10s 30s 1m" "jitterctl status --timeout "
expect "watch interval" "500ms 1s 5s" "jitterctl watch --interval "

# Words that bash split at COMP_WORDBREAKS (":" and "="): the values are joined again, so that the
# words after them are counted right.
expect_words "a start time split at ':' is one value" "$interfaces" \
    "$jitterctl apply --start 2026-11-30T20:00:00Z " \
    "$jitterctl" apply --start 2026-11-30T20 : 00 : 00Z ""
expect_words "a match rule split at '=' is one value" "--lease" \
    "$jitterctl apply lo wan --set r --match dst=10.0.0.0/8,proto=tcp --le" \
    "$jitterctl" apply lo wan --set r --match dst = 10.0.0.0/8,proto = tcp --le
expect_words "a value bash split is not completed" "" \
    "$jitterctl apply lo wan --set r --match dst=" \
    "$jitterctl" apply lo wan --set r --match dst =

# The completion knows every option jitterctl takes, and which of them take a value: each command's
# options as `jitterctl COMMAND --help` prints them from ctl/cli.cpp's registry ("  --lease DURATION
# help", "  -o, --output PROFILE.json"; the form ends at two blanks or the line's end).
commands=$("$jitterctl" --help | sed -n 's/^  \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\1/p')
for command in $commands; do
    declared=() with_value=()
    while IFS= read -r line; do
        form=${line#  }
        form=${form%%  *}
        short=""
        if [[ $form == -?", "* ]]; then
            short=${form%%,*}
            form=${form#-?, }
            declared+=("$short")
        fi
        declared+=("${form%% *}")
        [[ $form == *" "* ]] && with_value+=("${form%% *}" $short)
    done < <("$jitterctl" "$command" --help | sed -n '/^options:$/,/^global options:$/p' | grep '^  -')
    cases=$((cases + 1))
    # shellcheck disable=SC2046 # the completion's words, split
    if [[ $(sorted "${declared[@]}" --help) != $(sorted $(_jitterctl_options_of "$command")) ]]; then
        echo "FAIL: $command: the completion offers [$(sorted $(_jitterctl_options_of "$command"))]," \
            "jitterctl $command --help lists [$(sorted "${declared[@]}" --help)]"
        failures=$((failures + 1))
    fi
    for option in "${declared[@]}"; do
        cases=$((cases + 1))
        wanted=0 completed=0
        [[ " ${with_value[*]} " == *" $option "* ]] && wanted=1
        _jitterctl_takes_value "$command" "$option" && completed=1
        if ((wanted != completed)); then
            echo "FAIL: $command $option: takes a value: jitterctl $wanted, the completion $completed"
            failures=$((failures + 1))
        fi
    done
done
if [[ $commands != *validate* || $commands != *apply* ]]; then
    echo "FAIL: no commands read from jitterctl --help: [$commands]"
    failures=$((failures + 1))
fi

# Registered for the command name.
cases=$((cases + 1))
if [[ $(complete -p jitterctl 2>/dev/null) != "complete -F _jitterctl jitterctl" ]]; then
    echo "FAIL: 'complete -p jitterctl' is [$(complete -p jitterctl 2>&1)]"
    failures=$((failures + 1))
fi

echo "$((cases - failures)) of $cases completion cases passed"
((failures == 0))
