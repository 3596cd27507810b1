"""The runtime-LoRA state machine of one emulated SGLang 0.5.15 server: no I/O, no locks, no clock.

SGLang keeps two views of the adapters, and so does this module:

- the *registry* (SGLang's ``LoRARegistry`` in the tokenizer manager): the names that requests and
  ``/v1/models`` see, in LRU order (least recently used first);
- the *backend* (SGLang's ``LoRAManager``): the adapters whose weights are loaded, in load order.

An unload takes the name out of the registry at once and the weights out of the backend only once
the adapter's in-flight requests have finished; the caller waits in between (``begin_unload``,
then ``in_flight`` reaches zero, then ``finish_unload``). LRU eviction is the same two steps.

The checks of a load run in SGLang's order (see ``LoraState.load``). The caller serializes loads
and unloads and guards every call with one lock; reading ``adapter_config.json`` is the only
effect, injected as the ``read`` callable of ``load``.
"""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "AdapterReadError",
    "AdapterRef",
    "AdapterSpec",
    "DpSizeAssertionError",
    "InferenceError",
    "LoadOutcome",
    "LoraPolicy",
    "LoraState",
    "Reload",
    "UpdateResult",
]

_LORA_NOT_ENABLED = "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."
_DP_ASSERTION = "dp_size must be 1 for dynamic lora loading"


class AdapterReadError(Exception):
    """An adapter directory could not be read; the text is what SGLang reports for it."""


class DpSizeAssertionError(Exception):
    """``--dp-size > 1``: SGLang's load/unload handler dies on an assertion (500, plain text)."""


class InferenceError(Exception):
    """An inference request names an adapter it cannot use (HTTP 400 on the inference routes)."""


@dataclass(frozen=True)
class AdapterSpec:
    """What ``adapter_config.json`` says about an adapter's shape."""

    rank: int
    """``r``: the adapter's LoRA rank."""
    target_modules: frozenset[str]
    """``target_modules``, normalized as SGLang does (``q_proj`` → ``qkv_proj``, …)."""
    missing_weights: str | None = None
    """SGLang's error when the directory holds no weights file (checked after the config's fit,
    as SGLang loads the weights last), else ``None``."""
    finite: bool = True
    """Whether every weight is a finite number. SGLang loads NaN or infinite weights without a
    word; every generation through them then computes NaN logits (logprobs ``null``)."""


@dataclass(frozen=True)
class LoraPolicy:
    """The launch-time limits that decide every load (SGLang's LoRA memory pool and flags)."""

    enabled: bool
    """``--enable-lora``, or implied by a non-empty ``--lora-paths``."""
    max_lora_rank: int
    """The pool's rank: ``--max-lora-rank``, else the largest rank of the startup adapters."""
    target_modules: frozenset[str]
    """The pool's modules: ``--lora-target-modules``, else those of the startup adapters."""
    max_loras_per_batch: int
    """``--max-loras-per-batch``: at most this many minus one adapters may be pinned."""
    max_loaded_loras: int | None
    """``--max-loaded-loras``: above it, the least recently used unpinned adapter is evicted."""
    dp_size: int
    """``--dp-size``: runtime loads and unloads only work with 1."""


@dataclass(frozen=True)
class AdapterRef:
    """One loaded adapter; ``lora_id`` tells two loads of the same name apart."""

    lora_id: str
    name: str
    path: str
    pinned: bool
    finite: bool = True
    """``AdapterSpec.finite`` of the weights loaded."""


@dataclass(frozen=True)
class Reload:
    """An adapter that an inference request names and that must be implicitly loaded again."""

    name: str
    path: str
    pinned: bool


@dataclass(frozen=True)
class UpdateResult:
    """The outcome of a load or unload, as SGLang's ``LoRAUpdateOutput`` carries it."""

    success: bool
    error_message: str | None
    loaded_adapters: Mapping[str, str] | None

    def body(self) -> dict[str, object]:
        """The JSON body of ``/load_lora_adapter`` and ``/unload_lora_adapter`` (200 and 400)."""
        loaded = None if self.loaded_adapters is None else dict(self.loaded_adapters)
        return {
            "rid": None,
            "http_worker_ipc": None,
            "success": self.success,
            "error_message": self.error_message,
            "loaded_adapters": loaded,
        }


@dataclass(frozen=True)
class LoadOutcome:
    """A load's result plus the adapters it evicted, whose unload the caller must finish."""

    result: UpdateResult
    draining: tuple[str, ...]
    """``lora_id`` of every evicted adapter: wait until idle, then ``finish_unload``."""


def _lora_not_enabled_for_inference(name: str) -> str:
    """SGLang's text when a request names an adapter on a server started without LoRA."""
    return (
        f"LoRA adapter '{name}' was requested, but LoRA is not enabled. Please launch the server "
        "with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter "
        "endpoint."
    )


def _keys_repr(names: Iterable[str]) -> str:
    """How SGLang prints its registry's names (an ``OrderedDict``'s keys view)."""
    return f"odict_keys({list(names)!r})"


class LoraState:
    """Registry, backend, in-flight counters and the never-cleared cache of loaded names.

    Pure: every method only reads and changes this object (``load`` also calls ``read``).
    """

    def __init__(self, policy: LoraPolicy) -> None:
        self._policy = policy
        self._registry: OrderedDict[str, AdapterRef] = OrderedDict()
        self._backend: dict[str, AdapterRef] = {}
        self._in_flight: dict[str, int] = {}
        self._ever_loaded: dict[str, Reload] = {}
        self._inferences: Counter[str] = Counter()

    # -- queries ---------------------------------------------------------------------------

    def registered(self) -> list[AdapterRef]:
        """The adapters requests can use, least recently used first (``/v1/models``)."""
        return list(self._registry.values())

    def is_registered(self, name: str) -> bool:
        """Whether ``name`` is in the registry now."""
        return name in self._registry

    def in_flight(self, lora_id: str) -> int:
        """How many requests are running on the adapter ``lora_id``."""
        return self._in_flight.get(lora_id, 0)

    def draining(self) -> list[AdapterRef]:
        """Adapters unregistered but still loaded, waiting for their requests to finish."""
        registered = {ref.lora_id for ref in self._registry.values()}
        return [ref for ref in self._backend.values() if ref.lora_id not in registered]

    def ever_loaded(self) -> dict[str, str]:
        """Every name ever loaded successfully, with its last path (the implicit-reload cache)."""
        return {name: item.path for name, item in self._ever_loaded.items()}

    def inferences(self) -> dict[str, int]:
        """How many inference requests ran through each adapter, ever (base requests aside)."""
        return dict(self._inferences)

    def non_finite(self, names: Iterable[str | None]) -> frozenset[str]:
        """Those of ``names`` whose loaded weights are not all finite (their logits are NaN)."""
        return frozenset(name for name in names if name and not self._registry[name].finite)

    # -- loads and unloads -----------------------------------------------------------------

    def load(
        self,
        name: str,
        path: str,
        pinned: bool,
        read: Callable[[str], AdapterSpec],
        *,
        launching: bool = False,
    ) -> LoadOutcome:
        """Load one adapter, checking in SGLang's order.

        1. LoRA not enabled (``loaded_adapters`` null); then ``--dp-size > 1`` raises
           ``DpSizeAssertionError``. 2. The path is read (a bad path wins over a duplicate name).
        3. Duplicate name. 4. Rank or modules outside the pool. 5. Pinning would starve the
        unpinned adapters. Failures 2 to 5 report the current map. 6. Over ``--max-loaded-loras``,
        evict LRU unpinned adapters; if none is left, fail with ``loaded_adapters`` null (the new
        adapter stays loaded, as in SGLang, which registers before it evicts).

        ``launching``: a ``--lora-paths`` adapter, which SGLang's backend loads directly, past the
        HTTP handler's checks 1 and ``--dp-size``.
        """
        if not launching:
            if not self._policy.enabled:
                return LoadOutcome(UpdateResult(False, _LORA_NOT_ENABLED, None), ())
            self._check_dp_size()
        try:
            spec = read(path)
        except AdapterReadError as exc:
            return LoadOutcome(self._failure(str(exc)), ())
        refusal = self._refusal(name, spec, pinned)
        if refusal is not None:
            return LoadOutcome(self._failure(refusal), ())
        ref = AdapterRef(uuid.uuid4().hex, name, path, pinned, spec.finite)
        self._backend[ref.lora_id] = ref
        self._registry[name] = ref
        self._ever_loaded[name] = Reload(name, path, pinned)
        return self._evict_over_limit()

    def begin_unload(self, name: str) -> UpdateResult | str:
        """Unregister ``name``: its ``lora_id`` to wait on, or the failure to answer with."""
        if not self._policy.enabled:
            return UpdateResult(False, _LORA_NOT_ENABLED, None)
        self._check_dp_size()
        ref = self._registry.pop(name, None)
        if ref is None:
            message = (
                f"LoRA with name {name} does not exist. Loaded LoRAs: {_keys_repr(self._registry)}"
            )
            return UpdateResult(False, message, None)
        return ref.lora_id

    def finish_unload(self, lora_id: str) -> UpdateResult:
        """Drop an unregistered adapter's weights once it is idle; the remaining map."""
        assert self.in_flight(lora_id) == 0, "finish_unload of an adapter still in use"
        del self._backend[lora_id]
        return UpdateResult(True, "", self._loaded_map())

    # -- inference -------------------------------------------------------------------------

    def plan_inference(self, names: Sequence[str | None]) -> tuple[Reload, ...]:
        """Check the adapters a request names; those to reload first (``None`` is the base).

        Registered names count as used (LRU). A name never loaded successfully, or any name on
        a server without LoRA, raises ``InferenceError``.
        """
        requested = [name for name in dict.fromkeys(names) if name]
        if requested and not self._policy.enabled:
            raise InferenceError(_lora_not_enabled_for_inference(requested[0]))
        reloads: list[Reload] = []
        for name in requested:
            if name in self._registry:
                self._registry.move_to_end(name)
            elif name in self._ever_loaded:
                reloads.append(self._ever_loaded[name])
            else:
                raise InferenceError(f"Got LoRA adapter that has never been loaded: {name}")
        return tuple(reloads)

    def acquire(self, names: Sequence[str | None]) -> tuple[str, ...]:
        """Start requests on these adapters (LRU use, in-flight +1); their ``lora_id``s."""
        refs: list[AdapterRef] = []
        for name in names:
            if not name:
                continue
            ref = self._registry.get(name)
            if ref is None:
                raise InferenceError(
                    f"The following requested LoRA adapters are not loaded: {name}\n"
                    f"Loaded adapters: {_keys_repr(self._registry)}."
                )
            self._registry.move_to_end(name)
            refs.append(ref)
        for ref in refs:
            self._in_flight[ref.lora_id] = self.in_flight(ref.lora_id) + 1
            self._inferences[ref.name] += 1
        return tuple(ref.lora_id for ref in refs)

    def release(self, lora_ids: Iterable[str]) -> None:
        """Finish requests started by ``acquire``."""
        for lora_id in lora_ids:
            remaining = self._in_flight[lora_id] - 1
            if remaining:
                self._in_flight[lora_id] = remaining
            else:
                del self._in_flight[lora_id]

    # -- helpers ---------------------------------------------------------------------------

    def _check_dp_size(self) -> None:
        if self._policy.dp_size != 1:
            raise DpSizeAssertionError(_DP_ASSERTION)

    def _refusal(self, name: str, spec: AdapterSpec, pinned: bool) -> str | None:
        """Checks 3 to 5 of a load: the error text, or ``None`` when the adapter fits."""
        if any(ref.name == name for ref in self._backend.values()):
            return f"Failed to load LoRA adapter {name} because it is already loaded"
        if spec.rank > self._policy.max_lora_rank or not spec.target_modules.issubset(
            self._policy.target_modules
        ):
            return (
                f"LoRA adapter {name} with rank {spec.rank} is incompatible with the current "
                "LoRA memory pool configuration. Please ensure that the LoRA adapter's rank is "
                "within the configured `--max-lora-rank` and that the target modules are "
                "included in `--lora-target-modules`."
            )
        pinned_count = sum(ref.pinned for ref in self._backend.values())
        if pinned and pinned_count >= self._policy.max_loras_per_batch - 1:
            return (
                f"Failed to load LoRA adapter {name} as a pinned adapter. It is not allowed to "
                "pin all slots in the LoRA memory pool to avoid starvation for unpinned adapters "
                "and base models. Please increase your `--max-loras-per-batch` or load it as "
                "unpinned LoRA adapters."
            )
        return spec.missing_weights

    def _evict_over_limit(self) -> LoadOutcome:
        """Check 6: unregister LRU unpinned adapters while over ``--max-loaded-loras``."""
        limit = self._policy.max_loaded_loras
        loaded = self._loaded_map()
        draining: list[str] = []
        while limit is not None and len(self._registry) > limit:
            victim = next((ref for ref in self._registry.values() if not ref.pinned), None)
            if victim is None:
                registry = {name: ref.path for name, ref in self._registry.items()}
                message = (
                    "Didn't find any LoRA adapters when trying to evict LRU LoRA adapter. "
                    f"LoRA registry is: {registry}"
                )
                return LoadOutcome(UpdateResult(False, message, None), tuple(draining))
            del self._registry[victim.name]
            del loaded[victim.name]
            draining.append(victim.lora_id)
        return LoadOutcome(UpdateResult(True, "", loaded), tuple(draining))

    def _failure(self, message: str) -> UpdateResult:
        return UpdateResult(False, message, self._loaded_map())

    def _loaded_map(self) -> dict[str, str]:
        return {ref.name: ref.path for ref in self._backend.values()}
