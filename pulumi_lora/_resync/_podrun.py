"""One run on one pod: read ``/v1/models``, then drive the core's pod programs, one at a time.

The decisions are the core's, as in the provider. Each CR's permission is checked again right
before acting: the provider may have started an operation meanwhile.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import (
    ActionKind,
    Desired,
    PodOutcome,
    PodView,
    plan,
    pod_program,
)
from pulumi_lora._core._rollout import in_rotation
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._resync._decide import LoadLedger
from pulumi_lora._resync._drain import Drainer
from pulumi_lora._resync._status import EVICTED_REASON
from pulumi_lora._resync._views import SecretRef
from pulumi_lora._resync._world import AdapterTask, PodWork, Settled, Unload
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import (
    AlreadyLoaded,
    AsyncSGLangClient,
    Loaded,
    ModelList,
    NotLoaded,
    Smoked,
    Unloaded,
    asyncio_transport,
)
from pulumi_lora._sglang._executor import AsyncLoRAClient, run_async

#: Failure reason when a CR's API-key Secret can't be read.
SECRET_REASON = "ApiKeySecretUnavailable"  # noqa: S105 - a condition reason

KeySource = Callable[[SecretRef], Awaitable[str]]


@dataclass
class PodRun:
    """What one run did on one pod."""

    results: list[tuple[AdapterTask, PodOutcome]] = field(default_factory=list)
    unloaded: list[tuple[Unload, PodOutcome]] = field(default_factory=list)
    ledger: LoadLedger = field(default_factory=LoadLedger)
    listed: bool = False
    first_load: float | None = None  # monotonic time of the first load request
    first_load_wall: float | None = None  # the same moment, Unix time (for the logs)
    unauthorized: set[SecretRef] = field(default_factory=set)
    settled: Settled | None = None  # the fingerprint this run found or left (clean runs only)
    untouched: bool = False  # the server served what the last clean run left: nothing ran

    @property
    def failed(self) -> list[PodOutcome]:
        """Outcomes that ended in an error."""
        return [o for _, o in self.results + self.unloaded if o.error]


@cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every pod client (building one per client costs milliseconds)."""
    return ssl.create_default_context()


def pod_client(
    facts: PodEndpoint, api_key: str | None, timeouts: ClientTimeouts
) -> AsyncSGLangClient:
    """A client for one run on one pod, closed when the run ends.

    Its connection is kept alive across the run's requests (50 loads, one connect) but never
    beyond it: a pooled connection left idle to a server that then restarts or is replaced would
    fail on its next use, and holding connections to every pod between sweeps buys nothing.
    """
    return AsyncSGLangClient(
        facts.url,
        api_key=api_key,
        timeouts=timeouts,
        label=f"pod {facts.namespace}/{facts.name} ({facts.url})",
        transport=asyncio_transport(verify=_tls()),
    )


class _Observed:
    """An ``AsyncLoRAClient`` that reports every reply to the run's ledger."""

    def __init__(self, client: AsyncSGLangClient, run: PodRun) -> None:
        self._client = client
        self._run = run

    async def load_adapter(
        self, name: str, path: str, *, pinned: bool = False
    ) -> Loaded | AlreadyLoaded:
        if self._run.first_load is None:
            self._run.first_load, self._run.first_load_wall = time.monotonic(), time.time()
        outcome = await self._client.load_adapter(name, path, pinned=pinned)
        if isinstance(outcome, Loaded):
            self._run.ledger.loaded(name, path, outcome.loaded_adapters)
        return outcome

    async def unload_adapter(self, name: str) -> Unloaded | NotLoaded:
        outcome = await self._client.unload_adapter(name)
        self._run.ledger.unloaded(name)
        return outcome

    async def list_models(self) -> ModelList:
        listed = await self._client.list_models()
        self._run.ledger.listed(listed.adapters)
        return listed

    async def smoke(self, name: str) -> Smoked:
        return await self._client.smoke(name)


async def run_pod(
    facts: PodEndpoint,
    work: PodWork,
    *,
    read_key: KeySource,
    timeouts: ClientTimeouts,
    still_permitted: Callable[[AdapterTask], bool],
    settled: Settled | None = None,
    on_result: Callable[[AdapterTask, PodOutcome], None] | None = None,
    drain: Drainer | None = None,
) -> PodRun:
    """Apply ``work`` on one pod and return what happened (never raises for SGLang errors).

    ``settled`` is what the pod's last clean run left; when ``/v1/models`` shows the same again,
    the run stops there (``untouched``). ``on_result`` is told each adapter's outcome as soon as
    it is known (an outcome it was told is replaced in ``results`` only if a later load of the
    run evicted that adapter). With ``drain``, a swap on a gated pod in rotation is made out of
    rotation, in its turn (``_drain``), if ``still_permitted`` still holds then.
    """
    run = PodRun()
    keys: dict[SecretRef, str | PulumiLoRAError] = {}
    for ref in {t.api_key for t in work.tasks} | {u.api_key for u in work.unloads}:
        if ref is not None:
            try:
                keys[ref] = await read_key(ref)
            except PulumiLoRAError as exc:
                keys[ref] = exc
    clients: dict[str | None, AsyncSGLangClient] = {}

    def client_for(ref: SecretRef | None) -> _Observed | PulumiLoRAError:
        key = None if ref is None else keys[ref]
        if isinstance(key, PulumiLoRAError):
            return key
        if key not in clients:
            clients[key] = pod_client(facts, key, timeouts)
        return _Observed(clients[key], run)

    try:
        refs = [t.api_key for t in work.tasks] + [u.api_key for u in work.unloads]
        lister = next((c for c in map(client_for, refs) if not isinstance(c, Exception)), None)
        if lister is not None:
            try:
                await lister.list_models()
                run.listed = True
            except PulumiLoRAError:
                run.listed = False  # act blindly: the replies tell the truth
        if run.listed and settled is not None and work.settled_by(run.ledger.served) == settled:
            run.settled, run.untouched = settled, True
            return run
        for task in work.tasks:
            if not still_permitted(task):
                continue
            client = client_for(task.api_key)
            outcome = await _apply(
                facts, task, work, run, client, drain=drain, still_permitted=still_permitted
            )
            if outcome.reason == "Unauthorized" and task.api_key is not None:
                run.unauthorized.add(task.api_key)
            run.results.append((task, outcome))
            if on_result is not None:
                on_result(task, outcome)
        for unload in work.unloads:
            client = client_for(unload.api_key)
            if isinstance(client, PulumiLoRAError):
                run.unloaded.append((unload, _key_failure(facts, client)))
                continue
            view = PodView(facts.name, True, adapters=run.ledger.served if run.listed else None)
            action = plan(None, [view], unload.name)[0]
            run.unloaded.append(
                (unload, await run_async(pod_program(action, None, unload.name), client))
            )
    finally:
        for sglang in clients.values():
            await sglang.aclose()
    _mark_evicted(facts, run)
    if run.listed and not run.failed and all(o.loaded for _, o in run.results):
        run.settled = work.settled_by(run.ledger.served)
    return run


async def _apply(
    facts: PodEndpoint,
    task: AdapterTask,
    work: PodWork,
    run: PodRun,
    client: AsyncLoRAClient | PulumiLoRAError,
    *,
    drain: Drainer | None = None,
    still_permitted: Callable[[AdapterTask], bool] = lambda _task: True,
) -> PodOutcome:
    if isinstance(client, PulumiLoRAError):
        return _key_failure(facts, client)
    served = run.ledger.served if run.listed else None
    if task.name in work.capacity_skips and (served is None or task.name not in served):
        return _evicted(facts.name, task.name)
    desired = Desired(task.name, task.path, task.pinned, task.smoke)
    action = plan(desired, [PodView(facts.name, True, adapters=served)], task.name)[0]
    lora = client

    async def program() -> PodOutcome:
        return await run_async(pod_program(action, desired, task.name), lora)

    if drain is not None and action.kind is ActionKind.SWAP and in_rotation(facts):
        return await drain.swap(facts, task, program, lambda: still_permitted(task))
    return await program()


def _mark_evicted(facts: PodEndpoint, run: PodRun) -> None:
    """A load later in the run pushed an adapter out: that adapter is not loaded after all."""
    for index, (task, outcome) in enumerate(run.results):
        if outcome.loaded and task.name in run.ledger.evicted:
            run.results[index] = (task, _evicted(facts.name, task.name, did_load=outcome.did_load))


def _evicted(pod: str, name: str, *, did_load: bool = False) -> PodOutcome:
    return PodOutcome(
        pod,
        loaded=False,
        did_load=did_load,
        reason=EVICTED_REASON,
        error=(
            f"{name} was evicted by the server's --max-loaded-loras LRU when other adapters "
            "were loaded; it is reported instead of reloaded, so the server doesn't thrash"
        ),
    )


def _key_failure(facts: PodEndpoint, error: PulumiLoRAError) -> PodOutcome:
    return PodOutcome(
        facts.name,
        loaded=False,
        reason=SECRET_REASON,
        error=f"the SGLang API key could not be read: {error}",
        retryable=True,
    )
