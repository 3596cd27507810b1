"""One operation's session with its cluster: the CR, the target's pods, their SGLang clients,
and the parallel execution of a plan on every pod."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from lightkube import Client

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._caches import SharedViews
from pulumi_lora._core._conditions import (
    Availability,
    build_conditions,
    summarize,
    unload_conditions,
)
from pulumi_lora._core._llmkube import PodEndpoint, Target, adapter_manifest
from pulumi_lora._core._ownership import untrusted_message
from pulumi_lora._core._reconcile import (
    Desired,
    PodAction,
    PodOutcome,
    PodView,
    pod_program,
    startup_adapters,
)
from pulumi_lora._errors import (
    ClusterError,
    Forbidden,
    InferenceServiceNotFound,
    NameCollision,
    PulumiLoRAError,
    RuntimeMismatch,
)
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._looks import (
    CR_LISTINGS,
    LISTINGS,
    LOOKS,
    OWN_CRS,
    CrListing,
    LookKey,
    Scope,
    TargetLook,
    TargetPods,
)
from pulumi_lora._lifecycle._pool import POOL
from pulumi_lora._lifecycle._state import (
    AdapterState,
    reports,
    state_from_cr,
    untrusted_reports,
)
from pulumi_lora._lifecycle._transport import pod_clients
from pulumi_lora._models import (
    ANNOTATION_OPERATION,
    ANNOTATION_PREFIX,
    LLMKUBE_FINALIZER,
    UNLOAD_FINALIZER,
    LoRAAdapterStatus,
    Policy,
    format_time,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient
from pulumi_lora._sglang._executor import run_sync

#: Field manager for the status this provider writes (the re-sync loop uses its own).
STATUS_MANAGER = "pulumi-lora-provider"

T = TypeVar("T")
R = TypeVar("R")


#: What says an InferenceService has no pod this project serves: no such object (or namespace),
#: or not an SGLang one. Every other ClusterError is no answer, never taken for "gone".
TARGET_GONE = (InferenceServiceNotFound, RuntimeMismatch)


@dataclass
class Session:
    """The I/O context of one operation: cluster client, transport, credentials."""

    args: AdapterArgs
    config: ProviderConfig
    _kube: Client | None = None

    @property
    def source(self) -> KubeSource:
        """Cluster credentials: the resource's own, else the provider's, else the defaults."""
        return self.config.kube.for_resource(
            self.args.kubeconfig or self.args.kubeconfig_path, self.args.kube_context
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

    def resolve_target(self) -> Target:
        """The InferenceService; raises NotFound, or RuntimeMismatch when it isn't sglang."""
        target = k8s.get_target(self.kube, self.args.target_namespace, self.args.inference_service)
        if target.runtime != "sglang":
            raise RuntimeMismatch(target.namespace, target.name, target.runtime)
        return target

    def check_collisions(self, target: Target, own_uid: str | None) -> None:
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
        self, target: Target, own_uid: str | None, *, shared: bool = False
    ) -> list[Mapping[str, Any]]:
        """Other LoRAAdapter CRs declaring the same adapter name on the same target (listed now,
        or ``shared``: see ``adapters``)."""
        found = []
        for cr in self.adapters() if shared else self._visible_adapters():
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
        try:
            listing = CR_LISTINGS.get(self.source, self._list_adapters)
        except Forbidden:  # a Role per namespace, no ClusterRole: what it grants, listed now
            return self._visible_adapters()
        crs = {cr_key(cr): cr for cr in listing.crs}
        for (source, namespace, name), cr in OWN_CRS.since(listing.started).items():
            if source != self.source:
                continue
            if cr is None:
                crs.pop((namespace, name), None)
            else:
                crs[(namespace, name)] = cr
        return list(crs.values())

    def shared_cr(self) -> Mapping[str, Any] | None:
        """This resource's CR as the shared listing has it (see ``adapters``), or None.

        Only its presence is taken from the listing: a CR the listing lacks (deleted, or made
        since the listing started) is read afresh before it is called gone, and so is every CR
        when the cluster-wide listing can't be had (RBAC that grants only the namespace).
        """
        key = (self.args.namespace, self.args.cr_name)
        with contextlib.suppress(ClusterError):
            found = next((cr for cr in self.adapters() if cr_key(cr) == key), None)
            if found is not None:
                return found
        return k8s.get_adapter(self.kube, *key)

    def _visible_adapters(self) -> list[Mapping[str, Any]]:
        """Every CR this identity may list: the cluster's, or, when RBAC grants namespaces only
        (``pulumi-lora rbac -n``), those of the CR's and the target's namespaces (a CR in
        another namespace naming the same target is then not seen)."""
        try:
            return list(k8s.list_adapters(self.kube))
        except Forbidden:
            namespaces = dict.fromkeys((self.args.namespace, self.args.target_namespace))
            return [cr for ns in namespaces for cr in k8s.list_adapters(self.kube, ns)]

    def _list_adapters(self) -> CrListing:
        started = time.monotonic()
        return CrListing(started, tuple(k8s.list_adapters(self.kube)))

    def list_target(self) -> TargetPods:
        """List the target now: the InferenceService (None when it can't be used), its pods."""
        try:
            target = self.resolve_target()
        except TARGET_GONE:  # any other failure is no answer: raised, never taken for "gone"
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

    def api_key(self, target: Target) -> str | None:
        """The SGLang API key: from the referenced Secret (target's namespace), else config."""
        if self.args.api_key_secret_name:
            return k8s.read_secret_value(
                self.kube,
                target.namespace,
                self.args.api_key_secret_name,
                self.args.api_key_secret_key,
            )
        return self.config.api_key

    def clients(self, pods: Sequence[PodEndpoint], api_key: str | None) -> dict[str, SGLangClient]:
        """One SGLang client per reachable pod, for the resource's transport."""
        return pod_clients(self.args.transport, self.source, pods, api_key, self.timeouts)

    def views(
        self, pods: Sequence[PodEndpoint], clients: Mapping[str, SGLangClient]
    ) -> tuple[list[PodView], dict[str, str]]:
        """Read ``/v1/models`` on every Ready pod in parallel; errors per pod, not raised."""

        def read(pod: PodEndpoint) -> tuple[PodView, str]:
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
        stored = LoRAAdapterStatus.parse(cr.get("status") or {})
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
        written = k8s.apply_adapter_status(
            self.kube, meta["namespace"], meta["name"], status.wire(), STATUS_MANAGER
        )
        OWN_CRS.record((self.source, meta["namespace"], meta["name"]), written)
        pods = reports(outcomes or [], now) + untrusted_reports(untrusted or {})
        return state_from_cr({**cr, "status": status.wire()}, pods)

    def hold(self, cr: Mapping[str, Any], still_serving: Sequence[PodOutcome]) -> None:
        """Record on the CR (conditions, a Warning Event) that its deletion waits because the
        Ready pods ``still_serving`` failed to unload its adapter."""
        meta = cr["metadata"]
        stored = LoRAAdapterStatus.parse(cr.get("status") or {})
        conditions = unload_conditions(
            still_serving,
            generation=int(meta.get("generation", 1)),
            previous=stored.conditions or [],
            now=now_utc(),
        )
        status = stored.replace(conditions=conditions)
        written = k8s.apply_adapter_status(
            self.kube, meta["namespace"], meta["name"], status.wire(), STATUS_MANAGER
        )
        OWN_CRS.record((self.source, meta["namespace"], meta["name"]), written)
        for outcome in still_serving:
            k8s.emit_event(
                self.kube,
                cr,
                reason="UnloadUnsuccessful",
                message=f"pod {outcome.pod} still serves {self.args.adapter_name}: "
                f"{outcome.error}; the CR waits for its unload",
                warning=True,
            )

    @property
    def policy(self) -> Policy:
        """The core's readiness policy for this resource."""
        return Policy(self.args.readiness_policy.value)

    def apply_cr(self, operation: str | None = None, *, hold: bool = False) -> dict[str, Any]:
        """Server-side apply of spec and annotations (``operation`` marks a swap or delete).

        ``hold`` adds :data:`UNLOAD_FINALIZER` (a delete about to begin); any other apply leaves
        it out, and server-side apply then removes it: only a delete in progress carries it.
        """
        notes = self.args.annotations()
        if operation:  # omitted otherwise: server-side apply then removes it
            notes[ANNOTATION_OPERATION] = f"{operation}@{format_time(now_utc())}"
        manifest = adapter_manifest(
            self.args.namespace,
            self.args.cr_name,
            self.args.spec().wire(),
            notes,
            finalizers=(UNLOAD_FINALIZER,) if hold else (),
        )
        applied = k8s.apply_adapter(self.kube, manifest)
        OWN_CRS.record((self.source, self.args.namespace, self.args.cr_name), applied)
        return applied

    def restore_cr(self, existing: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of ``existing``'s spec and project annotations (as it was before this
        operation's apply): a swap rolled back leaves the CR naming the revision that serves."""
        meta = existing.get("metadata") or {}
        notes = {
            k: str(v)
            for k, v in (meta.get("annotations") or {}).items()
            if k.startswith(ANNOTATION_PREFIX) and k != ANNOTATION_OPERATION
        }
        manifest = adapter_manifest(
            self.args.namespace, self.args.cr_name, dict(existing.get("spec") or {}), notes
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

        Called once every pod is unloaded: pulumi-lora's own finalizer, which held the CR while
        the pods unloaded, comes off; LLMKube's, which guards its own unload through the Service,
        is released rather than waited on (its controller may be backing off, held off by the
        coexistence policy, or not running).
        """
        k8s.delete_adapter(
            self.kube,
            self.args.namespace,
            self.args.cr_name,
            release=(UNLOAD_FINALIZER, LLMKUBE_FINALIZER),
        )
        OWN_CRS.record((self.source, self.args.namespace, self.args.cr_name), None)


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """Map ``fn`` over ``items`` on threads (order kept); pods are independent servers."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(fn, items))


def now_utc() -> datetime:
    """The clock, in one place."""
    return datetime.now(UTC)


def as_declared(args: AdapterArgs, cr: Mapping[str, Any]) -> AdapterArgs:
    """Pure: ``args`` with the adapter name and path the CR's spec declares now (a refresh reads
    what is live, not what the program last declared)."""
    spec = cr.get("spec") or {}
    return args.replace(
        adapter_name=spec.get("name", args.adapter_name), path=spec.get("path", args.path)
    )


def cr_key(cr: Mapping[str, Any]) -> tuple[str, str]:
    meta = cr.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def target_generation(args: AdapterArgs, config: ProviderConfig) -> int:
    """How many times this process loaded or unloaded on ``args``' target (``LOOKS``' count)."""
    return LOOKS.generation(Session(args, config).scope)
