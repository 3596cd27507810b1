"""The loop's rolling swap behind the readiness gate (issue 54, item 3, ``_resync._drain``): a
``delegated`` adapter's new revision goes on gated pods one at a time, each out of rotation
first, and a bad revision is rolled back (``_resync._reverts``); requests sent as kube-proxy
sends them see no failure through either. The loop runs as the identity
``resync_manifests(readiness_gate=True, watch_namespace=NS)`` renders (its Role gains ``list`` on
``endpointslices``)."""

from __future__ import annotations

import re
import time

import pytest
from _resync_harness import Cluster, everywhere, wait_until
from conftest import Identity, LoopFactory
from test_readiness_gate import PORT, condition, gate_identity, pod_json

from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._errors import SwapRolledBack
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora.testing.audit import audited
from pulumi_lora.testing.traffic import Traffic, sampled
from tests.e2e.conftest import adapter_props, provider_for

__all__ = ["gate_identity"]  # the fixture, shared with test_readiness_gate


def test_the_loop_swaps_a_delegated_adapter_pod_by_pod_and_rolls_back_a_bad_revision(
    cluster: Cluster, loops: LoopFactory, gate_identity: Identity
) -> None:
    loop = loops(cluster.namespace, identity=gate_identity)
    handle = cluster.deploy(replicas=3, network="netns", endpoint_port=PORT)
    names = sorted(p.name for p in handle.pods())
    tb = cluster.tb
    v1, v2 = tb.make_adapter("loop-v1"), tb.make_adapter("loop-v2")
    bad = tb.make_adapter("loop-r512", rank=512)  # above the pods' --max-lora-rank 64
    provider = provider_for(ProviderConfig(kube=KubeSource(str(tb.kubeconfig_path))))
    props = {
        **adapter_props(cluster.namespace, v1, name="dl"),
        "transport": "delegated",
        "ready_timeout_seconds": 60,
        "drain_seconds": 1.5,  # the CR's pulumi-lora.dev/drain-seconds: the loop's pace
    }
    created = provider.create(props)
    wait_until(
        lambda: all(
            condition(pod_json(cluster, n), GATE_CONDITION)
            .get("message", "")
            .startswith("1 adapter loaded")
            for n in names
        ),
        30,
        what="the adapter required on every pod",
    )

    with Traffic(tb.client(), cluster.namespace, "llama", ["dl"], rate=40, seed=8) as traffic:
        wait_until(lambda: len(traffic.endpoints) == 3, 30, what="three pods in the slices")
        wait_until(lambda: len(traffic.report().outcomes) >= 40, 30, what="40 requests")

        swap = traffic.mark("swap")
        in_rotation: list[int] = []
        started = time.monotonic()
        with sampled(lambda: in_rotation.append(len(traffic.endpoints))):
            updated = provider.update(created.id, created.outs, {**props, "path": v2}).outs
        took = time.monotonic() - started
        assert updated["loaded"] and updated["loaded_path"] == v2
        assert everywhere(handle, {"dl": v2})
        assert min(in_rotation) == 2, in_rotation  # one pod out at a time, each once
        assert took >= 3 * 1.5  # each pod drained 1.5 s (the CR's annotation) before it swapped
        drained = loop.events("swapped_out_of_rotation", adapter="dl")
        assert sorted(e["pod"] for e in drained) == [f"{cluster.namespace}/{n}" for n in names]
        assert all(e["loaded"] and e["in_slices"] and e["seconds"] >= 1.5 for e in drained)

        rollback = traffic.mark("bad revision")
        with pytest.raises(SwapRolledBack) as caught:
            provider.update(created.id, updated, {**props, "path": bad})
        message = str(caught.value)
        assert re.search(rf"swapping dl to '{bad}' failed \(pod ({'|'.join(names)}): ", message)
        assert "with rank 512 is incompatible" in message
        assert f"rolled back to {v2!r}: it serves again on {', '.join(names)}" in message
        assert everywhere(handle, {"dl": v2})
        stored = cluster.cr("dl")
        assert stored is not None and stored["spec"]["path"] == v2
        wait_until(lambda: len(traffic.endpoints) == 3, 30, what="every pod back in the slices")
        done = traffic.mark("done")
        wait_until(lambda: traffic.report().counts(done).total() >= 20, 30, what="20 more")

    report = traffic.report()
    swapped, rolled_back = report.counts(swap, rollback), report.counts(rollback, float("inf"))
    print(f"loop swap in {took:.1f}s: {dict(swapped)}; bad revision: {dict(rolled_back)}")
    assert swapped == {"ok": swapped.total()}, report.failed(swap, rollback)
    assert rolled_back == {"ok": rolled_back.total()}, report.failed(rollback)
    provider.delete(created.id, updated)
    if tb.audit_log_path is not None:  # the slices' reads are the grant's use, none refused
        used, denied = audited(tb.audit_log_path, gate_identity.user)
        assert ("discovery.k8s.io", "endpointslices", "list") in used
        assert not denied, [(e["verb"], e["requestURI"]) for e in denied]
