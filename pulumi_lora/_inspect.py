"""What ``pulumi-lora status`` and ``pulumi-lora doctor`` find: pure verdicts over gathered facts.

Two halves, kept apart as everywhere in this project:

- **pure** (no I/O, no clock): :func:`adapter_line` turns one LoRAAdapter CR plus what each of
  its target's pods serves into a verdict (ok, drift, error); :func:`diagnose` turns an
  InferenceService object, its Service port, its pods and what each SGLang server said into
  checks (ok, warn, fail), each with a message and a fix in plain words. Plain dicts and values
  in, frozen values out, so every rule is unit-tested without a cluster.
- **gathering** (the edge): :func:`gather_status` and :func:`gather_doctor` read the cluster and
  the pods through the code the provider itself uses (``_operations.observe``,
  ``Session.clients``, the process-wide client ``POOL``), so the operator sees exactly what
  ``pulumi refresh`` would.

Secrets: the SGLang API key is read from the Secret a CR's ``pulumi-lora.dev/api-key-secret``
annotation names (or ``doctor --api-key-secret``), used as a header, and never put in a value
returned from here. ``/server_info`` echoes the server's API keys: only its ``version`` and
``enable_lora`` fields are kept, the body is never returned or printed.
"""

from __future__ import annotations

import json
import re
import shlex
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import httpx
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Service
from pydantic import ValidationError

from pulumi_lora import _cluster as k8s
from pulumi_lora._errors import ClusterError, PulumiLoRAError, Unauthorized, UnsupportedServer
from pulumi_lora._models import (
    ANNOTATION_API_KEY_SECRET,
    ANNOTATION_MANAGED_BY,
    ANNOTATION_TRANSPORT,
    LLMKUBE_FINALIZER,
    AdapterArgs,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    Transport,
    written_by_llmkube,
)
from pulumi_lora._operations import (
    POOL,
    SUPPORTED_SGLANG,
    PodReport,
    ProviderConfig,
    Session,
    observe,
    parallel,
)
from pulumi_lora._ownership import untrusted_message
from pulumi_lora._reconcile import extra_arg_value, startup_adapters
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient
from pulumi_lora._sglang._protocol import build_headers

__all__ = [
    "MIN_SGLANG",
    "AdapterLine",
    "AdapterVerdict",
    "Check",
    "CheckStatus",
    "DoctorFacts",
    "DoctorReport",
    "PodLine",
    "PodState",
    "ServerProbe",
    "StatusReport",
    "adapter_line",
    "args_from_cr",
    "check_adapter_volumes",
    "check_data_parallel",
    "check_enable_lora",
    "check_lora_pool",
    "check_ownership",
    "check_pods",
    "check_ports",
    "check_runtime",
    "check_server",
    "container_port",
    "diagnose",
    "gather_doctor",
    "gather_status",
    "has_flag",
    "normalize_args",
    "parse_version",
    "pod_line",
    "service_port",
]

MIN_SGLANG = (0, 5, 5)
"""The oldest supported SGLang: its ``/v1/models`` lists adapters (drift is read there)."""

#: LLMKube's defaults (its service_builder.go; docs/protocol.md): the sglang container port and
#: the Service port.
SGLANG_CONTAINER_PORT = k8s.DEFAULT_SGLANG_PORT
SERVICE_DEFAULT_PORT = 8080


# ================================================================================================
# status: LoRAAdapter CRs and their pods
# ================================================================================================


class PodState(StrEnum):
    """What one pod of the target serves, measured against the CR's declaration."""

    OK = "ok"  # Ready, serves the adapter at the declared path
    MISSING = "missing"  # Ready and reachable, adapter not loaded (drift)
    WRONG_PATH = "wrong-path"  # Ready, serves the adapter at another path (drift)
    UNREACHABLE = "unreachable"  # Ready, but its /v1/models could not be read (error)
    NOT_READY = "not-ready"  # not Ready: not counted, nothing is expected of it yet


class AdapterVerdict(StrEnum):
    """One CR's verdict; the command's exit code is 0 only when every CR is ``ok``."""

    OK = "ok"  # loaded at the declared path on every Ready pod
    DRIFT = "drift"  # some Ready pod lacks it or serves another path
    ERROR = "error"  # the truth could not be read (target, Secret, pod unreachable, no Ready pod)


@dataclass(frozen=True)
class PodLine:
    """One pod's line under a CR."""

    pod: str
    ready: bool
    state: PodState
    path: str | None = None  # the path the pod serves the adapter from, if it does
    error: str = ""  # why the state is not ok, in words


@dataclass(frozen=True)
class AdapterLine:
    """One LoRAAdapter CR with its verdict and the pods it was measured on."""

    namespace: str
    name: str
    adapter: str
    path: str
    target_namespace: str
    target_name: str
    transport: str
    observed: str  # "pods" (each pod's /v1/models) or "conditions" (the CR's status only)
    verdict: AdapterVerdict
    last_loaded_at: str | None = None
    error: str = ""
    pods: tuple[PodLine, ...] = ()
    llmkube: str = ""  # signs that LLMKube's own LoRA controller acts on the CR (llmkube_signs)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "adapter": self.adapter,
            "path": self.path,
            "target": {"namespace": self.target_namespace, "name": self.target_name},
            "transport": self.transport,
            "observed": self.observed,
            "verdict": self.verdict.value,
            "last_loaded_at": self.last_loaded_at,
            "error": self.error,
            "llmkube": self.llmkube,
            "pods": [
                {
                    "pod": p.pod,
                    "ready": p.ready,
                    "state": p.state.value,
                    "loaded": p.state is PodState.OK,
                    "path": p.path,
                    "error": p.error,
                }
                for p in self.pods
            ],
        }


@dataclass(frozen=True)
class StatusReport:
    """Every CR looked at, in namespace/name order."""

    adapters: tuple[AdapterLine, ...]

    @property
    def ok(self) -> bool:
        """Whether every declared adapter is loaded on every Ready pod of its target."""
        return all(a.verdict is AdapterVerdict.OK for a in self.adapters)

    @property
    def exit_code(self) -> int:
        """0 when all is ok, 1 when drift or errors were found (2 is for usage/cluster errors)."""
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        """How many CRs have each verdict, plus the total."""
        counts = {v.value: 0 for v in AdapterVerdict}
        for line in self.adapters:
            counts[line.verdict.value] += 1
        return {"adapters": len(self.adapters), **counts}

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "ok": self.ok,
            "summary": self.counts(),
            "adapters": [a.to_json() for a in self.adapters],
        }


def args_from_cr(cr: Mapping[str, Any], transport: Transport | None = None) -> AdapterArgs:
    """Pure: the resource arguments a CR stands for, so ``observe`` can read it as refresh does.

    The transport and API key Secret come from the CR's ``pulumi-lora.dev/*`` annotations (a CR
    made by someone else reads as ``direct``, unkeyed); ``transport`` overrides the recorded one.
    Raises pydantic's ``ValidationError`` for a CR whose spec breaks the CRD's rules.
    """
    meta = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    notes = meta.get("annotations") or {}
    ref = spec.get("inferenceServiceRef") or {}
    secret_name, _, secret_key = str(notes.get(ANNOTATION_API_KEY_SECRET, "")).partition("/")
    values: dict[str, Any] = {
        "adapter_name": spec.get("name"),
        "path": spec.get("path"),
        "inference_service": ref.get("name"),
        "inference_service_namespace": ref.get("namespace") or None,
        "namespace": meta.get("namespace"),
        "resource_name": meta.get("name"),
        "transport": transport or notes.get(ANNOTATION_TRANSPORT) or Transport.DIRECT,
        "api_key_secret_name": secret_name or None,
    }
    if secret_key:
        values["api_key_secret_key"] = secret_key
    return AdapterArgs.model_validate(values)


def pod_line(report: PodReport, declared_path: str) -> PodLine:
    """Pure: one pod's state against the declared path."""
    if not report.ready:
        return PodLine(report.pod, False, PodState.NOT_READY, report.path)
    if report.error:
        return PodLine(report.pod, True, PodState.UNREACHABLE, None, report.error)
    if not report.loaded:
        return PodLine(report.pod, True, PodState.MISSING, None, "not loaded")
    if report.path != declared_path:
        return PodLine(
            report.pod,
            True,
            PodState.WRONG_PATH,
            report.path,
            f"serves path {report.path!r}, declared {declared_path!r}",
        )
    return PodLine(report.pod, True, PodState.OK, report.path)


def adapter_line(
    cr: Mapping[str, Any],
    pods: Sequence[PodReport] | None,
    *,
    transport: str = Transport.DIRECT.value,
    error: str = "",
) -> AdapterLine:
    """Pure: one CR's verdict from its pods (``pods`` None: not observed, judge its conditions).

    ``error`` is a problem found while reading (the target, a Secret, a CR that can't be read);
    it makes the verdict ``error``. With pods observed, any unreachable Ready pod is an error,
    any Ready pod missing the adapter or serving another path is drift, and no Ready pod at all
    is an error (the adapter is served nowhere). Not observed (the delegated transport: only the
    in-cluster loop talks to the pods), the CR's ``Loaded`` condition for its current generation
    is the verdict.
    """
    meta = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    ref = spec.get("inferenceServiceRef") or {}
    namespace = str(meta.get("namespace", ""))
    declared = str(spec.get("path", ""))
    last_loaded = _status(cr).get("lastLoadedAt")
    line = AdapterLine(
        namespace=namespace,
        name=str(meta.get("name", "")),
        adapter=str(spec.get("name", "")),
        path=declared,
        target_namespace=str(ref.get("namespace") or namespace),
        target_name=str(ref.get("name", "")),
        transport=transport,
        observed="pods" if pods is not None else "conditions",
        verdict=AdapterVerdict.OK,
        last_loaded_at=str(last_loaded) if last_loaded else None,
        pods=tuple(pod_line(p, declared) for p in pods or ()),
        llmkube=llmkube_signs(cr),
    )
    if error:
        return replace(line, verdict=AdapterVerdict.ERROR, error=error)
    if pods is None:
        verdict, problem = _verdict_from_conditions(cr)
        return replace(line, verdict=verdict, error=problem)
    states = [p.state for p in line.pods]
    drifted = sum(1 for s in states if s in (PodState.MISSING, PodState.WRONG_PATH))
    ready = sum(1 for p in line.pods if p.ready)
    if PodState.UNREACHABLE in states:
        return replace(
            line, verdict=AdapterVerdict.ERROR, error="some Ready pods could not be read"
        )
    if not ready:
        problem = "no Ready pods: the adapter is served nowhere" if states else "no pods found"
        return replace(line, verdict=AdapterVerdict.ERROR, error=problem)
    if drifted:
        return replace(
            line, verdict=AdapterVerdict.DRIFT, error=f"drift on {drifted}/{ready} Ready pods"
        )
    return line


COEXISTENCE_FIX = (
    "apply pulumi-lora's coexistence policy, which holds LLMKube's LoRA controller off the CRs "
    "pulumi-lora serves: `pulumi-lora coexistence-policy | kubectl apply -f -` (the re-sync "
    "loop's manifests include it; --llmkube-user if LLMKube runs under another ServiceAccount)"
)
"""What to do when LLMKube's own LoRA controller is seen acting on pulumi-lora's CRs."""


def llmkube_signs(cr: Mapping[str, Any]) -> str:
    """Pure: the signs that LLMKube's own LoRA controller acts on this CR, in words ("" if none).

    Its finalizer on the CR, and the conditions it wrote (``written_by_llmkube``). The pods stay
    the truth for the verdict; these say why ``kubectl get lora`` may disagree with it.
    """
    signs = []
    if LLMKUBE_FINALIZER in ((cr.get("metadata") or {}).get("finalizers") or []):
        signs.append(f"its finalizer {LLMKUBE_FINALIZER}")
    try:
        conditions = LoRAAdapterStatus.model_validate(_status(cr)).conditions or []
    except ValidationError:
        conditions = []
    written = [
        f"{c.type}={c.status.value} ({c.reason})" for c in conditions if written_by_llmkube(c)
    ]
    if written:
        signs.append("conditions it wrote: " + ", ".join(written))
    return "; ".join(signs)


def _status(cr: Mapping[str, Any]) -> Mapping[str, Any]:
    status = cr.get("status")
    return status if isinstance(status, Mapping) else {}


def _verdict_from_conditions(cr: Mapping[str, Any]) -> tuple[AdapterVerdict, str]:
    """Pure: ok when ``Loaded`` is True for the CR's current generation, else drift (why)."""
    generation = int((cr.get("metadata") or {}).get("generation", 1))
    try:
        conditions = LoRAAdapterStatus.model_validate(_status(cr)).conditions or []
    except ValidationError:
        return AdapterVerdict.ERROR, "the CR's status cannot be read"
    loaded = next((c for c in conditions if c.type == ConditionKind.LOADED.value), None)
    if loaded is not None and written_by_llmkube(loaded):
        return (
            AdapterVerdict.ERROR,
            "the Loaded condition is LLMKube's LoRA controller's, not the re-sync loop's: "
            + COEXISTENCE_FIX,
        )
    if loaded is None:
        return AdapterVerdict.DRIFT, "no Loaded condition yet (is the re-sync loop running?)"
    if loaded.observed_generation is not None and loaded.observed_generation != generation:
        return (
            AdapterVerdict.DRIFT,
            f"the Loaded condition is for generation {loaded.observed_generation}, the spec is "
            f"at {generation} (is the re-sync loop running?)",
        )
    if loaded.status is not ConditionStatus.TRUE:
        return AdapterVerdict.DRIFT, f"Loaded={loaded.status.value} ({loaded.reason}): " + (
            loaded.message or "no message"
        )
    return AdapterVerdict.OK, ""


# ================================================================================================
# doctor: an InferenceService's fitness for dynamic LoRA
# ================================================================================================


class CheckStatus(StrEnum):
    """A check's outcome: ``fail`` breaks dynamic LoRA, ``warn`` is a trap worth a look."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One check: a stable ``name``, its status, what was found, and what to do about it."""

    name: str
    status: CheckStatus
    message: str
    fix: str = ""
    pod: str | None = None  # the pod a per-server check is about

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "fix": self.fix,
            "pod": self.pod,
        }


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
class DoctorFacts:
    """Everything doctor looks at, as plain values (``isvc`` None: it does not exist)."""

    namespace: str
    name: str
    isvc: Mapping[str, Any] | None
    service_port: int | None = None  # the live Service's ``http`` port, when it exists
    pods: tuple[k8s.PodEndpoint, ...] = ()
    servers: tuple[ServerProbe, ...] = ()
    transport: str = Transport.DIRECT.value
    untrusted: Mapping[str, str] = field(default_factory=dict)  # labelled, outside the chain
    adapters: tuple[Mapping[str, Any], ...] = ()  # the LoRAAdapter CRs that target it


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
        check_data_parallel(args),
        check_adapter_volumes(spec),
        check_ports(spec, facts.service_port),
        check_pods(facts.pods, int(spec.get("replicas", 1))),
        *([check_ownership(facts.name, facts.untrusted)] if facts.untrusted else []),
        *([check_llmkube(facts.adapters)] if facts.adapters else []),
        *(check_server(probe, facts.transport) for probe in facts.servers),
    ]
    return DoctorReport(facts.namespace, facts.name, tuple(checks))


def normalize_args(extra_args: Sequence[object]) -> list[str]:
    """Pure: ``spec.extraArgs`` as a flat list (one string holding every flag is split by shell
    rules, as ``startup_adapters`` does: both forms appear in real manifests)."""
    args = [str(a) for a in extra_args]
    if len(args) == 1 and " " in args[0]:
        return shlex.split(args[0])
    return args


def has_flag(args: Sequence[str], flag: str) -> bool:
    """Pure: whether ``flag`` is given (``--flag``, ``--flag v`` or ``--flag=v``)."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


def check_runtime(spec: Mapping[str, Any]) -> Check:
    """Only SGLang's runtime takes adapters at run time (LLMKube's default is llamacpp)."""
    runtime = str(spec.get("runtime") or "llamacpp")
    if runtime == "sglang":
        return Check("runtime", CheckStatus.OK, "runtime: sglang")
    implicit = "" if spec.get("runtime") else " (spec.runtime is unset: LLMKube's default)"
    return Check(
        "runtime",
        CheckStatus.FAIL,
        f"runtime: {runtime}{implicit}; pulumi-lora loads adapters through SGLang's runtime LoRA "
        "API only (RuntimeMismatch)",
        "set spec.runtime: sglang",
    )


def check_enable_lora(args: Sequence[str], has_startup_adapters: bool) -> Check:
    """``--enable-lora`` must be in ``extraArgs``: LLMKube's operator never adds it by itself."""
    if has_flag(args, "--enable-lora"):
        return Check("enable-lora", CheckStatus.OK, "spec.extraArgs has --enable-lora")
    if has_startup_adapters:
        return Check(
            "enable-lora",
            CheckStatus.WARN,
            "spec.extraArgs has no --enable-lora; LoRA is on only because startup adapters "
            "(--lora-paths or spec.sglangConfig.loraAdapters) are given",
            "add --enable-lora to spec.extraArgs so dynamic loading does not depend on them",
        )
    return Check(
        "enable-lora",
        CheckStatus.FAIL,
        "spec.extraArgs has no --enable-lora and LLMKube never adds it: every load fails with "
        "'LoRA is not enabled'",
        "add --enable-lora to spec.extraArgs",
    )


def check_lora_pool(
    args: Sequence[str], sglang: Mapping[str, Any], has_startup_adapters: bool
) -> Check:
    """Without ``--lora-paths``, SGLang sizes its LoRA memory pool from two flags it then needs."""
    rank = extra_arg_value(args, "--max-lora-rank") if has_flag(args, "--max-lora-rank") else None
    modules = (
        extra_arg_value(args, "--lora-target-modules")
        if has_flag(args, "--lora-target-modules")
        else None
    )
    rank = rank or _str_or_none(sglang.get("maxLoraRank"))
    modules = modules or _join_or_none(sglang.get("loraTargetModules"))
    if rank and modules:
        return Check(
            "lora-pool",
            CheckStatus.OK,
            f"LoRA pool: --max-lora-rank {rank}, --lora-target-modules {modules}",
        )
    if has_startup_adapters:
        return Check(
            "lora-pool",
            CheckStatus.OK,
            "LoRA pool sized from the startup adapters (--lora-paths); adapters loaded later must "
            "fit their largest rank and target modules",
            ""
            if rank and modules
            else "add --max-lora-rank and --lora-target-modules to "
            "spec.extraArgs to load larger adapters later",
        )
    missing = [
        flag
        for flag, value in (("--max-lora-rank", rank), ("--lora-target-modules", modules))
        if not value
    ]
    return Check(
        "lora-pool",
        CheckStatus.FAIL,
        f"no --lora-paths and no {' or '.join(missing)}: SGLang cannot size its LoRA memory pool, "
        "so it refuses to start or every load is 'incompatible'",
        "add e.g. --max-lora-rank 64 --lora-target-modules all to spec.extraArgs (the largest "
        "rank and the union of the target modules of the adapters you will load)",
    )


def check_data_parallel(args: Sequence[str]) -> Check:
    """SGLang's runtime LoRA routes fail (500) with more than one data-parallel rank."""
    for flag in ("--dp-size", "--data-parallel-size", "--dp"):
        if not has_flag(args, flag):
            continue
        value = extra_arg_value(args, flag)
        size = _int_or_none(value)
        if size is None:
            return Check(
                "data-parallel",
                CheckStatus.WARN,
                f"{flag} {value!r} is not a number",
                f"give {flag} 1 (or drop it)",
            )
        if size > 1:
            return Check(
                "data-parallel",
                CheckStatus.FAIL,
                f"{flag} {size}: SGLang answers runtime LoRA loads with a 500 when the data-"
                "parallel size is above 1",
                f"drop {flag} (one data-parallel rank per pod) and scale with spec.replicas",
            )
        return Check("data-parallel", CheckStatus.OK, f"{flag} {size}")
    return Check("data-parallel", CheckStatus.OK, "data-parallel size 1 (no --dp-size)")


def check_adapter_volumes(spec: Mapping[str, Any]) -> Check:
    """Adapter weights reach the sglang container only through volumes the spec declares."""
    volumes = list(spec.get("extraVolumes") or [])
    mounts = list(spec.get("extraVolumeMounts") or [])
    where = ", ".join(str(m.get("mountPath", "?")) for m in mounts if isinstance(m, Mapping))
    if volumes and mounts:
        return Check(
            "adapter-volumes",
            CheckStatus.OK,
            f"{len(volumes)} extra volume(s), mounted at {where}; adapter paths must lie "
            "under them",
        )
    if mounts:
        return Check(
            "adapter-volumes",
            CheckStatus.FAIL,
            "spec.extraVolumeMounts is set but spec.extraVolumes is empty: the pods cannot be "
            "created",
            "declare the mounted volumes in spec.extraVolumes",
        )
    if volumes:
        return Check(
            "adapter-volumes",
            CheckStatus.WARN,
            "spec.extraVolumes is set but nothing mounts it (spec.extraVolumeMounts is empty)",
            "mount the adapter volume in spec.extraVolumeMounts (e.g. at /adapters)",
        )
    return Check(
        "adapter-volumes",
        CheckStatus.WARN,
        "no extra volumes: nothing mounts adapter weights automatically, so every adapter path "
        "must already exist in the image",
        "add the adapters' volume to spec.extraVolumes and mount it with spec.extraVolumeMounts "
        "(e.g. a PVC at /adapters), then declare paths under it",
    )


def container_port(spec: Mapping[str, Any]) -> int:
    """Pure: the sglang container port LLMKube sets (containerPort, endpoint.port, or 30000)."""
    endpoint = spec.get("endpoint") or {}
    return int(spec.get("containerPort") or endpoint.get("port") or SGLANG_CONTAINER_PORT)


def service_port(spec: Mapping[str, Any]) -> int:
    """Pure: the Service port LLMKube sets (endpoint.port, else 8080)."""
    endpoint = spec.get("endpoint") or {}
    return int(endpoint.get("port") or SERVICE_DEFAULT_PORT)


def check_ports(spec: Mapping[str, Any], live_service_port: int | None) -> Check:
    """The Service and the container can disagree (endpoint omitted: 8080 vs 30000)."""
    endpoint = spec.get("endpoint") or {}
    container = container_port(spec)
    service = live_service_port if live_service_port is not None else service_port(spec)
    if live_service_port is not None:
        service_from = "the live Service"
    else:
        service_from = "spec.endpoint.port" if endpoint.get("port") else "endpoint unset: 8080"
    if spec.get("containerPort"):
        container_from = "spec.containerPort"
    else:
        container_from = "spec.endpoint.port" if endpoint.get("port") else "sglang default"
    if service == container:
        return Check(
            "ports", CheckStatus.OK, f"Service port {service} = sglang container port {container}"
        )
    return Check(
        "ports",
        CheckStatus.WARN,
        f"the Service listens on {service} ({service_from}), SGLang on {container} "
        f"({container_from}): a client that mixes up the two reaches nothing. pulumi-lora is "
        "not affected: it addresses each pod at its container port",
        f"set spec.endpoint.port: {container} so both agree",
    )


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


def check_pods(pods: Sequence[k8s.PodEndpoint], replicas: int) -> Check:
    """The pods LLMKube labels for the InferenceService exist and are Ready."""
    ready = [p for p in pods if p.ready]
    others = "; ".join(f"{p.name}: {p.state}" for p in pods if not p.ready)
    if not pods:
        return Check(
            "pods",
            CheckStatus.FAIL,
            f"no pods labelled {k8s.SERVICE_LABEL}=<name> found",
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


def check_server(probe: ServerProbe, transport: str = Transport.DIRECT.value) -> Check:
    """One Ready pod's SGLang: reachable, LoRA on, version supported (≥ 0.5.5)."""
    name = "sglang-server"
    if not probe.reachable:
        fix = _reach_fix(probe, transport)
        return Check(name, CheckStatus.FAIL, f"unreachable: {probe.error}", fix, pod=probe.pod)
    version = parse_version(probe.version) if probe.version else None
    lora = "" if probe.adapters is None else f", {probe.adapters} adapter(s) loaded"
    if version is not None and version < MIN_SGLANG:
        return Check(
            name,
            CheckStatus.FAIL,
            f"SGLang {probe.version}: older than 0.5.5, whose /v1/models lists no adapters, so "
            "drift cannot be read",
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


def _reach_fix(probe: ServerProbe, transport: str) -> str:
    if probe.reason == Unauthorized.reason:
        return (
            "the server wants an API key: pass --api-key-secret NAME[/KEY] (a Secret in the "
            "InferenceService's namespace)"
        )
    if probe.reason == UnsupportedServer.reason:
        return f"upgrade SGLang (supported: {SUPPORTED_SGLANG})"
    if transport == Transport.DIRECT.value:
        return (
            "doctor reaches pods at their IP (--transport direct); from outside the cluster "
            "network use --transport proxy"
        )
    return "check that the pod's sglang container listens on its port named http"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """Pure: ``0.5.15`` → ``(0, 5, 15)``; ``v0.5.5.post1`` and ``0.5.6rc1`` parse too; else None."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _str_or_none(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _join_or_none(value: object) -> str | None:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) or None
    return _str_or_none(value)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# ================================================================================================
# gathering (the edge)
# ================================================================================================


def gather_status(
    source: k8s.KubeSource, namespace: str | None, transport: Transport | None = None
) -> StatusReport:
    """Read every LoRAAdapter (one namespace, or all when None) and what each pod serves.

    Each CR is observed exactly as ``pulumi refresh`` observes it (``_operations.observe``: the
    target, its pods, each Ready pod's ``/v1/models``, the API key Secret its annotation names).
    Problems with one CR become its error; only cluster access itself raises ``ClusterError``.
    """
    kube = POOL.kube(source)
    crs = sorted(
        k8s.list_adapters(kube, namespace),
        key=lambda cr: (cr["metadata"].get("namespace", ""), cr["metadata"].get("name", "")),
    )
    config = ProviderConfig(kubeconfig=source.kubeconfig, context=source.context)
    return StatusReport(tuple(parallel(lambda cr: _observe_cr(cr, config, transport), crs)))


def _observe_cr(
    cr: Mapping[str, Any], config: ProviderConfig, transport: Transport | None
) -> AdapterLine:
    try:
        args = args_from_cr(cr, transport)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return adapter_line(cr, None, error=f"the CR cannot be read: {problems}")
    used = args.transport.value
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
    source: k8s.KubeSource,
    namespace: str,
    name: str,
    *,
    transport: Transport = Transport.DIRECT,
    api_key_secret: tuple[str, str] | None = None,
) -> DoctorFacts:
    """Read the InferenceService, its Service, its pods, and ask each Ready pod's SGLang.

    Raises ``ClusterError`` only when the cluster itself can't be used; a missing
    InferenceService is a fact (``isvc`` None) that :func:`diagnose` turns into a failed check.
    """
    kube = POOL.kube(source)
    try:
        obj = k8s.as_dict(kube.get(k8s.InferenceServiceResource, name, namespace=namespace))
    except ApiError as exc:
        if exc.status.code == 404:
            return DoctorFacts(namespace, name, None, transport=transport.value)
        raise _api_error(f"reading InferenceService {namespace}/{name}", exc) from exc
    listing = k8s.list_target_pods(kube, k8s.target_from_object(obj))
    pods = listing.pods
    args = AdapterArgs(
        # Session.clients is the one place that turns a transport into per-pod clients; doctor
        # has no adapter of its own, so these args name a placeholder adapter on the target.
        adapter_name="pulumi-lora-doctor",
        path="/pulumi-lora-doctor",
        inference_service=name,
        namespace=namespace,
        transport=transport,
        api_key_secret_name=api_key_secret[0] if api_key_secret else None,
        api_key_secret_key=api_key_secret[1] if api_key_secret else "api-key",
    )
    session = Session(args, ProviderConfig(kubeconfig=source.kubeconfig, context=source.context))
    return DoctorFacts(
        namespace,
        name,
        obj,
        service_port=_live_service_port(kube, namespace, name),
        pods=pods,
        servers=_probe_servers(session, k8s.target_from_object(obj), pods),
        transport=transport.value,
        untrusted=listing.untrusted,
        adapters=tuple(_targeting(_adapters_near(kube, namespace), namespace, name)),
    )


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
    chosen = next((p for p in ports if p.name == k8s.HTTP_PORT_NAME), ports[0] if ports else None)
    return int(chosen.port) if chosen is not None else None


def _probe_servers(
    session: Session, target: k8s.Target, pods: Sequence[k8s.PodEndpoint]
) -> tuple[ServerProbe, ...]:
    """Ask every Ready pod's SGLang for its adapters and version (in parallel)."""
    ready = [p for p in pods if p.ready]
    if not ready:
        return ()
    try:
        api_key = session.api_key(target)
        clients = session.clients(ready, api_key)
        headers, tls = _server_info_access(session, api_key)
    except PulumiLoRAError as exc:
        return tuple(ServerProbe(p.name, False, error=str(exc), reason=exc.reason) for p in ready)

    def probe(pod: k8s.PodEndpoint) -> ServerProbe:
        client = clients.get(pod.name)
        if client is None:
            return ServerProbe(pod.name, False, error="the pod has no IP", reason="NoPodIP")
        return _probe(pod.name, client, headers, tls, session.timeouts)

    return tuple(parallel(probe, ready))


Verify = ssl.SSLContext | bool


def _server_info_access(session: Session, api_key: str | None) -> tuple[dict[str, str], Verify]:
    """Headers and TLS for ``/server_info``, the same way in as the pooled SGLang clients."""
    if session.args.transport is Transport.PROXY:
        access = POOL.proxy(session.source)
        return build_headers(None, access.headers), access.ssl_context or True
    return build_headers(api_key), True


def _probe(
    pod: str,
    client: SGLangClient,
    headers: Mapping[str, str],
    tls: Verify,
    timeouts: ClientTimeouts,
) -> ServerProbe:
    """One server: ``/v1/models`` (reachable, the adapters) then ``/server_info`` (version)."""
    unsupported = ""
    adapters: int | None = None
    try:
        adapters = len(client.list_models().adapters)
    except UnsupportedServer as exc:
        unsupported = str(exc)
    except PulumiLoRAError as exc:
        return ServerProbe(pod, False, error=str(exc), reason=exc.reason)
    info, info_error = _server_info(str(client.base_url), headers, tls, timeouts)
    version, enabled = info.get("version"), info.get("enable_lora")
    return ServerProbe(
        pod,
        True,
        version=str(version) if version is not None else None,
        lora_enabled=enabled if isinstance(enabled, bool) else None,
        adapters=adapters,
        error=unsupported,
        reason=UnsupportedServer.reason if unsupported else "",
        info_error=info_error,
    )


def _server_info(
    base_url: str, headers: Mapping[str, str], tls: Verify, timeouts: ClientTimeouts
) -> tuple[dict[str, Any], str]:
    """``GET /server_info`` (``/get_server_info`` before 0.5.6): ``version`` and ``enable_lora``,
    or why they could not be read.

    The body echoes the server's API keys: nothing else leaves this function and no message
    quotes the body.
    """
    timeout = httpx.Timeout(timeouts.read, connect=timeouts.connect)
    base = base_url.rstrip("/")
    try:
        with httpx.Client(headers=dict(headers), verify=tls, timeout=timeout) as http:
            response = http.get(f"{base}/server_info")
            if response.status_code == 404:
                response = http.get(f"{base}/get_server_info")
    except httpx.HTTPError as exc:
        return {}, f"/server_info could not be read ({type(exc).__name__})"
    if response.status_code != 200:
        return {}, f"/server_info answered HTTP {response.status_code}"
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}, "/server_info did not answer JSON"
    if not isinstance(body, dict):
        return {}, "/server_info did not answer a JSON object"
    return {key: body[key] for key in ("version", "enable_lora") if key in body}, ""


def _api_error(action: str, exc: ApiError) -> ClusterError:
    status = exc.status
    return ClusterError(f"{action} failed: HTTP {status.code} {status.reason}: {status.message}")
