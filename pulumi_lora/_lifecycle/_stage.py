"""A staged adapter's weights onto the claim its target mounts, before anything is loaded.

``staged(args)`` turns an adapter declared by ``source`` into one with a ``path``: it finds the
claim the InferenceService mounts in its SGLang container, runs the staging Job
(``_staging._plan``: ``pulumi-lora stage`` in the project's image, named after the content key,
so adapters of the same content share it), waits for it, reads its result from the container's
termination message, and deletes the Job; the staged adapters a command declared on one claim
share one Job (``_batch``), and one the batch could not stage is staged alone. A failure raises
the stager's own error (naming the file or the cause and what to do) with the Job deleted; no
pod has been touched yet, and the stager never leaves a partial directory at a final path
(docs/staging.md).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from lightkube import Client

from pulumi_lora import _cluster as k8s
from pulumi_lora import _jobs
from pulumi_lora._errors import ClusterError, PulumiLoRAError
from pulumi_lora._lifecycle._batch import BATCHES, Outcome, batch_group
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._looks import LOOK_MAX_AGE_SECONDS
from pulumi_lora._lifecycle._session import Session
from pulumi_lora._llmkube import Target
from pulumi_lora._models import AdapterArgs
from pulumi_lora._shared_views import SharedViews
from pulumi_lora._staging._errors import StagingError
from pulumi_lora._staging._plan import (
    AdapterMount,
    FetchSettings,
    adapter_mount,
    batch_job,
    claim_job,
    job_document,
    server_flags,
    stage_result,
    staging_job,
)
from pulumi_lora._staging._source import StagingRequest, content_key, declared_request
from pulumi_lora._version import __version__

DEFAULT_IMAGE = f"localhost/pulumi-lora:{__version__}"
"""The staging Job's image unless ``pulumi-lora:image`` says where the project's image was
pushed: what ``tools/image.py`` tags locally (the testbed's)."""
DEADLINE_SECONDS = 3600
"""The stager's ``--deadline`` for the whole fetch."""
START_SECONDS = 300.0
"""How long the Job's pod may take to start (pull the image, mount the claim) before the
staging fails naming what it waits for."""
POLL = 0.2
"""Seconds between two looks at a Job's pods (a staging takes a few seconds in all)."""
WAITING_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""A staging container waiting for one of these will not start by itself."""

Say = Callable[[str], None]


def _to_stderr(text: str) -> None:
    """Where the engine shows a dynamic provider's lines: its stderr, among the diagnostics."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _claim(args: AdapterArgs, config: ProviderConfig) -> tuple[Session, Target, AdapterMount]:
    """The session, the target and the claim its SGLang container mounts for adapters."""
    session = Session(args, config)
    target = session.resolve_target()
    where = f"{target.namespace}/{target.name}"
    return (
        session,
        target,
        adapter_mount(target.volumes, target.volume_mounts, args.volume_claim, where),
    )


def _on_claim(target: Target, mount: AdapterMount, config: ProviderConfig) -> dict[str, Any]:
    """Where a Job on the target's claim runs and with what image (``claim_job``'s keywords)."""
    return {"namespace": target.namespace, "mount": mount, "image": config.image or DEFAULT_IMAGE}


def _scope(session: Session, mount: AdapterMount) -> tuple[Hashable, ...]:
    """What this process's verdicts on a claim's directories are shared and retired by."""
    return (*session.scope, mount.claim)


def staged(
    args: AdapterArgs, config: ProviderConfig, *, say: Say = _to_stderr, poll: float = POLL
) -> AdapterArgs:
    """``args`` with ``path`` set to the staged directory as the pods see it; stages the content
    unless it is already there (the stager verifies and reuses it)."""
    request, hf_endpoint = declared_request(args.to_dict())
    key = content_key(request)
    session, target, mount = _claim(args, config)
    scope = _scope(session, mount)
    fetch: FetchSettings = {
        "namespace": target.namespace,
        "mount": mount,
        "image": config.image or DEFAULT_IMAGE,
        "secret_name": args.source_secret_name,
        "service_account": args.source_service_account,
        "hf_endpoint": hf_endpoint,
        "server_flags": server_flags(target.extra_args),
        "deadline_seconds": DEADLINE_SECONDS,
    }
    label = f"staging {args.adapter_name} ({key}) from {request.source.uri} onto {mount.claim}"

    def run_batch(requests: Sequence[StagingRequest]) -> dict[str, Outcome]:
        manifest = batch_job(requests, **fetch)
        keys = ", ".join(sorted(content_key(r) for r in requests))
        try:
            document = run_job(
                session.kube,
                manifest,
                say=say,
                label=f"staging {len(requests)} adapters ({keys}) onto {mount.claim} in one Job",
                poll=poll,
            )
        finally:
            VERIFIED.invalidate(scope)
        return batch_outcomes(document)

    group = batch_group(args, config, hf_endpoint)
    outcome = BATCHES.stage(scope, group, request, run_batch)
    if outcome is not None and outcome.staged:
        how = "fetched" if outcome.fetched else "already staged"
        say(f"{label}: {how} in a batch Job, {outcome.bytes} bytes")
        return args.replace(path=mount.staged_path(key))
    if outcome is not None:  # the batch could not: alone, for the stager's own message
        say(f"{label}: not staged in the batch Job ({outcome.reason}); staging it alone")
    manifest = staging_job(request, key, **fetch)
    try:
        result = stage_result(run_job(session.kube, manifest, say=say, label=label, poll=poll))
    finally:
        VERIFIED.invalidate(scope)
    say(f"{label}: {'fetched' if result.fetched else 'already staged'}, {result.bytes} bytes")
    return args.replace(path=mount.staged_path(key))


def batch_outcomes(document: Mapping[str, Any]) -> dict[str, Outcome]:
    """Pure: each content key's outcome in a ``stage-batch`` result."""
    outcomes = {
        str(key): Outcome(
            True, bytes=int(facts.get("bytes") or 0), fetched=bool(facts.get("fetched"))
        )
        for key, facts in (document.get("staged") or {}).items()
    }
    for key, reason in (document.get("failed") or {}).items():
        outcomes[str(key)] = Outcome(False, reason=str(reason))
    return outcomes


VERIFIED: SharedViews[tuple[Hashable, ...], str] = SharedViews(
    LOOK_MAX_AGE_SECONDS, lambda key: key[:-1]
)
"""The verdicts of this process's verification Jobs, shared as a look at the pods is (the same
age bound): one Job per staged directory for the concurrent reads of a refresh, however many
adapters name it; this process's own staging and removal on a claim retire them."""


def verify_staged(
    args: AdapterArgs, config: ProviderConfig, path: str, *, say: Say = _to_stderr
) -> str:
    """What a refresh knows of the staged directory ``path``: ``"verified"`` (every file as the
    stager recorded it), ``"missing"``, or what is wrong with it, from a Job that fetches
    nothing (``pulumi-lora verify-staged``). ``"verified"`` too when it cannot be checked (said
    on the command's output): a refresh reports drift it saw, never a guess."""
    key = path.rstrip("/").rpartition("/")[2]
    try:
        session, target, mount = _claim(args, config)
        if mount.staged_path(key) != path:
            return "verified"  # not a directory of this claim (edited outside): the spec says
        manifest = claim_job("verify-staged", key, **_on_claim(target, mount, config))
        cache_key = (*_scope(session, mount), key)

        def take() -> str:
            document = run_job(
                session.kube, manifest, say=say, label=f"verifying {path}", poll=POLL
            )
            return str((document.get("keys") or {}).get(key, "missing"))

        return VERIFIED.get(cache_key, take)
    except PulumiLoRAError as exc:
        say(f"staged directory {path} not verified: {exc}")
        return "verified"


def unstage_unused(
    args: AdapterArgs,
    config: ProviderConfig,
    path: str,
    *,
    say: Say = _to_stderr,
    poll: float = POLL,
) -> bool:
    """Remove the staged directory ``path`` (of ``args``' claim) once no LoRAAdapter CR of the
    adapter's or the target's namespace and no pod of the target names it; returns whether it
    was removed. Best effort: a directory left behind is reported, never an error (nothing
    loaded depends on it)."""
    key = path.rstrip("/").rpartition("/")[2]
    try:
        session, target, mount = _claim(args, config)
        if mount.staged_path(key) != path:
            return False  # not a directory of this claim: not ours to remove
        namespaces = {args.namespace, target.namespace}
        named = [
            f"LoRAAdapter {cr['metadata']['namespace']}/{cr['metadata']['name']}"
            for namespace in sorted(namespaces)
            for cr in k8s.list_adapters(session.kube, namespace)
            if (cr.get("spec") or {}).get("path") == path
        ]
        pods = list(k8s.list_target_pods(session.kube, target).pods)
        views, _ = session.views(pods, session.clients(pods, session.api_key(target)))
        named += [
            f"pod {v.name}" + (" (could not be read)" if v.adapters is None else "")
            for v in views
            if v.adapters is None or path in v.adapters.values()
        ]
        if named:
            say(f"staged directory {path} kept: {', '.join(named)} still name it")
            return False
        manifest = claim_job("unstage", key, **_on_claim(target, mount, config))
        try:
            run_job(session.kube, manifest, say=say, label=f"removing {path}", poll=poll)
        finally:
            VERIFIED.invalidate(_scope(session, mount))
            BATCHES.forget(_scope(session, mount))
    except PulumiLoRAError as exc:
        say(f"staged directory {path} left on the claim: {exc}")
        return False
    say(f"staged directory {path} removed: nothing names it any more")
    return True


def run_job(
    kube: Client, manifest: Mapping[str, Any], *, say: Say, label: str, poll: float
) -> dict[str, Any]:
    """Run the staging Job to its end and return its result (or raise the stager's error); the
    Job is deleted either way. A Job of the same name that another adapter started is waited
    for, not duplicated; one that already failed is replaced."""
    meta = manifest["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        return _run(kube, manifest, say=say, label=label, poll=poll)
    finally:
        _jobs.delete_job(kube, namespace, name)


def _run(
    kube: Client, manifest: Mapping[str, Any], *, say: Say, label: str, poll: float
) -> dict[str, Any]:
    """The result as soon as the Job's container has ended: its termination message is final,
    and the Job controller marks the Job complete only a batching period later."""
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    started = time.monotonic()
    deadline = started + DEADLINE_SECONDS + START_SECONDS
    said = started
    job, created = _jobs.create_job(kube, manifest)
    say(f"{label}: Job {namespace}/{name} {'started' if created else 'already running'}")
    while True:
        if not job:  # gone under us (another adapter's staging ended and deleted it)
            job, created = _jobs.create_job(kube, manifest)
            continue
        pods = _jobs.job_pods(kube, namespace, name)
        ended = next(((pod, t) for pod in reversed(pods) if (t := _terminated(pod))), None)
        finished = _finished(job)
        if ended is None and finished == "Failed" and not created:
            _jobs.delete_job(kube, namespace, name)  # a stale failure that never ran: afresh
            job, created = _jobs.create_job(kube, manifest)
            continue
        if ended is not None:
            pod, terminated = ended
            status = pod.get("status") or {}
            if not terminated.get("message") and status.get("reason"):  # Evicted, say
                raise StagingError(
                    f"staging Job {namespace}/{name}: its pod was {status['reason']} "
                    f"({status.get('message') or 'no message'}); run `pulumi up` again"
                )
            return job_document(terminated.get("message"), terminated.get("exitCode"))
        if finished is not None:
            reason = next(
                (p["status"]["reason"] for p in pods if p.get("status", {}).get("reason")), finished
            )
            raise StagingError(
                f"staging Job {namespace}/{name} ended ({reason}) before its container ran: "
                "was its pod evicted or past activeDeadlineSeconds?"
            )
        _check_started(pods, namespace, name, started)
        now = time.monotonic()
        if now >= deadline:
            raise StagingError(
                f"{label}: Job {namespace}/{name} did not finish within "
                f"{DEADLINE_SECONDS + START_SECONDS:.0f}s"
            )
        if now - said >= 10:
            said = now
            say(f"{label}: running for {now - started:.0f}s")
        time.sleep(poll)
        job = _jobs.get_job(kube, namespace, name) or {}


def _finished(job: Mapping[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` once the Job controller says so, else ``None``."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") in {"Complete", "Failed"} and condition.get("status") == "True":
            return str(condition["type"])
    return None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``terminated`` state of the pod's container, once it has ended."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def _check_started(pods: list[dict[str, Any]], namespace: str, name: str, started: float) -> None:
    """Fail early when the staging container cannot start by itself (a missing image, a
    Secret or ServiceAccount that does not exist, a claim never bound), naming why."""
    for pod in pods:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in WAITING_FAILURES:
                raise StagingError(
                    f"staging Job {namespace}/{name} cannot start: {waiting.get('reason')}: "
                    f"{waiting.get('message') or 'no message'} (check pulumi-lora:image, "
                    "source_secret_name and source_service_account)"
                )
        if status.get("phase") == "Pending" and time.monotonic() - started > START_SECONDS:
            conditions = status.get("conditions") or ()
            why = "; ".join(str(c.get("message")) for c in conditions if c.get("message"))
            raise ClusterError(
                f"staging Job {namespace}/{name}: its pod did not start within "
                f"{START_SECONDS:.0f}s{': ' + why if why else ''}"
            )
