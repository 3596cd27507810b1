"""A staged adapter's weights onto the claim its target mounts, before anything is loaded.

It stages through this process's stager server on the claim (``_stager``); a failure raises
before any pod is touched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._caches import SharedViews
from pulumi_lora._core._llmkube import Target
from pulumi_lora._core._topology import servable
from pulumi_lora._errors import Forbidden, PulumiLoRAError
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._looks import LOOK_MAX_AGE_SECONDS
from pulumi_lora._lifecycle._pool import POOL
from pulumi_lora._lifecycle._session import Session
from pulumi_lora._lifecycle._stager import DEADLINE_SECONDS, STAGERS, Stager
from pulumi_lora._staging._named import named_keys
from pulumi_lora._staging._plan import (
    AdapterMount,
    FetchSettings,
    adapter_mount,
    server_flags,
    stage_result,
)
from pulumi_lora._staging._source import content_key, declared_request
from pulumi_lora._version import __version__

DEFAULT_IMAGE = f"localhost/pulumi-lora:{__version__}"
"""The stager's image unless ``pulumi-lora:image`` says where the project's image was pushed:
what ``tools/image.py`` tags locally (the testbed's)."""

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


def _settings(
    target: Target,
    mount: AdapterMount,
    config: ProviderConfig,
    args: AdapterArgs | None = None,
    hf_endpoint: str | None = None,
) -> FetchSettings:
    """The server's Job for the claim: with ``args``' credentials to fetch its source, or with
    none (to verify and remove directories)."""
    return {
        "namespace": target.namespace,
        "mount": mount,
        "image": config.image or DEFAULT_IMAGE,
        "secret_name": args.source_secret_name if args else None,
        "service_account": args.source_service_account if args else None,
        "hf_endpoint": hf_endpoint,
        "server_flags": server_flags(target.extra_args) if args else [],
        "deadline_seconds": DEADLINE_SECONDS,
    }


def _scope(session: Session, mount: AdapterMount) -> tuple[Hashable, ...]:
    """What this process's verdicts on a claim's directories are shared and retired by."""
    return (*session.scope, mount.claim)


def _on_server(
    session: Session,
    settings: FetchSettings,
    use: Callable[[Stager], Any],
    *,
    say: Say,
    label: str,
    any_credentials: bool = False,
) -> Any:
    """``use`` this process's server for the claim and ``settings`` (started if need be); a
    call that fetches nothing (``any_credentials``) takes any server of the claim, never a
    staging, which must not meet another source's credentials or endpoint."""
    return STAGERS.run(
        session.kube,
        lambda: POOL.proxy(session.source),
        session.source,
        settings,
        use,
        say=say,
        label=label,
        any_credentials=any_credentials,
    )


def staged(args: AdapterArgs, config: ProviderConfig, *, say: Say = _to_stderr) -> AdapterArgs:
    """``args`` with ``path`` set to the staged directory as the pods see it; stages the content
    unless it is already there (the stager verifies and reuses it)."""
    request, hf_endpoint = declared_request(args.to_dict())
    key = content_key(request)
    session, target, mount = _claim(args, config)
    servable(target)  # nothing fetched for a server no load can fully reach (``PartialReach``)
    label = f"staging {args.adapter_name} ({key}) from {request.source.uri} onto {mount.claim}"
    settings = _settings(target, mount, config, args, hf_endpoint)
    try:
        document = _on_server(
            session,
            settings,
            lambda server: server.stage(request, say=say, label=label),
            say=say,
            label=label,
        )
    finally:
        VERIFIED.invalidate(_scope(session, mount))
    result = stage_result(document)
    how = "fetched" if result.fetched else "already staged"
    say(f"{label}: {how}, {result.bytes} bytes in {result.seconds:.2f} s")
    return args.replace(path=mount.staged_path(key))


VERIFIED: SharedViews[tuple[Hashable, ...], str] = SharedViews(
    LOOK_MAX_AGE_SECONDS, lambda key: key[:-1]
)
"""The verdicts of this process's verifications, shared as a look at the pods is (the same age
bound): one check per staged directory for the concurrent reads of a refresh, however many
adapters name it; this process's own staging and removal on a claim retire them."""


def verify_staged(
    args: AdapterArgs, config: ProviderConfig, path: str, *, say: Say = _to_stderr
) -> str:
    """What a refresh knows of the staged directory ``path``: ``"verified"`` (every file as the
    stager recorded it), ``"missing"``, or what is wrong with it, from a Job that fetches
    nothing (the stager server's ``/verify``). ``"verified"`` too when it cannot be checked
    (said on the command's output): a refresh reports drift it saw, never a guess."""
    key = path.rstrip("/").rpartition("/")[2]
    try:
        session, target, mount = _claim(args, config)
        if mount.staged_path(key) != path:
            return "verified"  # not a directory of this claim (edited outside): the spec says
        cache_key = (*_scope(session, mount), key)
        label = f"verifying {path}"

        def take() -> str:
            document = _on_server(
                session,
                _settings(target, mount, config),
                lambda server: server.polled("/verify", {"keys": [key]}, say=say, label=label),
                say=say,
                label=label,
                any_credentials=True,
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
) -> bool:
    """Release the staged directory ``path`` of ``args``' claim (this adapter's CR no longer
    names it), then have the claim's stager collect: every staged directory of the claim no
    CR names is removed once unused for ``pulumi-lora:stagingGraceSeconds`` (its last
    staging, reuse or release), each under its key's lock (docs/staging.md, "Revisions and
    cleanup"). So a replacement, or another stack staging the same content meanwhile, finds
    ``path`` there, and a later command on the claim removes it. What names a key is decided
    from the CRs alone: no pod, no Secret is read. Returns whether ``path`` was removed. Best
    effort: a directory left behind is reported, never an error (nothing loaded depends on
    it)."""
    key = path.rstrip("/").rpartition("/")[2]
    try:
        session, target, mount = _claim(args, config)
        if mount.staged_path(key) != path:
            return False  # not a directory of this claim: not ours to release
        named = _named(session, args, target, mount, say)
        body = {
            "named": sorted(named),
            "released": [key],
            "grace_seconds": config.staging_grace,
        }
        label = f"collecting the staged directories of {mount.claim}"
        try:
            document = _on_server(
                session,
                _settings(target, mount, config),
                lambda server: server.polled("/collect", body, say=say, label=label),
                say=say,
                label=label,
                any_credentials=True,
            )
        finally:
            VERIFIED.invalidate(_scope(session, mount))
    except PulumiLoRAError as exc:
        say(f"staged directory {path} left on the claim: {exc}")
        return False
    _report(document, path, key, named=named, mount=mount, grace=config.staging_grace, say=say)
    return key in (document.get("removed") or ())


def _named(
    session: Session, args: AdapterArgs, target: Target, mount: AdapterMount, say: Say
) -> dict[str, list[str]]:
    """The keys of ``mount``'s claim some CR names (``named_keys``), from the CRs this
    identity may list (the cluster's, else the adapter's and the target's namespaces') and
    the InferenceServices of the claim's namespace they name."""
    try:
        crs = k8s.list_adapters(session.kube)
    except Forbidden:  # a Role per namespace (``pulumi-lora rbac -n``): what it grants
        namespaces = list(dict.fromkeys((args.namespace, target.namespace)))
        say(
            f"LoRAAdapters listed in {', '.join(namespaces)} only (no right to list them in "
            f"every namespace): one elsewhere naming a directory of {mount.claim} is not seen"
        )
        crs = [cr for namespace in namespaces for cr in k8s.list_adapters(session.kube, namespace)]
    workloads: dict[str, Target | None] = {target.name: target}
    for cr in crs:
        ref = (cr.get("spec") or {}).get("inferenceServiceRef") or {}
        name = str(ref.get("name") or "")
        in_claims_namespace = (
            ref.get("namespace") or (cr.get("metadata") or {}).get("namespace")
        ) == target.namespace
        if in_claims_namespace and name and name not in workloads:
            try:
                workloads[name] = k8s.get_target(session.kube, target.namespace, name)
            except PulumiLoRAError:  # gone or unreadable: its CRs name what their paths end with
                workloads[name] = None
    return named_keys(crs, workloads, target.namespace, mount)


def _report(
    document: Mapping[str, Any],
    path: str,
    key: str,
    *,
    named: Mapping[str, Sequence[str]],
    mount: AdapterMount,
    grace: float,
    say: Say,
) -> None:
    """Say on the command's output what became of ``path`` and what else was removed."""
    removed = [str(k) for k in document.get("removed") or ()]
    if key in named:
        say(f"staged directory {path} kept: {', '.join(named[key])} still names it")
    elif key in removed:
        say(f"staged directory {path} removed: nothing names it any more")
    elif key in (document.get("busy") or ()):
        say(f"staged directory {path} kept: a staging of the same content uses it now")
    else:
        say(
            f"staged directory {path} released: a later command on {mount.claim} removes it "
            f"once nothing names it for {grace:g}s (pulumi-lora:stagingGraceSeconds)"
        )
    others = [mount.staged_path(k) for k in removed if k != key]
    if others:
        say(f"staged directories nothing named for {grace:g}s removed: {', '.join(others)}")
