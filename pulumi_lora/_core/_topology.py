"""Server configurations where one runtime load cannot reach every request (issue 54, item 6).

Pure. SGLang 0.5.23's ``/load_lora_adapter`` registers the adapter in the tokenizer manager
that took the request and fans the weights out to every scheduler behind it. Where a pod runs
several tokenizer managers, or several data-parallel replicas, one load is not the pod's:

- ``--tokenizer-worker-num N > 1``: N HTTP workers, each a ``TokenizerWorker`` with its own
  ``LoRARegistry`` (``managers/tokenizer_manager.py``); a load reaches the worker that took it,
  and requests through the others answer 400 "never been loaded" (SGLang issue 31084, open).
  Refused.
- ``--dp-size``/``--dp``/``--data-parallel-size N > 1``, or LLMKube's
  ``spec.sglangConfig.dataParallelSize`` (it renders ``--dp N``): the load handler asserts
  ``dp_size == 1`` (``tokenizer_control_mixin.py``) and answers 500. Refused.
- ``--disaggregation-mode prefill|decode``: a request passes a prefill and a decode server,
  each resolving the adapter in its own tokenizer manager; the adapter must be declared on both
  InferenceServices. Warned, not refused: each side is served as declared.

Not partial, checked in the same source: tensor and pipeline parallelism and multi-node
(control requests reach every rank through the scheduler), ``--enable-dp-attention`` (0.5.23
rewrites it to attention-DP ranks that every load reaches), ``--max-loaded-loras`` (evictions,
healed as drift).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_lora._core._llmkube import Target
from pulumi_lora._core._reconcile import extra_arg_value
from pulumi_lora._errors import PartialReach

__all__ = ["Finding", "has_flag", "normalize_args", "partial_reach", "refusal", "servable"]

#: The flags naming the data-parallel size (SGLang's aliases).
DP_FLAGS = ("--dp-size", "--data-parallel-size", "--dp")


@dataclass(frozen=True)
class Finding:
    """One configuration that keeps a load from reaching every request of a pod."""

    flag: str
    refuse: bool  # True: no load can be served as declared; False: a warning
    reason: str
    fix: str


def normalize_args(extra_args: Sequence[object]) -> list[str]:
    """Pure: ``spec.extraArgs`` as a flat list (one string holding every flag is split by shell
    rules: both forms appear in real manifests)."""
    args = [str(a) for a in extra_args]
    if len(args) == 1 and " " in args[0]:
        return shlex.split(args[0])
    return args


def has_flag(args: Sequence[str], flag: str) -> bool:
    """Pure: whether ``flag`` is given (``--flag``, ``--flag v`` or ``--flag=v``)."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _number(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def partial_reach(
    extra_args: Sequence[object], sglang_config: Mapping[str, Any] | None = None
) -> tuple[Finding, ...]:
    """Pure: every configuration of ``spec.extraArgs`` and ``spec.sglangConfig`` where one
    runtime load cannot reach every request (see the module docstring)."""
    args = normalize_args(extra_args)
    found: list[Finding] = []
    workers = _number(extra_arg_value(args, "--tokenizer-worker-num"))
    if workers is not None and workers > 1:
        found.append(
            Finding(
                "--tokenizer-worker-num",
                True,
                f"--tokenizer-worker-num {workers}: each of the {workers} tokenizer workers "
                "keeps its own adapter registry, and a runtime load reaches only the worker that "
                "took it, so requests through the others fail 'never been loaded' (SGLang issue "
                "31084)",
                "drop --tokenizer-worker-num (one tokenizer worker per pod) and scale with "
                "spec.replicas",
            )
        )
    sizes = [(flag, extra_arg_value(args, flag)) for flag in DP_FLAGS if has_flag(args, flag)]
    dp = (sglang_config or {}).get("dataParallelSize")
    if dp is not None:
        sizes.append(("spec.sglangConfig.dataParallelSize", str(dp)))
    for flag, value in sizes:
        size = _number(value)
        if size is not None and size > 1:
            found.append(
                Finding(
                    flag,
                    True,
                    f"{flag} {size}: SGLang refuses runtime LoRA loads with more than one "
                    "data-parallel replica per server (it answers 500)",
                    f"drop {flag} (one data-parallel replica per pod) and scale with spec.replicas",
                )
            )
            break
    mode = extra_arg_value(args, "--disaggregation-mode")
    if mode in ("prefill", "decode"):
        found.append(
            Finding(
                "--disaggregation-mode",
                False,
                f"--disaggregation-mode {mode}: a request passes a prefill and a decode server, "
                "and each serves only the adapters loaded on its own pods",
                "declare the adapter on both the prefill and the decode InferenceService",
            )
        )
    return tuple(found)


def refusal(extra_args: Sequence[object], sglang_config: Mapping[str, Any] | None = None) -> str:
    """Pure: why no load on this server can be served as declared ("" when one can): the
    refused findings of :func:`partial_reach`, each with its fix."""
    return "; ".join(
        f"{f.reason}: {f.fix}" for f in partial_reach(extra_args, sglang_config) if f.refuse
    )


def servable(target: Target) -> Target:
    """Pure: ``target``, or ``PartialReach`` naming why one load cannot reach every request of
    its pods (create and update ask before anything is applied or loaded)."""
    why = refusal(target.extra_args, {"dataParallelSize": target.data_parallel_size})
    if why:
        raise PartialReach(target.namespace, target.name, why)
    return target
