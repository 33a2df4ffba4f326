"""The client against a fake jitterd on a Unix socket: what each method sends, how replies, errors
and events come back, and what shaped() does around a block (protocol tests; the real daemon is
test_real_daemon.py's). Standard library only: runs under pytest or `python3 -m unittest`."""

import datetime
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import jitterd  # noqa: E402


class FakeJitterd:
    """Answers each request line with handler(method, params) -> result, or raises FakeError for an
    error reply; records every request. Subscribed connections get the events given to emit()."""

    class Error(Exception):
        def __init__(self, code, message, where=None, hint=None):
            super().__init__(message)
            self.error = {"code": code, "message": message}
            if where:
                self.error["where"] = where
            if hint:
                self.error["hint"] = hint

    def __init__(self, handler):
        self.handler = handler
        self.requests = []
        self.subscribers = []
        self.lock = threading.Lock()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "jitterd.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                request = json.loads(line)
                method, params = request["method"], request.get("params", {})
                with self.lock:
                    self.requests.append((method, params))
                try:
                    result = self.handler(method, params)
                    reply = {"id": request.get("id"), "ok": True, "result": result}
                except FakeJitterd.Error as e:
                    reply = {"id": request.get("id"), "ok": False, "error": e.error}
                if method == "subscribe":
                    reply["result"] = {"subscribed": True}
                    with self.lock:
                        self.subscribers.append(conn)
                try:
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    return

    def emit(self, event):
        line = (json.dumps(event) + "\n").encode()
        with self.lock:
            for conn in list(self.subscribers):
                try:
                    conn.sendall(line)
                except OSError:
                    self.subscribers.remove(conn)

    def calls(self, method):
        with self.lock:
            return [params for m, params in self.requests if m == method]

    def close(self):
        self.server.close()
        self.dir.cleanup()


def stamp(monotonic_ns):
    return {"monotonic_ns": monotonic_ns, "realtime_ns": monotonic_ns}


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.replies = {}
        self.fake = FakeJitterd(self.handle)
        self.client = jitterd.Client(self.fake.path, timeout=5)

    def tearDown(self):
        self.client.close()
        self.fake.close()

    def handle(self, method, params):
        reply = self.replies.get(method, {})
        if isinstance(reply, Exception):
            raise reply
        return reply(params) if callable(reply) else reply

    def test_every_method_sends_its_params_and_returns_its_result(self):
        self.replies = {
            "list-commands": {"commands": [{"name": "apply"}]},
            "version": {"protocol": 1},
            "interfaces": {"interfaces": [{"name": "veth0"}]},
            "profiles": {"profiles": [], "invalid": []},
            "status": {"sessions": [{"interface": "veth0"}]},
            "clear": {"cleared": ["veth0"]},
            "metrics": {"text": "# HELP x\n"},
        }
        c = self.client
        self.assertEqual(c.list_commands(), [{"name": "apply"}])
        self.assertEqual(c.version(), {"protocol": 1})
        self.assertEqual(c.interfaces(), [{"name": "veth0"}])
        self.assertEqual(c.profiles(), {"profiles": [], "invalid": []})
        c.apply("veth0", "wifi", phase="high", direction="ingress", rule_set="redis",
                match=[{"dst_port": 6379}], lease="30s", confirm=datetime.timedelta(seconds=2),
                protect_ssh=False, start="+1s")
        c.switch("veth0", "low", at="+2s")
        c.pause("veth0")
        c.resume("veth0", direction="egress")
        c.skip("veth0", step=3)
        self.assertEqual(c.status(), [{"interface": "veth0"}])
        c.status("veth0")
        self.assertEqual(c.clear("veth0"), ["veth0"])
        c.clear(everything=True)
        c.confirm("veth0")
        c.renew("veth0", 5_000_000_000)
        self.assertEqual(c.metrics(), "# HELP x\n")
        self.assertEqual(self.fake.calls("apply"), [{
            "interface": "veth0", "profile": "wifi", "phase": "high", "direction": "ingress",
            "set": "redis", "match": [{"dst_port": 6379}], "lease": "30s", "confirm": 2_000_000_000,
            "protect_ssh": False, "start": "+1s"}])
        self.assertEqual(self.fake.calls("switch"), [{"interface": "veth0", "phase": "low", "at": "+2s"}])
        self.assertEqual(self.fake.calls("resume"), [{"interface": "veth0", "direction": "egress"}])
        self.assertEqual(self.fake.calls("skip"), [{"interface": "veth0", "step": 3}])
        self.assertEqual(self.fake.calls("status"), [{}, {"interface": "veth0"}])
        self.assertEqual(self.fake.calls("clear"), [{"interface": "veth0"}, {"all": True}])
        self.assertEqual(self.fake.calls("renew"), [{"interface": "veth0", "lease": 5_000_000_000}])
        # One connection for every request.
        self.assertEqual(len(self.fake.requests), 16)

    def test_refusals_are_exceptions_with_the_reply_members(self):
        self.replies["switch"] = FakeJitterd.Error("not-found", 'phase "hgih" is not in profile "wifi"',
                                                   "/params/phase", "phases: high, low")
        with self.assertRaises(jitterd.JitterdError) as caught:
            self.client.switch("veth0", "hgih")
        e = caught.exception
        self.assertEqual((e.method, e.code, e.where, e.hint), ("switch", "not-found", "/params/phase",
                                                               "phases: high, low"))
        self.assertIn('switch: not-found: phase "hgih" is not in profile "wifi" (at /params/phase); '
                      "hint: phases: high, low", str(e))
        # The connection is still good.
        self.replies["version"] = {"protocol": 1}
        self.assertEqual(self.client.version(), {"protocol": 1})

    def test_bad_arguments_are_refused_before_sending(self):
        with self.assertRaises(TypeError):
            self.client.clear()
        with self.assertRaises(TypeError):
            self.client.clear("veth0", everything=True)
        with self.assertRaises(TypeError):
            self.client.renew("veth0", 1.5)
        self.assertEqual(self.fake.requests, [])

    def test_a_missing_daemon_is_an_os_error_naming_nothing_else(self):
        client = jitterd.Client(os.path.join(self.fake.dir.name, "none.sock"))
        with self.assertRaises(FileNotFoundError):
            client.version()

    def test_events_arrive_on_their_own_connection(self):
        with self.client.subscribe(interfaces=["veth0"], events=["phase-changed"]) as events:
            self.assertEqual(self.fake.calls("subscribe"), [{"interfaces": ["veth0"],
                                                             "events": ["phase-changed"]}])
            self.fake.emit({"event": "phase-changed", "seq": 1, "interface": "veth0", "phase": "a",
                            "at": stamp(5)})
            self.assertEqual(next(events)["phase"], "a")

    def test_timeline_tags_times_with_the_phase_in_force(self):
        timeline = jitterd.Timeline([
            {"event": "applied", "seq": 1, "phase": "a", "at": stamp(100), "apply_ns": 10},
            {"event": "phase-changed", "seq": 2, "phase": "b", "at": stamp(200), "apply_ns": 20},
            {"event": "cleared", "seq": 3, "reason": "request", "at": stamp(300)},
        ])
        self.assertEqual(timeline.tag(50), jitterd.BEFORE_APPLY)
        self.assertEqual(timeline.tag(95), jitterd.SWITCHING)
        self.assertEqual(timeline.tag(150), "a")
        self.assertEqual(timeline.tag(185), jitterd.SWITCHING)
        self.assertEqual(timeline.tag(250), "b")
        self.assertEqual(timeline.tag(301), jitterd.UNSHAPED)
        self.assertEqual(timeline.tag_span(150, 190), jitterd.SWITCHING)
        self.assertEqual(timeline.tag_span(210, 290), "b")
        # a: from its acknowledgement (100) to b's request (180); b: from 200 to the end (300).
        self.assertEqual(timeline.time_in("a", 1000), 80 / 1e9)
        self.assertEqual(timeline.time_in("b", 1000), 100 / 1e9)


class ShapedTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeJitterd(self.handle)
        self.cleared = threading.Event()

    def tearDown(self):
        self.fake.close()

    def handle(self, method, params):
        if method == "apply":
            self.fake_emit_later({"event": "applied", "seq": 1, "interface": "veth0", "phase": "a",
                                  "direction": "egress", "set": None, "at": stamp(time.monotonic_ns()),
                                  "apply_ns": 1000})
            return {"interface": "veth0", "phase": "a"}
        if method == "clear":
            self.fake_emit_later({"event": "cleared", "seq": 9, "interface": "veth0", "reason": "request",
                                  "direction": "egress", "set": None, "at": stamp(time.monotonic_ns())})
            self.cleared.set()
            return {"cleared": ["veth0"]}
        return {"interface": params.get("interface")}

    def fake_emit_later(self, event):
        threading.Timer(0.01, self.fake.emit, args=(event,)).start()

    def test_applies_with_a_lease_renews_it_and_clears_after_the_block(self):
        with jitterd.shaped("veth0", "wifi", lease="300ms", socket_path=self.fake.path,
                            phase="a") as link:
            time.sleep(0.5)
            link.switch("b")
            self.assertEqual(self.fake.calls("apply"), [{"interface": "veth0", "profile": "wifi",
                                                         "lease": "300ms", "phase": "a"}])
            self.assertGreaterEqual(len(self.fake.calls("renew")), 2)  # every 100 ms
            self.assertEqual(self.fake.calls("renew")[0], {"interface": "veth0", "lease": "300ms"})
            self.assertEqual(link.phase_at(time.monotonic_ns()), "a")
        self.assertTrue(self.cleared.is_set())
        self.assertEqual(self.fake.calls("clear"), [{"interface": "veth0"}])
        self.assertEqual(link.phase_at(time.monotonic_ns() + 1), jitterd.UNSHAPED)
        renewals = len(self.fake.calls("renew"))
        time.sleep(0.3)
        self.assertEqual(len(self.fake.calls("renew")), renewals)  # renewing stopped

    def test_clears_when_the_block_raises_or_is_interrupted(self):
        for error in (RuntimeError("harness failed"), KeyboardInterrupt()):
            self.cleared.clear()
            with self.assertRaises(type(error)):
                with jitterd.shaped("veth0", "wifi", socket_path=self.fake.path):
                    raise error
            self.assertTrue(self.cleared.is_set(), type(error).__name__)


if __name__ == "__main__":
    unittest.main()
