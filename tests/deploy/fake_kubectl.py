#!/usr/bin/python3
"""A stand-in for kubectl in tests of `jitterctl --host k8s://NODE` (no cluster is reachable here).

Every call's arguments go to $FAKE_KUBECTL_LOG as one JSON array per line; a leading "--context NAME" is
then passed over. It knows two commands:
  get pods ... --field-selector spec.nodeName=NODE,status.phase=Running --output json
      prints {"kind": "List", "items": PODS[NODE]} from the fixture $FAKE_KUBECTL_PODS (a JSON object:
      node name -> list of pod items, as `kubectl get pods -o json` prints them); no entry: no items.
  exec --stdin --namespace NS --container C POD -- jitterctl proxy [--socket S]
      execs $FAKE_KUBECTL_JITTERCTL (the built jitterctl) with the words after "jitterctl", as the pod
      would run its own; when that fails, says "command terminated with exit code N" as kubectl does.
Anything else: exit 1 with a message, as kubectl's usage errors do.
"""

import json
import os
import subprocess
import sys


def main(args):
    with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
        log.write(json.dumps(args) + "\n")
    while args[:1] == ["--context"]:  # kubectl's global option, as $JITTERD_KUBECTL may give it
        args = args[2:]
    if args[:2] == ["get", "pods"] and "--field-selector" in args and args[-2:] == ["--output", "json"]:
        selector = args[args.index("--field-selector") + 1]
        node = dict(part.split("=", 1) for part in selector.split(","))["spec.nodeName"]
        with open(os.environ["FAKE_KUBECTL_PODS"]) as f:
            pods = json.load(f)
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods.get(node, []), "metadata": {}}))
        return 0
    if args[:1] == ["exec"] and "--" in args:
        command = args[args.index("--") + 1:]
        if command[:1] != ["jitterctl"]:
            print(f'error: exec: "{command[0]}": executable file not found in $PATH', file=sys.stderr)
            return 126
        code = subprocess.run([os.environ["FAKE_KUBECTL_JITTERCTL"], *command[1:]]).returncode
        if code != 0:
            print(f"command terminated with exit code {code}", file=sys.stderr)
        return code
    print(f"error: fake kubectl: unexpected arguments {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
