#!/usr/bin/python3
"""deploy/kubernetes/jitterd-kubectl-ssh as jitterctl's $JITTERD_SSH, against a real jitterd.

No cluster is reachable here, so kubectl is a fake (a shell script written below) that answers the
pod lookup for one node and runs `kubectl exec`'s command locally, as the pod would. Everything else is
real: jitterctl's ssh transport, the wrapper, `jitterctl proxy`, and a jitterd (built from this tree)
in a fresh network namespace of its own, so that it touches nobody's qdiscs. What this does not show:
kubectl's own stream handling (stdin's end crossing `kubectl exec`), RBAC, a real pod.

usage: kubectl_ssh_test.py SOURCE_DIR JITTERD JITTERCTL
Exit 0: passed; 1: failed; 77: skipped (not root, or no unshare).
"""

import grp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
NODE = "node-a"
POD = "jitterd-7xk2p"

# Answers `get pods` for NODE only, logs every call, and runs `exec`'s command (after --) here.
FAKE_KUBECTL = f"""#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_KUBECTL_LOG"
case $1 in
  get) case "$*" in *"--field-selector spec.nodeName={NODE},status.phase=Running "*) printf {POD} ;; esac ;;
  exec) while [ "$1" != -- ]; do shift; done; shift; exec "$@" ;;
  *) echo "fake kubectl: unexpected $1" >&2; exit 1 ;;
esac
"""


def run_jitterctl(jitterctl, env, *args):
    return subprocess.run([jitterctl, *args], env=env, capture_output=True, text=True, timeout=60)


def scenario(source, jitterd, jitterctl):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        socket = os.path.join(tmp, "jitterd.sock")
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as out:
            json.dump({"socket": {"path": socket, "group": grp.getgrgid(os.getgid()).gr_name},
                       "state_dir": os.path.join(tmp, "state"), "interfaces": {"allow": ["veth-none"]}}, out)
        bin_dir = os.path.join(tmp, "bin")
        os.mkdir(bin_dir)
        with open(os.path.join(bin_dir, "kubectl"), "w") as out:
            out.write(FAKE_KUBECTL)
        os.chmod(os.path.join(bin_dir, "kubectl"), 0o755)
        os.symlink(jitterctl, os.path.join(bin_dir, "jitterctl"))  # `jitterctl proxy` "in the pod"
        log = os.path.join(tmp, "kubectl.log")
        env = dict(os.environ, PATH=bin_dir + ":/usr/bin:/bin", FAKE_KUBECTL_LOG=log,
                   JITTERD_SSH=os.path.join(source, "deploy/kubernetes/jitterd-kubectl-ssh"))
        env.pop("JITTERD_HOST", None)
        daemon = subprocess.Popen([jitterd, "--config", config], stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(tmp, "jitterd.log"), "w"))
        try:
            for _ in range(200):  # up to 10 s for the socket on a loaded 2-core machine
                if os.path.exists(socket) or daemon.poll() is not None:
                    break
                time.sleep(0.05)
            if not os.path.exists(socket):
                with open(os.path.join(tmp, "jitterd.log")) as f:
                    return [f"jitterd did not start: {f.read()}"]

            r = run_jitterctl(jitterctl, env, "--host", f"ssh://{NODE}{socket}", "version")
            if r.returncode != 0 or "protocol" not in r.stdout:
                failures.append(f"version through the wrapper: exit {r.returncode}\n{r.stdout}{r.stderr}")
            with open(log) as f:
                calls = f.read().splitlines()
            expected = [
                f"get pods --namespace jitterd --selector app.kubernetes.io/name=jitterd --field-selector "
                f"spec.nodeName={NODE},status.phase=Running --output jsonpath={{.items[*].metadata.name}}",
                f"exec --stdin --namespace jitterd --container jitterd {POD} -- sh -c jitterctl proxy "
                f"--socket '{socket}'",  # jitterctl single-quotes the path for the remote shell
            ]
            if calls != expected:
                failures.append(f"kubectl calls:\n{calls}\nexpected:\n{expected}")

            r = run_jitterctl(jitterctl, env, "--host", f"ssh://{NODE}{socket}", "status")
            if r.returncode != 0:
                failures.append(f"status through the wrapper: exit {r.returncode}\n{r.stdout}{r.stderr}")

            # The wrapper's own failures come back as ssh's would (exit 255, its line quoted): jitterctl
            # exits 4 (jitterd unreachable) with the reason.
            for url, says in ((f"ssh://node-b{socket}", "no Running jitterd pod on node node-b"),
                              (f"ssh://root@{NODE}{socket}", "a port or user in --host means nothing"),
                              (f"ssh://{NODE}{tmp}/absent.sock",
                               "the remote jitterctl proxy could not reach jitterd")):
                r = run_jitterctl(jitterctl, env, "--host", url, "version")
                if r.returncode != 4 or says not in r.stderr:
                    failures.append(f"{url}: exit {r.returncode}, expected 4 saying {says!r}:\n{r.stderr}")
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    return failures


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--in-namespace":
        failures = scenario(*sys.argv[2:])
        for f in failures:
            print("FAIL:", f)
        return 1 if failures else 0
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("SKIP: needs root and unshare(1): jitterd runs in a network namespace of its own, so that "
              "its start-up recovery cannot touch another jitterd's qdiscs")
        return SKIP
    source, jitterd, jitterctl = (os.path.abspath(a) for a in sys.argv[1:])
    return subprocess.run(["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), "--in-namespace",
                           source, jitterd, jitterctl], timeout=300).returncode


if __name__ == "__main__":
    sys.exit(main())
