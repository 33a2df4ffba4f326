#!/usr/bin/python3
"""`jitterctl --host k8s://NODE` (jitterctl's native Kubernetes transport) against real jitterds.

No cluster is reachable here, so kubectl is tests/deploy/fake_kubectl.py (given through $JITTERD_KUBECTL):
it answers `get pods -o json` from a fixture (node -> pods) and runs `exec`'s `jitterctl proxy` with the
built jitterctl, as the pod would. Everything else is real: jitterctl's pod lookup and choice, its
kubectl child transport, `jitterctl proxy`, and two jitterds built from this tree, each in a network
namespace of its own with a dummy interface jk0 (two "nodes"). What this does not show: kubectl's own
stream handling, RBAC, the API server's field selectors, a real pod.

In the VM bed (JITTERD_VM_BED set: a kernel with netem) `apply` and `clear` through k8s:// and a fleet
apply over two k8s:// hosts must succeed and tc (the independent reader) must show netem; outside it,
where the kernel has no netem, `apply` must come back through k8s:// with jitterd's kernel error.

usage: k8s_transport_test.py SOURCE_DIR JITTERD JITTERCTL
Exit 0: passed; 1: failed; 77: skipped (not root, or no unshare; or JITTERD_K8S_TEST_NEEDS_BED set outside
the VM bed: the kernel variant's registration sets it).
"""

import grp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
SELECTOR = "app.kubernetes.io/name=jitterd"


def pod(name, created, ready=True, terminating=False):
    item = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "jitterd", "creationTimestamp": created,
                         "labels": {"app.kubernetes.io/name": "jitterd"}},
            "spec": {"nodeName": "node"},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if terminating:
        item["metadata"]["deletionTimestamp"] = "2026-12-05T12:00:30Z"
    return item


def start_node(tmp, name, jitterd):
    """A jitterd in a network namespace of its own with a dummy interface jk0; returns (process, socket)."""
    socket = os.path.join(tmp, name + ".sock")
    config = os.path.join(tmp, name + ".json")
    with open(config, "w") as out:
        json.dump({"socket": {"path": socket, "group": grp.getgrgid(os.getgid()).gr_name},
                   "state_dir": os.path.join(tmp, name + "-state"),
                   "profile_dirs": [os.path.join(tmp, "profiles")],
                   "interfaces": {"allow": ["jk0"]}}, out)
    log = open(os.path.join(tmp, name + ".log"), "w")
    process = subprocess.Popen(
        ["unshare", "--net", "--", "sh", "-c",
         'ip link add jk0 type dummy && ip link set jk0 up; exec "$0" --config "$1"', jitterd, config],
        stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(200):  # up to 10 s for the socket on a loaded 2-core machine
        if os.path.exists(socket) or process.poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(socket):
        raise RuntimeError(f"jitterd {name} did not start: {open(log.name).read()}")
    return process, socket


def netem_of(process):
    """tc's view of jk0's root qdisc in that jitterd's namespace (the independent reader)."""
    return subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % process.pid, "tc", "qdisc", "show", "dev",
                           "jk0"], capture_output=True, text=True).stdout


def scenario(jitterd, jitterctl):
    failures = []
    in_bed = bool(os.environ.get("JITTERD_VM_BED"))
    print("apply/clear and fleet apply with netem:", "checked (VM bed)" if in_bed else "not here (no VM bed)")
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "profiles"))
        with open(os.path.join(tmp, "profiles", "k8s-test.json"), "w") as out:
            json.dump({"version": 1, "name": "k8s-test", "description": "deploy.k8s_transport: 25 ms",
                       "phases": {"only": {"delay": {"latency": "25ms"}}}}, out)
        log = os.path.join(tmp, "kubectl.log")
        pods = os.path.join(tmp, "pods.json")
        with open(pods, "w") as out:
            json.dump({"node-a": [pod("jitterd-aaaaa", "2026-12-05T10:00:00Z")],
                       # a rolling update on node-b: the old pod terminating, the new one Ready
                       "node-b": [pod("jitterd-old-b", "2026-12-01T09:00:00Z", terminating=True),
                                  pod("jitterd-new-b", "2026-12-05T12:00:00Z")]}, out)
        env = dict(os.environ, FAKE_KUBECTL_LOG=log, FAKE_KUBECTL_PODS=pods, FAKE_KUBECTL_JITTERCTL=jitterctl,
                   JITTERD_KUBECTL=f"{sys.executable} {HERE}/fake_kubectl.py --context lab")
        for name in ("JITTERD_HOST", "JITTERD_SSH", "JITTERD_K8S_NAMESPACE"):
            env.pop(name, None)

        def ctl(*args, environment=env):
            return subprocess.run([jitterctl, *args], env=environment, capture_output=True, text=True,
                                  timeout=60)

        def calls():
            if not os.path.exists(log):
                return []
            with open(log) as f:
                lines = [json.loads(line) for line in f]
            os.remove(log)
            return lines

        def expect(what, r, code, says=""):
            if r.returncode != code or says not in r.stdout + r.stderr:
                failures.append(f"{what}: exit {r.returncode}, expected {code} saying {says!r}:\n"
                                f"{r.stdout}{r.stderr}")

        node_a, socket_a = start_node(tmp, "a", jitterd)
        node_b, socket_b = start_node(tmp, "b", jitterd)
        try:
            url_a = f"k8s://node-a{socket_a}"
            expect("status", ctl("--host", url_a, "status"), 0)
            expected = [
                ["--context", "lab", "get", "pods", "--namespace", "jitterd", "--selector", SELECTOR,
                 "--field-selector", "spec.nodeName=node-a,status.phase=Running", "--output", "json"],
                ["--context", "lab", "exec", "--stdin", "--namespace", "jitterd", "--container", "jitterd",
                 "jitterd-aaaaa", "--", "jitterctl", "proxy", "--socket", socket_a]]
            got = calls()
            if got != expected:
                failures.append(f"kubectl calls:\n{got}\nexpected:\n{expected}")

            # JITTERD_HOST and JITTERD_K8S_NAMESPACE, as the docs say.
            r = ctl("version", environment=dict(env, JITTERD_HOST=url_a, JITTERD_K8S_NAMESPACE="chaos"))
            expect("version via JITTERD_HOST", r, 0, "protocol")
            if not all(c[c.index("--namespace") + 1] == "chaos" for c in calls()):
                failures.append("JITTERD_K8S_NAMESPACE did not reach both kubectl calls")

            r = ctl("--host", url_a, "apply", "jk0", "k8s-test")
            if in_bed:
                expect("apply through k8s://", r, 0)
                if "netem" not in netem_of(node_a) or "25ms" not in netem_of(node_a):
                    failures.append(f"after apply, tc shows: {netem_of(node_a)}")
                expect("status after apply", ctl("--host", url_a, "status"), 0, "k8s-test")
                expect("clear through k8s://", ctl("--host", url_a, "clear", "jk0"), 0)
                if "netem" in netem_of(node_a):
                    failures.append(f"after clear, tc shows: {netem_of(node_a)}")
            elif r.returncode == 0 or "jk0" not in r.stderr:
                # No netem here: jitterd's refusal must come back through k8s:// naming the interface.
                failures.append(f"apply without netem: exit {r.returncode}\n{r.stdout}{r.stderr}")
            calls()

            # Two Running pods on node-b: the newest Ready one that is not terminating, said on stderr.
            r = ctl("--host", f"k8s://node-b{socket_b}", "status")
            expect("status on node-b", r, 0, "2 Running jitterd pods on node node-b (a rolling update?): "
                                             "using jitterd-new-b, the newest Ready one")
            if [c[c.index("--") - 1] for c in calls() if c[2] == "exec"] != ["jitterd-new-b"]:
                failures.append("node-b: not exec'd into jitterd-new-b")

            expect("a node without a pod", ctl("--host", "k8s://node-c", "status"), 4,
                   "no Running jitterd pod on node node-c in namespace jitterd (selector "
                   f"{SELECTOR}) — is jitterd deployed there")
            calls()
            for url in ("k8s://Node_C", "k8s://-n", "k8s://root@node-a"):
                expect(f"{url} refused", ctl("--host", url, "status"), 2, "--host")
            if calls():
                failures.append("kubectl ran for a node name that was refused")
            expect("kubectl missing", ctl("--host", url_a, "status",
                                          environment=dict(env, JITTERD_KUBECTL="/nonexistent/kubectl")),
                   4, 'cannot run "/nonexistent/kubectl": No such file or directory — install kubectl, or '
                      "name the kubectl command in $JITTERD_KUBECTL")
            expect("bad namespace", ctl("--host", url_a, "status",
                                        environment=dict(env, JITTERD_K8S_NAMESPACE="Bad_NS")), 2,
                   "not a Kubernetes namespace name")
            expect("a missing socket in the pod", ctl("--host", f"k8s://node-a{tmp}/absent.sock", "status"), 4,
                   "the jitterctl proxy in pod jitterd-aaaaa on node node-a could not reach jitterd: "
                   "jitterctl proxy: cannot connect")
            calls()

            # A fleet of two k8s:// nodes.
            inventory = os.path.join(tmp, "inventory.json")
            with open(inventory, "w") as out:
                json.dump({"version": 1, "hosts": [
                    {"name": "a", "host": f"k8s://node-a{socket_a}", "interface": "jk0"},
                    {"name": "b", "host": f"k8s://node-b{socket_b}", "interface": "jk0"}]}, out)
            # Both hosts answer (their clock offsets are measured) and have no session yet: exit 3.
            r = ctl("fleet", "--inventory", inventory, "status")
            expect("fleet status", r, 3, "jk0 has no jitterd session")
            rows = [line for line in r.stdout.splitlines() if line.startswith(("a ", "b "))]
            # The offset is printed in whatever unit fits it: under a microsecond on a quick link, "ns".
            offset = re.compile(r"-?\d+(\.\d+)? (ns|µs|ms|s)$")
            if len(rows) != 2 or not all(offset.search(row.rstrip()) for row in rows):
                failures.append(f"fleet status: expected rows a and b with a clock offset:\n{r.stdout}")
            execs = sorted(c[c.index("--") - 1] for c in calls() if c[2] == "exec")
            if execs != ["jitterd-aaaaa", "jitterd-new-b"]:
                failures.append(f"fleet status exec'd into {execs}")
            if in_bed:
                r = ctl("fleet", "--inventory", inventory, "apply", "k8s-test")
                expect("fleet apply", r, 0)
                for name, node in (("a", node_a), ("b", node_b)):
                    if "25ms" not in netem_of(node):
                        failures.append(f"fleet apply: node {name}'s jk0 has {netem_of(node)}")
                r = ctl("fleet", "--inventory", inventory, "status")
                expect("fleet status after apply", r, 0, "k8s-test")
                calls()
                expect("fleet clear", ctl("fleet", "--inventory", inventory, "clear"), 0)
        finally:
            for process in (node_a, node_b):
                process.terminate()
                process.wait(timeout=30)
    return failures


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--in-namespace":
        failures = scenario(*sys.argv[3:])
        for f in failures:
            print("FAIL:", f)
        return 1 if failures else 0
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("SKIP: needs root and unshare(1): each jitterd runs in a network namespace of its own, so that "
              "its start-up recovery cannot touch another jitterd's qdiscs")
        return SKIP
    if os.environ.get("JITTERD_K8S_TEST_NEEDS_BED") and not os.environ.get("JITTERD_VM_BED"):
        print("SKIP: the kernel variant runs in the VM bed (tests/vm/run), where the kernel has netem")
        return SKIP
    source, jitterd, jitterctl = (os.path.abspath(a) for a in sys.argv[1:])
    return subprocess.run(["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), "--in-namespace",
                           source, jitterd, jitterctl], timeout=300).returncode


if __name__ == "__main__":
    sys.exit(main())
