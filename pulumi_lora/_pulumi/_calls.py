"""The dynamic provider's calls: a thin translation between the engine and ``_lifecycle``.

Loaded at the provider process's first call. ``check`` fails every bad input before anything
touches a cluster; ``diff`` compares the new inputs with the live values in the old outputs, so
drift shows as a change; ``update`` and ``read`` always return the full outputs. See
docs/protocol.md and docs/architecture.md.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from msgspec import ValidationError
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    UpdateResult,
)
from pulumi.dynamic.config import Config

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import PATH_OR_SOURCE, AdapterArgs, as_text_kubeconfig
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._models import PROXY_STRIPS_KEY, Transport
from pulumi_lora._pulumi._drift import (
    changed,
    drift_words,
    effective_inputs,
    live_drift,
    progress,
    report_drift,
)
from pulumi_lora._pulumi._outputs import (
    STAGING_INPUTS,
    inputs,
    outputs,
    refreshed_inputs,
    reported_conditions,
    unknown,
    with_staged_path,
)
from pulumi_lora._pulumi._properties import (
    INPUT_KEYS,
    OUTPUT_KEYS,
    REPLACE_KEYS,
    UPDATE_KEYS,
)
from pulumi_lora._staging._errors import MutableSourceRefused, SourceRefused
from pulumi_lora._staging._source import declared_request


class Calls:
    """The provider's calls, each given the stack config (``LoRAAdapterProvider.config``)."""

    @staticmethod
    def default_config() -> lifecycle.ProviderConfig:
        """The config before ``configure``: the local kubeconfig, default timeouts."""
        return lifecycle.ProviderConfig()

    @staticmethod
    def configured(config: Config) -> lifecycle.ProviderConfig:
        """The credentials and the SGLang timeouts (``CONFIG_KEYS``) from stack config."""
        keys = [f"pulumi-lora:{key}" for key in lifecycle.CONFIG_KEYS]
        return lifecycle.ProviderConfig.from_config(
            {k: _config_text(v) for k in keys if (v := config.get(k)) is not None}
        )

    def check(
        self, config: lifecycle.ProviderConfig, olds: dict[str, Any], news: dict[str, Any]
    ) -> CheckResult:
        """Validate every input; unknown (preview) values are checked once known."""
        given = {k: v for k, v in inputs(news).items() if v is not None}
        pending = frozenset(k for k, v in given.items() if unknown(v))
        known = {k: v for k, v in given.items() if k not in pending}
        failures = validation_failures(known, pending)
        if (
            not failures
            and not Transport(known.get("transport", Transport.DIRECT)).carries_key
            and (known.get("api_key_secret_name") or config.api_key)
        ):
            failures.append(
                CheckFailure(
                    "transport",
                    f"transport {known['transport']!r}: {PROXY_STRIPS_KEY}; use 'delegated' or "
                    "'direct'",
                )
            )
        if (
            not failures
            and known.get("transport") == Transport.DELEGATED.value
            and config.api_key
            and not known.get("api_key_secret_name")
        ):
            failures.append(
                CheckFailure(
                    "transport",
                    "transport 'delegated' leaves the loads to the re-sync loop, which reads "
                    "SGLang API keys from Secrets only, never the stack's "
                    "pulumi-lora:sglangApiKey: put the key in a Secret in the InferenceService's "
                    "namespace and name it with api_key_secret_name",
                )
            )
        # A kubeconfig object (pulumi-eks' ``Cluster.kubeconfig``) is kept as its JSON text, the
        # content every later call reads, so the state holds one form (secret either way).
        return CheckResult(as_text_kubeconfig(news), failures)

    def diff(
        self,
        config: lifecycle.ProviderConfig,
        id_: str,
        olds: dict[str, Any],
        news: dict[str, Any],
    ) -> DiffResult:
        """Explicit diff against the live values in the old outputs (see module docstring)."""
        news = with_staged_path(olds, news)
        before, after = effective_inputs(olds), effective_inputs(news)
        replaces = [k for k in REPLACE_KEYS if changed(before.get(k), after.get(k))]
        updates = [k for k in UPDATE_KEYS if changed(before.get(k), after.get(k))]
        drift = live_drift(olds, news)
        if not (replaces or updates or drift or self._read_vouches(config, id_, olds, news)):
            drift = self._observed_drift(config, news)
        return DiffResult(
            changes=bool(replaces or updates or drift),
            replaces=replaces,
            delete_before_replace=True,
        )

    @staticmethod
    def _observed_drift(config: lifecycle.ProviderConfig, news: dict[str, Any]) -> list[str]:
        """Look at the cluster now, so a plain ``pulumi up`` heals drift no refresh recorded.

        Best effort: when the cluster can't be read, the recorded outputs decide (as above).
        """
        try:
            args = _args(news)
            state = lifecycle.observe(args, config, lifecycle.LOOKS)
        except (PulumiLoRAError, ValidationError):
            return []
        if state is None:
            report_drift(args, ["CR deleted outside Pulumi"])
            return ["cr"]
        live = outputs(args, state)
        report_drift(args, drift_words(live, news))
        if state.spec.get("path") != args.path:
            return ["path"]
        return live_drift(live, news)

    @staticmethod
    def _read_vouches(
        config: lifecycle.ProviderConfig, id_: str, olds: dict[str, Any], news: dict[str, Any]
    ) -> bool:
        """Whether this process's read of ``id_`` is as good as a look now (``RecentReads``)."""
        generation = lifecycle.target_generation(_args(news), config)
        return RECENT_READS.vouches_for(id_, olds, generation)

    @staticmethod
    def create(config: lifecycle.ProviderConfig, props: dict[str, Any]) -> CreateResult:
        """Apply the CR and load everywhere (nothing left behind on failure)."""
        args = _args(props)
        if args.path is None:  # declared by source: staged first, then loaded by its path
            args = lifecycle.staged(args, config, say=progress)
        state = lifecycle.create(args, config)
        return CreateResult(id_=f"{args.namespace}/{args.cr_name}", outs=outputs(args, state))

    def read(self, config: lifecycle.ProviderConfig, id_: str, props: dict[str, Any]) -> ReadResult:
        """Refresh: the CR's live spec and every Ready pod's truth; gone when the CR is.

        Given only an ID (``pulumi import`` of ``NAMESPACE/NAME`` through ``provider/``), the
        CR says what is declared (``lifecycle.declared_at``), and those become the imported inputs.
        Reads only: nothing is loaded, unloaded or written.
        """
        if not inputs(props):
            declared = lifecycle.declared_at(id_, config)
            if declared is None:
                return ReadResult(id_="", outs={})
            found = self.read(config, id_, declared)
            return ReadResult(id_=found.id, outs=found.outs, inputs=declared if found.id else None)
        args = _args(props)
        started = time.monotonic()
        generation = lifecycle.target_generation(args, config)
        state = lifecycle.observe(args, config, lifecycle.LOOKS, reported_conditions(props))
        if state is None:
            report_drift(args, ["CR deleted outside Pulumi"])
            return ReadResult(id_="", outs={})
        live = args.replace(
            adapter_name=state.spec.get("name", args.adapter_name),
            path=state.spec.get("path", args.path),
        )
        outs = outputs(live, state)
        if outs.get("content_key") and outs.get("path"):  # a staged adapter: is it still there?
            verdict = lifecycle.verify_staged(live, config, str(outs["path"]), say=progress)
            if verdict != "verified":
                changed = "missing" if verdict == "missing" else f"changed ({verdict})"
                report_drift(args, [f"staged directory {outs['path']} {changed}"])
                del outs["content_key"]  # the next up stages it again
        report_drift(args, drift_words(outs, props))
        RECENT_READS.record(id_, outs, started, generation)
        return ReadResult(id_=id_, outs=outs, inputs=refreshed_inputs(props, outs))

    @staticmethod
    def update(
        config: lifecycle.ProviderConfig, _id: str, _olds: dict[str, Any], news: dict[str, Any]
    ) -> UpdateResult:
        """Swap on every pod, re-write status, return the full outputs. New content of a
        staged adapter is staged beside the old first; the old directory is then released
        (removed by a collection once nothing names it for the grace period)."""
        args = _args(with_staged_path(_olds, news))
        if args.path is None:
            args = lifecycle.staged(args, config, say=progress)
        outs = outputs(args, lifecycle.update(args, config, say=progress))
        old = _olds.get("path")
        if _olds.get("content_key") and old and old != args.path:  # the old content: released
            lifecycle.unstage_unused(_args(_olds), config, str(old), say=progress)
        return UpdateResult(outs=outs)

    @staticmethod
    def delete(config: lifecycle.ProviderConfig, _id: str, props: dict[str, Any]) -> None:
        """Unload everywhere, remove the CR, wait until it is gone; a staged directory is
        released, not removed: a replacement (``delete_before_replace``) reuses it, and a
        later collection removes it once nothing names it for the grace period."""
        args = _args(props)
        lifecycle.delete(args, config)
        if props.get("content_key") and args.path:
            lifecycle.unstage_unused(args, config, args.path, say=progress)


CALLS = Calls()


def serves_one_command() -> bool:
    """Whether this process is the engine's dynamic-provider process (``python -m
    pulumi.dynamic``), which the engine starts for one command and stops after it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pulumi.dynamic.__main__"


class RecentReads:
    """The outputs this process's ``read`` returned lately, by resource id (thread-safe).

    The engine follows a refresh's read with a diff of the same resource, in the same provider
    process; when the diff's old outputs are exactly what that read returned, the read is as
    good as a look at the cluster now, and the diff need not look again, if

    * this process has not loaded or unloaded on the adapter's target since the read started
      (the target's ``lifecycle.LOOKS`` generation is the same: an adapter loaded since may have
      evicted this one), and
    * the read started less than ``max_age`` ago (the rule of ``lifecycle.LOOKS``), or this process
      serves one engine command (``whole_command``). A ``preview --refresh`` of 300 adapters
      reads them all first and diffs them seconds later; the read was taken in this command,
      which is all that a refresh promises.
    """

    def __init__(
        self, max_age: float, whole_command: Callable[[], bool] = serves_one_command
    ) -> None:
        self.max_age = max_age
        self._whole_command = whole_command
        self._lock = threading.Lock()
        self._reads: dict[str, tuple[float, int, str]] = {}

    def record(self, id_: str, outs: Mapping[str, Any], started: float, generation: int) -> None:
        """A ``read`` of ``id_`` started at ``started`` (``time.monotonic``), when its target's
        generation was ``generation``, and returned ``outs``."""
        with self._lock:
            self._reads[id_] = (started, generation, _fingerprint(outs))

    def vouches_for(self, id_: str, olds: Mapping[str, Any], generation: int) -> bool:
        """Whether a read of ``id_`` returned exactly ``olds``, young enough and with no own
        write to its target since (its generation is still ``generation``)."""
        with self._lock:
            started, seen_generation, seen = self._reads.get(id_, (-float("inf"), -1, ""))
        young = time.monotonic() - started < self.max_age or self._whole_command()
        return young and seen_generation == generation and seen == _fingerprint(olds)


RECENT_READS = RecentReads(lifecycle.LOOK_MAX_AGE_SECONDS)


def _fingerprint(props: Mapping[str, Any]) -> str:
    """Pure: the inputs and outputs of ``props`` as canonical JSON (numbers as floats: the
    engine hands integers back as floats)."""

    def canonical(value: Any) -> Any:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, Mapping):
            return {str(k): canonical(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [canonical(v) for v in value]
        return str(value)

    kept = {k: props.get(k) for k in (*INPUT_KEYS, *OUTPUT_KEYS)}
    return json.dumps(canonical(kept), sort_keys=True)


def validation_failures(
    values: Mapping[str, Any], pending: frozenset[str] = frozenset()
) -> list[CheckFailure]:
    """Every rule ``values`` break, one ``CheckFailure`` per field (pure).

    ``pending`` names fields whose values are unknown during preview; they are checked once known.
    """
    failures = [
        CheckFailure(field, message)
        for field, message in AdapterArgs.failures(values)
        if field not in pending and not (pending and message == PATH_OR_SOURCE)
    ]
    if failures:
        return failures
    return staging_failures(values) if not pending & STAGING_INPUTS else []


def staging_failures(values: Mapping[str, Any]) -> list[CheckFailure]:
    """Pure: what is wrong with a staged adapter's declaration (none for an adapter by path):
    ``path`` and ``source`` together, a source, digest or endpoint the stager would refuse, a
    mutable source without digests (unless ``allow_mutable``)."""
    source = values.get("source")
    if source is None:
        return []
    if values.get("path") is not None:
        return [
            CheckFailure(
                "path",
                "path and source exclude each other: path is where the adapter already is, "
                "source where pulumi-lora stages it from (the staged directory is the output path)",
            )
        ]
    try:
        declared_request(values)
    except MutableSourceRefused as exc:
        return [CheckFailure("digests", str(exc))]
    except SourceRefused as exc:
        said = str(exc)
        field = next(
            (f for f in ("source_endpoint", "source_public") if said.startswith(f)), "source"
        )
        return [CheckFailure(field, str(exc))]
    return []


def _args(props: Mapping[str, Any]) -> AdapterArgs:
    return AdapterArgs.parse({k: v for k, v in inputs(props).items() if v is not None})


def _config_text(value: object) -> str:
    """A config value as text (a YAML ``loadTimeoutSeconds: 5`` may arrive as a number)."""
    return value if isinstance(value, str) else json.dumps(value)
