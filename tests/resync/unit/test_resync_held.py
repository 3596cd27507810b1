"""The loop's held-delete task (docs/protocol.md rule 4) against fakes at its edges: a fake
apiserver (the finalizer's release), in-process emulators as pods (real sockets), and the pods'
workers played by the ``request`` callback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest

from pulumi_lora._core._llmkube import PodEndpoint, Target
from pulumi_lora._core._ownership import ControllerRef, Owned
from pulumi_lora._models import UNLOAD_FINALIZER
from pulumi_lora._resync import _held
from pulumi_lora._resync._decide import ReloadReason
from pulumi_lora._resync._held import HeldDeletes
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._logs import LOGGER_NAME
from pulumi_lora._resync._views import AdapterCR, Key, SecretRef, adapter_from_object
from pulumi_lora._resync._world import World
from pulumi_lora.testing.emulator import EmulatorConfig, EmulatorServer
from pulumi_lora.testing.peft import write_adapter

REPLICASET = ControllerRef("apps/v1", "ReplicaSet", "llama-5d8f", "uid-rs")
DEPLOYMENT = ControllerRef("apps/v1", "Deployment", "llama", "uid-deploy")
SERVICE_UID = "uid-isvc"
NOT_READY = "Running, not Ready (ContainersNotReady)"


class FakeKube:
    """The apiserver's side of the release: each ``release_finalizer`` answers the next of
    ``answers`` (True: removed; False: not removed; an exception: raised), then True."""

    def __init__(self, *answers: bool | Exception, served: Any = None) -> None:
        self.answers = list(answers)
        self.carries = True  # whether the CR still carries pulumi-lora's finalizer
        self.calls: list[str] = []
        self.served_at_release: list[dict[str, str]] = []
        self._served = served  # what the NotReady pod served when the release was asked

    async def release_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        assert (namespace, name, finalizer) == ("models", "sql", UNLOAD_FINALIZER)
        self.calls.append("release")
        if self._served is not None:
            self.served_at_release.append(await asyncio.to_thread(self._served))
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        removed = answer and self.carries
        self.carries = self.carries and not removed
        return removed

    async def has_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        self.calls.append("has")
        return self.carries

    async def read_secret(self, ref: SecretRef) -> str:
        return "k"


@pytest.fixture
def backoffs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The failure counts the loop's backoff was asked for; it answers 0 s (no waiting)."""
    asked: list[int] = []

    def backoff_delay(failures: int, fraction: float, *, base: float, cap: float) -> float:
        asked.append(failures)
        return 0.0

    monkeypatch.setattr(_held, "backoff_delay", backoff_delay)
    return asked


@pytest.fixture
def events() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The loop's log events, as (name, fields)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.getMessage(), dict(getattr(record, "fields", {}))))

    logger, keep = logging.getLogger(LOGGER_NAME), Keep()
    level = logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    yield seen
    logger.removeHandler(keep)
    logger.setLevel(level)


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    """An SGLang emulator serving adapter ``sql``."""
    write_adapter(tmp_path / "adapters" / "sql", target_modules=("q_proj",))
    config = EmulatorConfig(
        fs_root=tmp_path,
        admin=True,
        enable_lora=True,
        max_lora_rank=64,
        lora_target_modules=("all",),
    )
    server = EmulatorServer(config).start()
    loaded = httpx2.post(
        f"{server.url}/load_lora_adapter",
        json={"lora_name": "sql", "lora_path": "/adapters/sql"},
        timeout=10,
    )
    assert loaded.status_code == 200, loaded.text
    yield server
    server.stop()


def served(server: EmulatorServer) -> dict[str, str]:
    body = httpx2.get(f"{server.url}/v1/models", timeout=10).json()
    return {m["id"]: m["root"] for m in body["data"] if m.get("parent")}


def held_cr() -> AdapterCR:
    cr = adapter_from_object(
        {
            "metadata": {
                "name": "sql",
                "namespace": "models",
                "uid": "uid-sql",
                "deletionTimestamp": "2026-12-05T09:00:00Z",
                "finalizers": [UNLOAD_FINALIZER],
            },
            "spec": {
                "name": "sql",
                "path": "/adapters/sql",
                "inferenceServiceRef": {"name": "llama"},
            },
        }
    )
    assert cr is not None
    return cr


def pod(name: str, *, ready: bool, port: int = 30000, state: str = "Running, Ready") -> PodEndpoint:
    return PodEndpoint(
        name=name,
        namespace="models",
        uid=f"uid-{name}",
        ready=ready,
        ip="127.0.0.1",
        port=port,
        state=state,
        started_at="2026-12-05T08:00:00Z",
        controller=REPLICASET,
        service="llama",
    )


def world(*pods: PodEndpoint) -> World:
    w = World()
    w.put_target(Target("models", "llama", "sglang", 2, uid=SERVICE_UID))
    w.put_owner("replicasets", Owned("models", REPLICASET.name, REPLICASET.uid, DEPLOYMENT))
    service = ControllerRef(
        "inference.llmkube.dev/v1alpha1", "InferenceService", "llama", SERVICE_UID
    )
    w.put_owner("deployments", Owned("models", DEPLOYMENT.name, DEPLOYMENT.uid, service))
    for facts in pods:
        w.seed_pod(facts)
    return w


def workers(w: World, adapter: str = "sql") -> Any:
    """The Ready pods' workers: a request unloads the adapter from each (as a clean run does)."""

    def request(keys: list[Key], reason: ReloadReason) -> None:
        for key in keys:
            state = w.pods[key]
            if state.facts.serving:
                state.unloaded(adapter)

    return request


async def finished(held: HeldDeletes) -> None:
    """Start the held delete of ``sql`` and wait for its task to end."""
    held.hold(held_cr())
    await held._tasks[("models", "sql")]


def test_a_release_that_did_not_happen_is_retried_with_backoff(
    backoffs: list[int], events: list[tuple[str, dict[str, Any]]]
) -> None:
    """Two releases refused by conflicts (say, a webhook refusing updates) while the CR still
    carries the finalizer: each is a failure, said so, and retried with the loop's backoff."""
    kube = FakeKube(False, False)
    w = world()
    held = HeldDeletes(w, cast(Kube, kube), workers(w), lambda: True, poll=0.0)
    asyncio.run(finished(held))

    assert kube.calls == ["release", "has", "release", "has", "release"]
    assert not kube.carries
    assert backoffs == [1, 2]
    stuck = [fields for name, fields in events if name == "held_delete_stuck"]
    assert [s["failures"] for s in stuck] == [1, 2]
    assert all("the release did not happen" in s["error"] for s in stuck)
    done = [fields for name, fields in events if name == "held_delete_finished"]
    assert [d["released"] for d in done] == [True]


def test_a_cr_someone_else_let_go_is_finished_without_retrying(
    backoffs: list[int], events: list[tuple[str, dict[str, Any]]]
) -> None:
    kube = FakeKube(False)
    kube.carries = False  # `pulumi-lora finish-delete` removed the finalizer meanwhile
    w = world()
    asyncio.run(finished(HeldDeletes(w, cast(Kube, kube), workers(w), lambda: True, poll=0.0)))
    assert kube.calls == ["release", "has"]
    assert backoffs == []
    done = [fields for name, fields in events if name == "held_delete_finished"]
    assert [d["released"] for d in done] == [False]


def test_an_error_on_release_is_retried_until_the_finalizer_is_off(backoffs: list[int]) -> None:
    kube = FakeKube(RuntimeError("apiserver away"))
    w = world()
    asyncio.run(finished(HeldDeletes(w, cast(Kube, kube), workers(w), lambda: True, poll=0.0)))
    assert kube.calls == ["release", "release"]
    assert backoffs == [1] and not kube.carries


def test_a_not_ready_pod_that_serves_the_adapter_unloads_it_before_the_release(
    emulator: EmulatorServer, backoffs: list[int], events: list[tuple[str, dict[str, Any]]]
) -> None:
    """A NotReady pod still serving the adapter would serve it again once Ready: the finalizer
    comes off only after it unloaded it (nothing is left to the leader's memory)."""
    kube = FakeKube(served=lambda: served(emulator))
    w = world(
        pod("ready", ready=True), pod("slow", ready=False, port=emulator.port, state=NOT_READY)
    )
    asyncio.run(finished(HeldDeletes(w, cast(Kube, kube), workers(w), lambda: True, poll=0.0)))

    assert kube.served_at_release == [{}]
    assert served(emulator) == {}
    assert all("sql" not in state.unloads for state in w.pods.values())
    assert ("held_delete_unloaded", {"cr": "models/sql", "pod": "models/slow", "ready": False}) in (
        events
    )


@pytest.mark.parametrize("ending", ["gone", "restarted"])
def test_an_unreachable_not_ready_pod_holds_the_cr_until_it_can_serve_nothing(
    emulator: EmulatorServer,
    backoffs: list[int],
    events: list[tuple[str, dict[str, Any]]],
    ending: str,
) -> None:
    """A NotReady pod that does not answer may still serve the adapter: the finalizer stays,
    its unload retried with the loop's backoff, until the pod is gone (or its server restarted,
    losing its dynamic adapters)."""
    port = emulator.port
    emulator.stop()  # nothing answers there now
    kube = FakeKube()
    dark = pod("dark", ready=False, port=port, state=NOT_READY)
    w = world(pod("ready", ready=True), dark)
    held = HeldDeletes(w, cast(Kube, kube), workers(w), lambda: True, poll=0.0)

    async def scenario() -> None:
        held.hold(held_cr())
        task = held._tasks[("models", "sql")]
        while len(backoffs) < 3 and not task.done():
            await asyncio.sleep(0.01)
        assert kube.calls == []  # held: no release while the pod may serve the adapter
        assert len(backoffs) >= 3 and backoffs == list(range(1, len(backoffs) + 1))
        if ending == "gone":
            w.remove_pod(dark.key)
        else:
            w.put_pod(replace(dark, restart_count=1), now=0.0)
        await task

    asyncio.run(scenario())
    assert kube.calls == ["release"] and not kube.carries
    waiting = [fields for name, fields in events if name == "held_delete_waiting"]
    assert waiting and waiting[0]["pods"] == ["dark"]
    assert "finish-delete --force models/sql" in waiting[0]["fix"]
