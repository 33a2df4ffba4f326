# shellcheck shell=bash
# Sourced by tests/bench/fleet_bench.sh (--transport ssh): Debian's real sshd in a network namespace
# of the VM test bed, set up as tests/e2e/ssh_server.cpp sets up the kernel tests' sshd (that file
# says why each line is there): a host key of its own, one client key authorised for root, no PAM,
# the log on stderr, and root's shell /bin/sh in a copy of /etc/passwd bound over /etc/passwd in a
# mount namespace of sshd's own (Debian's bash sources ~/.bashrc for sshd's commands, which made a
# login take 4-16 s in the bed: docs/testing.md, "ssh in the bed"). `SetEnv PATH=` puts the
# jitterctl under test first in the remote PATH, so that the remote command is "jitterctl proxy".
# The kernel tests' server is C++ (tests/e2e); this is the shell side of the same set-up for scripts
# that run in the bed as root.

# bed_ssh_key PATH: an ed25519 key pair without a passphrase, PATH and PATH.pub.
bed_ssh_key() {
  rm -f "$1" "$1.pub"
  ssh-keygen -q -t ed25519 -N '' -f "$1"
}

# bed_ssh_command KEY KNOWN_HOSTS: the ssh command line for $JITTERD_SSH: that key only, no config
# files, the host keys accepted on first use into KNOWN_HOSTS (as ssh_command() in ssh_server.cpp).
bed_ssh_command() {
  printf '/usr/bin/ssh -F none -i %s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s -o StrictHostKeyChecking=accept-new' \
    "$1" "$2"
}

# bed_sshd_start DIR NETNS ADDRESS PORT CLIENT_PUB JITTERCTL: writes DIR/sshd_config, DIR/host_key,
# DIR/authorized_keys (CLIENT_PUB's line) and DIR/passwd, starts sshd in NETNS on ADDRESS:PORT with
# its log in DIR/sshd.log, sets BED_SSHD_PID to its pid and returns when it listens; returns 1 with
# its log on stderr when it ends or does not listen within 20 s.
bed_sshd_start() {
  local dir=$1 netns=$2 address=$3 port=$4 client_pub=$5 jitterctl=$6
  bed_ssh_key "$dir/host_key"
  cp "$client_pub" "$dir/authorized_keys"
  cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress $address
HostKey $dir/host_key
PidFile none
AuthorizedKeysFile $dir/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
LogLevel VERBOSE
SetEnv PATH=$(dirname "$jitterctl"):/usr/bin:/bin
EOF
  sed 's|^\(root:.*:\)[^:]*$|\1/bin/sh|' /etc/passwd >"$dir/passwd"
  mkdir -p /run/sshd # its privilege separation folder (the guest's own /run)
  # ip netns exec, unshare (without --fork) and sh all exec: $! is sshd itself.
  ip netns exec "$netns" unshare -m --propagation private \
    sh -c "mount --bind $dir/passwd /etc/passwd && exec /usr/sbin/sshd -D -e -f $dir/sshd_config" \
    >"$dir/sshd.log" 2>&1 &
  BED_SSHD_PID=$!
  local tries=0
  until grep -q 'listening on' "$dir/sshd.log" 2>/dev/null; do
    if ! kill -0 "$BED_SSHD_PID" 2>/dev/null || ((++tries > 400)); then
      echo "sshd in $netns does not listen:" >&2
      cat "$dir/sshd.log" >&2
      return 1
    fi
    sleep 0.05
  done
}
