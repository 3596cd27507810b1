"""What ``pulumi-lora status`` and ``doctor`` read from the cluster and the pods (the I/O edge).

Through the provider's own code (``POOL``, ``observe``, ``pod_clients``), so an operator sees
what the provider would. An API key read from a Secret is used as a header, never returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Service
from msgspec import ValidationError

from pulumi_lora._core._llmkube import HTTP_PORT_NAME, PodEndpoint, target_from_object
from pulumi_lora._errors import ClusterError, PulumiLoRAError, UnsupportedServer
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube._discovery import policy_versions
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import POOL, ProviderConfig, Session, observe, parallel
from pulumi_lora._lifecycle._transport import pod_clients
from pulumi_lora._models import Transport
from pulumi_lora._ops._doctor import DoctorFacts, ServerProbe, TransportTrial
from pulumi_lora._ops._permissions import Ask, asks
from pulumi_lora._ops._status import (
    AdapterLine,
    StatusReport,
    adapter_line,
    args_from_cr,
    held_pods,
    with_gates,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient

__all__ = ["gather_doctor", "gather_status"]


def gather_status(
    source: KubeSource, namespace: str | None, transport: Transport | None = None
) -> StatusReport:
    """Read every LoRAAdapter (one namespace, or all when None) and what each pod serves.

    Each CR is observed exactly as ``pulumi refresh`` observes it (``_lifecycle.observe``: the
    target, its pods, each Ready pod's ``/v1/models``, the API key Secret its annotation names).
    Problems with one CR become its error; only cluster access itself raises ``ClusterError``.
    The pods of each target are listed once more for the readiness gate: which carry it, and
    which it holds unready (``held_pods``; a target whose pods cannot be listed shows none).
    """
    kube = POOL.kube(source)
    crs = sorted(
        k8s.list_adapters(kube, namespace),
        key=lambda cr: (cr["metadata"].get("namespace", ""), cr["metadata"].get("name", "")),
    )
    config = ProviderConfig(kube=source)
    lines = list(parallel(lambda cr: _observe_cr(cr, config, transport), crs))
    targets = sorted({(line.target_namespace, line.target_name) for line in lines})
    pods = dict(zip(targets, parallel(lambda t: _target_pods(kube, *t), targets), strict=True))
    gated = {t: {p.name for p in found if p.gated} for t, found in pods.items()}
    lines = [with_gates(line, gated[line.target_namespace, line.target_name]) for line in lines]
    held = held_pods((p for found in pods.values() for p in found), datetime.now(UTC))
    return StatusReport(tuple(lines), held)


def _target_pods(kube: Client, namespace: str, name: str) -> list[PodEndpoint]:
    """The pods labelled for the InferenceService ``namespace/name`` (none when unreadable:
    the CR's own line says what went wrong reading its target)."""
    if not (namespace and name):
        return []
    try:
        return k8s.list_pods(kube, namespace, name)
    except PulumiLoRAError:
        return []


def _observe_cr(
    cr: Mapping[str, Any], config: ProviderConfig, transport: Transport | None
) -> AdapterLine:
    try:
        args = args_from_cr(cr, transport)
    except ValidationError as exc:
        return adapter_line(cr, None, error=f"the CR cannot be read: {exc}")
    used = args.transport
    if args.transport is Transport.DELEGATED:
        return adapter_line(cr, None, transport=used)
    try:
        state = observe(args, config)
        if state is None:
            return adapter_line(cr, (), transport=used, error="the CR was deleted while reading")
        if not state.pods:
            Session(args, config).resolve_target()  # raises why there is nothing to look at
    except PulumiLoRAError as exc:
        return adapter_line(cr, (), transport=used, error=str(exc))
    return adapter_line(cr, state.pods, transport=used)


def gather_doctor(
    source: KubeSource,
    namespace: str,
    name: str,
    *,
    transport: Transport | None = None,
    api_key_secret: tuple[str, str] | None = None,
) -> DoctorFacts:
    """Read the InferenceService, its Service, its pods, and ask each Ready pod's SGLang.

    With no ``transport``, tries ``direct``, then (when it does not reach every Ready pod and
    no API key is needed) ``proxy``, and reports each (``trials``); the servers are judged
    through the first that works. Raises ``ClusterError`` only when the cluster itself can't be
    used; a missing InferenceService is a fact (``isvc`` None) that :func:`diagnose` turns into
    a failed check.
    """
    kube = POOL.kube(source)
    try:
        obj = k8s.as_dict(kube.get(k8s.InferenceServiceResource, name, namespace=namespace))
    except ApiError as exc:
        if exc.status.code == 404:
            chosen = transport or Transport.DIRECT
            return DoctorFacts(namespace, name, None, transport=chosen)
        raise _api_error(f"reading InferenceService {namespace}/{name}", exc) from exc
    listing = k8s.list_target_pods(kube, target_from_object(obj))
    pods, read_at = listing.pods, datetime.now(UTC)
    trials: list[TransportTrial] = []
    candidates = [transport] if transport else [Transport.DIRECT, Transport.PROXY]
    for candidate in candidates:
        servers = _probe_servers(source, candidate, pods, _api_key(kube, namespace, api_key_secret))
        trial = _trial(candidate, servers)
        trials.append(trial)
        if trial.works or (api_key_secret and candidate is Transport.DIRECT):
            break  # a keyed server cannot be reached through the proxy
    return DoctorFacts(
        namespace,
        name,
        obj,
        service_port=_live_service_port(kube, namespace, name),
        pods=pods,
        servers=servers,
        transport=candidate,
        untrusted=listing.untrusted,
        adapters=tuple(_targeting(_adapters_near(kube, namespace), namespace, name)),
        trials=tuple(trials) if transport is None else (),
        denied=_denied(
            kube,
            namespace,
            asks(
                candidate,
                keyed=api_key_secret is not None,
                gated=any(p.gated for p in pods),
            ),
        ),
        keyed=api_key_secret is not None,
        gate_api=_gate_api(kube),
        now=read_at,
    )


def _gate_api(kube: Client) -> tuple[str, ...] | None:
    """The versions serving MutatingAdmissionPolicy (API discovery), None when it won't say."""
    try:
        return policy_versions(kube)
    except PulumiLoRAError:
        return None


def _denied(kube: Client, namespace: str, wanted: Sequence[Ask]) -> tuple[Ask, ...] | None:
    """What of ``wanted`` the apiserver says this identity may not do in ``namespace`` (one
    SelfSubjectAccessReview each), or None when it will not say (the review refused)."""
    denied = []
    for verb, group, resource in wanted:
        name, _, sub = resource.partition("/")
        attributes = ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=name, subresource=sub or None
        )
        review = SelfSubjectAccessReview(
            spec=SelfSubjectAccessReviewSpec(resourceAttributes=attributes)
        )
        try:
            answer = kube.create(review)
        except ApiError:
            return None
        if not (answer.status and answer.status.allowed):
            denied.append((verb, group, resource))
    return tuple(denied)


def _api_key(
    kube: Client, namespace: str, secret: tuple[str, str] | None
) -> Callable[[], str | None]:
    """Read the API key from ``secret`` (NAME, KEY) in ``namespace`` when asked (not before a
    pod is Ready: the read may be refused, and is then each probe's error)."""
    if secret is None:
        return lambda: None
    return lambda: k8s.read_secret_value(kube, namespace, *secret)


def _trial(transport: Transport, servers: Sequence[ServerProbe]) -> TransportTrial:
    """Pure: how many servers answered through ``transport`` (an auth refusal still answered)."""
    failed = [s for s in servers if not s.reachable and s.reason != "Unauthorized"]
    error = f"pod {failed[0].pod}: {failed[0].error}" if failed else ""
    return TransportTrial(transport, len(servers) - len(failed), len(servers), error)


def _adapters_near(kube: Client, namespace: str) -> list[dict[str, Any]]:
    """Every LoRAAdapter (they may target across namespaces), else the target namespace's
    (a user allowed to list only there)."""
    try:
        return k8s.list_adapters(kube)
    except ClusterError:
        return k8s.list_adapters(kube, namespace)


def _targeting(
    crs: Sequence[Mapping[str, Any]], namespace: str, name: str
) -> list[Mapping[str, Any]]:
    """Pure: the CRs whose ``spec.inferenceServiceRef`` is ``namespace/name``."""
    found = []
    for cr in crs:
        ref = (cr.get("spec") or {}).get("inferenceServiceRef") or {}
        where = ref.get("namespace") or (cr.get("metadata") or {}).get("namespace")
        if ref.get("name") == name and where == namespace:
            found.append(cr)
    return found


def _live_service_port(kube: Client, namespace: str, name: str) -> int | None:
    """The ``http`` port of the Service LLMKube creates (name with ``.`` → ``-``), if readable."""
    try:
        service = kube.get(Service, name.replace(".", "-"), namespace=namespace)
    except ApiError:
        return None  # absent, or not readable with these credentials: judge from the spec
    ports = (service.spec.ports if service.spec else None) or []
    chosen = next((p for p in ports if p.name == HTTP_PORT_NAME), ports[0] if ports else None)
    return int(chosen.port) if chosen is not None else None


def _probe_servers(
    source: KubeSource,
    transport: Transport,
    pods: Sequence[PodEndpoint],
    api_key: Callable[[], str | None],
) -> tuple[ServerProbe, ...]:
    """Ask every Ready pod's SGLang, through ``transport``, for its adapters and version (in
    parallel), with the clients the provider would use (``pod_clients``)."""
    ready = [p for p in pods if p.ready]
    if not ready:
        return ()
    try:
        clients = pod_clients(transport, source, ready, api_key(), ClientTimeouts())
    except PulumiLoRAError as exc:
        return tuple(ServerProbe(p.name, False, error=str(exc), reason=exc.reason) for p in ready)

    def probe(pod: PodEndpoint) -> ServerProbe:
        client = clients.get(pod.name)
        if client is None:
            return ServerProbe(pod.name, False, error="the pod has no IP", reason="NoPodIP")
        return _probe(pod.name, client)

    return tuple(parallel(probe, ready))


def _probe(pod: str, client: SGLangClient) -> ServerProbe:
    """One server: ``/v1/models`` (reachable, the adapters) then ``/server_info`` (version)."""
    unsupported = ""
    adapters: int | None = None
    try:
        adapters = len(client.list_models().adapters)
    except UnsupportedServer as exc:
        unsupported = str(exc)
    except PulumiLoRAError as exc:
        return ServerProbe(pod, False, error=str(exc), reason=exc.reason)
    info = client.server_info()
    return ServerProbe(
        pod,
        True,
        version=info.version,
        lora_enabled=info.lora_enabled,
        adapters=adapters,
        error=unsupported,
        reason=UnsupportedServer.reason if unsupported else "",
        info_error=info.error,
    )


def _api_error(action: str, exc: ApiError) -> ClusterError:
    status = exc.status
    return ClusterError(f"{action} failed: HTTP {status.code} {status.reason}: {status.message}")
