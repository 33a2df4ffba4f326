#!/usr/bin/python3
"""Benchmarks Redis through a link that jitterd shapes, phase by phase.

While jitterd holds one phase of a profile after another on the client's interface (the harness sends
`apply` and then `switch` over jitterd's Unix socket), two things run side by side from this host to
redis-server:

  * load: redis-benchmark (GET, --clients connections), run again and again in short slices. It prints
    a summary per run, not per request, so a slice is the unit: a slice counts for a phase when it ran
    wholly inside that phase, and is discarded when a phase change happened while it ran. Its
    throughput is redis-benchmark's own (requests / its measured run time).
  * probe: this script's own Redis client on one TCP connection, one GET at a time, that stamps every
    request with time.monotonic_ns() just before sending it and measures its round trip. These are the
    per-request samples behind p50/p99/p99.9.

Every sample and every slice is tagged with the phase in force when it was sent, from jitterd's event
stream (`subscribe`): each `applied`/`phase-changed` event carries `at.monotonic_ns`, when the kernel
acknowledged the change, and `apply_ns`, how long before that jitterd sent it; the change took effect
somewhere in [at - apply_ns, at]. Both sides use CLOCK_MONOTONIC on the same host, so the stamps compare
directly. A sample sent inside that window is tagged "(switching)" and left out of every phase.

Run it in the client's network namespace (examples/sandbox does, with a jitterd and a redis-server of
its own). Python 3 standard library only. See examples/README.md.
"""

import argparse
import csv
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# jitterd's Python package (clients/python): from this checkout when it is beside the examples,
# else as installed (pip install ./clients/python).
_CHECKOUT_PACKAGE = os.path.join(os.path.dirname(HERE), "clients", "python", "src")
if os.path.isdir(os.path.join(_CHECKOUT_PACKAGE, "jitterd")):
    sys.path.insert(0, _CHECKOUT_PACKAGE)
import jitterd  # noqa: E402
from jitterd import SWITCHING, Timeline  # noqa: E402

PROBE_KEY = b"jitterd:probe"


class HarnessError(Exception):
    """The benchmark itself failed (a probe, redis-benchmark, a missing event)."""


class EventStream(threading.Thread):
    """A second connection that subscribes to one interface's events and keeps them all."""

    def __init__(self, path, interface):
        super().__init__(daemon=True)
        # Subscribed before this returns: the reply comes before any event.
        self.stream = jitterd.Client(path).subscribe(interfaces=[interface])
        self.events = []
        self.cond = threading.Condition()
        self.closed = False

    def run(self):
        for event in self.stream:
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """Waits until predicate(events) holds; returns whether it did."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return predicate(self.events)
                self.cond.wait(left)
            return True

    def snapshot(self):
        with self.cond:
            return sorted(self.events, key=lambda e: e["seq"])


def read_resp_reply(reader):
    """Reads one RESP reply (simple string, error, integer or bulk string) and returns its bytes."""
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("redis closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind == b"-":
        raise OSError("redis error: " + body.decode(errors="replace"))
    if kind == b"$":
        n = int(body)
        return None if n < 0 else reader.read(n + 2)[:-2]
    if kind in (b"+", b":"):
        return body
    raise OSError("unexpected RESP reply %r" % line)


def resp_command(*words):
    out = b"*%d\r\n" % len(words)
    for w in words:
        out += b"$%d\r\n%s\r\n" % (len(w), w)
    return out


class Probe(threading.Thread):
    """One GET at a time on one connection; a sample per request: (send time, round trip), in ns."""

    def __init__(self, host, port, interval_ns, stop):
        super().__init__(daemon=True)
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")
        self.interval_ns = interval_ns
        self.stop = stop
        self.samples = []
        self.error = None
        self.sock.sendall(resp_command(b"SET", PROBE_KEY, b"x" * 16))
        read_resp_reply(self.reader)

    def run(self):
        request = resp_command(b"GET", PROBE_KEY)
        next_send = time.monotonic_ns()
        try:
            while not self.stop.is_set():
                wait = next_send - time.monotonic_ns()
                if wait > 0:
                    time.sleep(wait / 1e9)
                sent = time.monotonic_ns()
                self.sock.sendall(request)
                read_resp_reply(self.reader)
                self.samples.append((sent, time.monotonic_ns() - sent))
                # At most one request per interval; a slower reply only delays the next one.
                next_send = sent + self.interval_ns
        except OSError as e:
            self.error = "probe: %s" % e
        finally:
            self.sock.close()


class BenchmarkSlices(threading.Thread):
    """redis-benchmark, run again and again until stopped; one record per run (a slice)."""

    def __init__(self, program, host, port, clients, slice_seconds, stop):
        super().__init__(daemon=True)
        self.command = [program, "-h", host, "-p", str(port), "-c", str(clients), "-t", "get", "--csv"]
        self.clients = clients
        self.slice_seconds = slice_seconds
        self.stop = stop
        self.slices = []
        self.error = None

    def run(self):
        # The first slice is short; then each one asks for about slice_seconds at the last slice's rate.
        requests = self.clients * 20
        while not self.stop.is_set():
            start = time.monotonic_ns()
            run = subprocess.run(self.command + ["-n", str(requests)], capture_output=True, text=True)
            end = time.monotonic_ns()
            rows = {r[0]: r for r in csv.reader(run.stdout.splitlines()) if r}
            if run.returncode != 0 or "GET" not in rows:
                self.error = "redis-benchmark exited with %d: %s" % (run.returncode, (run.stderr or run.stdout).strip())
                self.stop.set()
                return
            header = rows["test"]
            row = dict(zip(header, rows["GET"]))
            rps = float(row["rps"])
            self.slices.append({"start_ns": start, "end_ns": end, "requests": requests, "rps": rps,
                                "min_ms": float(row["min_latency_ms"]), "p50_ms": float(row["p50_latency_ms"]),
                                "p99_ms": float(row["p99_latency_ms"])})
            requests = max(self.clients * 10, int(rps * self.slice_seconds))


def percentile(sorted_values, q):
    """Nearest rank: the smallest value with at least q of the samples at or below it."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", default=os.environ.get("JITTERD_SOCKET", "/run/jitterd/jitterd.sock"),
                   help="jitterd's socket (default: $JITTERD_SOCKET or /run/jitterd/jitterd.sock)")
    p.add_argument("--interface", default=os.environ.get("JITTERD_INTERFACE"),
                   help="the interface to shape: the client's side of the link (default: $JITTERD_INTERFACE)")
    p.add_argument("--redis", default="%s:%s" % (os.environ.get("REDIS_HOST", "127.0.0.1"),
                                                 os.environ.get("REDIS_PORT", "6379")),
                   help="redis-server's HOST:PORT, reached through the interface (default: $REDIS_HOST:$REDIS_PORT)")
    p.add_argument("--profile", default=os.path.join(HERE, "redis-phases.json"),
                   help="a profile file (sent inline) or the name of a profile in jitterd's profile folders "
                        "(default: redis-phases.json beside this script)")
    p.add_argument("--phases", help="comma-separated phases to hold in turn (default: every phase, by name)")
    p.add_argument("--phase-seconds", type=float, default=5.0, help="how long each phase is held (default 5)")
    p.add_argument("--rounds", type=int, default=2, help="how many times the phases are gone through (default 2)")
    p.add_argument("--clients", type=int, default=20, help="redis-benchmark's connections (default 20)")
    p.add_argument("--slice-seconds", type=float, default=0.5,
                   help="about how long each redis-benchmark run lasts (default 0.5)")
    p.add_argument("--probe-interval-ms", type=float, default=2.0,
                   help="the probe sends at most one request per interval (default 2)")
    p.add_argument("--redis-benchmark", default="redis-benchmark", help="the redis-benchmark program")
    p.add_argument("--samples", help="write every probe sample here (CSV: send_monotonic_ns,rtt_ns,phase)")
    p.add_argument("--slices", help="write every redis-benchmark run here (CSV)")
    p.add_argument("--json", help="write the summary here (JSON)")
    args = p.parse_args(argv)
    if not args.interface:
        p.error("--interface (or $JITTERD_INTERFACE) is required")
    host, _, port = args.redis.rpartition(":")
    args.redis_host, args.redis_port = host, int(port)
    return args


def resolve_profile(ctl, spec):
    """The `profile` parameter (a name, or the profile object inline) and its phase names."""
    if os.path.isfile(spec):
        with open(spec) as f:
            profile = json.load(f)
        return profile, profile["name"], sorted(profile["phases"])
    for p in ctl.call("profiles")["profiles"]:
        if p["name"] == spec:
            return spec, spec, sorted(p["phases"])
    raise HarnessError("no profile file %r and no profile of that name in jitterd's profile folders" % spec)


def report(args, version, profile_name, plan, events, samples, slices, run_start, run_end):
    timeline = Timeline(events)
    tagged = [(sent, rtt, timeline.tag(sent)) for sent, rtt in samples]
    for s in slices:
        s["phase"] = timeline.tag_span(s["start_ns"], s["end_ns"])
    rel = lambda t: (t - run_start) / 1e9

    print("== events (from the subscription; at = when the kernel acknowledged the change)")
    for e in events:
        extra = ""
        if "apply_ns" in e:
            extra = "  (apply took %.3f ms)" % (e["apply_ns"] / 1e6)
        elif "reason" in e:
            extra = "  (%s)" % e["reason"]
        print("  %+9.3f s  %-14s %-10s%s" % (rel(e["at"]["monotonic_ns"]), e["event"], e.get("phase", ""), extra))

    phases = []
    for p in plan:
        if p not in phases:
            phases.append(p)
    summary = {"daemon": version, "interface": args.interface, "profile": profile_name, "plan": plan,
               "phase_seconds": args.phase_seconds, "clients": args.clients, "events": events, "phases": {}}
    print("== per phase (throughput: redis-benchmark GET, %d connections, runs wholly inside the phase;" % args.clients)
    print("   latency: one GET at a time on one more connection, each request tagged by its send time)")
    print("%-10s %8s %14s %12s %8s %9s %9s %9s" %
          ("phase", "held s", "bench runs", "GET/s", "samples", "p50 ms", "p99 ms", "p99.9 ms"))
    for phase in phases:
        rtts = sorted(rtt for _, rtt, tag in tagged if tag == phase)
        kept = [s for s in slices if s["phase"] == phase]
        requests = sum(s["requests"] for s in kept)
        busy = sum(s["requests"] / s["rps"] for s in kept if s["rps"] > 0)
        throughput = requests / busy if busy else 0.0
        stats = {"held_seconds": timeline.time_in(phase, run_end), "bench_runs": len(kept),
                 "bench_requests": requests, "throughput_rps": throughput, "samples": len(rtts)}
        if rtts:
            stats.update({"min_ms": rtts[0] / 1e6, "p50_ms": percentile(rtts, 0.50) / 1e6,
                          "p99_ms": percentile(rtts, 0.99) / 1e6, "p999_ms": percentile(rtts, 0.999) / 1e6,
                          "max_ms": rtts[-1] / 1e6})
        summary["phases"][phase] = stats
        fmt = lambda k: "%9.2f" % stats[k] if k in stats else "%9s" % "-"
        print("%-10s %8.2f %14s %12.1f %8d %s %s %s" %
              (phase, stats["held_seconds"], "%d (%d req)" % (len(kept), requests), throughput, len(rtts),
               fmt("p50_ms"), fmt("p99_ms"), fmt("p999_ms")))

    counts = {}
    for _, _, tag in tagged:
        counts[tag] = counts.get(tag, 0) + 1
    straddling = sum(1 for s in slices if s["phase"] == SWITCHING)
    summary["tags"] = counts
    summary["bench_runs"] = {"total": len(slices), "straddling": straddling}
    print("samples: %d, every one tagged: %s" % (len(tagged), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    print("redis-benchmark runs: %d, %d discarded for straddling a phase change" % (len(slices), straddling))
    if any(n < 1000 for n in (s["samples"] for s in summary["phases"].values())):
        print("(p99.9 of fewer than 1000 samples is the largest or one of the few largest: read it as a maximum)")

    if args.samples:
        with open(args.samples, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["send_monotonic_ns", "rtt_ns", "phase"])
            w.writerows(tagged)
    if args.slices:
        with open(args.slices, "w", newline="") as f:
            w = csv.writer(f)
            keys = ["start_ns", "end_ns", "requests", "rps", "min_ms", "p50_ms", "p99_ms", "phase"]
            w.writerow(keys)
            w.writerows([s[k] for k in keys] for s in slices)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return summary


def main(argv):
    args = parse_args(argv)
    # Threads hand over the interpreter every 0.5 ms instead of 5: the probe's stamp after a reply must
    # not wait for another thread's time slice.
    sys.setswitchinterval(0.0005)
    ctl = jitterd.Client(args.socket)
    version = ctl.call("version")
    profile, profile_name, all_phases = resolve_profile(ctl, args.profile)
    phases = args.phases.split(",") if args.phases else all_phases
    plan = phases * args.rounds
    print("== jitterd %s (protocol %d, pid %d): %s on %s; redis at %s" %
          (version["version"], version["protocol"], version["pid"], profile_name, args.interface, args.redis))
    print("== plan: %s, %g s each" % (" -> ".join(plan), args.phase_seconds))

    events = EventStream(args.socket, args.interface)
    events.start()
    stop = threading.Event()
    probe = Probe(args.redis_host, args.redis_port, int(args.probe_interval_ms * 1e6), stop)
    bench = BenchmarkSlices(args.redis_benchmark, args.redis_host, args.redis_port, args.clients,
                            args.slice_seconds, stop)
    # A lease: if this harness dies, jitterd removes the shaping by itself a minute after the run's end.
    lease = "%ds" % math.ceil(len(plan) * args.phase_seconds + 60)
    applied = False
    try:
        ctl.call("apply", interface=args.interface, profile=profile, phase=plan[0], lease=lease)
        applied = True
        run_start = time.monotonic_ns()
        probe.start()
        bench.start()
        for phase in plan[1:]:
            if stop.wait(args.phase_seconds):
                break
            ctl.call("switch", interface=args.interface, phase=phase)
        stop.wait(args.phase_seconds)
        stop.set()
        probe.join()
        bench.join()
        run_end = time.monotonic_ns()
        if probe.error or bench.error:
            raise HarnessError(probe.error or bench.error)
        # Every transition's event, before tagging (the replies may overtake them).
        want = len(plan)
        if not events.wait_for(lambda ev: sum(e["event"] in ("applied", "phase-changed") for e in ev) >= want, 10):
            raise HarnessError("expected %d applied/phase-changed events, got %d" % (want, len(events.snapshot())))
    finally:
        if applied:
            ctl.call("clear", interface=args.interface)
    events.wait_for(lambda ev: any(e["event"] == "cleared" for e in ev), 5)
    report(args, version, profile_name, plan, events.snapshot(), probe.samples, bench.slices, run_start, run_end)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (jitterd.JitterdError, HarnessError, OSError) as e:
        print("redis_bench: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
