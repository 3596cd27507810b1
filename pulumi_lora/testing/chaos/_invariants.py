"""Pure: what must hold once the faults stop, checked on snapshots of the system.

A :class:`Snapshot` is what the driver read at one moment: each pod of the InferenceService
(Ready or not, and what its own ``/v1/models`` lists), each LoRAAdapter CR (spec and status),
and the replica count. The checks return human-readable violations; an empty list means the
invariant holds. Three moments are checked:

- ``loop_violations``: the re-sync loop alone has healed the service (every CR's adapter on every
  Ready pod with the CR's path, nothing else loaded, status matching the pods);
- ``final_violations``: after the final ``pulumi up`` and ``refresh``, cluster, pods and Pulumi
  state all agree with the program (no orphaned CR, no undeclared adapter, no missing one);
- ``empty_violations``: after ``pulumi destroy``, nothing this project loaded or created is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CRView",
    "PodView",
    "Snapshot",
    "StateEntry",
    "empty_violations",
    "final_violations",
    "healed_pods",
    "is_whole",
    "loop_violations",
]


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod as the driver saw it: Ready, and its adapters (``None``: it did not answer)."""

    name: str
    ready: bool
    served: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class CRView:
    """One LoRAAdapter CR: its spec and what its status says."""

    name: str
    adapter: str
    path: str
    generation: int
    loaded: bool = False  # the Loaded condition is True
    observed_generation: int | None = None  # the Loaded condition's observedGeneration
    loaded_path: str | None = None  # status.loadedPath


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One LoRAAdapter in the Pulumi state: its declared path, outputs and per-pod outputs."""

    path: str
    loaded: bool
    pods: Mapping[str, str | None] = field(default_factory=dict)  # pod → loaded path


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The system at one moment (``None`` CRs: the apiserver did not answer)."""

    at: float
    replicas: int
    pods: tuple[PodView, ...]
    crs: tuple[CRView, ...] | None

    @property
    def ready(self) -> tuple[PodView, ...]:
        """The Ready pods."""
        return tuple(p for p in self.pods if p.ready)

    def expected(self) -> dict[str, str]:
        """Adapter name → path, as the CRs declare it."""
        return {cr.adapter: cr.path for cr in self.crs or ()}


def _serving_violations(snapshot: Snapshot, expected: Mapping[str, str]) -> list[str]:
    """Every Ready pod serves exactly ``expected``; as many Ready pods as replicas."""
    problems: list[str] = []
    ready = snapshot.ready
    if len(ready) != snapshot.replicas:
        problems.append(f"{len(ready)} Ready pods, {snapshot.replicas} replicas declared")
    for pod in ready:
        if pod.served is None:
            problems.append(f"pod {pod.name}: /v1/models did not answer")
            continue
        for name, path in sorted(expected.items()):
            seen = pod.served.get(name)
            if seen is None:
                problems.append(f"pod {pod.name}: {name} is not loaded")
            elif seen != path:
                problems.append(f"pod {pod.name}: {name} is loaded from {seen}, not {path}")
        problems.extend(
            f"pod {pod.name}: {name} is loaded but nothing declares it"
            for name in sorted(set(pod.served) - set(expected))
        )
    return problems


def _status_violations(crs: tuple[CRView, ...]) -> list[str]:
    """Each CR's status says Loaded, for its current generation, with its path."""
    problems: list[str] = []
    for cr in crs:
        if not cr.loaded:
            problems.append(f"CR {cr.name}: status does not say Loaded")
        elif cr.observed_generation != cr.generation:
            problems.append(
                f"CR {cr.name}: status is for generation {cr.observed_generation}, "
                f"spec is generation {cr.generation}"
            )
        elif cr.loaded_path != cr.path:
            problems.append(f"CR {cr.name}: status.loadedPath {cr.loaded_path}, spec {cr.path}")
    return problems


def healed_pods(snapshot: Snapshot) -> frozenset[str]:
    """The Ready pods that serve exactly what the CRs declare (none while the apiserver is away)."""
    if snapshot.crs is None:
        return frozenset()
    expected = snapshot.expected()
    return frozenset(p.name for p in snapshot.ready if p.served == expected)


def is_whole(snapshot: Snapshot) -> bool:
    """Whether the service is healed: all replicas Ready, each serving exactly what CRs say."""
    return snapshot.crs is not None and not _serving_violations(snapshot, snapshot.expected())


def loop_violations(snapshot: Snapshot) -> list[str]:
    """What keeps the loop-healed service from matching its CRs (status included)."""
    if snapshot.crs is None:
        return ["the apiserver did not answer"]
    return _serving_violations(snapshot, snapshot.expected()) + _status_violations(snapshot.crs)


def final_violations(
    snapshot: Snapshot, declared: Mapping[str, str], state: Mapping[str, StateEntry]
) -> list[str]:
    """What keeps cluster, pods and Pulumi state from matching the program (``declared``)."""
    if snapshot.crs is None:
        return ["the apiserver did not answer"]
    problems: list[str] = []
    by_adapter = {cr.adapter: cr for cr in snapshot.crs}
    for name, path in sorted(declared.items()):
        cr = by_adapter.get(name)
        if cr is None:
            problems.append(f"{name}: declared, but no CR exists")
        elif cr.path != path:
            problems.append(f"CR {cr.name}: spec.path {cr.path}, the program says {path}")
    problems.extend(
        f"CR {by_adapter[name].name}: orphaned (the program no longer declares {name})"
        for name in sorted(set(by_adapter) - set(declared))
    )
    problems += _serving_violations(snapshot, declared) + _status_violations(snapshot.crs)
    ready = {p.name for p in snapshot.ready}
    for name, path in sorted(declared.items()):
        entry = state.get(name)
        if entry is None:
            problems.append(f"{name}: declared, but not in the Pulumi state")
            continue
        if entry.path != path or not entry.loaded:
            problems.append(f"{name}: state says path {entry.path}, loaded {entry.loaded}")
        if set(entry.pods) != ready:
            problems.append(
                f"{name}: state lists pods {sorted(entry.pods)}, Ready pods are {sorted(ready)}"
            )
        problems.extend(
            f"{name}: state says pod {pod} has {seen}, not {path}"
            for pod, seen in sorted(entry.pods.items())
            if seen != path
        )
    problems.extend(
        f"{name}: in the Pulumi state, but the program does not declare it"
        for name in sorted(set(state) - set(declared))
    )
    return problems


def empty_violations(snapshot: Snapshot) -> list[str]:
    """What destroy left behind: CRs, or adapters on any pod that answers."""
    if snapshot.crs is None:
        return ["the apiserver did not answer"]
    problems = [f"CR {cr.name}: left behind by destroy" for cr in snapshot.crs]
    for pod in snapshot.pods:
        problems.extend(
            f"pod {pod.name}: {name} left loaded by destroy" for name in sorted(pod.served or ())
        )
    return problems
