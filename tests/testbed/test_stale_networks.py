"""A testbed killed with SIGKILL leaves namespaces with processes inside; the next one sweeps them.

Made for real: a network namespace and veth pair named for a testbed id, a process running
inside it (as an in-cluster loop would, reparented to init once its testbed died), and the claim
a live testbed holds. Only leftovers of testbeds without a claim go.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator

import pytest

from pulumi_lora.testing.testbed._netns import (
    NetworkClaim,
    allocate_pod_network,
    existing_namespaces,
    remove_testbed_networks,
    sweep_stale_networks,
)
from pulumi_lora.testing.testbed._netns import (
    testbed_links as links_of,
)
from pulumi_lora.testing.testbed._process import alive


def orphan_inside(namespace: str) -> int:
    """A process left running inside ``namespace`` whose parent is gone (reparented to init)."""
    started = subprocess.run(
        ["sh", "-c", f"ip netns exec {namespace} sleep 600 >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pid = started.stdout.strip()
    deadline = time.monotonic() + 10
    while pid not in pids_in(namespace):
        assert time.monotonic() < deadline, f"no process appeared in {namespace}"
        time.sleep(0.02)
    return int(pid)


def pids_in(namespace: str) -> list[str]:
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    return done.stdout.split()


@pytest.fixture
def testbed_ids(netns_required: None) -> Iterator[list[str]]:
    """Fresh testbed ids; whatever a test leaves under them is removed at its end."""
    ids: list[str] = []
    yield ids
    for testbed_id in ids:
        remove_testbed_networks(testbed_id)


def test_a_dead_testbeds_namespaces_and_processes_are_swept(testbed_ids: list[str]) -> None:
    dead, live = secrets.token_hex(3), secrets.token_hex(3)
    testbed_ids += [dead, live]
    claim = NetworkClaim(live)
    try:
        dead_net, live_net = allocate_pod_network(dead, 0), allocate_pod_network(live, 0)
        dead_pid, live_pid = orphan_inside(dead_net.namespace), orphan_inside(live_net.namespace)

        removed = sweep_stale_networks()

        assert dead_net.namespace in removed  # its veth pair went with it
        assert f"pid {dead_pid}" in removed
        assert dead_net.namespace not in existing_namespaces() and not links_of(dead)
        deadline = time.monotonic() + 10
        while alive(dead_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(dead_pid)
        # The live testbed's namespace, link and process are untouched.
        assert not [r for r in removed if live in r or r == f"pid {live_pid}"]
        assert live_net.namespace in existing_namespaces() and alive(live_pid)
    finally:
        claim.release()
    # Once its claim is dropped, that testbed's leftovers are swept too.
    assert live_net.namespace in sweep_stale_networks()
    assert live_net.namespace not in existing_namespaces()
