#!/bin/sh
# A minimal jitterd client in shell, with socat (the protocol: docs/protocol.md).
#
#   client.sh METHOD [PARAMS]      send one request, print its reply line
#   client.sh subscribe [PARAMS]   print the reply, then every event line, until Ctrl-C
#
# PARAMS is a JSON object, e.g.  client.sh switch '{"interface": "veth0", "phase": "slow"}'.
# The socket is $JITTERD_SOCKET, else /run/jitterd/jitterd.sock.
# Exit status: 0 when the reply says "ok":true, 1 otherwise.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: client.sh METHOD [PARAMS_JSON]" >&2
  exit 2
fi
sock=${JITTERD_SOCKET:-/run/jitterd/jitterd.sock}
request=$(printf '{"id":1,"method":"%s","params":%s}' "$1" "${2:-"{}"}")

if [ "$1" = subscribe ]; then
  # ignoreeof: once the request is written, keep the connection open (socat keeps polling its input,
  # like tail -f) so that jitterd goes on sending events; jitterd ends a connection whose client
  # has shut down its side.
  printf '%s\n' "$request" | exec socat -,ignoreeof UNIX-CONNECT:"$sock"
fi

# -t 30: after sending, wait up to 30 s for the reply; jitterd closes the connection once it has
# answered (it has read the end of our input), and socat exits then.
reply=$(printf '%s\n' "$request" | socat -t 30 - UNIX-CONNECT:"$sock")
printf '%s\n' "$reply"
case $reply in
  *'"ok":true'*) exit 0 ;;
  *) exit 1 ;;
esac
