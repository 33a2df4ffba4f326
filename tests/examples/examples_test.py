#!/usr/bin/python3
"""The examples (examples/), run for real: a jitterd of the build, in examples/sandbox (two network
namespaces joined by a veth, redis-server beside), on a kernel with netem (the VM test bed).

  examples_test.py bench JITTERD     examples/redis_bench.py end to end, its figures judged
  examples_test.py clients JITTERD   examples/client.py and client.sh against the daemon
  examples_test.py python JITTERD    the Python package (clients/python) and its pytest plugin

Exit 77 (ctest: skipped) when not root or when this kernel has no netem.
"""

import csv
import json
import os
import re
import select
import subprocess
import sys
import shutil
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
PYTHON = "/usr/bin/python3"
# The phases the bench test holds: constant delays on the client's egress (examples/redis-phases.json).
DELAY_MS = {"steady": 2.0, "slow": 12.0}
CLIENTS = 4
PROBE_INTERVAL_MS = 2.0

failures = []


def check(condition, message):
    print(("ok:   " if condition else "FAIL: ") + message, flush=True)
    if not condition:
        failures.append(message)


def skip_unless_netem():
    if os.geteuid() != 0:
        print("skipped: needs root (network namespaces and qdiscs)")
        sys.exit(77)
    probe = subprocess.run(["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem"],
                           capture_output=True)
    if probe.returncode != 0:
        print("skipped: this kernel has no netem; run the kernel suite in the VM test bed (tests/vm/run)")
        sys.exit(77)


def sandbox(jitterd, command, **kwargs):
    # JITTERD_EXAMPLES_IN_VM=1: never start a VM from here (we checked for netem above).
    env = dict(os.environ, JITTERD_EXAMPLES_IN_VM="1")
    return subprocess.run([os.path.join(EXAMPLES, "sandbox"), "--jitterd", jitterd, "--"] + command,
                          env=env, **kwargs)


def bench(jitterd):
    # Kept afterwards (ctest runs this in the build tree: tests/examples/bench-output) for a look at
    # every sample and run.
    out = os.path.abspath("bench-output")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    summary_file, samples_file, slices_file = (os.path.join(out, n) for n in ("summary.json", "samples.csv", "slices.csv"))
    run = sandbox(jitterd, [PYTHON, os.path.join(EXAMPLES, "redis_bench.py"), "--phases", "steady,slow",
                            "--phase-seconds", "4", "--rounds", "2", "--clients", str(CLIENTS),
                            "--probe-interval-ms", str(PROBE_INTERVAL_MS), "--json", summary_file,
                            "--samples", samples_file, "--slices", slices_file],
                  capture_output=True, text=True, timeout=240)
    print(run.stdout, end="")
    print(run.stderr, end="", file=sys.stderr)
    check(run.returncode == 0, "redis_bench.py exits 0 (got %d)" % run.returncode)
    if run.returncode != 0:
        return

    # The printed table: a row per phase with throughput and the three percentiles, all numbers.
    for phase in DELAY_MS:
        row = re.search(r"^%s\s+[\d.]+\s+\d+ \(\d+ req\)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$" % phase,
                        run.stdout, re.M)
        check(row is not None, "the output has a %s row with throughput, samples, p50, p99 and p99.9" % phase)

    with open(summary_file) as f:
        summary = json.load(f)
    with open(samples_file) as f:
        samples = list(csv.DictReader(f))
    with open(slices_file) as f:
        slices = list(csv.DictReader(f))
    stats = summary["phases"]

    # Every sample tagged: with a phase, or as sent while a change was being applied. Such a window
    # lasts apply_ns, and the probe sends at most one request per interval, so a window holds at most
    # ceil(apply_ns / interval) + 1 samples.
    tags = {}
    for s in samples:
        tags[s["phase"]] = tags.get(s["phase"], 0) + 1
    check(set(tags) <= set(DELAY_MS) | {"(switching)"},
          "every sample is tagged with a phase or (switching): %s" % tags)
    changes = [e for e in summary["events"] if e["event"] == "phase-changed"]
    check(len(changes) == 3, "three phase-changed events for steady, slow, steady, slow (got %d)" % len(changes))
    switching_bound = sum(-(-e["apply_ns"] // int(PROBE_INTERVAL_MS * 1e6)) + 1 for e in changes)
    check(tags.get("(switching)", 0) <= switching_bound,
          "samples tagged (switching): %d <= %d" % (tags.get("(switching)", 0), switching_bound))

    for phase, delay in DELAY_MS.items():
        rtts = [int(s["rtt_ns"]) / 1e6 for s in samples if s["phase"] == phase]
        # 8 s held: even at 12 ms + 50 ms of emulated-machine overhead a request, 100 would be 6 s.
        check(len(rtts) >= 100, "%s: %d probe samples >= 100" % (phase, len(rtts)))
        # netem never releases a packet before its delay, and a sample's stamp precedes its request's
        # enqueue: a sample tagged with the wrong phase (a 2 ms request counted as slow) fails this.
        check(min(rtts) >= delay, "%s: every sample's round trip >= %g ms (min %.3f ms)" % (phase, delay, min(rtts)))
        kept = [s for s in slices if s["phase"] == phase]
        check(len(kept) >= 1, "%s: %d redis-benchmark runs wholly inside the phase" % (phase, len(kept)))
        # The same check on redis-benchmark's own minimum: its histogram keeps 3 significant digits
        # (rounds down by < 0.1 %, 0.2 % allowed) and prints 3 decimals (0.001 ms).
        lowest = min(float(s["min_ms"]) for s in kept) if kept else 0.0
        check(lowest >= delay * 0.998 - 0.001,
              "%s: redis-benchmark's fastest request in its runs >= %g ms (%.3f ms)" % (phase, delay, lowest))
        # Little's law: CLIENTS connections with one request each outstanding, each request taking at
        # least the delay, cannot go faster than CLIENTS / delay; redis-benchmark times its run in
        # whole ms, and its shortest run (10 requests a connection) takes >= 20 ms: 5 % allowed.
        bound = CLIENTS / (delay / 1e3)
        check(0 < stats[phase]["throughput_rps"] <= bound * 1.05,
              "%s: throughput %.1f GET/s in (0, %.0f]" % (phase, stats[phase]["throughput_rps"], bound * 1.05))

    # The medians: netem adds exactly 2 and 12 ms to every request, so p50(slow) - p50(steady) is 10 ms
    # plus the difference between the medians of the rest (Python, Redis, the emulated machine), which
    # the phases' different loads move. A coarse check by design (TOLERANCE_MS); the sharp ones are the
    # minimums above.
    gap = stats["slow"]["p50_ms"] - stats["steady"]["p50_ms"]
    expected = DELAY_MS["slow"] - DELAY_MS["steady"]
    check(abs(gap - expected) <= TOLERANCE_MS,
          "p50(slow) - p50(steady) = %.3f ms, %g +- %g ms" % (gap, expected, TOLERANCE_MS))
    check(stats["steady"]["throughput_rps"] > stats["slow"]["throughput_rps"],
          "steady serves more GET/s than slow (%.1f > %.1f)" % (stats["steady"]["throughput_rps"],
                                                               stats["slow"]["throughput_rps"]))


# In qemu TCG (the second bed; 2-core host) the rest's median measured 2.6 to 6.0 ms in four runs and
# differed between the phases by up to 3.4 ms (p50 gaps of 9.8, 12.3 and 13.4 ms); User-Mode Linux, the
# default bed, is quieter. 5 ms is not fitted to either: it is half the delays' difference: a run whose delays do not show at the median (no shaping: ~0 ms; phases swapped
# by the tagging: -10 ms) still fails.
TOLERANCE_MS = 5.0


def clients(jitterd):
    run = sandbox(jitterd, [PYTHON, os.path.abspath(__file__), "clients-inside"], capture_output=True, text=True,
                  timeout=180)
    print(run.stdout, end="")
    print(run.stderr, end="", file=sys.stderr)
    check(run.returncode == 0, "the client checks inside the sandbox pass (exit %d)" % run.returncode)


def call(kind, method, params=None):
    """Runs examples/client.py or client.sh; returns (exit status, the reply)."""
    program = [PYTHON, os.path.join(EXAMPLES, "client.py")] if kind == "py" else [os.path.join(EXAMPLES, "client.sh")]
    args = [method] + ([json.dumps(params)] if params is not None else [])
    run = subprocess.run(program + args, capture_output=True, text=True, timeout=30)
    lines = run.stdout.splitlines()
    reply = json.loads(lines[0]) if lines else None
    print("%s %s %s -> %d %s" % ("client.py" if kind == "py" else "client.sh", method,
                                 json.dumps(params) if params is not None else "", run.returncode, run.stdout.strip()))
    return run.returncode, reply


def root_netem_delay_ms(dev):
    """The root netem's delay on dev, read by tc (an independent reader), or None without one."""
    out = subprocess.run(["tc", "-j", "qdisc", "show", "dev", dev], capture_output=True, text=True, check=True).stdout
    for q in json.loads(out):
        if q.get("root") and q["kind"] == "netem":
            return round(q["options"]["delay"]["delay"] * 1e3, 6)
    return None


class Subscriber:
    def __init__(self, kind, params):
        program = [PYTHON, os.path.join(EXAMPLES, "client.py"), "--count", "2"] if kind == "py" \
            else [os.path.join(EXAMPLES, "client.sh")]
        self.name = "client.py" if kind == "py" else "client.sh"
        self.proc = subprocess.Popen(program + ["subscribe", json.dumps(params)], stdout=subprocess.PIPE)
        self.buffer = b""

    def line(self, timeout=10):
        """The next line within timeout seconds, parsed, or None. Reads the pipe with os.read into a
        buffer of its own: a buffered reader could hold a second line that select() cannot see."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        text, self.buffer = self.buffer.split(b"\n", 1)
        print("%s subscribe: %s" % (self.name, text.decode()))
        return json.loads(text)


def clients_inside():
    dev = os.environ["JITTERD_INTERFACE"]
    for kind in ("py", "sh"):
        rc, reply = call(kind, "version")
        check(rc == 0 and reply["ok"] and reply["result"]["protocol"] == 1, "%s version: ok, protocol 1" % kind)

    rc, reply = call("py", "apply", {"interface": dev, "profile": "redis-phases", "phase": "slow", "lease": "60s"})
    check(rc == 0 and reply["result"]["phase"] == "slow" and reply["result"]["state"] == "active",
          "client.py apply: session active in phase slow")
    check(root_netem_delay_ms(dev) == 12.0, "tc sees a 12 ms netem root on %s" % dev)

    subscribers = [Subscriber("py", {"interfaces": [dev]}),
                   Subscriber("sh", {"interfaces": [dev], "events": ["phase-changed", "cleared"]})]
    for s in subscribers:
        first = s.line()
        check(first is not None and first.get("ok") and first["result"] == {"subscribed": True},
              "%s subscribe: the reply says subscribed" % s.name)

    rc, reply = call("sh", "switch", {"interface": dev, "phase": "steady"})
    check(rc == 0 and reply["result"]["phase"] == "steady", "client.sh switch: phase steady")
    check(root_netem_delay_ms(dev) == 2.0, "tc sees the netem root changed to 2 ms")
    rc, reply = call("sh", "switch", {"interface": dev, "phase": "hgih"})
    check(rc == 1 and not reply["ok"] and reply["error"]["code"] == "not-found",
          "client.sh switch to an unknown phase: exit 1, not-found")
    rc, reply = call("py", "no-such-method")
    check(rc == 1 and reply["error"]["code"] == "unknown-method", "client.py unknown method: exit 1, unknown-method")
    rc, reply = call("sh", "clear", {"interface": dev})
    check(rc == 0 and reply["result"] == {"cleared": [dev]}, "client.sh clear: cleared %s" % dev)
    check(root_netem_delay_ms(dev) is None, "tc sees no netem root on %s any more" % dev)

    for s in subscribers:
        changed, cleared = s.line(), s.line()
        check(changed is not None and changed["event"] == "phase-changed" and changed["phase"] == "steady"
              and changed["previous"] == "slow" and changed["interface"] == dev
              and isinstance(changed["at"]["monotonic_ns"], int),
              "%s subscribe: phase-changed slow -> steady with its time" % s.name)
        check(cleared is not None and cleared["event"] == "cleared" and cleared["reason"] == "request",
              "%s subscribe: cleared, reason request" % s.name)
    py, sh = subscribers
    try:
        check(py.proc.wait(timeout=10) == 0, "client.py subscribe --count 2 exits 0 after two events")
    except subprocess.TimeoutExpired:
        check(False, "client.py subscribe --count 2 exits after two events")
    for s in subscribers:
        if s.proc.poll() is None:
            s.proc.terminate()
            s.proc.wait()


def python_package(jitterd):
    """clients/python's tests: the protocol ones, and those against this jitterd in the sandbox."""
    tests = os.path.join(ROOT, "clients", "python", "tests")
    if subprocess.run([PYTHON, "-c", "import pytest"], capture_output=True).returncode != 0:
        check(False, "pytest for /usr/bin/python3 is missing: run scripts/setup (python3-pytest)")
        return
    result = sandbox(jitterd, [PYTHON, "-m", "pytest", "-p", "pytester", "-q", "-rs", tests])
    check(result.returncode == 0, "clients/python's tests pass against the daemon")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "clients-inside":
        clients_inside()
    elif len(sys.argv) == 3 and sys.argv[1] in ("bench", "clients", "python"):
        skip_unless_netem()
        for tool in ("redis-server", "redis-benchmark", "redis-cli", "socat"):
            if subprocess.run(["sh", "-c", "command -v " + tool], capture_output=True).returncode != 0:
                print("FAIL: %s is missing: run scripts/setup" % tool)
                return 1
        {"bench": bench, "clients": clients, "python": python_package}[sys.argv[1]](
            os.path.abspath(sys.argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("%d failed checks" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
