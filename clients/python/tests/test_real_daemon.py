"""The client against the real jitterd, in examples/sandbox (two network namespaces joined by a
veth, jitterd allowed to shape the client's end, redis-server on the other side; in the VM test
bed where this kernel has no netem):

    examples/sandbox -- /usr/bin/python3 -m pytest -p pytester clients/python/tests

(tests/examples runs it so, as ctest examples.python). Skipped without the sandbox's environment.
The round trip of a TCP connect to redis-server is the independent reader of the shaping."""

import os
import socket
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import jitterd  # noqa: E402

SOCKET = os.environ.get("JITTERD_SOCKET")
INTERFACE = os.environ.get("JITTERD_INTERFACE")
REDIS = (os.environ.get("REDIS_HOST"), int(os.environ.get("REDIS_PORT", "6379")))
PROFILE = "redis-phases"  # examples/redis-phases.json: steady 2 ms, slow 12 ms, jittery 12 ms ± 8

pytestmark = pytest.mark.skipif(
    not (SOCKET and INTERFACE and REDIS[0]),
    reason="needs examples/sandbox (JITTERD_SOCKET, JITTERD_INTERFACE, REDIS_HOST)")


def connect_ms():
    """The fastest of 9 TCP connects to redis-server: one round trip each, through the shaped link.
    The minimum, not the median: the guest's own delays only add (on a slow host the median of the
    2 ms phase came out 6.8 ms, the 12 ms phase 13.4 ms)."""
    times = []
    for _ in range(9):
        start = time.monotonic_ns()
        with socket.create_connection(REDIS, timeout=5):
            times.append((time.monotonic_ns() - start) / 1e6)
    return min(times)


@pytest.fixture
def client():
    c = jitterd.Client(SOCKET)
    yield c
    try:
        c.clear(everything=True)
    except jitterd.JitterdError:
        pass
    c.close()


def test_version_interfaces_profiles(client):
    assert client.version()["protocol"] == 1
    assert {c["name"] for c in client.list_commands()} >= {"apply", "switch", "status", "clear"}
    assert INTERFACE in {i["name"] for i in client.interfaces() if i["allowed"]}
    assert PROFILE in {p["name"] for p in client.profiles()["profiles"]}


def test_apply_switch_status_clear_are_seen_on_the_link(client):
    client.apply(INTERFACE, PROFILE, phase="steady")
    steady = connect_ms()
    status = client.switch(INTERFACE, "slow")
    assert status["phase"] == "slow"
    slow = connect_ms()
    assert slow - steady > 7, (steady, slow)  # 12 ms against 2 ms, one way
    [session] = client.status(INTERFACE)
    assert session["profile"] == PROFILE and session["phase"] == "slow"
    assert client.clear(INTERFACE) == [INTERFACE]
    assert client.status() == []
    assert connect_ms() < steady


def test_refusals_carry_code_where_and_hint(client):
    client.apply(INTERFACE, PROFILE, phase="steady")
    with pytest.raises(jitterd.JitterdError) as caught:
        client.switch(INTERFACE, "no-such-phase")
    assert caught.value.code == "not-found"
    assert caught.value.where == "/params/phase"
    assert "slow" in caught.value.hint
    with pytest.raises(jitterd.JitterdError) as caught:
        client.apply("eth-not-allowed", PROFILE)
    assert caught.value.code in ("permission-denied", "not-found")


def test_shaped_renews_its_lease_tags_phases_and_clears(client):
    with client.subscribe(interfaces=[INTERFACE]) as events:
        with jitterd.shaped(INTERFACE, PROFILE, lease="1s", socket_path=SOCKET, phase="steady") as link:
            time.sleep(2.5)  # past the lease: only the renewals keep it
            assert client.status(INTERFACE)[0]["phase"] == "steady"
            before = time.monotonic_ns()
            link.switch("slow")
            after = time.monotonic_ns()
            time.sleep(0.2)
            assert link.phase_at(before - 1) == "steady"
            assert link.phase_at(after + 1) == "slow"
        assert client.status() == []
        seen = []
        for event in events:
            seen.append(event["event"])
            if event["event"] == "cleared":
                break
    assert seen[0] == "applied" and "phase-changed" in seen and "lease-expired" not in seen


def test_shaped_clears_on_an_exception(client):
    with pytest.raises(RuntimeError):
        with jitterd.shaped(INTERFACE, PROFILE, socket_path=SOCKET, phase="slow"):
            assert client.status(INTERFACE)[0]["phase"] == "slow"
            raise RuntimeError("the harness failed")
    assert client.status() == []


def test_the_pytest_plugin_shapes_a_test_and_reports_its_phases(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.jitterd(interface=%r, profile=%r, phase="slow")
        def test_inner(jitterd_link, jitterd_client):
            [session] = jitterd_client.status(%r)
            assert session["phase"] == "slow"
            jitterd_link.switch("jittery")
        """ % (INTERFACE, PROFILE, INTERFACE))
    result = pytester.runpytest_inprocess("-p", "jitterd.pytest_plugin", "--jitterd-socket", SOCKET,
                                          "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    report = (pytester.path / "report.xml").read_text()
    assert 'name="jitterd_phases"' in report and "slow" in report and "jittery" in report
    assert jitterd.Client(SOCKET).status() == []
