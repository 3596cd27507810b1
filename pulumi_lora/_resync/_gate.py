"""The loop's readiness gate writer: ``pulumi-lora.dev/adapters-loaded`` on gated pods (issue 54).

The decision is the core's (``_core._gate.verdict``); this module feeds it and writes the
condition through ``pods/status`` (a strategic merge patch, merged by condition type, so the
kubelet's conditions stay):

- **on every pod event** of a gated pod: its containers stopped, or a new container runs where a
  True was written for another one: False at once, before any run;
- **after every run** on a gated pod, with what the run saw it serve, and **after a CR of its
  target changes** (a first ``status.loadedPath`` makes an adapter required), with what the
  last run on the same container saw: the verdict, written. A True carries the pod's
  ``resourceVersion``; on 409 the next pod event decides again.

Only the leader writes (the controller runs only while it holds the Lease). A pod held unready
(containers ready, the gate not True) shows in ``pulumi_lora_resync_pod_gate_unready_since``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from pulumi_lora._core._gate import GateVerdict, condition_patch, established, verdict
from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._views import Key
from pulumi_lora._resync._world import PodRecord, World


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GateKeeper:
    """Decides and writes the gate's condition of every gated pod the loop tracks."""

    def __init__(self, world: World, kube: Kube, metrics: Metrics) -> None:
        self.world = world
        self.kube = kube
        self.metrics = metrics
        #: What the last run saw each pod serve, with the container it ran on.
        self._served: dict[Key, tuple[str, dict[str, str]]] = {}
        #: The last verdict written per pod (uid, container id, verdict): not written twice
        #: while the watch has not shown it yet.
        self._written: dict[Key, tuple[str, str, GateVerdict]] = {}
        self._writes: dict[Key, asyncio.Task[None]] = {}
        self._again: set[Key] = set()
        self._unready_since: dict[Key, tuple[float, str]] = {}

    # --- what the controller tells it -------------------------------------------------------

    def ran(self, state: PodRecord, served: Mapping[str, str] | None) -> None:
        """A run on the pod ended, having seen it serve ``served`` (None: not read)."""
        if served is not None:
            self._served[state.facts.key] = (state.facts.container_id, dict(served))
        self.decide(state.facts.key)

    def target_changed(self, target: Key) -> None:
        """A CR of ``target`` changed (its spec or its status): decide for each of its pods."""
        for state in self.world.labelled_pods_of(target):
            self.decide(state.facts.key)

    def forget(self, key: Key) -> None:
        """The pod is gone."""
        self._served.pop(key, None)
        self._written.pop(key, None)
        self._again.discard(key)
        self._unready(key, None)

    def cancel_all(self) -> None:
        """Stop the writes under way (the loop is stopping)."""
        for task in list(self._writes.values()):
            task.cancel()

    # --- deciding ---------------------------------------------------------------------------

    def required(self, state: PodRecord) -> dict[str, str]:
        """The adapters the pod must serve to be Ready: the established ones (their CR recorded
        a load) owned on its target, less those its server evicted for lack of room."""
        target = state.facts.target
        crs = [
            {
                "metadata": {},
                "spec": {"name": cr.adapter_name, "path": self.world.reverts.path(cr)},
                "status": cr.status,
            }
            for cr in self.world.crs_of(target)
            if self.world.owner(target, cr.adapter_name) == cr.key
            and not (cr.operation or "").startswith("delete@")
        ]
        required = established(crs)
        if state.capacity is not None:
            for name in state.capacity.evicted:
                required.pop(name, None)
        return required

    def decide(self, key: Key) -> None:
        """Decide what the pod's gate should say now, and write it when that changes."""
        state = self.world.pods.get(key)
        if state is None or not state.facts.gated or self.world.trust(state.facts) is not None:
            return
        facts = state.facts
        self._unready(key, facts)
        written = self._written.get(key)
        if written is not None and facts.gate is not None and _says(facts.gate, written[2]):
            self._written.pop(key, None)  # the watch shows it: decide from the pod again
            written = None
        required = self.required(state)
        kept = self._served.get(key)
        served = kept[1] if kept is not None and kept[0] == facts.container_id else None
        if served is None and not required:
            served = {}  # nothing is required: nothing to read
        found = verdict(facts, required, served if facts.ready else None)
        if found is None or written == (facts.uid, facts.container_id, found):
            return
        if key in self._writes:
            self._again.add(key)  # one write per pod at a time: decide again after it
            return
        self._written[key] = (facts.uid, facts.container_id, found)
        task = asyncio.create_task(self._write(facts, found), name=f"gate {'/'.join(key)}")
        self._writes[key] = task

    async def _write(self, facts: PodEndpoint, found: GateVerdict) -> None:
        key = facts.key
        body = condition_patch(found, _now(), facts.gate, facts.resource_version)
        try:
            done = await self.kube.patch_pod_status(facts.namespace, facts.name, body)
        except Exception as exc:  # logged; the next event or run decides again
            done = False
            logs.event(
                "gate_write_failed", logging.WARNING, pod="/".join(key), error=str(exc)[:300]
            )
        finally:
            self._writes.pop(key, None)
        if done:
            self.metrics.gate_writes.labels("true" if found.status else "false").inc()
            logs.event(
                "gate_written",
                pod="/".join(key),
                status=found.status,
                reason=found.reason,
                message=found.message,
            )
        else:
            self._written.pop(key, None)  # 409 or gone: the next pod event decides again
            logs.event("gate_write_refused", logging.DEBUG, pod="/".join(key))
        if key in self._again:
            self._again.discard(key)
            self.decide(key)

    def _unready(self, key: Key, facts: PodEndpoint | None) -> None:
        """Keep ``pulumi_lora_resync_pod_gate_unready_since`` (containers ready, gate not True)."""
        held = facts is not None and facts.ready and (facts.gate or {}).get("status") != "True"
        gauge = self.metrics.gate_unready_since
        if held and facts is not None:
            if key not in self._unready_since:
                self._unready_since[key] = (time.time(), facts.service)
                gauge.labels(key[0], key[1], facts.service).set(self._unready_since[key][0])
        elif key in self._unready_since:
            _, service = self._unready_since.pop(key)
            gauge.remove(key[0], key[1], service)


def _says(condition: Mapping[str, object], found: GateVerdict) -> bool:
    return (condition.get("status"), condition.get("reason"), condition.get("message")) == (
        "True" if found.status else "False",
        found.reason,
        found.message,
    )
