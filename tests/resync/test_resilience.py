"""The loop survives the apiserver going away, elects one leader, and shuts down cleanly."""

from __future__ import annotations

import json
import time

import pytest
from _resync_harness import Cluster, LoopProcess, emulator, everywhere, served, wait_until
from conftest import TEST_LEASE, Identity, LoopFactory

from pulumi_lora._resync._settings import DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE


@pytest.mark.parametrize(
    "lease",
    [
        pytest.param(
            {
                "--lease-duration": str(DEFAULT_LEASE_DURATION),
                "--lease-renew-deadline": str(DEFAULT_RENEW_DEADLINE),
            },
            id="default-lease-keeps-it",
        ),
        pytest.param({}, id="loses-lease"),
    ],
)
def test_the_loop_recovers_from_an_apiserver_restart(
    cluster: Cluster, loops: LoopFactory, lease: dict[str, str]
) -> None:
    """The apiserver drains for 15 s on SIGTERM (the testbed then kills it) and comes back.

    With the default Lease (its 30 s renew deadline outlives the outage) the leader keeps acting
    and its watches must resume (re-watch, then 410 → relist → diff); with the tests' 3 s Lease
    it stops acting within the renew deadline and starts over as leader once the apiserver
    answers again. Either way a pod restarted during the outage, and a CR created after it, are
    handled.
    """
    handle = cluster.deploy(replicas=2)
    a = cluster.tb.make_adapter("sql-a")
    cluster.apply_cr("sql-a", a)
    loop = loops(cluster.namespace, **lease)
    wait_until(lambda: everywhere(handle, {"sql-a": a}), 20)

    victim = handle.pods()[0].name
    cluster.tb.stop_apiserver()
    try:
        cluster.tb.restart_pod(cluster.namespace, victim)  # its status reaches the API later
    finally:
        cluster.tb.start_apiserver()
    wait_until(lambda: handle.pod(victim).ready, 30)
    wait_until(
        lambda: served(handle).get(victim) == {"sql-a": a}, 30, what="the restart seen after"
    )
    b = cluster.tb.make_adapter("sql-b")
    cluster.apply_cr("sql-b", b)
    wait_until(lambda: everywhere(handle, {"sql-a": a, "sql-b": b}), 20, what="a CR made after")
    wait_until(lambda: cluster.conditions("sql-b").get("Loaded", {}).get("status") == "True", 10)
    assert loop.proc.poll() is None
    if lease:
        assert not loop.events("leadership_lost")
        assert loop.events("watch_broken", action="relist"), "no relist after the outage"
        assert loop.wait_event("pod_synced", reason="restart", pod=f"{cluster.namespace}/{victim}")
        assert loop.metric("pulumi_lora_resync_watch_restarts_total", action="relist") >= 1
    else:
        assert loop.events("leadership_lost") and loop.events("stopped_acting")
        assert len(loop.events("leadership_acquired")) == 2
        assert len(loop.events("caches_synced")) == 2


def _holder(cluster: Cluster, identity: Identity) -> str | None:
    done = cluster.tb.kubectl("get", "lease", TEST_LEASE, "-n", identity.namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    holder: str | None = json.loads(done.stdout)["spec"].get("holderIdentity")
    return holder


def _identity_of(loop: LoopProcess) -> str:
    return str(loop.events("serving")[0]["identity"])


def test_only_the_leader_acts_and_a_standby_takes_over(
    cluster: Cluster, loops: LoopFactory, resync_identity: Identity
) -> None:
    handle = cluster.deploy(replicas=2)
    a = cluster.tb.make_adapter("sql-a")
    cluster.apply_cr("sql-a", a)
    first = loops(cluster.namespace)
    first.wait_event("leadership_acquired")
    second = loops(cluster.namespace)
    wait_until(lambda: second.get("/readyz").text.strip() == "standby", 10)
    assert first.get("/readyz").text.strip() == "leader"
    assert _holder(cluster, resync_identity) == _identity_of(first)
    wait_until(lambda: everywhere(handle, {"sql-a": a}), 20)

    cluster.tb.restart_pod(cluster.namespace, handle.pods()[0].name)
    wait_until(lambda: everywhere(handle, {"sql-a": a}), 30, what="re-loaded after a restart")
    assert first.metric("pulumi_lora_resync_loads_total", reason="restart") == 1
    assert second.metric("pulumi_lora_resync_loads_total") == 0
    assert second.metric("pulumi_lora_resync_reloads_total") == 0
    assert second.metric("pulumi_lora_resync_leader") == 0

    # A clean shutdown releases the Lease: the standby takes over at its next round, without
    # waiting for it to expire.
    assert first.stop() == 0
    assert first.events("lease_released")
    assert _holder(cluster, resync_identity) in (None, _identity_of(second))
    second.wait_event("leadership_acquired", timeout=10)
    assert not second.events("lease_taken_over", previous=_identity_of(first))
    cluster.tb.restart_pod(cluster.namespace, handle.pods()[1].name)
    wait_until(lambda: everywhere(handle, {"sql-a": a}), 30, what="the new leader re-loading")
    assert second.metric("pulumi_lora_resync_loads_total", reason="restart") == 1

    # A crash can't release it: the next standby waits for the Lease to expire (3 s here).
    third = loops(cluster.namespace)
    wait_until(lambda: third.get("/readyz").text.strip() == "standby", 10)
    second.kill()
    crashed = time.monotonic()
    third.wait_event("leadership_acquired", timeout=20)
    assert time.monotonic() - crashed > 2.5  # the 3 s Lease had to expire first
    assert third.events("lease_taken_over", previous=_identity_of(second))
    assert _holder(cluster, resync_identity) == _identity_of(third)
    cluster.tb.restart_pod(cluster.namespace, handle.pods()[0].name)
    wait_until(lambda: everywhere(handle, {"sql-a": a}), 30, what="the third leader re-loading")


def test_sigterm_finishes_the_load_in_flight_then_releases_the_lease(
    cluster: Cluster, loops: LoopFactory, resync_identity: Identity
) -> None:
    handle = cluster.deploy(
        replicas=1, emulator_args=("--emulator-latency", "/load_lora_adapter=1.5")
    )
    loop = loops(cluster.namespace)
    loop.wait_event("caches_synced")
    a = cluster.tb.make_adapter("slow")
    cluster.apply_cr("slow", a)
    pod = handle.pods()[0]
    wait_until(lambda: emulator(pod.url, "GET", "/_emulator/state")["updating"], 5, what="a load")
    assert served(handle) == {handle.pods()[0].name: {}}
    assert loop.stop() == 0
    assert everywhere(handle, {"slow": a}), "the in-flight load was cut short"
    assert loop.events("drained")[-1]["in_flight_left"] == 0
    assert cluster.conditions("slow")["Loaded"]["status"] == "True"  # its status was written too
    assert _holder(cluster, resync_identity) is None
    assert loop.events("lease_released")
