"""One LoRAAdapter's lifecycle against a live cluster: create, observe, update, delete.

The Pulumi provider is a thin translation of these functions. Each follows the reconcile pattern:
observe (target, pods, what each pod serves), ask the pure core for a plan, execute it on every
pod in parallel (each SGLang serializes its own loads), record the result in the CR's status and
in Events, and return an :class:`AdapterState` that becomes the resource's outputs.
"""

from __future__ import annotations

import contextlib
import math
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from lightkube import Client

from pulumi_lora import _cluster as k8s
from pulumi_lora._errors import (
    AdapterNotLoaded,
    ApiserverUnreachable,
    ClusterError,
    ConfigurationError,
    NameCollision,
    NoReadyPods,
    PulumiLoRAError,
    RuntimeMismatch,
    TransportUnavailable,
)
from pulumi_lora._executor import run_sync
from pulumi_lora._models import (
    ANNOTATION_MANAGED_BY,
    ANNOTATION_OPERATION,
    LLMKUBE_FINALIZER,
    AdapterArgs,
    Condition,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    Transport,
    declared_by_cr,
    format_time,
    written_by_llmkube,
)
from pulumi_lora._ownership import untrusted_message
from pulumi_lora._reconcile import (
    Availability,
    Desired,
    PodAction,
    PodOutcome,
    PodView,
    ReadinessPolicy,
    build_conditions,
    is_loaded,
    loaded_message,
    plan,
    pod_program,
    rollback_plan,
    startup_adapters,
    summarize,
    unsettled,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient, deadline_transport
from pulumi_lora._shared_views import OwnWrites, SharedViews

#: Field manager for the status this provider writes (the re-sync loop uses its own).
STATUS_MANAGER = "pulumi-lora-provider"
#: Supported SGLang servers (``/v1/models`` lists adapters from 0.5.5 on).
SUPPORTED_SGLANG = ">= 0.5.5"

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ProviderConfig:
    """Provider-wide settings from Pulumi config (``pulumi-lora:*``), plaintext in memory only.

    ``kubeconfig`` (content or path) and ``context`` are defaults for resources that set neither;
    ``api_key`` is the SGLang API key when no Secret reference is given.
    """

    kubeconfig: str | None = None
    context: str | None = None
    api_key: str | None = None
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> ProviderConfig:
        """Read ``pulumi-lora:kubeconfig``, ``:context``, ``:sglangApiKey`` and the timeouts.

        Raises ``ConfigurationError`` naming the key when a timeout is not a positive number of
        seconds, so a typo fails the first operation instead of hanging a later one.
        """

        def get(key: str) -> str | None:
            return values.get(f"pulumi-lora:{key}") or None

        seconds: dict[str, float] = {}
        for key, attribute in TIMEOUT_KEYS.items():
            if (text := get(key)) is not None:
                seconds[attribute] = _positive_seconds(f"pulumi-lora:{key}", text)
        return cls(
            get("kubeconfig"), get("context"), get("sglangApiKey"), ClientTimeouts(**seconds)
        )

    def __repr__(self) -> str:
        return (
            f"ProviderConfig(kubeconfig={'set' if self.kubeconfig else None}, "
            f"context={self.context!r}, api_key={'set' if self.api_key else None}, "
            f"timeouts={self.timeouts!r})"
        )


#: Stack config keys of the SGLang client timeouts, and the ``ClientTimeouts`` field each sets.
TIMEOUT_KEYS = {
    "connectTimeoutSeconds": "connect",
    "readTimeoutSeconds": "read",
    "loadTimeoutSeconds": "load",
    "unloadTimeoutSeconds": "unload",
}
#: Every stack config key the provider reads.
CONFIG_KEYS = ("kubeconfig", "context", "sglangApiKey", *TIMEOUT_KEYS)


def _positive_seconds(key: str, text: str) -> float:
    """``text`` as a positive, finite number of seconds, else a ``ConfigurationError``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{key} must be a positive number of seconds, got {text!r}")
    return value


class ClientPool:
    """Process-wide clients, shared by every operation and thread of one provider process.

    A TLS context costs tens of milliseconds to build and a connection a round trip; a request
    costs a millisecond. The engine runs many resources through one provider process, so
    clients (and their keep-alive connections) are built once per server and kept. httpx and
    lightkube clients are thread-safe; the dict is guarded by a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kube: dict[k8s.KubeSource, Client] = {}
        self._proxy: dict[k8s.KubeSource, k8s.ProxyAccess] = {}
        self._sglang: dict[tuple[object, ...], SGLangClient] = {}
        self._default_tls: ssl.SSLContext | None = None

    def kube(self, source: k8s.KubeSource) -> Client:
        """The lightkube client for ``source``."""
        with self._lock:
            if source not in self._kube:
                self._kube[source] = k8s.make_client(source)
            return self._kube[source]

    def proxy(self, source: k8s.KubeSource) -> k8s.ProxyAccess:
        """Access through the apiserver's pod proxy for ``source``."""
        with self._lock:
            if source not in self._proxy:
                self._proxy[source] = k8s.proxy_access(source)
            return self._proxy[source]

    def sglang(
        self,
        url: str,
        *,
        api_key: str | None,
        headers: Mapping[str, str],
        timeouts: ClientTimeouts,
        label: str,
        tls: ssl.SSLContext | None,
    ) -> SGLangClient:
        """The SGLang client for one server and credential (the key is only a dict key here).

        ``tls`` is the context to verify the server with (the cluster CA for the pod proxy);
        None means the system's default trust store, built once per process.
        """
        key = (url, api_key, tuple(sorted(headers.items())), timeouts, label, id(tls))
        with self._lock:
            client = self._sglang.get(key)
            if client is None:
                if tls is None:
                    self._default_tls = self._default_tls or ssl.create_default_context()
                    tls = self._default_tls
                client = SGLangClient(
                    url,
                    api_key=api_key,
                    extra_headers=headers,
                    timeouts=timeouts,
                    label=label,
                    transport=deadline_transport(verify=tls),
                )
                self._sglang[key] = client
            return client


POOL = ClientPool()

#: One target on one cluster: what a write by this process invalidates.
Scope = tuple[k8s.KubeSource, str, str]


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

    target: k8s.Target | None
    pods: tuple[k8s.PodEndpoint, ...] = ()
    untrusted: Mapping[str, str] = field(default_factory=dict)

    @property
    def listing(self) -> k8s.PodListing:
        """The pods as ``k8s.PodListing``."""
        return k8s.PodListing(self.pods, self.untrusted)


@dataclass(frozen=True)
class TargetLook:
    """One look at a target: the InferenceService (None when it can't be used), its pods, and
    what each Ready pod serves (a pod whose ``/v1/models`` failed has its error beside)."""

    target: k8s.Target | None
    pods: tuple[PodView, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)
    untrusted: Mapping[str, str] = field(default_factory=dict)


#: How long the provider's diffs and reads share one look at a target (see ``_shared_views``):
#: short, so an out-of-band change is seen within it even by a long-lived caller.
LOOK_MAX_AGE_SECONDS = 2.0
#: The looks shared by this process's diffs and reads; writes through ``Session.execute``
#: invalidate their target's.
LOOKS: SharedViews[LookKey, TargetLook] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda key: key.scope
)


def target_generation(args: AdapterArgs, config: ProviderConfig) -> int:
    """How many times this process loaded or unloaded on ``args``' target (``LOOKS``' count)."""
    return LOOKS.generation(Session(args, config).scope)


@dataclass(frozen=True)
class CrListing:
    """Every LoRAAdapter CR of a cluster, as listed from ``started`` (``time.monotonic``) on."""

    started: float
    crs: tuple[Mapping[str, Any], ...]


#: Cluster-wide CR listings shared by this process's collision checks: N creates would
#: otherwise list every CR N times (quadratic in the fleet).
CR_LISTINGS: SharedViews[k8s.KubeSource, CrListing] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda source: source
)
#: The CRs this process applied or deleted (source, namespace, name), laid over those listings
#: so its own concurrent creates see each other's claims.
OWN_CRS: OwnWrites[tuple[k8s.KubeSource, str, str], Mapping[str, Any]] = OwnWrites(
    LOOK_MAX_AGE_SECONDS
)
#: The listings of targets and their pods shared by this process's operations (its own loads
#: change neither, so nothing here invalidates them; their age alone bounds them).
LISTINGS: SharedViews[Scope, TargetPods] = SharedViews(
    LOOK_MAX_AGE_SECONDS, scope_of=lambda scope: scope
)


@dataclass(frozen=True)
class PodReport:
    """One pod's line in the outputs: what it serves, or why not."""

    pod: str
    ready: bool
    loaded: bool
    path: str | None = None
    reason: str = ""
    error: str = ""
    since: str | None = None  # when this project last loaded it there


@dataclass(frozen=True)
class AdapterState:
    """The live truth about one adapter, as outputs need it."""

    uid: str
    generation: int
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    conditions: tuple[Condition, ...] = ()
    pods: tuple[PodReport, ...] = ()
    loaded_path: str | None = None
    last_loaded_at: str | None = None

    def condition(self, kind: ConditionKind) -> bool:
        """Whether condition ``kind`` is True."""
        return any(
            c.type == kind.value and c.status is ConditionStatus.TRUE for c in self.conditions
        )


@dataclass
class Session:
    """The I/O context of one operation: cluster client, transport, credentials."""

    args: AdapterArgs
    config: ProviderConfig
    _kube: Client | None = None

    @property
    def source(self) -> k8s.KubeSource:
        """Cluster credentials: the resource's own, else the provider's, else the defaults."""
        return k8s.KubeSource(
            kubeconfig=self.args.kubeconfig_path or self.config.kubeconfig,
            context=self.args.kube_context or self.config.context,
        )

    @property
    def scope(self) -> Scope:
        """The target on its cluster, as shared looks are invalidated."""
        return (self.source, self.args.target_namespace, self.args.inference_service)

    @property
    def timeouts(self) -> ClientTimeouts:
        """The SGLang client timeouts (stack config, else the defaults)."""
        return self.config.timeouts

    @property
    def kube(self) -> Client:
        """The lightkube client (built on first use: clients can't be pickled)."""
        if self._kube is None:
            self._kube = POOL.kube(self.source)
        return self._kube

    # --- observation ----------------------------------------------------------------------------

    def resolve_target(self) -> k8s.Target:
        """The InferenceService; raises NotFound, or RuntimeMismatch when it isn't sglang."""
        target = k8s.get_target(self.kube, self.args.target_namespace, self.args.inference_service)
        if target.runtime != "sglang":
            raise RuntimeMismatch(target.namespace, target.name, target.runtime)
        return target

    def check_collisions(self, target: k8s.Target, own_uid: str | None) -> None:
        """Refuse a name another CR claims on this target, or a startup adapter's other path.

        The CRs come from the listing shared with this process's other operations (at most
        its max age old, with this process's own writes laid over it).
        """
        args = self.args
        for other in self.claims(target, own_uid, shared=True):
            meta = other["metadata"]
            raise NameCollision(
                args.adapter_name,
                target.namespace,
                target.name,
                f"LoRAAdapter {meta['namespace']}/{meta['name']}",
            )
        served = startup_adapters(target.extra_args, target.sglang_adapters)
        if args.adapter_name in served and served[args.adapter_name] != args.path:
            raise NameCollision(
                args.adapter_name,
                target.namespace,
                target.name,
                f"the server's startup --lora-paths ({served[args.adapter_name]})",
            )

    def claims(
        self, target: k8s.Target, own_uid: str | None, *, shared: bool = False
    ) -> list[Mapping[str, Any]]:
        """Other LoRAAdapter CRs declaring the same adapter name on the same target (listed now,
        or ``shared``: see ``adapters``)."""
        found = []
        for cr in self.adapters() if shared else k8s.list_adapters(self.kube):
            meta, spec = cr.get("metadata") or {}, cr.get("spec") or {}
            ref = spec.get("inferenceServiceRef") or {}
            same_target = (
                ref.get("name") == target.name
                and (ref.get("namespace") or meta.get("namespace")) == target.namespace
            )
            if (
                same_target
                and spec.get("name") == self.args.adapter_name
                and (meta.get("uid") != own_uid)
                and not (
                    meta.get("name") == self.args.cr_name
                    and meta.get("namespace") == self.args.namespace
                )
            ):
                found.append(cr)
        return found

    def adapters(self) -> list[Mapping[str, Any]]:
        """Every LoRAAdapter CR of the cluster: the shared listing (bounded age), with the CRs
        this process applied or deleted since it started laid over it."""
        listing = CR_LISTINGS.get(self.source, self._list_adapters)
        crs = {_cr_key(cr): cr for cr in listing.crs}
        for (source, namespace, name), cr in OWN_CRS.since(listing.started).items():
            if source != self.source:
                continue
            if cr is None:
                crs.pop((namespace, name), None)
            else:
                crs[(namespace, name)] = cr
        return list(crs.values())

    def _list_adapters(self) -> CrListing:
        started = time.monotonic()
        return CrListing(started, tuple(k8s.list_adapters(self.kube)))

    def list_target(self) -> TargetPods:
        """List the target now: the InferenceService (None when it can't be used), its pods."""
        try:
            target = self.resolve_target()
        except ClusterError:
            return TargetPods(None)
        listing = k8s.list_target_pods(self.kube, target)
        return TargetPods(target, listing.pods, listing.untrusted)

    def shared_listing(self) -> TargetPods:
        """The target and its pods as listed for this process's operations (bounded age)."""
        return LISTINGS.get(self.scope, self.list_target)

    def look(self, listing: TargetPods) -> TargetLook:
        """Ask each Ready pod of ``listing`` what it serves, now."""
        if listing.target is None:
            return TargetLook(None)
        pods = listing.pods
        views, errors = self.views(pods, self.clients(pods, self.api_key(listing.target)))
        return TargetLook(listing.target, tuple(views), errors, listing.untrusted)

    def shared_look(self, looks: SharedViews[LookKey, TargetLook]) -> TargetLook:
        """A look at the target shared with this process's other operations (bounded age)."""
        args = self.args
        secret = (
            (args.api_key_secret_name, args.api_key_secret_key)
            if args.api_key_secret_name
            else None
        )
        key = LookKey(self.scope, args.transport, secret, self.config.api_key, self.timeouts)
        return looks.get(key, lambda: self.look(self.shared_listing()))

    def api_key(self, target: k8s.Target) -> str | None:
        """The SGLang API key: from the referenced Secret (target's namespace), else config."""
        if self.args.api_key_secret_name:
            return k8s.read_secret_value(
                self.kube,
                target.namespace,
                self.args.api_key_secret_name,
                self.args.api_key_secret_key,
            )
        return self.config.api_key

    def clients(
        self, pods: Sequence[k8s.PodEndpoint], api_key: str | None
    ) -> dict[str, SGLangClient]:
        """One SGLang client per reachable pod, for the chosen transport."""
        ensure_reachable(self.args, api_key)
        if self.args.transport is Transport.PROXY:
            access = POOL.proxy(self.source)
            return {
                p.name: POOL.sglang(
                    access.pod_url(p),
                    api_key=None,
                    headers=access.headers,
                    timeouts=self.timeouts,
                    label=f"pod {p.name} (via apiserver proxy)",
                    tls=access.ssl_context,
                )
                for p in pods
            }
        return {
            p.name: POOL.sglang(
                _pod_url(p),
                api_key=api_key,
                headers={},
                timeouts=self.timeouts,
                label=f"pod {p.name} ({_pod_url(p)})",
                tls=None,
            )
            for p in pods
            if p.ip
        }

    def views(
        self, pods: Sequence[k8s.PodEndpoint], clients: Mapping[str, SGLangClient]
    ) -> tuple[list[PodView], dict[str, str]]:
        """Read ``/v1/models`` on every Ready pod in parallel; errors per pod, not raised."""

        def read(pod: k8s.PodEndpoint) -> tuple[PodView, str]:
            client = clients.get(pod.name)
            if not pod.ready or client is None:
                return PodView(pod.name, pod.ready and client is not None, pod.state, pod.uid), ""
            try:
                listed = client.list_models()
            except PulumiLoRAError as exc:
                return PodView(pod.name, True, pod.state, pod.uid, None), str(exc)
            return PodView(pod.name, True, pod.state, pod.uid, dict(listed.adapters)), ""

        results = parallel(read, pods)
        return [v for v, _ in results], {v.name: e for v, e in results if e}

    # --- actions --------------------------------------------------------------------------------

    def execute(
        self,
        desired: Desired | None,
        actions: Sequence[PodAction],
        clients: Mapping[str, SGLangClient],
    ) -> list[PodOutcome]:
        """Run every pod's program in parallel; then retire the shared looks at the target
        (they may predate these loads and unloads)."""
        name = self.args.adapter_name

        def run(action: PodAction) -> PodOutcome:
            client = clients.get(action.pod)
            if client is None:
                return PodOutcome(action.pod, loaded=False, waiting=True)
            return run_sync(pod_program(action, desired, name), client)

        try:
            return parallel(run, actions)
        finally:
            LOOKS.invalidate(self.scope)

    def write_status(
        self,
        cr: Mapping[str, Any],
        availability: Availability,
        outcomes: Sequence[PodOutcome] | None,
        now: datetime,
        untrusted: Mapping[str, str] | None = None,
    ) -> AdapterState:
        """Write conditions, loadedPath and lastLoadedAt to the CR; return the new state.

        ``untrusted`` (labelled pods outside the controller chain) are named in ``Available``'s
        message and listed in the per-pod outputs as not Ready.
        """
        meta = cr["metadata"]
        if untrusted and availability.ok:
            note = untrusted_message(self.args.inference_service, untrusted)
            availability = Availability(True, availability.reason, note)
        stored = LoRAAdapterStatus.model_validate(cr.get("status") or {})
        summary = None if outcomes is None else summarize(outcomes)
        conditions = build_conditions(
            availability=availability,
            summary=summary,
            policy=self.policy,
            generation=int(meta.get("generation", 1)),
            previous=stored.conditions or [],
            now=now,
        )
        loaded = [o for o in outcomes or [] if o.loaded]
        did_load = any(o.did_load for o in loaded)
        status = LoRAAdapterStatus(
            conditions=conditions,
            loaded_path=self.args.path if loaded else stored.loaded_path,
            last_loaded_at=now if did_load else stored.last_loaded_at,
        )
        k8s.apply_adapter_status(
            self.kube, meta["namespace"], meta["name"], status.wire(), STATUS_MANAGER
        )
        pods = reports(outcomes or [], now) + untrusted_reports(untrusted or {})
        return state_from_cr({**cr, "status": status.wire()}, pods)

    @property
    def policy(self) -> ReadinessPolicy:
        """The core's readiness policy for this resource."""
        return ReadinessPolicy(self.args.readiness_policy.value)

    def apply_cr(self, operation: str | None = None) -> dict[str, Any]:
        """Server-side apply of spec and annotations (``operation`` marks a swap or delete)."""
        notes = self.args.annotations()
        if operation:  # omitted otherwise: server-side apply then removes it
            notes[ANNOTATION_OPERATION] = f"{operation}@{format_time(now_utc())}"
        manifest = k8s.adapter_manifest(
            self.args.namespace, self.args.cr_name, self.args.spec().wire(), notes
        )
        applied = k8s.apply_adapter(self.kube, manifest)
        OWN_CRS.record((self.source, self.args.namespace, self.args.cr_name), applied)
        return applied

    def release_llmkube(self, cr: Mapping[str, Any]) -> None:
        """Take the CR from LLMKube's LoRA controller: remove its finalizer, if the CR carries it.

        Where the coexistence policy holds (docs/protocol.md) LLMKube cannot add it back, so a CR
        made before the policy is taken over; without the policy LLMKube re-adds it, and nothing
        depends on it being gone (deletion releases it again).
        """
        if LLMKUBE_FINALIZER in ((cr.get("metadata") or {}).get("finalizers") or []):
            k8s.release_finalizer(
                self.kube, self.args.namespace, self.args.cr_name, LLMKUBE_FINALIZER
            )

    def delete_cr(self) -> None:
        """Delete the CR and wait until it is gone (recorded for the shared listings).

        Called once every pod is unloaded: LLMKube's finalizer, which guards its own unload
        through the Service, is released rather than waited on (its controller may be backing off,
        held off by the coexistence policy, or not running).
        """
        k8s.delete_adapter(
            self.kube, self.args.namespace, self.args.cr_name, release=LLMKUBE_FINALIZER
        )
        OWN_CRS.record((self.source, self.args.namespace, self.args.cr_name), None)

    def load_everywhere(
        self,
        cr: Mapping[str, Any],
        target: k8s.Target,
        *,
        observe: bool,
        seen: k8s.PodListing | None = None,
    ) -> tuple[list[PodOutcome], k8s.PodListing]:
        """Wait for the pods (``seen``, listed moments ago, when they are all Ready), then load
        (or swap) on every Ready one its controller chain vouches for."""
        listing = (
            seen
            if seen is not None and k8s.all_ready(target, seen.pods)
            else k8s.wait_for_pods(self.kube, target, self.args.ready_timeout_seconds)
        )
        pods = list(listing.pods)
        if not any(p.ready for p in pods):
            raise NoReadyPods(target.namespace, target.name, [f"{p.name}: {p.state}" for p in pods])
        clients = self.clients(pods, self.api_key(target))
        if observe:
            views, _ = self.views(pods, clients)
        else:
            views = [PodView(p.name, p.ready and p.name in clients, p.state, p.uid) for p in pods]
        desired = Desired(self.args.adapter_name, self.args.path, self.args.pinned)
        return self.execute(desired, plan(desired, views, desired.name), clients), listing


# --- the lifecycle ------------------------------------------------------------------------------


@k8s.apiserver_errors()
def create(args: AdapterArgs, config: ProviderConfig) -> AdapterState:
    """Apply the CR and load on every Ready pod; on failure leave no CR and no partial load."""
    session = Session(args, config)
    listing = session.shared_listing()
    target = listing.target or session.resolve_target()  # afresh: raises why it can't be used
    existing = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    if existing is not None:
        refusal = adoption_refusal(existing, args)
        if refusal:
            raise ClusterError(refusal)
    adopted = existing is not None
    session.check_collisions(target, own_uid=(existing or {}).get("metadata", {}).get("uid"))
    ensure_reachable(args, session.api_key(target))
    cr = session.apply_cr()
    loads: tuple[Sequence[k8s.PodEndpoint], Sequence[PodOutcome]] | None = None
    try:
        if adopted:
            session.release_llmkube(cr)
        if args.transport is Transport.DELEGATED:
            return await_delegated(session, cr)
        # An adopted CR's adapter may already be served: look first, load only where it lacks.
        outcomes, seen = session.load_everywhere(cr, target, observe=adopted, seen=listing.listing)
        loads = (seen.pods, outcomes)
        _untrusted_event(session, cr, seen.untrusted)
        summary = summarize(outcomes)
        if not is_loaded(summary, session.policy):
            raise AdapterNotLoaded(args.adapter_name, loaded_message(summary), _advice(outcomes))
        state = session.write_status(
            cr, Availability(True, "InferenceServiceReady"), outcomes, now_utc(), seen.untrusted
        )
        _event(session, cr, outcomes, "Loaded")
        return state
    except BaseException:
        # A failed create leaves nothing: unload what it loaded (pods answer even when the
        # apiserver stopped answering after the loads), then remove the CR (an adopted one is
        # given back as it was found: only this project's annotations come off).
        if loads is not None:
            with contextlib.suppress(PulumiLoRAError, *k8s.TRANSPORT_ERRORS):  # best effort
                _rollback(session, target, *loads)
        if adopted:
            with contextlib.suppress(PulumiLoRAError):
                k8s.remove_annotations(
                    session.kube, args.namespace, args.cr_name, list(args.annotations())
                )
        else:
            _remove_cr_patiently(session)
        raise


@k8s.apiserver_errors()
def update(args: AdapterArgs, config: ProviderConfig) -> AdapterState:
    """Re-apply the CR and swap (or load) on every Ready pod; status records any failure."""
    session = Session(args, config)
    cr = session.apply_cr(operation="update")
    try:
        session.release_llmkube(cr)
        listing = session.shared_listing()
        target = listing.target or session.resolve_target()  # afresh: raises why it can't be used
        session.check_collisions(target, own_uid=cr["metadata"].get("uid"))
        if args.transport is Transport.DELEGATED:
            cr = session.apply_cr()
            return await_delegated(session, cr)
        outcomes, seen = session.load_everywhere(cr, target, observe=True, seen=listing.listing)
        _untrusted_event(session, cr, seen.untrusted)
        state = session.write_status(
            cr, Availability(True, "InferenceServiceReady"), outcomes, now_utc(), seen.untrusted
        )
        _event(session, cr, outcomes, "Updated")
        summary = summarize(outcomes)
        if not is_loaded(summary, session.policy):
            raise AdapterNotLoaded(args.adapter_name, loaded_message(summary), _advice(outcomes))
        return state
    except PulumiLoRAError as exc:
        if not isinstance(exc, AdapterNotLoaded):
            session.write_status(cr, Availability(False, exc.reason, str(exc)), None, now_utc())
        raise
    finally:
        session.apply_cr()


@k8s.apiserver_errors()
def observe(
    args: AdapterArgs,
    config: ProviderConfig,
    looks: SharedViews[LookKey, TargetLook] | None = None,
    previous: Sequence[Condition] = (),
) -> AdapterState | None:
    """What the cluster says now (refresh): None when the CR is gone.

    The CR is always read afresh; the target's pods are looked at afresh, or through ``looks``
    (``LOOKS``: shared with this process's other operations, at most its max age old).

    The pods are the truth: the conditions are this project's verdict on what the pods serve
    now (``observed_conditions``), not what the CR's status says, which another writer (LLMKube's
    own LoRA controller, where no coexistence policy holds it off) may have rewritten.
    ``previous`` (the conditions last reported) keeps each unchanged condition's ``since``.
    """
    session = Session(args, config)
    cr = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    if cr is None:
        return None
    spec = cr.get("spec") or {}
    live = args.model_copy(
        update={
            "adapter_name": spec.get("name", args.adapter_name),
            "path": spec.get("path", args.path),
        }
    )
    session = Session(live, config)
    if args.transport is Transport.DELEGATED:  # the loop's verdict, never LLMKube's
        state = state_from_cr(cr, ())
        kept = tuple(c for c in state.conditions if not written_by_llmkube(c))
        return replace(state, conditions=kept)
    look = session.look(session.list_target()) if looks is None else session.shared_look(looks)
    errors = look.errors
    since = (cr.get("status") or {}).get("lastLoadedAt")
    name = live.adapter_name
    pod_reports = tuple(
        PodReport(
            v.name,
            v.ready,
            loaded=bool(v.adapters and name in v.adapters),
            path=(v.adapters or {}).get(name),
            reason="Unreachable" if v.name in errors else "",
            error=errors.get(v.name, ""),
            since=since if v.adapters and name in v.adapters else None,
        )
        for v in look.pods
    )
    state = state_from_cr(cr, pod_reports + untrusted_reports(look.untrusted))
    availability = (
        Availability(True, "InferenceServiceReady")
        if look.target is not None
        else _unavailable(session)
    )
    conditions = observed_conditions(
        availability,
        None if look.target is None else pod_reports,
        look.untrusted,
        live,
        generation=state.generation,
        previous=previous or state.conditions,
        now=now_utc(),
    )
    return replace(state, conditions=conditions)


@k8s.apiserver_errors()
def declared_at(resource_id: str, config: ProviderConfig) -> dict[str, Any] | None:
    """``pulumi import``: the arguments the CR ``NAMESPACE/NAME`` declares (``declared_by_cr``),
    read with the provider's cluster credentials; None when there is no such CR. Reads only."""
    namespace, slash, name = resource_id.partition("/")
    if not (slash and namespace and name) or "/" in name:
        raise ConfigurationError(
            f"cannot import {resource_id!r}: the ID of a LoRAAdapter is NAMESPACE/NAME, the "
            "CR's namespace and name (e.g. models/sql-lora)"
        )
    kube = POOL.kube(k8s.KubeSource(kubeconfig=config.kubeconfig, context=config.context))
    cr = k8s.get_adapter(kube, namespace, name)
    return None if cr is None else declared_by_cr(cr)


def observed_conditions(
    availability: Availability,
    pods: Sequence[PodReport] | None,
    untrusted: Mapping[str, str],
    args: AdapterArgs,
    *,
    generation: int,
    previous: Sequence[Condition],
    now: datetime,
) -> tuple[Condition, ...]:
    """Pure: the conditions that what the pods serve now earns (``pods`` None: no target).

    A pod counts as loaded when it serves ``args.path`` under ``args.adapter_name``; a pod whose
    ``/v1/models`` failed counts as failed, with its error. Conditions whose status did not flip
    keep their ``lastTransitionTime`` from ``previous``; types other than the four are dropped.
    """
    if untrusted and availability.ok:
        note = untrusted_message(args.inference_service, untrusted)
        availability = Availability(True, availability.reason, note)
    summary = (
        None
        if pods is None
        else summarize(
            [
                PodOutcome(
                    p.pod,
                    loaded=p.loaded and p.path == args.path,
                    path=p.path,
                    waiting=not p.ready,
                    reason=p.reason,
                    error=p.error,
                )
                for p in pods
            ]
        )
    )
    fresh = build_conditions(
        availability=availability,
        summary=summary,
        policy=ReadinessPolicy(args.readiness_policy.value),
        generation=generation,
        previous=previous,
        now=now,
    )
    kinds = {k.value for k in ConditionKind}
    return tuple(c for c in fresh if c.type in kinds)


def _unavailable(session: Session) -> Availability:
    """Why the target can't be used, asked afresh (it may have come back since the look)."""
    try:
        session.resolve_target()
    except ClusterError as exc:
        return Availability(False, exc.reason, str(exc))
    return Availability(True, "InferenceServiceReady")


@k8s.apiserver_errors()
def delete(args: AdapterArgs, config: ProviderConfig) -> None:
    """Unload from every pod (unless another CR claims the name), remove the CR, wait it's gone."""
    session = Session(args, config)
    cr = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    finalizers = ((cr or {}).get("metadata") or {}).get("finalizers") or []
    llmkube_holds = LLMKUBE_FINALIZER in finalizers
    if llmkube_holds:
        # LLMKube's LoRA controller marked it (no coexistence policy): it loads through the
        # Service on any change of a live CR, but only unloads once the CR is being deleted.
        # So the deletion comes first, held by its finalizer until the pods are unloaded (no
        # annotation then: an apply to a CR LLMKube already let go of would make it again).
        k8s.begin_delete(session.kube, args.namespace, args.cr_name)
    elif cr is not None:
        session.apply_cr(operation="delete")
    try:
        target = session.resolve_target()
    except ClusterError:
        target = None  # a vanished (or changed) target has nothing left to unload
    if (
        target is not None
        and args.transport is not Transport.DELEGATED
        and not session.claims(target, own_uid=(cr or {}).get("metadata", {}).get("uid"))
    ):
        pods = list(k8s.list_target_pods(session.kube, target).pods)
        clients = session.clients(pods, session.api_key(target))
        views, _ = session.views(pods, clients)
        outcomes = session.execute(None, plan(None, views, args.adapter_name), clients)
        ready = {v.name for v in views if v.ready}
        failed = [o for o in outcomes if o.error and o.pod in ready]
        if failed:
            if cr is not None and not llmkube_holds:  # a CR being deleted stays so
                session.apply_cr()
            raise AdapterNotLoaded(
                args.adapter_name,
                "; ".join(f"pod {o.pod}: {o.error}" for o in failed),
                "the delete can be retried: it unloads from every pod again"
                if llmkube_holds
                else "the CR is kept so the delete can be retried",
                unloading=True,
            )
    session.delete_cr()


def await_delegated(session: Session, cr: Mapping[str, Any], poll: float = 0.5) -> AdapterState:
    """Wait for the in-cluster re-sync loop to report this generation (Loaded or Error)."""
    meta = cr["metadata"]
    generation = int(meta.get("generation", 1))
    deadline = time.monotonic() + session.args.ready_timeout_seconds
    while True:
        live = k8s.get_adapter(session.kube, meta["namespace"], meta["name"]) or cr
        state = state_from_cr(live, ())
        current = {  # the loop's verdict: LLMKube's controller may write the same types
            c.type: c
            for c in state.conditions
            if c.observed_generation == generation and not written_by_llmkube(c)
        }
        if (loaded := current.get(ConditionKind.LOADED.value)) and (
            loaded.status is ConditionStatus.TRUE
        ):
            return state
        if (error := current.get(ConditionKind.ERROR.value)) and (
            error.status is ConditionStatus.TRUE
        ):
            raise AdapterNotLoaded(
                session.args.adapter_name,
                error.message,
                f"reported by the re-sync loop ({error.reason})",
            )
        if time.monotonic() >= deadline:
            raise AdapterNotLoaded(
                session.args.adapter_name,
                f"no re-sync loop reported generation {generation} within "
                f"{session.args.ready_timeout_seconds:.0f}s",
                "the delegated transport needs `pulumi-lora resync` running in the cluster",
            )
        time.sleep(poll)


# --- helpers ------------------------------------------------------------------------------------


def state_from_cr(cr: Mapping[str, Any], pods: Iterable[PodReport]) -> AdapterState:
    """Pure: an AdapterState from a stored CR plus per-pod reports."""
    meta = cr.get("metadata") or {}
    status = LoRAAdapterStatus.model_validate(cr.get("status") or {})
    return AdapterState(
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 1)),
        spec=dict(cr.get("spec") or {}),
        annotations=dict(meta.get("annotations") or {}),
        conditions=tuple(status.conditions or ()),
        pods=tuple(pods),
        loaded_path=status.loaded_path,
        last_loaded_at=format_time(status.last_loaded_at) if status.last_loaded_at else None,
    )


def reports(outcomes: Sequence[PodOutcome], now: datetime) -> tuple[PodReport, ...]:
    """Pure: per-pod lines from the outcomes of one run."""
    return tuple(
        PodReport(
            o.pod,
            ready=not o.waiting,
            loaded=o.loaded,
            path=o.path,
            reason=o.reason,
            error=o.error,
            since=format_time(now) if o.did_load else None,
        )
        for o in outcomes
    )


#: Per-pod ``reason`` of a labelled pod outside the target's controller chain.
UNTRUSTED_REASON = "NotControlledByTarget"


def untrusted_reports(untrusted: Mapping[str, str]) -> tuple[PodReport, ...]:
    """Pure: per-pod lines for the labelled pods that got nothing (not Ready, for drift)."""
    return tuple(
        PodReport(name, ready=False, loaded=False, reason=UNTRUSTED_REASON, error=f"pod {why}")
        for name, why in sorted(untrusted.items())
    )


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """Map ``fn`` over ``items`` on threads (order kept); pods are independent servers."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(fn, items))


def now_utc() -> datetime:
    """The clock, in one place."""
    return datetime.now(UTC)


def adoption_refusal(existing: Mapping[str, Any], args: AdapterArgs) -> str | None:
    """Pure: why ``create`` must not take over the CR that already has this resource's name, or
    None when it may (``adopt`` set, made outside Pulumi, its spec what ``args`` declares)."""
    meta = existing.get("metadata") or {}
    where = f"LoRAAdapter {args.namespace}/{args.cr_name}"
    if not args.adopt:
        return (
            f"{where} already exists and this stack did not create it; set adopt=True to take "
            "it over (its spec must be what this resource declares), or choose another "
            "resource_name, or delete the existing CR"
        )
    if meta.get("deletionTimestamp"):
        return f"{where} is being deleted; adopt it once it is gone, or create it anew then"
    if ANNOTATION_MANAGED_BY in (meta.get("annotations") or {}):
        return (
            f"{where} is already managed by a pulumi-lora stack (annotation "
            f"{ANNOTATION_MANAGED_BY}); adopt takes over only CRs made outside Pulumi (kubectl, "
            "Helm). To move it here, run `pulumi state delete URN` in the stack that manages it "
            f"(the CR and its adapters stay), then `kubectl annotate lora {args.cr_name} -n "
            f"{args.namespace} {ANNOTATION_MANAGED_BY}-`, then `pulumi up` here"
        )
    spec = existing.get("spec") or {}
    ref = spec.get("inferenceServiceRef") or {}
    have = {
        "spec.name": spec.get("name"),
        "spec.path": spec.get("path"),
        "spec.inferenceServiceRef.name": ref.get("name"),
        "spec.inferenceServiceRef.namespace": ref.get("namespace") or None,
    }
    want = {
        "spec.name": args.adapter_name,
        "spec.path": args.path,
        "spec.inferenceServiceRef.name": args.inference_service,
        "spec.inferenceServiceRef.namespace": args.inference_service_namespace,
    }
    differs = [f"{k} is {have[k]!r}, declared {want[k]!r}" for k in want if have[k] != want[k]]
    if differs:
        return (
            f"{where} exists with another spec ({'; '.join(differs)}); adopt takes over only a "
            "CR whose spec is what the program declares. Declare the CR's values (and change "
            "them in a later `pulumi up`), or edit the CR, or delete it"
        )
    return None


def ensure_reachable(args: AdapterArgs, api_key: str | None) -> None:
    """Fail before anything is made when the transport can't carry the server's API key."""
    if args.transport is Transport.PROXY and api_key:
        raise TransportUnavailable(
            "the apiserver's pod proxy strips the Authorization header, so a keyed SGLang can't "
            "be reached through it; use transport 'delegated' (or 'direct' from inside the "
            "cluster network)"
        )


def _cr_key(cr: Mapping[str, Any]) -> tuple[str, str]:
    meta = cr.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _pod_url(pod: k8s.PodEndpoint) -> str:
    host = f"[{pod.ip}]" if pod.ip and ":" in pod.ip else pod.ip
    return f"http://{host}:{pod.port}"


#: What the removal of a failed create's CR waits out: an apiserver that is briefly away.
_RETRY_DELETE_ON: tuple[type[Exception], ...] = (ApiserverUnreachable, *k8s.TRANSPORT_ERRORS)


def _remove_cr_patiently(session: Session, patience: float = 30.0) -> None:
    """Delete the CR of a failed create, waiting out an apiserver that is briefly unreachable.

    Without this, an apiserver restart in the middle of a create would leave a CR that no stack
    owns, and the next ``pulumi up`` would refuse to adopt it.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            session.delete_cr()
            return
        except _RETRY_DELETE_ON as exc:
            if time.monotonic() >= deadline:
                raise ApiserverUnreachable(
                    f"{exc}; LoRAAdapter {session.args.namespace}/{session.args.cr_name} may "
                    "remain: delete it before the next run"
                ) from exc
            time.sleep(1.0)


def _rollback(
    session: Session,
    target: k8s.Target,
    pods: Sequence[k8s.PodEndpoint],
    outcomes: Sequence[PodOutcome],
) -> None:
    """Unload from exactly the pods this create loaded or may have loaded (best effort; the error
    says the rest), then watch those where a timed-out load may still land (`_settle`)."""
    actions = rollback_plan(outcomes)
    if not actions:
        return
    clients = session.clients(
        [p for p in pods if p.name in {a.pod for a in actions}], session.api_key(target)
    )
    late = unsettled(outcomes, session.execute(None, actions, clients))
    if late:
        _settle(session, [p for p in pods if p.name in late], clients)


#: Seconds between two looks at a pod where a timed-out load may still land.
SETTLE_POLL_SECONDS = 0.5
#: The longest a failed create watches for late loads (the load timeout, up to this).
SETTLE_MAX_SECONDS = 30.0


def _settle(
    session: Session, pods: Sequence[k8s.PodEndpoint], clients: Mapping[str, SGLangClient]
) -> None:
    """Watch pods whose timed-out load may still land, unloading it when it does.

    SGLang keeps working on a request whose client gave up; one held back before the server
    started it arrives later. Each pod is watched until its late load was seen and unloaded, or
    for as long again as the load timeout but at most `SETTLE_MAX_SECONDS` (a failed create
    should not take twice a 300 s timeout to say so), reading ``/v1/models`` every
    `SETTLE_POLL_SECONDS`. A load held back longer still lands where nothing declares it (the
    chaos run's invariants report such an adapter); docs/threat-model.md states the limit.
    """
    name = session.args.adapter_name
    deadline = time.monotonic() + min(session.timeouts.load, SETTLE_MAX_SECONDS)
    waiting = list(pods)
    while waiting and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_SECONDS)
        views, _ = session.views(waiting, clients)
        unloaded = {
            o.pod for o in session.execute(None, plan(None, views, name), clients) if o.did_unload
        }
        waiting = [p for p in waiting if p.name not in unloaded]


def _advice(outcomes: Sequence[PodOutcome]) -> str:
    """One line of what to do, fitting the class of the failures.

    What only a change of flags, spec or keys fixes comes first, then what may pass by itself;
    the first class present wins. A timeout says whether the connection or the answer was late
    (the SGLang clients' message for a connect timeout says "no connection within"); only a
    server that cannot list adapters is told about SGLang versions.
    """
    failed = [o for o in outcomes if o.error]
    by_class: dict[str, str] = {}
    for o in failed:
        kind = o.reason
        if kind == "Timeout" and "no connection within" in o.error:
            kind = "ConnectTimeout"
        by_class.setdefault(kind, o.pod)
    logs = "kubectl logs {pod} -c sglang"
    advice = {
        "LoRANotEnabled": "add --enable-lora to the InferenceService's spec.extraArgs",
        "IncompatibleAdapter": (
            "raise --max-lora-rank or widen --lora-target-modules in spec.extraArgs, or use "
            "an adapter within them"
        ),
        "InvalidAdapterPath": (
            "the path must be a directory with adapter_config.json inside the sglang container"
        ),
        "Unauthorized": (
            "check the SGLang API key (api_key_secret_name or pulumi-lora:sglangApiKey)"
        ),
        "UnsupportedSGLangVersion": (
            "upgrade SGLang: this server cannot list adapters in /v1/models "
            f"(supported SGLang versions: {SUPPORTED_SGLANG})"
        ),
        "CapacityExhausted": (
            "the pod holds --max-loaded-loras adapters and can evict none: raise "
            "--max-loaded-loras (at least --max-loras-per-batch) in spec.extraArgs, or unpin or "
            "unload adapters"
        ),
        "PinStarvation": (
            "at most --max-loras-per-batch - 1 adapters can be pinned: unpin one or raise "
            "--max-loras-per-batch in spec.extraArgs"
        ),
        "IncompleteUnload": "restart the pod: SGLang refuses this adapter name until it restarts",
        "BadRequest": (
            f"SGLang refused the request's shape: report it with the pod's SGLang version ({logs})"
        ),
        "ConnectTimeout": (
            "no connection within pulumi-lora:connectTimeoutSeconds: check that the pod is "
            "reachable from where pulumi runs (transport 'direct' needs the pod network routed "
            "there; from outside the cluster use 'proxy' or 'delegated') and that it is running"
        ),
        "ConnectionFailed": (
            "nothing accepted the connection: check that SGLang is up and listens on the pod's "
            f"container port named http (SGLang's --port) ({logs})"
        ),
        "Timeout": (
            "a pod did not answer within the SGLang client timeouts; raise "
            "pulumi-lora:loadTimeoutSeconds (unloadTimeoutSeconds, readTimeoutSeconds) if it is "
            "just slow"
        ),
        "ServerStarting": "SGLang is starting or stopping on the pod: run again once it serves",
        "ServerError": f"SGLang failed while handling the request: check its logs ({logs})",
        "InvalidResponse": (
            "the answer does not follow SGLang's LoRA HTTP contract: check what listens on the "
            f"pod's http port, and its logs ({logs})"
        ),
    }
    for kind, text in advice.items():
        if kind in by_class:
            return text.format(pod=by_class[kind])
    pod = failed[0].pod if failed else "POD"
    return f"see each pod's error above, and the SGLang logs ({logs.format(pod=pod)})"


#: Reason of the Warning Event naming labelled pods outside the controller chain.
UNTRUSTED_EVENT = "UntrustedPodIgnored"


def _untrusted_event(session: Session, cr: Mapping[str, Any], untrusted: Mapping[str, str]) -> None:
    if untrusted:
        k8s.emit_event(
            session.kube,
            cr,
            reason=UNTRUSTED_EVENT,
            message=untrusted_message(session.args.inference_service, untrusted),
            warning=True,
        )


def _event(
    session: Session, cr: Mapping[str, Any], outcomes: Sequence[PodOutcome], verb: str
) -> None:
    changed = [o.pod for o in outcomes if o.did_load]
    if changed:
        k8s.emit_event(
            session.kube,
            cr,
            reason=f"Adapter{verb}",
            message=f"{verb.lower()} {session.args.adapter_name} from "
            f"{session.args.path} on {', '.join(changed)}",
        )


__all__ = [
    "AdapterState",
    "PodReport",
    "ProviderConfig",
    "create",
    "delete",
    "observe",
    "target_generation",
    "update",
]
