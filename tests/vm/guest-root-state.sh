# shellcheck shell=bash
# Sourced by the bed scripts that run a container runtime in a guest of tests/vm/run which other
# tests share (tests/vm/container-bed, tests/vm/cri-bed, run by the kernel suite's ctest in a guest
# that runs other tests before and after them).
#
# A runtime changes the guest's root namespace: netavark, dockerd and the CNI bridge plugin turn
# IPv4 forwarding on (which namespaces made later inherit from it: net.core.devconf_inherit_init_net
# is 0), add iptables chains and rules (dockerd also FORWARD's policy DROP), bridges (docker0,
# podman0, cni0) and veths, a tmpfs on /run/netns and namespace files in it, mounts and state under
# /run. In a guest of its own that ends with the guest; in a shared one it is undone and checked:
#   guest_remember                   before the runtime starts
#   guest_restore_root RUN_ENTRY...  after the runtime's processes are gone: every link, sysctl,
#                                    iptables rule and chain, mount under /run/RUN_ENTRY, namespace
#                                    file and /run entry among RUN_ENTRY... that was not there before
#   guest_restored                   whether the root namespace is as it was; prints the difference

guest_state() { # what a runtime changes in the root namespace, one line each
    local t
    ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}'
    echo "sysctl ip_forward $(sysctl -n net.ipv4.ip_forward) ipv6 forwarding $(sysctl -n net.ipv6.conf.all.forwarding)"
    for t in iptables ip6tables; do
        # Rules, user chains and built-in chains' policies other than ACCEPT (an empty table that a
        # module load left is no change).
        "/usr/sbin/$t-legacy-save" 2>/dev/null | grep -E '^(-A |:[^ ]+ (-|DROP|REJECT) )' |
            sed -E "s/ \[[0-9]+:[0-9]+\]$//; s/^/$t /" || true
    done
    findmnt -rn -o TARGET | grep -E '^/run/' | sed 's/^/mount /' || true
    find /run/netns -mindepth 1 -maxdepth 1 -printf 'netns %f\n' 2>/dev/null | sort
    find /run -mindepth 1 -maxdepth 1 -printf 'run %f\n' | sort
}

guest_remember() {
    guest_before=$(guest_state)
    guest_forward4=$(sysctl -n net.ipv4.ip_forward)
    guest_forward6=$(sysctl -n net.ipv6.conf.all.forwarding)
}

# LINE: whether it was one of guest_state's lines before the run
guest_was_before() { [[ $'\n'$guest_before$'\n' == *$'\n'"$1"$'\n'* ]]; }

guest_restore_root() { # RUN_ENTRY...: the /run entries the runtime and the script make; idempotent
    local t table chain name entry
    while read -r name; do
        guest_was_before "link $name" || ip link del "$name" 2>/dev/null || true
    done < <(ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}')
    sysctl -q -w "net.ipv4.ip_forward=$guest_forward4" "net.ipv6.conf.all.forwarding=$guest_forward6" || true
    for t in iptables ip6tables; do
        while read -r table; do
            "/usr/sbin/$t-legacy" -t "$table" -F || true
            "/usr/sbin/$t-legacy" -t "$table" -X || true
            for chain in $("/usr/sbin/$t-legacy-save" -t "$table" 2>/dev/null | sed -n 's/^:\([A-Z]*\) [A-Z]* .*/\1/p'); do
                "/usr/sbin/$t-legacy" -t "$table" -P "$chain" ACCEPT 2>/dev/null || true
            done
        done < <(cat "/proc/net/${t/tables/_tables}_names" 2>/dev/null)
    done
    # Namespace files the runtime bound (a pod or container left by a failed step).
    for name in /run/netns/*; do
        [[ -e $name ]] || continue
        guest_was_before "netns ${name##*/}" && continue
        umount "$name" 2>/dev/null || umount -l "$name" 2>/dev/null || true
        rm -f -- "$name"
    done
    # Overlay and shm mounts of the runtime's storage, deepest first; then the tmpfs on /run/netns
    # once no namespace is left on it.
    for entry in "$@"; do
        while read -r name; do
            guest_was_before "mount $name" || umount -l "$name" 2>/dev/null || true
        done < <(findmnt -rn -o TARGET | grep -E "^/run/$entry(/|$)" | sort -r)
    done
    if ! guest_was_before "mount /run/netns" && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
        umount /run/netns 2>/dev/null || true
    fi
    for entry in "$@"; do
        guest_was_before "run $entry" || rm -rf "/run/${entry:?}"
    done
}

guest_restored() {
    local after
    after=$(guest_state)
    [[ $after == "$guest_before" ]] && return 0
    diff <(echo "$guest_before") <(echo "$after") | grep '^[<>]'
    return 1
}
