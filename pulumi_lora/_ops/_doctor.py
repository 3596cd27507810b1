"""``pulumi-lora doctor``'s verdict, pure: an InferenceService's fitness for dynamic LoRA.

:func:`diagnose` turns the gathered :class:`DoctorFacts` into checks (ok, warn, fail), each with
a fix in plain words, in the order an operator would fix them. The reading is ``_gather``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pulumi_lora._core._llmkube import GATE_CONDITION, SERVICE_LABEL, PodEndpoint
from pulumi_lora._core._ownership import untrusted_message
from pulumi_lora._core._reconcile import startup_adapters
from pulumi_lora._core._topology import has_flag, normalize_args
from pulumi_lora._errors import (
    MIN_SGLANG,
    MIN_SGLANG_VERSION,
    SUPPORTED_SGLANG,
    Unauthorized,
    UnsupportedServer,
    unroutable,
)
from pulumi_lora._models import ANNOTATION_MANAGED_BY, Transport
from pulumi_lora._ops._checks import Check, CheckStatus
from pulumi_lora._ops._permissions import Ask, check_permissions
from pulumi_lora._ops._spec import (
    check_adapter_volumes,
    check_data_parallel,
    check_enable_lora,
    check_lora_pool,
    check_ports,
    check_reach,
    check_runtime,
)
from pulumi_lora._ops._status import (
    COEXISTENCE_FIX,
    HELD_AFTER,
    HELD_RUNBOOK,
    held_pods,
    llmkube_signs,
)

__all__ = [
    "Check",
    "CheckStatus",
    "DoctorFacts",
    "DoctorReport",
    "ServerProbe",
    "TransportTrial",
    "check_adapter_volumes",
    "check_data_parallel",
    "check_enable_lora",
    "check_gate_api",
    "check_gate_held",
    "check_llmkube",
    "check_lora_pool",
    "check_ownership",
    "check_pods",
    "check_ports",
    "check_reach",
    "check_runtime",
    "check_server",
    "check_transport",
    "diagnose",
    "has_flag",
    "normalize_args",
    "parse_version",
]


@dataclass(frozen=True)
class ServerProbe:
    """What one Ready pod's SGLang said (gathered; only harmless fields of /server_info kept)."""

    pod: str
    reachable: bool
    version: str | None = None  # /server_info "version"
    lora_enabled: bool | None = None  # /server_info "enable_lora"
    adapters: int | None = None  # how many adapters /v1/models lists
    error: str = ""  # why it is unreachable or unsupported
    reason: str = ""  # CamelCase, from the project's error tree (e.g. Unauthorized)
    info_error: str = ""  # why /server_info told nothing (the version is then unknown)


@dataclass(frozen=True)
class TransportTrial:
    """How one transport fared from where doctor runs: how many Ready pods answered."""

    transport: Transport
    reached: int
    ready: int
    error: str = ""  # the first unreachable pod's error

    @property
    def works(self) -> bool:
        """Whether every Ready pod answered through it."""
        return self.ready > 0 and self.reached == self.ready


@dataclass(frozen=True)
class DoctorFacts:
    """Everything doctor looks at, as plain values (``isvc`` None: it does not exist); gathered
    by ``_gather.gather_doctor``."""

    namespace: str
    name: str
    isvc: Mapping[str, Any] | None
    service_port: int | None = None  # the live Service's ``http`` port, when it exists
    pods: tuple[PodEndpoint, ...] = ()
    servers: tuple[ServerProbe, ...] = ()
    transport: Transport = Transport.DIRECT
    untrusted: Mapping[str, str] = field(default_factory=dict)  # labelled, outside the chain
    adapters: tuple[Mapping[str, Any], ...] = ()  # the LoRAAdapter CRs that target it
    trials: tuple[TransportTrial, ...] = ()  # each transport tried, when none was given
    denied: tuple[Ask, ...] | None = None  # what the provider needs and this identity may not
    keyed: bool = False  # the servers take a key from a Secret (doctor --api-key-secret)
    #: The versions of admissionregistration.k8s.io serving MutatingAdmissionPolicy (API
    #: discovery), None when not asked or the apiserver would not say.
    gate_api: tuple[str, ...] | None = None
    now: datetime | None = None  # when the pods were read (how long a gate has held one)


@dataclass(frozen=True)
class DoctorReport:
    """The checks, in the order they were made."""

    namespace: str
    name: str
    checks: tuple[Check, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether no check failed (warnings allowed)."""
        return all(c.status is not CheckStatus.FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when no check failed, 1 when any did (2 is for usage/cluster errors)."""
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        """How many checks have each status."""
        counts = {s.value: 0 for s in CheckStatus}
        for check in self.checks:
            counts[check.status.value] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "inference_service": {"namespace": self.namespace, "name": self.name},
            "ok": self.ok,
            "summary": self.counts(),
            "checks": [c.to_json() for c in self.checks],
        }


def diagnose(facts: DoctorFacts) -> DoctorReport:
    """Pure: every check, in the order an operator would fix them."""
    if facts.isvc is None:
        return DoctorReport(
            facts.namespace,
            facts.name,
            (
                Check(
                    "inference-service",
                    CheckStatus.FAIL,
                    f"InferenceService {facts.namespace}/{facts.name} not found",
                    "check the name and --namespace "
                    "(kubectl get inferenceservices.inference.llmkube.dev -A)",
                ),
            ),
        )
    spec: Mapping[str, Any] = facts.isvc.get("spec") or {}
    args = normalize_args(spec.get("extraArgs") or ())
    sglang: Mapping[str, Any] = spec.get("sglangConfig") or {}
    try:
        startup = bool(startup_adapters(args, sglang.get("loraAdapters") or ()))
    except (ValueError, KeyError, TypeError):  # a malformed JSON --lora-paths item
        startup = has_flag(args, "--lora-paths")
    checks = [
        check_runtime(spec),
        check_enable_lora(args, startup),
        check_lora_pool(args, sglang, startup),
        check_data_parallel(args, sglang),
        check_reach(args, sglang),
        check_adapter_volumes(spec),
        check_ports(spec, facts.service_port),
        check_pods(facts.pods, int(spec.get("replicas", 1))),
        *([check_gate_api(facts.gate_api, facts.pods)] if facts.gate_api is not None else []),
        *(check_gate_held(facts.pods, facts.now) if facts.now is not None else []),
        *([check_ownership(facts.name, facts.untrusted)] if facts.untrusted else []),
        *([check_llmkube(facts.adapters)] if facts.adapters else []),
        *([check_transport(facts.trials)] if facts.trials else []),
        *(
            [
                check_permissions(
                    facts.denied,
                    facts.namespace,
                    facts.transport,
                    keyed=facts.keyed,
                    gated=any(p.gated for p in facts.pods),
                )
            ]
            if facts.denied is not None
            else []
        ),
        *(check_server(probe, facts.transport) for probe in facts.servers),
    ]
    return DoctorReport(facts.namespace, facts.name, tuple(checks))


def check_ownership(name: str, untrusted: Mapping[str, str]) -> Check:
    """Labelled pods the InferenceService does not control: pulumi-lora ignores them."""
    return Check(
        "ownership",
        CheckStatus.WARN,
        untrusted_message(name, untrusted),
        "find out who created them (kubectl get pod NAME -o yaml: metadata.ownerReferences) "
        "and restrict pod creation in the namespace (docs/threat-model.md)",
    )


def check_llmkube(adapters: Sequence[Mapping[str, Any]]) -> Check:
    """Pure: whether LLMKube's own LoRA controller acts on the CRs pulumi-lora serves here.

    It runs in every LLMKube install. On a CR pulumi-lora serves it loads into one pod through
    the Service, re-sends loads SGLang refuses, and rewrites the status; the coexistence policy
    holds it off. CRs pulumi-lora did not make (no ``managed-by`` annotation) are left to it,
    unless the re-sync loop serves them too (then the loop's manifests hold it off them).
    """
    managed = [a for a in adapters if ANNOTATION_MANAGED_BY in _notes(a)]
    seen = [(a, signs) for a in managed if (signs := llmkube_signs(a))]
    if not seen:
        what = f"{len(managed)} LoRAAdapter(s) pulumi-lora made" if managed else "no CR of ours"
        return Check("llmkube-controller", CheckStatus.OK, f"no sign of it on {what}")
    names = ", ".join(
        f"{a['metadata'].get('namespace')}/{a['metadata'].get('name')} ({signs})"
        for a, signs in seen
    )
    return Check(
        "llmkube-controller",
        CheckStatus.WARN,
        f"LLMKube's own LoRA controller acts on {len(seen)} of the {len(managed)} LoRAAdapter(s) "
        f"pulumi-lora serves here: {names}; it loads through the Service into one pod and "
        "rewrites their status (the pods stay the truth for pulumi-lora)",
        COEXISTENCE_FIX,
    )


def _notes(cr: Mapping[str, Any]) -> Mapping[str, Any]:
    notes = (cr.get("metadata") or {}).get("annotations")
    return notes if isinstance(notes, Mapping) else {}


def check_pods(pods: Sequence[PodEndpoint], replicas: int) -> Check:
    """The pods LLMKube labels for the InferenceService exist and are Ready."""
    ready = [p for p in pods if p.ready]
    others = "; ".join(f"{p.name}: {p.state}" for p in pods if not p.ready)
    if not pods:
        return Check(
            "pods",
            CheckStatus.FAIL,
            f"no pods labelled {SERVICE_LABEL}=<name> found",
            "check the InferenceService's status and its Deployment (kubectl describe "
            "inferenceservice.inference.llmkube.dev NAME)",
        )
    if not ready:
        return Check(
            "pods",
            CheckStatus.FAIL,
            f"0/{len(pods)} pods Ready ({others})",
            "look at the pods' events and logs (kubectl describe pod, kubectl logs -c sglang)",
        )
    if len(ready) < len(pods):
        return Check(
            "pods",
            CheckStatus.WARN,
            f"{len(ready)}/{len(pods)} pods Ready ({others}); adapters load on the others once "
            "they turn Ready (with the re-sync loop, or the next pulumi up)",
            "look at the pods that are not Ready (kubectl describe pod)",
        )
    if len(ready) < replicas:
        return Check(
            "pods",
            CheckStatus.WARN,
            f"{len(ready)}/{replicas} desired replicas exist (all Ready)",
            "wait for the Deployment to scale up, or check its events",
        )
    return Check("pods", CheckStatus.OK, f"{len(ready)}/{len(pods)} pods Ready")


#: The gate's policy: its API version, and the Kubernetes release that serves it by default.
GATE_API = "admissionregistration.k8s.io/v1"
GATE_KUBERNETES = "Kubernetes 1.36 or later"
_OLDER_APIS = {
    "v1beta1": "Kubernetes 1.34 and 1.35, behind the MutatingAdmissionPolicy feature gate",
    "v1alpha1": "Kubernetes 1.32 and 1.33, alpha, behind the MutatingAdmissionPolicy feature gate",
}


def check_gate_api(versions: Sequence[str], pods: Sequence[PodEndpoint]) -> Check:
    """Pure: whether the cluster serves the readiness gate's ``MutatingAdmissionPolicy`` at
    ``v1`` (``versions``: those of admissionregistration.k8s.io that serve it), said of the
    target's pods: gated ones need it; without any, the gate merely cannot be installed."""
    name = "readiness-gate"
    gated = sum(1 for p in pods if p.gated)
    carry = f"{gated}/{len(pods)} pods carry the readiness gate {GATE_CONDITION}"
    if "v1" in versions:
        if not gated:
            return Check(
                name,
                CheckStatus.OK,
                f"the cluster serves MutatingAdmissionPolicy in {GATE_API}: the readiness gate "
                "can be installed (ResyncDeployment(readiness_gate=True), or pulumi-lora "
                "readiness-gate); no pod here carries it",
            )
        if gated < len(pods):
            return Check(
                name,
                CheckStatus.WARN,
                f"only {carry}: pods created before the gate's policy have none, and turn Ready "
                "before their adapters load",
                "restart the InferenceService's pods once the policy is in place (kubectl "
                "rollout restart deployment): a pod gets its gates when it is created",
            )
        return Check(
            name, CheckStatus.OK, f"{carry} (MutatingAdmissionPolicy in {GATE_API} is served)"
        )
    older = next((v for v in ("v1beta1", "v1alpha1") if v in versions), None)
    served = (
        f"MutatingAdmissionPolicy only in admissionregistration.k8s.io/{older} "
        f"({_OLDER_APIS[older]})"
        if older
        else "no MutatingAdmissionPolicy at all"
    )
    if gated:
        return Check(
            name,
            CheckStatus.FAIL,
            f"{carry}, but the cluster serves {served}: pulumi-lora's gate policy needs "
            f"{GATE_API} ({GATE_KUBERNETES})",
            f"upgrade the cluster to {GATE_KUBERNETES}, or take the gate off: remove what adds "
            "it to the pods (a policy of another version, a webhook) and restart them",
        )
    return Check(
        name,
        CheckStatus.WARN,
        "the readiness gate cannot be installed here: it needs MutatingAdmissionPolicy in "
        f"{GATE_API} ({GATE_KUBERNETES}), and the cluster serves {served}",
        "run the re-sync loop without readiness_gate (pods then turn Ready before their "
        f"adapters load), or upgrade the cluster to {GATE_KUBERNETES}",
    )


def check_gate_held(pods: Sequence[PodEndpoint], now: datetime) -> list[Check]:
    """Pure: one warning per gated pod the gate holds unready past ``HELD_AFTER`` seconds (its
    containers ready, its gate not True), naming since when and what is missing; one ok check
    when none is; nothing when no pod carries the gate."""
    gated = [p for p in pods if p.gated]
    if not gated:
        return []
    held = held_pods(gated, now)
    if not held:
        return [
            Check(
                "gate-held",
                CheckStatus.OK,
                f"no pod held unready by the readiness gate for more than {HELD_AFTER} s "
                f"({len(gated)} gated)",
            )
        ]
    return [
        Check(
            "gate-held",
            CheckStatus.WARN,
            f"containers ready, held unready by the readiness gate since {h.since} "
            f"({h.held_for}): {h.message}",
            "find why what it names is not loaded (pulumi-lora status, the re-sync loop's "
            f"log); runbook of alert PulumiLoRAPodHeldUnready: {HELD_RUNBOOK}",
            pod=h.pod,
        )
        for h in held
    ]


def check_server(probe: ServerProbe, transport: Transport = Transport.DIRECT) -> Check:
    """One Ready pod's SGLang: reachable, LoRA on, version supported (``SUPPORTED_SGLANG``)."""
    name = "sglang-server"
    if not probe.reachable:
        fix = _reach_fix(probe, transport)
        return Check(name, CheckStatus.FAIL, f"unreachable: {probe.error}", fix, pod=probe.pod)
    version = parse_version(probe.version) if probe.version else None
    lora = "" if probe.adapters is None else f", {probe.adapters} adapter(s) loaded"
    if version is not None and version < MIN_SGLANG_VERSION:
        return Check(
            name,
            CheckStatus.FAIL,
            f"SGLang {probe.version}: older than {MIN_SGLANG}, whose /v1/models lists no "
            "adapters, so drift cannot be read",
            f"upgrade SGLang (supported: {SUPPORTED_SGLANG})",
            pod=probe.pod,
        )
    if probe.lora_enabled is False:
        return Check(
            name,
            CheckStatus.FAIL,
            f"SGLang {probe.version or '(version unknown)'} runs with LoRA disabled",
            "add --enable-lora to spec.extraArgs and let the pods restart",
            pod=probe.pod,
        )
    if probe.error:
        return Check(
            name,
            CheckStatus.FAIL,
            f"SGLang {probe.version or '(version unknown)'}: {probe.error}",
            _reach_fix(probe, transport),
            pod=probe.pod,
        )
    if version is None:
        why = probe.info_error or f"/server_info gave version {probe.version!r}"
        return Check(
            name,
            CheckStatus.WARN,
            f"reachable{lora}, but its version is unknown ({why})",
            f"make sure it runs a supported SGLang ({SUPPORTED_SGLANG})",
            pod=probe.pod,
        )
    return Check(name, CheckStatus.OK, f"SGLang {probe.version}, LoRA enabled{lora}", pod=probe.pod)


def check_transport(trials: Sequence[TransportTrial]) -> Check:
    """Which transport reaches the pods from here, and how to choose it (doctor tried each)."""
    name = "transport"
    tried = "; ".join(
        f"{t.transport}: {t.reached}/{t.ready} pods" + (f" ({t.error})" if t.error else "")
        for t in trials
    )
    working = next((t for t in trials if t.works), None)
    if working is None:
        return Check(
            name,
            CheckStatus.FAIL,
            f"no transport reaches the pods from here ({tried})",
            "use transport 'delegated' (the in-cluster re-sync loop loads; docs/resync.md), "
            "or run pulumi inside the cluster network",
        )
    if working.transport == Transport.DIRECT:
        return Check(name, CheckStatus.OK, "transport 'direct' reaches every Ready pod from here")
    return Check(
        name,
        CheckStatus.WARN,
        f"only transport '{working.transport}' reaches the pods from here ({tried})",
        f"set the adapters' transport input to '{working.transport}' (transport="
        f'"{working.transport}"; the examples read it from stack config: pulumi config set '
        f"transport {working.transport}); the default 'direct' cannot reach these pods",
    )


def _reach_fix(probe: ServerProbe, transport: Transport) -> str:
    if probe.reason == Unauthorized.reason:
        return (
            "the server wants an API key: pass --api-key-secret NAME[/KEY] (a Secret in the "
            "InferenceService's namespace)"
        )
    if probe.reason == UnsupportedServer.reason:
        return f"upgrade SGLang (supported: {SUPPORTED_SGLANG})"
    if transport == Transport.DIRECT and unroutable(probe.error):
        return (
            "the pod IP is not routable from here: use transport 'proxy' (--transport proxy; "
            "unkeyed SGLang) or 'delegated'"
        )
    if transport == Transport.DIRECT and "no connection within" in probe.error:
        return (
            "no connection to the pod IP from here (likely not routable outside the cluster "
            "network): try --transport proxy, or check that the pod is running"
        )
    return "check that the pod's sglang container listens on its port named http"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """Pure: ``0.5.15`` → ``(0, 5, 15)``; ``v0.5.5.post1`` and ``0.5.6rc1`` parse too; else None."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)
