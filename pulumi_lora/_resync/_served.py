"""What the loop knows now, per declared adapter and pod: served or not, since when, capacity.

"Since" must survive a new leader, so an outage that may predate this leader is dated from the
CR's ``lastTransitionTime`` (LLMKube's status takes no new field). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from msgspec import ValidationError

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import extra_arg_value
from pulumi_lora._models import (
    LLMKUBE_FINALIZER,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    written_by_llmkube,
)
from pulumi_lora._resync._views import AdapterCR, Key
from pulumi_lora._resync._world import PodRecord, World

__all__ = [
    "AdapterMetrics",
    "AdapterPodState",
    "AdapterState",
    "FleetState",
    "NotServedClock",
    "PodCapacity",
    "fleet_state",
    "llmkube_contests",
]


class AdapterMetrics(StrEnum):
    """How much detail the state metrics carry (``--adapter-metrics``)."""

    PER_POD = "per-pod"
    """One series per declared adapter and Ready pod (adapters x pods), naming the pod."""
    PER_ADAPTER = "per-adapter"
    """Per adapter only (counts of Ready and serving pods, the oldest not-served time): for
    fleets where adapters x pods is too many series. Pod series (capacity) stay: one per pod."""


@dataclass(frozen=True)
class AdapterPodState:
    """One declared adapter on one Ready pod of its target."""

    pod: str
    served: bool
    not_served_since: float | None  # unix seconds, None while served
    reason: str = ""  # why not: the last failure's reason, or "" (not run yet)


@dataclass(frozen=True)
class AdapterState:
    """One LoRAAdapter CR: where it is served, and since when it is not."""

    cr: Key
    adapter: str
    target: Key
    pods: tuple[AdapterPodState, ...]
    contested: bool  # LLMKube's own LoRA controller shows on it (see llmkube_contests)

    @property
    def served_pods(self) -> int:
        """Ready pods serving it at its declared path and generation."""
        return sum(1 for p in self.pods if p.served)

    @property
    def not_served_since(self) -> float | None:
        """The earliest time a Ready pod has not served it, continuously since (None: served
        on every Ready pod)."""
        times = [p.not_served_since for p in self.pods if p.not_served_since is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class PodCapacity:
    """One trusted pod of an InferenceService: adapters declared, served and evicted."""

    pod: Key
    target: Key
    ready: bool
    declared: int  # adapters owned on the target
    served: int  # of those, served on the pod (as its runs recorded)
    evicted: int  # evicted for lack of room and not reloaded (the OverCapacity note)
    limit: int | None  # the server's --max-loaded-loras, when set
    consecutive_failures: int  # failed runs in a row (the pod's backoff count)


@dataclass(frozen=True)
class FleetState:
    """Every declared adapter and every pod, as the leader knows them now."""

    adapters: tuple[AdapterState, ...]
    pods: tuple[PodCapacity, ...]


class NotServedClock:
    """When each (CR, pod) pair stopped being served; forgotten once served again (or gone).
    Kept by the leader across scrapes; a new leader starts with a new one."""

    def __init__(self) -> None:
        self._since: dict[tuple[Key, Key], float] = {}
        #: Pairs not served at this leader's first look and ever since: the outage may be older.
        self._inherited: set[tuple[Key, Key]] | None = None

    def observe(
        self, not_served: Mapping[tuple[Key, Key], float | None], now: float
    ) -> dict[Key, dict[Key, float]]:
        """Record the pairs not served at ``now``, each with the since its CR's status records
        (None: no record, or not known to fail yet); return ``{cr: {pod: since}}`` for them.

        A pair's since is when this leader first saw it not served, or the recorded one if that
        is earlier and the pair has not been served since this leader's first look."""
        if self._inherited is None:
            self._inherited = set(not_served)
        else:
            self._inherited &= not_served.keys()
        self._since = {
            pair: (
                min(self._since.get(pair, now), recorded)
                if recorded is not None and pair in self._inherited
                else self._since.get(pair, now)
            )
            for pair, recorded in not_served.items()
        }
        found: dict[Key, dict[Key, float]] = {}
        for (cr, pod), since in self._since.items():
            found.setdefault(cr, {})[pod] = since
        return found


def _recorded_since(cr: AdapterCR) -> float | None:
    """Pure: since when the CR's status says it is not served, as unix time: the earliest
    ``lastTransitionTime`` of ``Loaded=False`` and ``Error=True`` for its current generation
    (LLMKube's conditions left out). None when it says served, or nothing readable."""
    try:
        conditions = LoRAAdapterStatus.parse(cr.status or {}).conditions or []
    except ValidationError:
        return None
    times = [
        c.last_transition_time.timestamp()
        for c in conditions
        if c.observed_generation in (None, cr.generation)
        and not written_by_llmkube(c)
        and (c.type, c.status)
        in (
            (ConditionKind.LOADED.value, ConditionStatus.FALSE),
            (ConditionKind.ERROR.value, ConditionStatus.TRUE),
        )
    ]
    return min(times) if times else None


def _started(facts: PodEndpoint) -> float | None:
    """When the pod's server container started (unix time), if known."""
    try:
        return datetime.fromisoformat(facts.started_at).timestamp() if facts.started_at else None
    except ValueError:
        return None


def llmkube_contests(cr: AdapterCR, returned: Set[Key]) -> bool:
    """Pure: whether LLMKube's own LoRA controller acts on the CR: its finalizer is on it, came
    back after the loop removed it (``returned``), or it wrote conditions (docs/protocol.md).

    A finalizer the loop is about to remove shows for a moment; alerts wait minutes."""
    if cr.key in returned:
        return True
    if LLMKUBE_FINALIZER in ((cr.raw.get("metadata") or {}).get("finalizers") or []):
        return True
    try:
        conditions = LoRAAdapterStatus.parse(cr.status or {}).conditions or []
    except ValidationError:
        return False
    return any(written_by_llmkube(c) for c in conditions)


def _served(cr: AdapterCR, state: PodRecord) -> tuple[bool, str]:
    recorded = state.outcomes.get(cr.key)
    if recorded is None or recorded.generation != cr.generation:
        return False, ""
    return recorded.outcome.loaded, recorded.outcome.reason


def fleet_state(
    world: World, clock: NotServedClock, now: float, returned: Set[Key] = frozenset()
) -> FleetState:
    """Pure (but for ``clock``'s memory): every CR x Ready pod of its target, and every pod's
    capacity, at wall time ``now``; "not served since" as :class:`NotServedClock` keeps it.

    A CR is served on a Ready pod when that pod's last run recorded it loaded, at its declared
    path, for its current generation. Anything else is "not served": the run is still to come,
    the load failed, the server evicted it, or the loop may not act on it (a name another CR
    owns, a target that is missing or not SGLang: the CR's conditions say which).
    """
    rows: list[tuple[AdapterCR, list[tuple[str, bool, str]]]] = []
    missing: dict[tuple[Key, Key], float | None] = {}
    pods_by_target: dict[Key, list[PodRecord]] = {}
    for key in sorted(world.crs):
        cr = world.crs[key]
        pods = pods_by_target.get(cr.target)
        if pods is None:
            pods = pods_by_target[cr.target] = world.pods_of(cr.target)
        found = []
        unserved = []
        for state in pods:
            if not state.facts.serving:
                continue
            served, reason = _served(cr, state)
            found.append((state.facts.name, served, reason))
            if not served:
                unserved.append(state)
        rows.append((cr, found))
        recorded = _recorded_since(cr) if unserved else None
        # Known not to serve it: a run of this leader recorded so, or none runs (not Available).
        runs = recorded is not None and world.availability(cr).ok
        for state in unserved:
            outcome = state.outcomes.get(key)
            known = not runs or (outcome is not None and outcome.generation == cr.generation)
            dated = None
            if recorded is not None and known:
                dated = max(recorded, _started(state.facts) or recorded)
            missing[(key, state.facts.key)] = dated
    since = clock.observe(missing, now)
    adapters = []
    for cr, found in rows:
        times = since.get(cr.key, {})
        target_ns = cr.target[0]
        states = tuple(
            AdapterPodState(name, served, None if served else times.get((target_ns, name)), why)
            for name, served, why in found
        )
        adapters.append(
            AdapterState(cr.key, cr.adapter_name, cr.target, states, llmkube_contests(cr, returned))
        )
    return FleetState(tuple(adapters), tuple(_capacities(world)))


def _capacities(world: World) -> list[PodCapacity]:
    found = []
    targets = sorted({s.facts.target for s in world.pods.values()})
    for target in targets:
        known = world.targets.get(target)
        limit_arg = extra_arg_value(known.extra_args, "--max-loaded-loras") if known else None
        limit = int(limit_arg) if limit_arg is not None and limit_arg.isdigit() else None
        owned = [
            cr for cr in world.crs_of(target) if world.owner(target, cr.adapter_name) == cr.key
        ]
        for state in world.pods_of(target):
            served = sum(1 for cr in owned if _served(cr, state)[0])
            evicted = len(state.capacity.evicted) if state.capacity is not None else 0
            found.append(
                PodCapacity(
                    state.facts.key,
                    target,
                    state.facts.serving,
                    len(owned),
                    served,
                    evicted,
                    limit,
                    state.failures,
                )
            )
    return found
