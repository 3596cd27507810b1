"""One LoRAAdapter's lifecycle against a live cluster: create, observe, update, delete.

Each step looks, asks the pure core for a plan, runs it on every pod in parallel, records the
result in the CR's status and Events, and returns the :class:`AdapterState` the outputs show.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._caches import SharedViews
from pulumi_lora._core._conditions import (
    Availability,
    build_conditions,
    is_loaded,
    loaded_message,
    summarize,
)
from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._ownership import untrusted_message
from pulumi_lora._core._reconcile import PodOutcome, plan
from pulumi_lora._core._rollout import failures, replaced, rollback_message, said
from pulumi_lora._core._topology import servable
from pulumi_lora._errors import (
    AdapterNotLoaded,
    ClusterError,
    PulumiLoRAError,
    SwapRolledBack,
)
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._delegated import await_delegated, delete_delegated, observe_delegated
from pulumi_lora._lifecycle._events import advice, record_outcomes, record_untrusted
from pulumi_lora._lifecycle._looks import (
    LookKey,
    TargetLook,
)
from pulumi_lora._lifecycle._rollback import (
    remove_cr_patiently,
    rollback,
)
from pulumi_lora._lifecycle._rolling import Say, desired_of, load_everywhere, quiet
from pulumi_lora._lifecycle._session import (
    TARGET_GONE,
    Session,
    as_declared,
    now_utc,
)
from pulumi_lora._lifecycle._state import (
    AdapterState,
    PodReport,
    state_from_cr,
    untrusted_reports,
)
from pulumi_lora._lifecycle._transport import ensure_reachable
from pulumi_lora._models import (
    ANNOTATION_MANAGED_BY,
    LLMKUBE_FINALIZER,
    UNLOAD_FINALIZER,
    Condition,
    ConditionKind,
    Policy,
    Transport,
)

# --- the lifecycle ------------------------------------------------------------------------------


@k8s.apiserver_errors()
def create(args: AdapterArgs, config: ProviderConfig) -> AdapterState:
    """Apply the CR and load on every Ready pod; on failure leave no CR and no partial load."""
    session = Session(args, config)
    listing = session.shared_listing()
    target = servable(listing.target or session.resolve_target())  # afresh: raises why not
    existing = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    if existing is not None:
        refusal = adoption_refusal(existing, args)
        if refusal:
            raise ClusterError(refusal)
    adopted = existing is not None
    session.check_collisions(target, own_uid=(existing or {}).get("metadata", {}).get("uid"))
    if not args.transport.carries_key:  # a key only matters where it cannot go (delegated:
        ensure_reachable(args.transport, session.api_key(target))  # the loop reads it)
    cr = session.apply_cr()
    loads: tuple[Sequence[PodEndpoint], Sequence[PodOutcome]] | None = None
    try:
        if adopted:
            session.release_llmkube(cr)
        if args.transport is Transport.DELEGATED:
            return await_delegated(session, cr)
        # An adopted CR's adapter may already be served: look first, load only where it lacks.
        outcomes, seen, _ = load_everywhere(session, target, observe=adopted, seen=listing.listing)
        loads = (seen.pods, outcomes)
        record_untrusted(session, cr, seen.untrusted)
        summary = summarize(outcomes)
        if not is_loaded(summary, session.policy):
            raise AdapterNotLoaded(args.adapter_name, loaded_message(summary), advice(outcomes))
        state = session.write_status(
            cr, Availability(True, "InferenceServiceReady"), outcomes, now_utc(), seen.untrusted
        )
        record_outcomes(session, cr, outcomes, "Loaded")
        return state
    except BaseException:
        # A failed create leaves nothing: unload what it loaded (pods answer even when the
        # apiserver stopped answering after the loads), then remove the CR (an adopted one is
        # given back as it was found: only this project's annotations come off).
        if loads is not None:
            with contextlib.suppress(PulumiLoRAError, *k8s.TRANSPORT_ERRORS):  # best effort
                rollback(session, target, *loads)
        if adopted:
            with contextlib.suppress(PulumiLoRAError):
                k8s.remove_annotations(
                    session.kube, args.namespace, args.cr_name, list(args.annotations())
                )
        else:
            remove_cr_patiently(session)
        raise


@k8s.apiserver_errors()
def update(args: AdapterArgs, config: ProviderConfig, *, say: Say = quiet) -> AdapterState:
    """Re-apply the CR and swap (or load) on every Ready pod, pod by pod behind the readiness
    gate; status records any failure. A swap that fails on a pod is rolled back: the old revision
    serves again on every pod and the CR names it again (``SwapRolledBack``)."""
    session = Session(args, config)
    existing = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    refusal = deletion_refusal(existing, args)
    if refusal:  # an apply would drop the finalizer that holds a failed destroy's CR
        raise ClusterError(refusal)
    cr = session.apply_cr(operation="update")
    rolled_back = False
    try:
        session.release_llmkube(cr)
        listing = session.shared_listing()
        target = servable(listing.target or session.resolve_target())  # afresh: raises why not
        session.check_collisions(target, own_uid=cr["metadata"].get("uid"))
        if args.transport is Transport.DELEGATED:
            cr = session.apply_cr()
            try:
                return await_delegated(session, cr)
            except SwapRolledBack:
                rolled_back = True  # the loop put the old revision back on every pod
                raise
        old = replaced((existing or {}).get("spec") or {}, desired_of(args))
        outcomes, seen, restored = load_everywhere(
            session, target, observe=True, seen=listing.listing, old=old, say=say
        )
        record_untrusted(session, cr, seen.untrusted)
        if old is not None and restored is not None:
            rolled_back = True
            raise swap_rolled_back(session, cr, outcomes, old.path, restored)
        state = session.write_status(
            cr, Availability(True, "InferenceServiceReady"), outcomes, now_utc(), seen.untrusted
        )
        record_outcomes(session, cr, outcomes, "Updated")
        summary = summarize(outcomes)
        if not is_loaded(summary, session.policy):
            raise AdapterNotLoaded(args.adapter_name, loaded_message(summary), advice(outcomes))
        return state
    except PulumiLoRAError as exc:
        if not isinstance(exc, AdapterNotLoaded):
            session.write_status(cr, Availability(False, exc.reason, str(exc)), None, now_utc())
        raise
    finally:
        if rolled_back and existing is not None:
            session.restore_cr(existing)  # only once every pod has the old revision back
        else:
            session.apply_cr()


def swap_rolled_back(
    session: Session,
    cr: Mapping[str, Any],
    outcomes: Sequence[PodOutcome],
    old_path: str,
    restored: Sequence[PodOutcome],
) -> SwapRolledBack:
    """The error (and the Warning Event on the CR) of a swap rolled back to ``old_path``."""
    args = session.args
    failed = failures(outcomes)
    record_outcomes(session, cr, failed, "Updated")
    unsettled = [o.pod for o in failed if o.unsettled]
    detail = rollback_message(
        args.adapter_name, args.load_path, old_path, said(failed), restored, unsettled=unsettled
    )
    k8s.emit_event(session.kube, cr, reason="SwapRolledBack", message=detail, warning=True)
    return SwapRolledBack(
        args.adapter_name,
        detail,
        f"LoRAAdapter {args.namespace}/{args.cr_name} names {old_path!r} again and the stack "
        "keeps it: fix the new revision, then `pulumi up`",
    )


@k8s.apiserver_errors()
def observe(
    args: AdapterArgs,
    config: ProviderConfig,
    looks: SharedViews[LookKey, TargetLook] | None = None,
    previous: Sequence[Condition] = (),
) -> AdapterState | None:
    """What the cluster says now (refresh): None when the CR is gone.

    Without ``looks`` the CR and the target's pods are read afresh. With them (``LOOKS``: the
    provider's reads and diffs) both are shared with this process's other operations, at most
    their max age old: the pods through ``looks``, the CR through the cluster's CR listing with
    this process's own writes laid over it (``Session.shared_cr``); a delegated adapter's CR,
    whose status is the loop's verdict, is always read afresh.

    The pods are the truth: the conditions are this project's verdict on what the pods serve
    now (``observed_conditions``), not what the CR's status says, which another writer (LLMKube's
    own LoRA controller, where no coexistence policy holds it off) may have rewritten.
    ``previous`` (the conditions last reported) keeps each unchanged condition's ``since``.
    """
    if args.transport is Transport.DELEGATED:  # the loop's verdict, while the loop is alive
        return observe_delegated(args, config, previous)
    session = Session(args, config)
    cr = (
        k8s.get_adapter(session.kube, args.namespace, args.cr_name)
        if looks is None
        else session.shared_cr()
    )
    if cr is None:
        return None
    live = as_declared(args, cr)
    session = Session(live, config)
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
        policy=Policy(args.readiness_policy.value),
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
    """Unload from every Ready pod (unless another CR claims the name), then let the CR go.

    The CR outlives every pod's unload, whatever LLMKube's controller does: it is held by
    pulumi-lora's own finalizer (:data:`UNLOAD_FINALIZER`) and marked for deletion first (a CR
    being deleted is never loaded again, by LLMKube or the loop); LLMKube's finalizer is released
    (its controller would unload one random pod and overwrite the conditions), then every Ready
    pod unloads. A pod that fails leaves the CR in place, being deleted, with conditions and a
    Warning Event naming each pod that still serves the adapter; a retry unloads again and lets
    it go. A delegated adapter is unloaded by the loop once the CR is gone (docs/protocol.md
    rule 6).
    """
    session = Session(args, config)
    if args.transport is Transport.DELEGATED:
        delete_delegated(session)
        return
    cr = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    if cr is not None and not (cr.get("metadata") or {}).get("deletionTimestamp"):
        cr = session.apply_cr(operation="delete", hold=True)
        k8s.begin_delete(session.kube, args.namespace, args.cr_name)
    if cr is not None:
        # The unload is pulumi-lora's from here. LLMKube's controller would unload through the
        # Service (one random pod) and write Loaded=False and its own Error over the conditions
        # that name the pods still serving; once its finalizer is gone it cannot come back (a
        # CR being deleted takes no new finalizer) and every write it had in flight conflicts.
        k8s.release_finalizer(session.kube, args.namespace, args.cr_name, LLMKUBE_FINALIZER)
    try:
        target = session.resolve_target()
    except TARGET_GONE:
        target = None  # no InferenceService (or no sglang one): no pod of it to unload from
    except ClusterError as exc:
        # Any other failure (403, 500, a shed request past its retries, a credential plugin
        # that failed) says nothing of the pods: the CR stays, held, for a retry to finish.
        if cr is None:
            raise
        raise AdapterNotLoaded(
            args.adapter_name, str(exc), held_advice(args), unloading=True
        ) from exc
    if target is not None and not session.claims(
        target, own_uid=(cr or {}).get("metadata", {}).get("uid")
    ):
        pods = list(k8s.list_target_pods(session.kube, target).pods)
        clients = session.clients(pods, session.api_key(target))
        views, _ = session.views(pods, clients)
        outcomes = session.execute(None, plan(None, views, args.adapter_name), clients)
        ready = {v.name for v in views if v.ready}
        failed = [o for o in outcomes if o.error and o.pod in ready]
        if failed:
            if cr is not None:
                session.hold(cr, failed)
            raise AdapterNotLoaded(
                args.adapter_name,
                "; ".join(f"pod {o.pod}: {o.error}" for o in failed),
                held_advice(args, "the pod answers"),
                unloading=True,
            )
    session.delete_cr()


def held_advice(args: AdapterArgs, once: str = "the InferenceService can be read") -> str:
    """Pure: what a user does about a CR a failed delete left held (being deleted)."""
    return (
        f"LoRAAdapter {args.namespace}/{args.cr_name} stays, being deleted, until every Ready "
        f"pod has unloaded it: run `pulumi destroy` again once {once} (or `pulumi-lora "
        f"finish-delete {args.namespace}/{args.cr_name}` without Pulumi)"
    )


def deletion_refusal(existing: Mapping[str, Any] | None, args: AdapterArgs) -> str | None:
    """Pure: why ``update`` must not apply the CR ``existing`` (it is being deleted), or None.

    A CR a failed ``pulumi destroy`` left carries :data:`UNLOAD_FINALIZER` until every Ready pod
    has unloaded it; an apply would drop that finalizer (server-side apply removes what the
    manifest leaves out) and the CR would go while a pod still serves the adapter.
    """
    meta = (existing or {}).get("metadata") or {}
    if not meta.get("deletionTimestamp"):
        return None
    where = f"LoRAAdapter {args.namespace}/{args.cr_name}"
    if UNLOAD_FINALIZER in (meta.get("finalizers") or []):
        return (
            f"{where} is being deleted: a failed `pulumi destroy` left it until every Ready pod "
            "has unloaded its adapter (`kubectl describe lora` names the pods). Finish the "
            f"deletion first (`pulumi destroy` again, or `pulumi-lora finish-delete "
            f"{args.namespace}/{args.cr_name}`), then `pulumi up` creates it anew"
        )
    return (
        f"{where} is being deleted (finalizers {meta.get('finalizers') or []}); "
        "`pulumi up` again once it is gone creates it anew"
    )


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
