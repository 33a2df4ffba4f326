#!/usr/bin/python3
"""A minimal jitterd client (Python 3 standard library only; the protocol: docs/protocol.md).

  client.py METHOD [PARAMS]               send one request, print its reply line
  client.py subscribe [PARAMS] [--count N] print the reply, then every event line (until Ctrl-C, or N events)

PARAMS is a JSON object, e.g.  client.py switch '{"interface": "veth0", "phase": "slow"}'.
The socket is --socket, else $JITTERD_SOCKET, else /run/jitterd/jitterd.sock.
Exit status: 0 when the reply says "ok": true, 1 when it is an error reply, 2 for anything else.
"""

import argparse
import json
import os
import socket
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", default=os.environ.get("JITTERD_SOCKET", "/run/jitterd/jitterd.sock"))
    p.add_argument("--count", type=int, help="subscribe: stop after this many events")
    p.add_argument("method")
    p.add_argument("params", nargs="?", default="{}", help="a JSON object (default {})")
    args = p.parse_args()
    try:
        params = json.loads(args.params)
    except ValueError as e:
        p.error("PARAMS is not JSON: %s" % e)

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(args.socket)
        # One JSON object per line; the id comes back in the reply.
        request = {"id": 1, "method": args.method, "params": params}
        s.sendall((json.dumps(request) + "\n").encode())
        lines = s.makefile("r")
        reply = lines.readline()
        if not reply:
            print("client.py: jitterd closed the connection without a reply", file=sys.stderr)
            return 2
        print(reply, end="", flush=True)
        ok = json.loads(reply).get("ok") is True
        if args.method != "subscribe" or not ok:
            return 0 if ok else 1
        # Subscribed: event lines follow, one JSON object each, until the connection closes.
        seen = 0
        for line in lines:
            print(line, end="", flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                break
        return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as e:
        print("client.py: %s" % e, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(0)
