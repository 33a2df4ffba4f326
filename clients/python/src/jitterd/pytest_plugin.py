"""pytest plugin for jitterd (registered through the pytest11 entry point when the package is
installed; or `-p jitterd.pytest_plugin`).

    import time, pytest

    @pytest.mark.jitterd(interface="veth0", profile="lab-regimes", phase="regime-2")
    def test_get_latency(jitterd_link):
        sent = time.monotonic_ns()
        ...                                   # one request through the shaped link
        record(latency, jitterd_link.phase_at(sent))

The marker takes shaped()'s arguments (interface, profile, lease, phase, schedule, direction,
rule_set, match, ...). `jitterd_link` applies them for the test, with a lease that it renews, and
clears the lane afterwards whatever the test did; the phases the test ran under go into its report
as the user property "jitterd_phases". `jitterd_client` is a plain Client.

Options: --jitterd-socket PATH (default $JITTERD_SOCKET, else /run/jitterd/jitterd.sock).
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from . import Client, ShapedLink, shaped


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("jitterd")
    group.addoption("--jitterd-socket", default=None,
                    help="jitterd's control socket (default $JITTERD_SOCKET, else "
                         "/run/jitterd/jitterd.sock)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "jitterd(interface, profile, **apply): shape a link with jitterd for the test "
                   "(fixture jitterd_link)")


@pytest.fixture
def jitterd_client(request: Any) -> Iterator[Client]:
    client = Client(request.config.getoption("--jitterd-socket"))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def jitterd_link(request: Any, record_property: Any) -> Iterator[ShapedLink]:
    marker = request.node.get_closest_marker("jitterd")
    if marker is None:
        raise pytest.UsageError(
            "jitterd_link needs @pytest.mark.jitterd(interface=..., profile=...) on the test")
    arguments = dict(marker.kwargs)
    for position, name in enumerate(("interface", "profile")):
        if position < len(marker.args):
            arguments[name] = marker.args[position]
    missing = [name for name in ("interface", "profile") if name not in arguments]
    if missing:
        raise pytest.UsageError("@pytest.mark.jitterd needs %s" % " and ".join(missing))
    arguments.setdefault("socket_path", request.config.getoption("--jitterd-socket"))
    with shaped(arguments.pop("interface"), arguments.pop("profile"), **arguments) as link:
        try:
            yield link
        finally:
            record_property("jitterd_phases",
                            [phase for _, _, phase in link.timeline.changes if phase is not None])
