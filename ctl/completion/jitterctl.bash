# bash completion for jitterctl (install as /usr/share/bash-completion/completions/jitterctl, or
# source it). Self-contained: it needs none of bash-completion's helpers.
#
# Completes commands, each command's options, interfaces (from /sys/class/net), profile names from
# jitterd's default profile folders, profile files (*.json) for --file, inspect and validate, phase
# names read from a profile file with `jitterctl inspect`, and example values for durations, start
# times and enumerations. Option lists mirror ctl/online_commands.cpp and ctl/offline_commands.cpp;
# tests/ctl/completion_test.sh checks them.

# jitterd's default profile_dirs (docs/daemon.md). A config may name others; those are not read here.
_jitterctl_profile_dirs=(/etc/jitterd/profiles /usr/share/jitterd/profiles)

_jitterctl_online_commands="list-commands version interfaces profiles apply switch confirm pause resume skip
status clear renew subscribe events metrics watch fleet"
_jitterctl_offline_commands="compile inspect validate proxy"
_jitterctl_global_options="--socket --host --json --timeout"
_jitterctl_lane_options="--direction --ingress --egress --set --netns --netns-path --pid --container --pod --via"
# The lane options that take a value (the target's among them: docs/operations.md, "Containers and namespaces").
_jitterctl_lane_values="--direction|--set|--netns|--netns-path|--pid|--container|--pod|--via"
_jitterctl_events="applied phase-changed deadline-missed cleared lease-expired interface-gone external-change
rolled-back confirmed target-gone target-followed error"
_jitterctl_formats="auto ping fping mtr-report mtr-json iperf3-json epoch-rtt csv tsv"

# The words of the command line up to the cursor as the user typed them. bash splits words at the
# characters of COMP_WORDBREAKS too (":" in "2026-11-30T20:00:00Z", "=" in "dst=10.0.0.0/8"); pieces
# that touch in COMP_LINE are joined again so that option values count as one word.
# Sets _jitterctl_words and _jitterctl_cword.
_jitterctl_join_words() {
    _jitterctl_words=()
    local line=${COMP_LINE-} i w pos=0 spaced
    if [[ -z $line ]]; then
        _jitterctl_words=("${COMP_WORDS[@]:0:COMP_CWORD+1}")
        _jitterctl_cword=$COMP_CWORD
        return
    fi
    line=${line:0:${COMP_POINT:-${#line}}}
    for ((i = 0; i <= COMP_CWORD && i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        spaced=0
        while [[ ${line:pos:1} == [[:space:]] ]]; do
            pos=$((pos + 1))
            spaced=1
        done
        if ((i > 0 && !spaced && ${#_jitterctl_words[@]} > 0)); then
            _jitterctl_words[${#_jitterctl_words[@]} - 1]+=$w
        else
            _jitterctl_words+=("$w")
        fi
        pos=$((pos + ${#w}))
    done
    _jitterctl_cword=$((${#_jitterctl_words[@]} - 1))
}

# Adds the words of $1 that start with $2 to COMPREPLY.
_jitterctl_add() {
    local w IFS=$' \t\n'
    for w in $1; do
        [[ $w == "$2"* ]] && COMPREPLY+=("$w")
    done
}

_jitterctl_interfaces() {
    local d
    for d in /sys/class/net/*; do
        [[ -d $d ]] || continue # bonding_masters is a file
        d=${d##*/}
        [[ $d == "$1"* ]] && COMPREPLY+=("$d")
    done
}

# Profile names (file stems) in jitterd's default folders.
_jitterctl_profile_names() {
    local dir f name seen=" "
    for dir in "${_jitterctl_profile_dirs[@]}"; do
        for f in "$dir"/*.json; do
            [[ -e $f ]] || continue
            name=${f##*/}
            name=${name%.json}
            [[ $name == "$1"* && $seen != *" $name "* ]] || continue
            seen+="$name "
            COMPREPLY+=("$name")
        done
    done
}

# Files matching the glob $2 (all files when empty) and directories, starting with $1.
_jitterctl_files() {
    local f
    compopt -o filenames 2>/dev/null
    while IFS= read -r f; do
        # shellcheck disable=SC2053 # $2 is a glob
        [[ -d $f || -z $2 || $f == $2 ]] && COMPREPLY+=("$f")
    done < <(compgen -f -- "$1")
}

# Phases of the profile in file $1 (as `jitterctl inspect` prints them; $2 is the jitterctl to run),
# starting with $3. Quiet when the file or the binary is not usable.
_jitterctl_phases_of_file() {
    local file=$1 bin=$2 line in_table=0
    # A "~/" the user typed is still literal in the word: expand it as the shell would.
    # shellcheck disable=SC2088
    [[ $file == "~/"* ]] && file=$HOME/${file#"~/"}
    [[ -f $file && -r $file ]] || return
    # shellcheck disable=SC2088
    [[ $bin == "~/"* ]] && bin=$HOME/${bin#"~/"}
    command -v -- "$bin" >/dev/null 2>&1 || return
    while IFS= read -r line; do
        if ((!in_table)); then
            [[ $line == "PHASE "* ]] && in_table=1
            continue
        fi
        [[ -z $line ]] && break
        line=${line%% *}
        [[ $line == "$3"* ]] && COMPREPLY+=("$line")
    done < <("$bin" inspect "$file" 2>/dev/null)
}

# Phases of the profile called $1 in jitterd's default folders.
_jitterctl_phases_of_name() {
    local dir
    for dir in "${_jitterctl_profile_dirs[@]}"; do
        if [[ -f $dir/$1.json ]]; then
            _jitterctl_phases_of_file "$dir/$1.json" "$2" "$3"
            return
        fi
    done
}

# The options each command takes (without the global ones).
_jitterctl_options_of() {
    case $1 in
    apply) echo "--file --phase --no-schedule --schedule --start --lease --force $_jitterctl_lane_options --match" \
        "--confirm --offloads --no-ssh-guard --follow --help" ;;
    switch) echo "--at $_jitterctl_lane_options --help" ;;
    confirm | pause | resume | status) echo "$_jitterctl_lane_options --help" ;;
    skip) echo "--phase --step $_jitterctl_lane_options --help" ;;
    clear) echo "--all $_jitterctl_lane_options --help" ;;
    renew) echo "--lease $_jitterctl_lane_options --help" ;;
    subscribe | events) echo "--interface --event --count --help" ;;
    watch) echo "--interval --once --help" ;;
    fleet) echo "--inventory --phase --lead --ack-wait --reorder-window --count --profiles --pairs --interval --alpha --seed --save --calibration --calibration-phase --blocks --probes --help" ;;
    list-commands | version | interfaces | profiles | metrics) echo "--help" ;;
    compile) echo "-o --output --format --interval --host --name --description --baseline --halves --regimes --window" \
        "--step --spike --no-reorder --packet-rate --entries --replay --replay-window --once --help" ;;
    inspect) echo "--json --help" ;;
    proxy) echo "--socket --timeout --help" ;;
    validate) echo "--shaped --link-calibration --calibration-delay --phase --json --plot --timeline --log --seed --probes --alpha" \
        "--format --interval --host --help" ;;
    esac
}

# Whether option $2 of command $1 takes a value.
_jitterctl_takes_value() {
    case $2 in
    --socket | --timeout) return 0 ;;
    esac
    case $1 in
    apply) [[ $2 == @(--file|--phase|--start|--lease|--match|--confirm|--offloads|$_jitterctl_lane_values) ]] ;;
    switch) [[ $2 == @(--at|$_jitterctl_lane_values) ]] ;;
    confirm | pause | resume | status | clear) [[ $2 == @($_jitterctl_lane_values) ]] ;;
    skip) [[ $2 == @(--phase|--step|$_jitterctl_lane_values) ]] ;;
    renew) [[ $2 == @(--lease|$_jitterctl_lane_values) ]] ;;
    subscribe | events) [[ $2 == @(--interface|--event|--count) ]] ;;
    watch) [[ $2 == --interval ]] ;;
    fleet) [[ $2 == @(--inventory|--phase|--lead|--ack-wait|--reorder-window|--count|--profiles|--pairs|--interval|--alpha|--seed|--save|--calibration|--calibration-phase|--blocks|--probes) ]] ;;
    compile) [[ $2 == @(-o|--output|--format|--interval|--host|--name|--description|--baseline|--regimes|--window|--step|--spike|--packet-rate|--entries|--replay-window) ]] ;;
    validate) [[ $2 == @(--shaped|--link-calibration|--calibration-delay|--phase|--plot|--timeline|--seed|--probes|--alpha|--format|--interval|--host) ]] ;;
    *) return 1 ;;
    esac
}

_jitterctl() {
    COMPREPLY=()
    local -a _jitterctl_words
    local _jitterctl_cword
    _jitterctl_join_words
    local -a words=("${_jitterctl_words[@]}")
    local cword=$_jitterctl_cword
    local cur=${words[cword]} prev=""
    ((cword > 0)) && prev=${words[cword - 1]}
    # bash replaces only its own last word; a value that bash split (RFC 3339 times, match rules) is
    # not completed.
    [[ $cur == "${COMP_WORDS[COMP_CWORD]}" ]] || return 0

    # The command: the first word that is not a global option or its value. Offline commands only
    # work as the first word (ctl/cli.cpp).
    local command="" command_at=0 i=1 globals=0
    while ((i < cword)); do
        case ${words[i]} in
        --socket | --timeout | --host)
            globals=1
            i=$((i + 2))
            ;;
        --json)
            globals=1
            i=$((i + 1))
            ;;
        *)
            command=${words[i]}
            command_at=$i
            break
            ;;
        esac
    done

    if [[ -z $command ]]; then
        case $prev in
        --socket)
            _jitterctl_files "$cur" ""
            return 0
            ;;
        --timeout)
            _jitterctl_add "5s 10s 30s 1m" "$cur"
            return 0
            ;;
        --host)
            compopt -o nospace 2>/dev/null
            _jitterctl_add "ssh:// k8s://" "$cur"
            return 0
            ;;
        esac
        if [[ $cur == -* ]]; then
            _jitterctl_add "$_jitterctl_global_options" "$cur"
            ((globals)) || _jitterctl_add "--help" "$cur"
        elif ((globals)); then
            _jitterctl_add "$_jitterctl_online_commands" "$cur"
        else
            _jitterctl_add "$_jitterctl_online_commands $_jitterctl_offline_commands" "$cur"
        fi
        return 0
    fi

    local offline=0
    [[ " $_jitterctl_offline_commands " == *" $command "* ]] && offline=1
    local bin=${words[0]}

    # Walk the command's arguments: positional words, and the values of a few options that later
    # completions depend on (--file, the profile, the phase's profile).
    local -a positional=()
    local file="" has_file=0 has_all=0
    for ((i = command_at + 1; i < cword; i++)); do
        local w=${words[i]}
        if [[ $w == -* ]]; then
            ((!offline)) && [[ $w == @(--socket|--timeout|--host) ]] && {
                i=$((i + 1))
                continue
            }
            if _jitterctl_takes_value "$command" "$w"; then
                [[ $w == --file ]] && {
                    file=${words[i + 1]}
                    has_file=1
                }
                i=$((i + 1))
            fi
            [[ $w == --all ]] && has_all=1
        else
            positional+=("$w")
        fi
    done

    # The value of an option.
    if [[ $prev == -* ]] && { ((!offline)) && [[ $prev == @(--socket|--timeout|--host) ]] || _jitterctl_takes_value "$command" "$prev"; }; then
        case $command:$prev in
        *:--socket | *:--shaped | *:--link-calibration | *:--netns-path) _jitterctl_files "$cur" "" ;;
        *:--netns) _jitterctl_add "$(ls /run/netns 2>/dev/null)" "$cur" ;;
        *:--via) _jitterctl_add "inside host-veth" "$cur" ;;
        *:--timeout) _jitterctl_add "5s 10s 30s 1m" "$cur" ;;
        compile:--host | validate:--host) ;;
        *:--host)
            compopt -o nospace 2>/dev/null
            _jitterctl_add "ssh:// k8s://" "$cur"
            ;;
        *:--lease | *:--confirm) _jitterctl_add "10s 30s 60s 5m 1h" "$cur" ;;
        watch:--interval) _jitterctl_add "500ms 1s 5s" "$cur" ;;
        apply:--file | fleet:--inventory) _jitterctl_files "$cur" "*.json" ;;
        fleet:--lead) _jitterctl_add "500ms 1s 2s 5s" "$cur" ;;
        fleet:--ack-wait) _jitterctl_add "2s 10s 30s" "$cur" ;;
        fleet:--reorder-window) _jitterctl_add "0 100ms 500ms 1s" "$cur" ;;
        fleet:--pairs) _jitterctl_add "all ring" "$cur" ;;
        fleet:--save | fleet:--calibration | fleet:--probes) _jitterctl_files "$cur" "*.json" ;;
        fleet:--profiles) _jitterctl_files "$cur" "" ;;
        compile:-o | compile:--output) _jitterctl_files "$cur" "*.json" ;;
        validate:--plot | validate:--timeline) _jitterctl_files "$cur" "*.svg" ;;
        apply:--start | switch:--at) _jitterctl_add "now +1s +10s +1m" "$cur" ;;
        apply:--direction) _jitterctl_add "egress ingress both" "$cur" ;;
        *:--direction) _jitterctl_add "egress ingress" "$cur" ;;
        apply:--offloads) _jitterctl_add "off keep" "$cur" ;;
        apply:--match)
            compopt -o nospace 2>/dev/null
            _jitterctl_add "src= dst= proto= sport= dport=" "$cur"
            [[ all == "$cur"* ]] && COMPREPLY+=(all)
            ;;
        apply:--phase)
            if ((has_file)); then
                _jitterctl_phases_of_file "$file" "$bin" "$cur"
            elif ((${#positional[@]} >= 2)); then
                _jitterctl_phases_of_name "${positional[1]}" "$bin" "$cur"
            fi
            ;;
        validate:--phase) ((${#positional[@]} >= 1)) && _jitterctl_phases_of_file "${positional[0]}" "$bin" "$cur" ;;
        subscribe:--interface | events:--interface) _jitterctl_interfaces "$cur" ;;
        subscribe:--event | events:--event) _jitterctl_add "$_jitterctl_events" "$cur" ;;
        *:--format) _jitterctl_add "$_jitterctl_formats" "$cur" ;;
        *:--interval | compile:--window | compile:--step | compile:--replay-window) _jitterctl_add "10ms 100ms 1s 10s 30s" "$cur" ;;
        compile:--baseline) _jitterctl_add "min none p1 p5" "$cur" ;;
        compile:--regimes) _jitterctl_add "single percentiles 2 3 4" "$cur" ;;
        compile:--spike) _jitterctl_add "100ms:2:30s" "$cur" ;;
        compile:--entries) _jitterctl_add "16384 4096" "$cur" ;;
        esac
        return 0
    fi

    local options
    options=$(_jitterctl_options_of "$command")
    ((!offline)) && options+=" $_jitterctl_global_options"
    if [[ $cur == -* ]]; then
        _jitterctl_add "$options" "$cur"
        return 0
    fi

    # Positional arguments.
    local n=${#positional[@]}
    case $command in
    apply)
        if ((n == 0)); then
            _jitterctl_interfaces "$cur"
        elif ((n == 1 && !has_file)); then
            _jitterctl_profile_names "$cur"
        fi
        ;;
    confirm | pause | resume | skip | status | renew) ((n == 0)) && _jitterctl_interfaces "$cur" ;;
    clear) ((n == 0 && !has_all)) && _jitterctl_interfaces "$cur" ;;
    switch) ((n == 0)) && _jitterctl_interfaces "$cur" ;;
    watch) _jitterctl_interfaces "$cur" ;;
    fleet)
        if ((n == 0)); then
            _jitterctl_add "apply switch clear status subscribe validate" "$cur"
        elif ((n == 1)) && [[ ${positional[0]} == apply ]]; then
            _jitterctl_profile_names "$cur"
        fi
        ;;
    compile) _jitterctl_files "$cur" "" ;;
    inspect) ((n == 0)) && _jitterctl_files "$cur" "*.json" ;;
    validate)
        if ((n == 0)); then
            _jitterctl_files "$cur" "*.json"
        elif ((n == 1)); then
            _jitterctl_files "$cur" ""
        fi
        ;;
    esac
    # Nothing positional left to give: offer the options.
    ((${#COMPREPLY[@]} == 0)) && [[ -z $cur ]] && _jitterctl_add "$options" ""
    return 0
}

complete -F _jitterctl jitterctl
