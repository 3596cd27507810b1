"""Shared looks at a target's pods and at the CRs.

Taken once, reused by concurrent operations, invalidated by this process's own writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_lora._core._caches import OwnWrites, SharedViews
from pulumi_lora._core._llmkube import PodEndpoint, PodListing, Target
from pulumi_lora._core._reconcile import (
    PodView,
)
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._models import (
    Transport,
)
from pulumi_lora._settings import ClientTimeouts

#: One target on one cluster: what a write by this process invalidates.
Scope = tuple[KubeSource, str, str]


@dataclass(frozen=True)
class LookKey:
    """What a look at a target depends on: the target, and how its pods are asked."""

    scope: Scope
    transport: Transport
    api_key_secret: tuple[str, str] | None
    api_key: str | None = field(repr=False)  # the config's key: in memory only, never shown
    timeouts: ClientTimeouts


@dataclass(frozen=True)
class TargetPods:
    """The InferenceService (None when it can't be used) and its pods, as listed (those its
    controller chain vouches for; the other labelled ones by name, with why)."""

    target: Target | None
    pods: tuple[PodEndpoint, ...] = ()
    untrusted: Mapping[str, str] = field(default_factory=dict)

    @property
    def listing(self) -> PodListing:
        """The pods as ``PodListing``."""
        return PodListing(self.pods, self.untrusted)


@dataclass(frozen=True)
class TargetLook:
    """One look at a target: the InferenceService (None when it can't be used), its pods, and
    what each Ready pod serves (a pod whose ``/v1/models`` failed has its error beside)."""

    target: Target | None
    pods: tuple[PodView, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)
    untrusted: Mapping[str, str] = field(default_factory=dict)


#: How long the provider's diffs and reads share one look at a target (see ``_core._caches``):
#: short, so an out-of-band change is seen within it even by a long-lived caller.
LOOK_MAX_AGE_SECONDS = 2.0
#: The looks shared by this process's diffs and reads; writes through ``Session.execute``
#: invalidate their target's.
LOOKS: SharedViews[LookKey, TargetLook] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda key: key.scope
)


@dataclass(frozen=True)
class CrListing:
    """Every LoRAAdapter CR of a cluster, as listed from ``started`` (``time.monotonic``) on."""

    started: float
    crs: tuple[Mapping[str, Any], ...]


#: Cluster-wide CR listings shared by this process's collision checks: N creates would
#: otherwise list every CR N times (quadratic in the fleet).
CR_LISTINGS: SharedViews[KubeSource, CrListing] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda source: source
)
#: The CRs this process applied or deleted (source, namespace, name), laid over those listings
#: so its own concurrent creates see each other's claims.
OWN_CRS: OwnWrites[tuple[KubeSource, str, str], Mapping[str, Any]] = OwnWrites(LOOK_MAX_AGE_SECONDS)
#: The listings of targets and their pods shared by this process's operations (its own loads
#: change neither, so nothing here invalidates them; their age alone bounds them).
LISTINGS: SharedViews[Scope, TargetPods] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda scope: scope
)
