"""Client for jitterd, the netem orchestration daemon (docs/protocol.md in the jitterd repository).

    import jitterd

    client = jitterd.Client()                       # $JITTERD_SOCKET or /run/jitterd/jitterd.sock
    client.apply("veth0", "lab-regimes", lease="30s")
    client.switch("veth0", "regime-2")
    client.clear("veth0")

    with jitterd.shaped("veth0", "lab-regimes") as link:   # applied with a lease, renewed, cleared
        link.switch("regime-2")
        ...
        phase = link.phase_at(time.monotonic_ns())          # tag a sample with the phase in force

Every method of the protocol is a method of Client; a refusal raises JitterdError with the reply's
code, message, where (a JSON pointer into the request) and hint. Standard library only, Python 3.9+.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

__all__ = [
    "Client",
    "ConnectionClosed",
    "DEFAULT_SOCKET",
    "Event",
    "JitterdError",
    "ShapedLink",
    "Timeline",
    "shaped",
    "SWITCHING",
    "BEFORE_APPLY",
    "UNSHAPED",
]

__version__ = "0.1.0"

DEFAULT_SOCKET = "/run/jitterd/jitterd.sock"

# A duration in a request: "250ms", "2s", "1.5m", "1h", an int of nanoseconds, or a timedelta.
Duration = Union[str, int, datetime.timedelta]
Event = Dict[str, Any]

# Phase tags of Timeline.tag for times that are in no phase.
SWITCHING = "(switching)"
BEFORE_APPLY = "(before apply)"
UNSHAPED = "(unshaped)"

# Events after which the lane is no longer shaped by its session.
_ENDING_EVENTS = {"cleared", "lease-expired", "interface-gone", "rolled-back"}


class JitterdError(Exception):
    """jitterd refused a request: the reply's error, member by member."""

    def __init__(self, method: str, code: str, message: str, where: Optional[str] = None,
                 hint: Optional[str] = None, reply: Optional[dict] = None) -> None:
        self.method = method
        self.code = code
        self.message = message
        self.where = where
        self.hint = hint
        self.reply = reply
        text = "%s: %s: %s" % (method, code, message)
        if where:
            text += " (at %s)" % where
        if hint:
            text += "; hint: %s" % hint
        super().__init__(text)


class ConnectionClosed(ConnectionError):
    """jitterd closed the connection (it stopped, or refused the connection: its one reply says why)."""


def _duration(value: Duration) -> Union[str, int]:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(microseconds=1)) * 1000
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError("a duration is a string (\"30s\"), an int of nanoseconds or a timedelta, "
                        "not %r" % (value,))
    return value


def _seconds(value: Duration) -> float:
    """A duration in seconds, for the client's own timers (renewal)."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, int):
        return value / 1e9
    units = (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
    for suffix, scale in units:
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * scale
    raise ValueError("not a duration: %r (\"250ms\", \"30s\", \"1m\")" % value)


def _params(**members: Any) -> dict:
    """The members that were given (None means absent)."""
    return {key: value for key, value in members.items() if value is not None}


class _Connection:
    """One connection: a JSON request per line, a JSON reply (or event) per line."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.lines = self.sock.makefile("rb")
        self.next_id = 1
        self.pending_events: List[Event] = []

    def send(self, method: str, params: dict) -> int:
        request_id = self.next_id
        self.next_id += 1
        line = json.dumps({"id": request_id, "method": method, "params": params}) + "\n"
        self.sock.sendall(line.encode())
        return request_id

    def read(self) -> dict:
        line = self.lines.readline()
        if not line:
            raise ConnectionClosed("jitterd closed the connection (%s)" % self.path)
        return json.loads(line)

    def call(self, method: str, params: dict) -> Any:
        request_id = self.send(method, params)
        while True:
            reply = self.read()
            if "event" in reply:
                self.pending_events.append(reply)
                continue
            if reply.get("id") != request_id:
                if "id" not in reply and reply.get("ok") is False:  # busy, permission-denied
                    _raise(method, reply)
                raise ConnectionClosed("reply out of order: %r" % (reply,))
            if reply.get("ok") is not True:
                _raise(method, reply)
            return reply["result"]

    def close(self) -> None:
        try:
            self.lines.close()
        finally:
            self.sock.close()


def _raise(method: str, reply: dict) -> None:
    error = reply.get("error") or {}
    raise JitterdError(method, str(error.get("code", "unknown")), str(error.get("message", reply)),
                       error.get("where"), error.get("hint"), reply)


class Client:
    """A connection to jitterd's control socket; one request at a time (use one Client per thread).

    socket_path: the socket (default $JITTERD_SOCKET, else /run/jitterd/jitterd.sock).
    timeout: seconds to wait for each reply (None: for ever).
    """

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0) -> None:
        self.socket_path = socket_path or os.environ.get("JITTERD_SOCKET") or DEFAULT_SOCKET
        self.timeout = timeout
        self._connection: Optional[_Connection] = None

    # -- the connection ---------------------------------------------------------------------------

    def call(self, method: str, **params: Any) -> Any:
        """Any method by name, with its params as keywords; returns the reply's result."""
        if self._connection is None:
            self._connection = _Connection(self.socket_path, self.timeout)
        try:
            return self._connection.call(method, params)
        except (OSError, ValueError):
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the methods (docs/protocol.md) -------------------------------------------------------------

    def list_commands(self) -> List[dict]:
        return self.call("list-commands")["commands"]

    def version(self) -> dict:
        return self.call("version")

    def interfaces(self) -> List[dict]:
        return self.call("interfaces")["interfaces"]

    def profiles(self) -> dict:
        """{"profiles": [...], "invalid": [...]}: the profile folders' profiles."""
        return self.call("profiles")

    def apply(self, interface: str, profile: Union[str, dict], *, phase: Optional[str] = None,
              schedule: Optional[bool] = None, direction: Optional[str] = None,
              rule_set: Optional[str] = None, match: Optional[Sequence[dict]] = None,
              confirm: Optional[Duration] = None, offloads: Optional[str] = None,
              protect_ssh: Optional[bool] = None, ssh_connection: Optional[str] = None,
              start: Optional[str] = None, lease: Optional[Duration] = None,
              force: Optional[bool] = None) -> dict:
        """Shapes `interface` with `profile` (a name in jitterd's profile folders, or a profile
        object). `rule_set` is the protocol's `set`. Returns the status, or {"sessions": [...]}
        for direction "both"."""
        return self.call("apply", **_params(
            interface=interface, profile=profile, phase=phase, schedule=schedule,
            direction=direction, set=rule_set, match=list(match) if match is not None else None,
            confirm=_duration(confirm) if confirm is not None else None, offloads=offloads,
            protect_ssh=protect_ssh, ssh_connection=ssh_connection, start=start,
            lease=_duration(lease) if lease is not None else None, force=force))

    def switch(self, interface: str, phase: str, *, at: Optional[str] = None,
               direction: Optional[str] = None, rule_set: Optional[str] = None) -> dict:
        return self.call("switch", **_params(interface=interface, phase=phase, at=at,
                                             direction=direction, set=rule_set))

    def pause(self, interface: str, *, direction: Optional[str] = None,
              rule_set: Optional[str] = None) -> dict:
        return self.call("pause", **_params(interface=interface, direction=direction, set=rule_set))

    def resume(self, interface: str, *, direction: Optional[str] = None,
               rule_set: Optional[str] = None) -> dict:
        return self.call("resume", **_params(interface=interface, direction=direction, set=rule_set))

    def skip(self, interface: str, *, phase: Optional[str] = None, step: Optional[int] = None,
             direction: Optional[str] = None, rule_set: Optional[str] = None) -> dict:
        return self.call("skip", **_params(interface=interface, phase=phase, step=step,
                                           direction=direction, set=rule_set))

    def status(self, interface: Optional[str] = None) -> List[dict]:
        """Every session's status, or those of `interface`."""
        return self.call("status", **_params(interface=interface))["sessions"]

    def clear(self, interface: Optional[str] = None, *, everything: bool = False,
              direction: Optional[str] = None, rule_set: Optional[str] = None) -> List[str]:
        """Removes what jitterd installed on `interface` (or on every interface: everything=True);
        returns the interfaces cleared."""
        if (interface is None) == (not everything):
            raise TypeError("clear takes an interface or everything=True (exactly one)")
        params = _params(interface=interface, direction=direction, set=rule_set)
        if everything:
            params["all"] = True
        return self.call("clear", **params)["cleared"]

    def confirm(self, interface: str, *, direction: Optional[str] = None,
                rule_set: Optional[str] = None) -> dict:
        return self.call("confirm", **_params(interface=interface, direction=direction, set=rule_set))

    def renew(self, interface: str, lease: Optional[Duration] = None, *,
              direction: Optional[str] = None, rule_set: Optional[str] = None) -> dict:
        return self.call("renew", **_params(
            interface=interface, lease=_duration(lease) if lease is not None else None,
            direction=direction, set=rule_set))

    def metrics(self) -> str:
        """Prometheus text exposition."""
        return self.call("metrics")["text"]

    def subscribe(self, interfaces: Optional[Sequence[str]] = None,
                  events: Optional[Sequence[str]] = None) -> "EventStream":
        """Events on a connection of their own (this Client stays free for requests)."""
        return EventStream(self.socket_path, interfaces, events)


class EventStream:
    """An iterator over jitterd's events (dicts with "event", "seq", "interface", "at", ...), read
    from a connection of its own until it is closed. Close it (or use it as a context manager) to
    stop."""

    def __init__(self, socket_path: str, interfaces: Optional[Sequence[str]] = None,
                 events: Optional[Sequence[str]] = None) -> None:
        self._connection = _Connection(socket_path, None)
        try:
            self._connection.call("subscribe", _params(
                interfaces=list(interfaces) if interfaces is not None else None,
                events=list(events) if events is not None else None))
        except BaseException:
            self._connection.close()
            raise

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        if self._connection.pending_events:
            return self._connection.pending_events.pop(0)
        try:
            while True:
                message = self._connection.read()
                if "event" in message:
                    return message
        except (ConnectionClosed, OSError, ValueError):
            raise StopIteration from None

    def close(self) -> None:
        try:
            self._connection.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._connection.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Timeline:
    """Which phase was in force on a lane at a CLOCK_MONOTONIC time, from its events.

    A change took effect somewhere between (at - apply_ns) and at: jitterd sent it, then the kernel
    acknowledged it. A time inside that window is SWITCHING; before the first phase, BEFORE_APPLY;
    after the session ended, UNSHAPED. time.monotonic_ns() on the same host compares directly.
    """

    def __init__(self, events: Sequence[Event] = ()) -> None:
        self.changes: List[tuple] = []  # (window start, window end, phase or None), in order
        for event in sorted(events, key=lambda e: e["seq"]):
            self.add(event)

    def add(self, event: Event) -> None:
        at = event["at"]["monotonic_ns"]
        kind = event["event"]
        if kind in ("applied", "phase-changed"):
            self.changes.append((at - event.get("apply_ns", 0), at, event["phase"]))
        elif kind == "cleared" and event.get("reason") == "replaced":
            return  # another apply took over in place: its `applied` came first
        elif kind in _ENDING_EVENTS or (kind == "external-change" and event.get("ended")):
            self.changes.append((at, at, None))

    def tag(self, t: int) -> str:
        current = BEFORE_APPLY
        for window_start, window_end, phase in self.changes:
            if t < window_start:
                break
            if t <= window_end:
                return SWITCHING
            current = phase if phase is not None else UNSHAPED
        return current

    def tag_span(self, start: int, end: int) -> str:
        """The phase in force from start to end, or SWITCHING when a change overlaps them."""
        for window_start, window_end, _ in self.changes:
            if window_start <= end and window_end >= start:
                return SWITCHING
        return self.tag(start)

    def time_in(self, phase: str, end: int) -> float:
        """Seconds `phase` was in force until `end`: from each change to it (acknowledged) to the
        next change's request, or `end`."""
        total = 0
        for i, (_, window_end, p) in enumerate(self.changes):
            if p == phase:
                until = min(self.changes[i + 1][0], end) if i + 1 < len(self.changes) else end
                total += max(0, until - window_end)
        return total / 1e9


class ShapedLink:
    """What shaped() yields: the lane it applied, its phase timeline, and its requests."""

    def __init__(self, client: Client, interface: str, direction: Optional[str],
                 rule_set: Optional[str], status: Any) -> None:
        self.client = client
        self.interface = interface
        self.direction = direction
        self.rule_set = rule_set
        self.applied = status
        self.timeline = Timeline()
        self._lock = threading.Lock()

    def _lane(self) -> dict:
        return {"direction": self.direction, "rule_set": self.rule_set}

    def switch(self, phase: str, at: Optional[str] = None) -> dict:
        return self.client.switch(self.interface, phase, at=at, **self._lane())

    def pause(self) -> dict:
        return self.client.pause(self.interface, **self._lane())

    def resume(self) -> dict:
        return self.client.resume(self.interface, **self._lane())

    def skip(self, phase: Optional[str] = None, step: Optional[int] = None) -> dict:
        return self.client.skip(self.interface, phase=phase, step=step, **self._lane())

    def status(self) -> List[dict]:
        return self.client.status(self.interface)

    def phase_at(self, t: int) -> str:
        """The phase in force at CLOCK_MONOTONIC time t (ns), or SWITCHING, BEFORE_APPLY, UNSHAPED."""
        with self._lock:
            return self.timeline.tag(t)

    def phase_during(self, start: int, end: int) -> str:
        with self._lock:
            return self.timeline.tag_span(start, end)

    def _add(self, event: Event) -> None:
        with self._lock:
            self.timeline.add(event)

    def _ended(self) -> bool:
        with self._lock:
            return bool(self.timeline.changes) and self.timeline.changes[-1][2] is None


@contextmanager
def shaped(interface: str, profile: Union[str, dict], *, lease: Duration = "10s",
           socket_path: Optional[str] = None, direction: Optional[str] = None,
           rule_set: Optional[str] = None, **apply_params: Any) -> Iterator[ShapedLink]:
    """Shapes `interface` with `profile` for the block: applies with a lease, renews it every third
    of the lease while the block runs (so a harness that dies leaves nothing behind once the lease
    runs out), follows the lane's events into link.timeline, and clears the lane on exit, also on an
    exception or Ctrl-C. Other apply parameters (phase, schedule, match, start...) pass through."""
    client = Client(socket_path)
    # renew and clear name one direction or neither (both lanes), never "both".
    lane_direction = direction if direction != "both" else None
    stream = client.subscribe(interfaces=[interface])
    stop = threading.Event()
    threads: List[threading.Thread] = []
    link: Optional[ShapedLink] = None
    try:
        status = client.apply(interface, profile, lease=lease, direction=direction,
                              rule_set=rule_set, **apply_params)
        link = ShapedLink(client, interface, direction, rule_set, status)

        def follow(target: ShapedLink) -> None:
            for event in stream:
                same_direction = direction in (None, "both") or event.get("direction") in (None, direction)
                if same_direction and (rule_set is None or event.get("set") == rule_set):
                    target._add(event)

        def renew() -> None:
            renewer = Client(client.socket_path)
            try:
                while not stop.wait(max(_seconds(lease) / 3, 0.05)):
                    renewer.renew(interface, lease, direction=lane_direction,
                                  rule_set=rule_set)
            except (JitterdError, OSError):
                pass  # the session ended (cleared, lease expired): nothing left to renew
            finally:
                renewer.close()

        threads = [threading.Thread(target=follow, args=(link,), daemon=True, name="jitterd-events"),
                   threading.Thread(target=renew, daemon=True, name="jitterd-renew")]
        for thread in threads:
            thread.start()
        yield link
    finally:
        stop.set()
        try:
            client.clear(interface, direction=lane_direction,
                         rule_set=rule_set)
        except JitterdError as e:
            if e.code != "not-found":  # already gone (lease expired, interface deleted)
                raise
        finally:
            # Let the lane's last event (cleared) reach the timeline before the stream closes.
            deadline = time.monotonic() + 0.5
            while link is not None and not link._ended() and time.monotonic() < deadline:
                time.sleep(0.01)
            stream.close()
            for thread in threads:
                thread.join(timeout=2)
            client.close()
