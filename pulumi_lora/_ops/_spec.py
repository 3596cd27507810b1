"""Doctor's checks of an InferenceService's spec, pure: its runtime, LoRA flags, volumes, ports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_lora._core._llmkube import container_port, service_port
from pulumi_lora._core._reconcile import extra_arg_value
from pulumi_lora._core._topology import has_flag, partial_reach
from pulumi_lora._ops._checks import Check, CheckStatus


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


def check_data_parallel(args: Sequence[str], sglang: Mapping[str, Any] | None = None) -> Check:
    """SGLang's runtime LoRA routes fail (500) with more than one data-parallel replica, given
    by a flag or by LLMKube's ``sglangConfig.dataParallelSize`` (it renders ``--dp N``)."""
    for finding in partial_reach(args, sglang):
        if finding.flag in DP_SOURCES:
            return Check("data-parallel", CheckStatus.FAIL, finding.reason, finding.fix)
    for flag in DP_SOURCES[:3]:
        value = extra_arg_value(args, flag)
        if has_flag(args, flag) and _int_or_none(value) is None:
            return Check(
                "data-parallel",
                CheckStatus.WARN,
                f"{flag} {value!r} is not a number",
                f"give {flag} 1 (or drop it)",
            )
        if has_flag(args, flag):
            return Check("data-parallel", CheckStatus.OK, f"{flag} {value}")
    return Check("data-parallel", CheckStatus.OK, "data-parallel size 1 (no --dp-size)")


#: Where the data-parallel size comes from (``_core._topology``'s flags, then LLMKube's field).
DP_SOURCES = ("--dp-size", "--data-parallel-size", "--dp", "spec.sglangConfig.dataParallelSize")


def check_reach(args: Sequence[str], sglang: Mapping[str, Any] | None = None) -> Check:
    """One runtime load must reach every request a pod serves: several tokenizer workers do not
    share their adapters (refused), prefill/decode disaggregation needs the adapter on both
    sides (a warning). The data-parallel size has its own check."""
    found = [f for f in partial_reach(args, sglang) if f.flag not in DP_SOURCES]
    refused = [f for f in found if f.refuse]
    if refused or found:
        shown = refused or found
        return Check(
            "load-reach",
            CheckStatus.FAIL if refused else CheckStatus.WARN,
            "; ".join(f.reason for f in shown),
            "; ".join(f.fix for f in shown),
        )
    return Check(
        "load-reach",
        CheckStatus.OK,
        "one load reaches every request (one tokenizer worker, no disaggregation)",
    )


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
