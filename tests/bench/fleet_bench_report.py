#!/usr/bin/env python3
"""The tables of tests/bench/fleet_bench.sh: reads the reports one run left in OUT/RUN/.

fleet_bench_report.py --lead DURATION OUT RUN...   (RUN: as fleet_bench.sh names them)

Per run: lateness (every host of every switch), skew (one per switch), the lateness split into the
time before the netlink send and the send itself (the status' apply_ns of the same transition,
matched by its acknowledgement time), the client's wall time per switch and the wall time beyond
the lead, and the jitterds' CPU time per switch (all hosts together). Percentiles are nearest-rank:
with 100 switches the skew's p99 is the second largest of 100.

The second table, per run: the `fleet apply`'s wall time; the clock offsets and round trips the
switches reported (every host of every switch); and the `fleet --json subscribe` stream of the
run: its events, the fewest and most of one host, how many of the switches' transitions (host and
switch, matched by the acknowledgement time the switch reported against the event's `at`) are not
in it, how many times its at_client_ns went backwards, how many events it marked late, and the
subscriber's exit status.
"""
import argparse
import glob
import json
import math
import os
import re
import sys


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def duration_ns(text):
    m = re.fullmatch(r"([0-9.]+)(ns|us|µs|ms|s)", text)
    if not m:
        sys.exit(f"fleet_bench_report.py: --lead {text!r} is not a duration such as 500ms")
    scale = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}[m.group(2)]
    return float(m.group(1)) * scale


def json_files(folder, pattern):
    """The parsed JSON of every file of `folder` matching `pattern`; unreadable ones are skipped."""
    for path in glob.glob(os.path.join(folder, pattern)):
        try:
            with open(path) as f:
                yield json.load(f)
        except (OSError, ValueError):
            continue


def read_run(folder):
    """Every switch of a run: its hosts' lateness, skew, and the apply_ns of each host's record."""
    applies = {}  # acknowledgement realtime -> apply_ns, from the status files
    for status in json_files(folder, "status-h*-*.json"):
        for session in status.get("sessions", []):
            for record in (session.get("transitions") or {}).get("recent", []):
                applies[record["applied"]["realtime_ns"]] = record["apply_ns"]
    late, skew, skew_by_offsets, before_send, send, unmatched, failed = [], [], [], [], [], 0, 0
    paths = glob.glob(os.path.join(folder, "switch-*.json"))
    for path in sorted(paths, key=lambda p: int(re.search(r"switch-(\d+)", p).group(1))):
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            failed += 1
            continue
        hosts = report.get("hosts", [])
        if not report.get("committed") or any("late_ns" not in h for h in hosts):
            failed += 1
            continue
        skew.append(report["skew_ns"])
        if "skew_by_offsets_ns" in report:
            skew_by_offsets.append(report["skew_by_offsets_ns"])
        for h in hosts:
            late.append(h["late_ns"])
            apply = applies.get(h["accepted_realtime_ns"])
            if apply is None:
                unmatched += 1
                continue
            send.append(apply)
            before_send.append(h["late_ns"] - apply)
    walls, cpus = [], []
    with open(os.path.join(folder, "runs.csv")) as f:
        for line in f:
            _, wall, cpu = line.strip().split(",")
            walls.append(int(wall))
            cpus.append(int(cpu))
    return {
        "late": late,
        "skew": skew,
        "skew_by_offsets": skew_by_offsets,
        "before_send": before_send,
        "send": send,
        "unmatched": unmatched,
        "failed": failed,
        "switches": len(paths),
        "wall": walls,
        "cpu": cpus,
    }


def read_stream(folder, hosts):
    """The subscription of a run against its switches' reports: see the module's doc."""
    events, per_host, backwards, late, last = 0, {}, 0, 0, None
    seen = set()  # (host, at realtime_ns) of every phase-changed event
    try:
        with open(os.path.join(folder, "subscribe.jsonl")) as f:
            for line in f:
                event = json.loads(line)
                events += 1
                per_host[event["host"]] = per_host.get(event["host"], 0) + 1
                if last is not None and event["at_client_ns"] < last:
                    backwards += 1
                last = event["at_client_ns"]
                late += 1 if event.get("late") else 0
                if event.get("event") == "phase-changed":
                    seen.add((event["host"], event["at"]["realtime_ns"]))
    except (OSError, ValueError, KeyError):
        return None
    missing = 0
    for report in json_files(folder, "switch-*.json"):
        for h in report.get("hosts", []):
            if "accepted_realtime_ns" in h and (h["name"], h["accepted_realtime_ns"]) not in seen:
                missing += 1
    counts = [per_host.get(f"h{i}", 0) for i in range(hosts)]
    try:
        with open(os.path.join(folder, "subscribe_status")) as f:
            exit_status = f.read().strip()
    except OSError:
        exit_status = "?"
    return {"events": events, "fewest": min(counts, default=0), "most": max(counts, default=0),
            "missing": missing, "backwards": backwards, "late": late, "status": exit_status}


def read_clocks(folder):
    """Every host's |offset| and round trip of every switch, and the apply's wall time."""
    offsets, trips = [], []
    for report in json_files(folder, "switch-*.json"):
        for h in report.get("hosts", []):
            if "offset_ns" in h:
                offsets.append(abs(h["offset_ns"]))
                trips.append(h["round_trip_ns"])
    try:
        with open(os.path.join(folder, "apply_wall_ns")) as f:
            apply_wall = int(f.read())
    except (OSError, ValueError):
        apply_wall = math.nan
    return offsets, trips, apply_wall


def print_table(header, rows):
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def second_table(out, runs):
    """The apply, the clocks and the stream per run; true when every stream was whole."""
    header = ("run", "apply wall", "|offset| p50", "|offset| max", "rtt p50", "rtt max", "events",
              "per host", "missing", "backwards", "late", "exit")
    rows, whole = [], True
    for run in runs:
        folder = os.path.join(out, run)
        hosts = int(run.rsplit("-", 1)[1])
        offsets, trips, apply_wall = read_clocks(folder)
        stream = read_stream(folder, hosts)
        if stream is None:
            whole = False
            rows.append((run, ms(apply_wall), *(["-"] * 10)))
            continue
        whole = whole and stream["missing"] == 0 and stream["backwards"] == 0 and \
            stream["late"] == 0 and stream["status"] == "0" and stream["fewest"] > 0
        rows.append((
            run, ms(apply_wall),
            ms(percentile(offsets, 50)), ms(max(offsets, default=math.nan)),
            ms(percentile(trips, 50)), ms(max(trips, default=math.nan)),
            str(stream["events"]), f"{stream['fewest']}-{stream['most']}", str(stream["missing"]),
            str(stream["backwards"]), str(stream["late"]), stream["status"]))
    print_table(header, rows)
    print("times in ms; apply wall = the `fleet apply`'s wall time; |offset|, rtt = every host's"
          " clock offset (absolute) and its round trip as the switches reported them; events = the"
          " run's `fleet subscribe` stream (warm-up switches included), per host = fewest-most of"
          " one host; missing = switch transitions (host, switch) not in it; backwards ="
          " at_client_ns smaller than the line before; late = marked late; exit = the subscriber's"
          " exit status after SIGTERM")
    return whole


def ms(ns):
    return f"{ns / 1e6:.2f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lead", required=True)
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    lead = duration_ns(args.lead)
    header = (
        "run", "switches", "late p50", "late p99", "late max", "skew p50", "skew p99", "skew max",
        "skew-off p50", "skew-off p99",
        "pre-send p50", "pre-send p99", "send p50", "send p99", "within 1ms", "wall-lead p50",
        "wall-lead p99", "CPU/switch", "failed")
    rows = []
    for run in args.runs:
        r = read_run(os.path.join(args.out, run))
        within = sum(1 for v in r["late"] if v <= 1_000_000)
        rows.append((
            run, str(r["switches"]),
            ms(percentile(r["late"], 50)), ms(percentile(r["late"], 99)), ms(max(r["late"], default=math.nan)),
            ms(percentile(r["skew"], 50)), ms(percentile(r["skew"], 99)), ms(max(r["skew"], default=math.nan)),
            ms(percentile(r["skew_by_offsets"], 50)), ms(percentile(r["skew_by_offsets"], 99)),
            ms(percentile(r["before_send"], 50)), ms(percentile(r["before_send"], 99)),
            ms(percentile(r["send"], 50)), ms(percentile(r["send"], 99)),
            f"{100 * within / len(r['late']):.1f}%" if r["late"] else "-",
            ms(percentile(r["wall"], 50) - lead), ms(percentile(r["wall"], 99) - lead),
            ms(sum(r["cpu"]) / len(r["cpu"])) if r["cpu"] else "-",
            str(r["failed"]) + (f" ({r['unmatched']} unmatched)" if r["unmatched"] else "")))
    print_table(header, rows)
    print("times in ms; late = acknowledgement - deadline per host and switch (host's monotonic clock);"
          " skew = last - first acknowledgement per switch (each host's realtime clock); skew-off = the same"
          " with each host's time moved by its estimated clock offset to the client's clock"
          " (skew_by_offsets_ns); pre-send = late - send (timer wake-up,"
          " planning, ledger); send = the netlink batch (status apply_ns); within 1ms = share of"
          " host changes with late <= 1 ms; wall-lead = the client's wall time per switch minus the"
          " lead; CPU/switch = all jitterds' CPU time per switch (clock, stage, commit, status"
          " included; per-host runs: the UML guests' whole host CPU time, kernels and sshds too)")
    print()
    whole = second_table(args.out, args.runs)
    return 1 if any(row[-1] != "0" for row in rows) or not whole else 0


if __name__ == "__main__":
    sys.exit(main())
