"""What the real-pod tests watch and drive: every change of the pods' Ready (and every version of
each pod, with its readiness gate), the readiness gate's policy as a user applies it, and a
sampler for what moves while a call runs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx2

from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._kube._gate_probe import gated_at_admission
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.testbed._rest import KubeRest


@dataclass(frozen=True)
class PodVersion:
    """One version of a pod as the watch delivered it: its container, ``ContainersReady``,
    ``Ready`` (with its reason) and the readiness gate's condition."""

    pod: str
    restarts: int
    container: str
    """The container's id, as the gate's message names it (12 characters)."""
    containers_ready: bool
    ready: bool
    ready_reason: str
    gate: str
    """The gate condition's status (``True``, ``False``, or empty when it has none yet)."""
    gate_message: str


def pod_version(pod: dict[str, Any]) -> PodVersion:
    """Pure: what :class:`PodVersion` keeps of a pod object."""
    status = pod.get("status", {})
    conditions = {c.get("type"): c for c in status.get("conditions", []) or []}
    containers = status.get("containerStatuses") or [{}]
    gate = conditions.get(GATE_CONDITION, {})
    return PodVersion(
        str(pod["metadata"]["name"]),
        int(containers[0].get("restartCount", 0)),
        str(containers[0].get("containerID", "")).rpartition("://")[2][:12],
        conditions.get("ContainersReady", {}).get("status") == "True",
        conditions.get("Ready", {}).get("status") == "True",
        str(conditions.get("Ready", {}).get("reason", "")),
        str(gate.get("status", "")),
        str(gate.get("message", "")),
    )


@dataclass(frozen=True)
class Seen:
    """One change of a pod's Ready condition, as the apiserver's watch delivered it."""

    pod: str
    ready: bool
    running: bool
    """Whether the container ran (a restart's stop is published with it terminated)."""
    restarts: int


class ReadyWatch:
    """Every change of the Ready condition of the pods of one namespace, from the first LIST
    on, through a chain of watches (each resumed from the last resourceVersion).

    A change the watch could not deliver (a watch the apiserver cannot resume, 410 Gone, is
    noted in ``gaps`` and followed by a LIST; or two changes between two versions of the pod)
    still moves the condition's ``lastTransitionTime``: it is recorded as the two changes it
    hides.
    """

    def __init__(self, rest: KubeRest, namespace: str) -> None:
        self.rest = rest
        self.namespace = namespace
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.seen: list[Seen] = []
        self.versions: list[PodVersion] = []
        """Every version of every pod noted, in the order the apiserver delivered them."""
        self.gaps: list[str] = []
        self._last: dict[str, tuple[Seen, str]] = {}  # each pod's last state and its Ready since
        self._versions: dict[str, int] = {}  # the newest resourceVersion noted of each pod
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-watch", daemon=True)

    def start(self) -> None:
        listing = self.rest.get(self.path)
        for pod in listing["items"]:
            self._note(pod)
        self._version = str(listing["metadata"]["resourceVersion"])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # not if it never started
            self._thread.join(timeout=30.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": self._version,
                      "allowWatchBookmarks": "true", "timeoutSeconds": "5"}  # fmt: skip
            try:
                with self.rest.stream("GET", self.path, params=params, timeout=WATCH_WAIT) as got:
                    if got.status_code != 200:
                        self._gap(f"watch answered {got.status_code}")
                        continue
                    for line in got.iter_lines():
                        if line:
                            self._event(json.loads(line))
            except httpx2.HTTPError as exc:  # the watch broke: resume from the same version
                self._stop.wait(0.2)
                if self._stop.is_set():
                    return
                print(f"ready watch resumed after {exc!r}")

    def _gap(self, why: str) -> None:
        self.gaps.append(why)
        listing = self.rest.get(self.path)
        for pod in listing["items"]:
            self._note(pod)
        self._version = str(listing["metadata"]["resourceVersion"])

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object", {})
        if event.get("type") == "ERROR":
            self._gap(str(obj.get("message", "watch error")))
            return
        self._version = str(obj.get("metadata", {}).get("resourceVersion", self._version))
        if event.get("type") in ("ADDED", "MODIFIED"):
            self._note(obj)

    def _note(self, pod: dict[str, Any]) -> None:
        status, name = pod.get("status", {}), str(pod["metadata"]["name"])
        self.versions.append(pod_version(pod))
        conditions: list[dict[str, Any]] = status.get("conditions", []) or []
        condition = next((c for c in conditions if c.get("type") == "Ready"), {})
        containers = status.get("containerStatuses") or [{}]
        now = Seen(name, condition.get("status") == "True",
                   "running" in (containers[0].get("state") or {}),
                   int(containers[0].get("restartCount", 0)))  # fmt: skip
        since = str(condition.get("lastTransitionTime", ""))
        before = self._last.get(name)
        self._last[name] = (now, since)
        if before is not None and before[0].ready == now.ready and "" != before[1] != since:
            # Out and back (or in and out) between two versions the watch delivered.
            kept = before[0].restarts == now.restarts
            self.seen.append(Seen(name, not now.ready, kept, before[0].restarts))
            self.seen.append(now)
        elif before is None or before[0].ready != now.ready:
            self.seen.append(now)
        self._versions[name] = int(pod["metadata"]["resourceVersion"])

    def caught_up(self, timeout: float = 30.0) -> list[Seen]:
        """Every change so far, once the watch has delivered each pod as a LIST now shows it."""
        listed = {
            str(pod["metadata"]["name"]): int(pod["metadata"]["resourceVersion"])
            for pod in self.rest.get(self.path)["items"]
        }
        deadline = time.monotonic() + timeout
        while any(self._versions.get(name, 0) < version for name, version in listed.items()):
            assert time.monotonic() < deadline, f"the watch is behind the LIST: {listed}"
            time.sleep(0.1)
        return list(self.seen)

    def transitions(self) -> dict[str, list[str]]:
        """Each pod's Ready changes in order: ``True``/``False``, with the restart count."""
        changes: dict[str, list[str]] = {}
        for seen in list(self.seen):
            changes.setdefault(seen.pod, []).append(f"{seen.ready}#{seen.restarts}")
        return changes

    def drops(self) -> list[Seen]:
        """Every change to not Ready of a running container that had been Ready since its
        (re)start (a readiness probe that failed, not a restart), the watch caught up first."""
        ready_runs = set()
        dropped = []
        for seen in self.caught_up():
            if seen.ready:
                ready_runs.add((seen.pod, seen.restarts))
            elif seen.running and (seen.pod, seen.restarts) in ready_runs:
                dropped.append(seen)
        return dropped


WATCH_WAIT = httpx2.Timeout(30.0, connect=5.0)
"""Beyond the watch's own 5 s: the apiserver ends it, the recorder resumes it."""


def apply_gate_policy(testbed: Testbed, namespace: str, name: str) -> None:
    """``pulumi-lora readiness-gate -n NAMESPACE --name NAME | kubectl apply -f -``, as the
    command's help says, then wait until the apiserver gates a new SGLang pod of ``namespace``
    (it loads a new policy moments after it is applied)."""
    printed = subprocess.run(
        [sys.executable, "-m", "pulumi_lora", "readiness-gate", "-n", namespace, "--name", name],
        capture_output=True,
        text=True,
        check=True,
    )
    done = testbed.kubectl("apply", "-f", "-", input=printed.stdout)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: gates_new_pods(testbed, namespace), 30, what="the gate's policy in force")


def remove_gate_policy(testbed: Testbed, name: str) -> None:
    for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
        testbed.kubectl("delete", kind, name, "--ignore-not-found")


def gates_new_pods(testbed: Testbed, namespace: str) -> bool:
    """Whether a new SGLang pod in ``namespace`` gets the gate (the product's dry run)."""
    return gated_at_admission(testbed.client(), namespace)


def gate_of(testbed: Testbed, namespace: str, pod: str) -> PodVersion:
    """The pod as the apiserver has it now."""
    return pod_version(testbed.rest.get(f"/api/v1/namespaces/{namespace}/pods/{pod}"))
