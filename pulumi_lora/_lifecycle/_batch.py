"""Staging batches: the staged adapters one command creates on a claim share one Job.

A Job per adapter costs a pod start each (on a cluster, seconds: schedule, mount, start), and
the dynamic host runs at most four calls at once. The engine checks a command's resources
before (and while) it creates them, so ``check`` declares each staged adapter it passes
(:meth:`StagingBatches.declare`); the first ``staged`` of a group (one claim, one set of
credentials) runs one Job for itself and every declared adapter of the group not staged yet,
and the others find their outcome waiting. An adapter the batch could not stage is staged alone
afterwards, for the stager's exact message. Must not decide anything about the cluster: the
caller resolves the claim and runs the Job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._models import AdapterArgs
from pulumi_lora._staging._plan import BATCH_LIMIT
from pulumi_lora._staging._source import StagingRequest, content_key, declared_request

Scope = tuple[Hashable, ...]
"""The cluster identity and the claim (``_stage._scope``): where a content key is staged."""


@dataclass(frozen=True)
class Outcome:
    """One adapter's part of a batch Job's result: staged (with its size), or why not."""

    staged: bool
    bytes: int = 0
    fetched: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Declared:
    """A staged adapter that ``check`` passed in this process: what its create will stage."""

    group: tuple[Hashable, ...]
    request: StagingRequest
    key: str
    at: float


def batch_group(
    args: AdapterArgs, config: ProviderConfig, hf_endpoint: str | None
) -> tuple[Hashable, ...]:
    """Pure: what adapters must share to share a Job: the cluster and target (so the claim),
    the claim's choice, the Secret, the ServiceAccount and the Hub endpoint."""
    return (
        config,
        args.kubeconfig,
        args.kubeconfig_path,
        args.kube_context,
        args.target_namespace,
        args.inference_service,
        args.volume_claim,
        args.source_secret_name,
        args.source_service_account,
        hf_endpoint,
    )


Runner = Callable[[Sequence[StagingRequest]], dict[str, Outcome]]


class StagingBatches:
    """This process's declared staged adapters, the batches in flight and their outcomes.

    Thread-safe. A declaration lives ``max_age`` seconds at most (a command's checks come
    seconds before its creates); an outcome waits for its adapter's ``staged`` that long too,
    and is taken once: a later command in the same process (the tests', an Automation API
    program's) stages afresh.
    """

    def __init__(
        self,
        max_age: float = 300.0,
        quiet: float = 0.05,
        settle_limit: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age = max_age
        self.quiet = quiet
        self.settle_limit = settle_limit
        self._clock = clock
        self._lock = threading.Condition()
        self._declared: dict[tuple[tuple[Hashable, ...], str], Declared] = {}
        self._last_declared = -float("inf")
        self._flight: dict[tuple[Scope, str], Future[Outcome]] = {}
        self._done: dict[tuple[Scope, str], tuple[Outcome, float]] = {}

    def declare(self, args: AdapterArgs, config: ProviderConfig) -> None:
        """``check`` passed a staged adapter: its create may share a batch Job."""
        request, hf_endpoint = declared_request(args.to_dict())
        group = batch_group(args, config, hf_endpoint)
        key = content_key(request)
        with self._lock:
            now = self._clock()
            self._declared[(group, key)] = Declared(group, request, key, now)
            self._last_declared = now
            self._lock.notify_all()

    def stage(
        self, scope: Scope, group: tuple[Hashable, ...], request: StagingRequest, run: Runner
    ) -> Outcome | None:
        """``request``'s outcome in a batch: taken from one that staged it already, awaited
        from one in flight, or from a batch this call runs with the group's declared adapters.
        ``None`` when there is nothing to batch it with: the caller stages it alone."""
        key = content_key(request)
        with self._lock:
            self._expire()
            settled = False
            while True:
                done = self._done.pop((scope, key), None)
                if done is not None:
                    self._declared.pop((group, key), None)
                    return done[0]
                waiting = self._flight.get((scope, key))
                if waiting is not None or settled:
                    break
                self._settle()  # another create may take this one into its batch meanwhile
                settled = True
            self._declared.pop((group, key), None)
            if waiting is None:
                others = self._companions(scope, group, key)
                if not others:
                    return None
                batch = [request, *others]
                futures = {content_key(r): Future[Outcome]() for r in batch}
                for k, future in futures.items():
                    self._flight[(scope, k)] = future
                    self._declared.pop((group, k), None)
        if waiting is not None:
            outcome = waiting.result()
            with self._lock:
                self._done.pop((scope, key), None)  # ours: taken
            return outcome
        return self._run(scope, key, batch, futures, run)

    def forget(self, scope: Scope) -> None:
        """Outcomes on ``scope``'s claim are stale (a directory there was removed)."""
        with self._lock:
            for entry in [k for k in self._done if k[0] == scope]:
                del self._done[entry]

    def _run(
        self,
        scope: Scope,
        key: str,
        batch: list[StagingRequest],
        futures: dict[str, Future[Outcome]],
        run: Runner,
    ) -> Outcome:
        try:
            outcomes = run(batch)
        except BaseException as exc:
            with self._lock:
                for k, future in futures.items():
                    del self._flight[(scope, k)]
                    future.set_exception(exc)
            raise
        with self._lock:
            now = self._clock()
            for k, future in futures.items():
                outcome = outcomes.get(k, Outcome(False, reason="NotReported"))
                del self._flight[(scope, k)]
                future.set_result(outcome)
                if k != key:
                    self._done[(scope, k)] = (outcome, now)
        return outcomes.get(key, Outcome(False, reason="NotReported"))

    def _settle(self) -> None:
        """Wait (lock held) until no declaration came for ``quiet`` seconds, at most
        ``settle_limit``: the engine is still checking the command's resources."""
        ends = self._clock() + self.settle_limit
        while (now := self._clock()) < ends and now - self._last_declared < self.quiet:
            self._lock.wait(min(self.quiet, ends - now))

    def _companions(
        self, scope: Scope, group: tuple[Hashable, ...], key: str
    ) -> list[StagingRequest]:
        """The group's declared requests not staged, in flight or ``key`` (lock held)."""
        found: dict[str, StagingRequest] = {}
        for (their_group, k), declared in self._declared.items():
            if their_group != group or k == key or (scope, k) in self._flight:
                continue
            if (scope, k) not in self._done:
                found.setdefault(k, declared.request)
        return list(found.values())[: BATCH_LIMIT - 1]

    def _expire(self) -> None:
        """Drop declarations and outcomes older than ``max_age`` (lock held)."""
        oldest = self._clock() - self.max_age
        for entry in [k for k, d in self._declared.items() if d.at < oldest]:
            del self._declared[entry]
        for done in [k for k, (_, at) in self._done.items() if at < oldest]:
            del self._done[done]


BATCHES = StagingBatches()
"""The process's staging batches (the provider's ``check`` declares, ``_stage.staged`` runs)."""
