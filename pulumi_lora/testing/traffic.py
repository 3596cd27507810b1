"""Requests for declared adapters, sent as kube-proxy sends them: to the ready endpoints of a
Service's EndpointSlices (issue 54). For proving, on the testbed or on a stack of your own, that
no request for a declared adapter meets a pod without it through restarts, scale-ups, rollouts
and revision swaps.

``Traffic`` follows the Service's EndpointSlices (``kubernetes.io/service-name``) every
``refresh`` seconds, as kube-proxy and gateways follow them, keeps the endpoints whose
``conditions.ready`` is true, and sends greedy one-token ``/generate`` requests naming a random
declared adapter to a random one of them, at ``rate`` requests a second, until stopped. Every
answer is counted by outcome (``ok``; ``not_loaded``: SGLang's 400 "never been loaded";
``http_<code>``; ``refused``; ``timeout``; ``no_endpoint``), with its time, so a report can be cut
by the events :meth:`Traffic.mark` records. Run it where pod IPs are routable (inside the
cluster network, or on the testbed).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource

__all__ = ["Outcome", "Traffic", "TrafficReport", "classify", "ready_endpoints", "sampled"]

EndpointSlice = create_namespaced_resource(
    "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"
)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Outcome:
    """One request's answer: when it was sent, to which endpoint, for which adapter, and how it
    went (``ok``, ``not_loaded``, ``http_<code>``, ``refused``, ``timeout``, ``no_endpoint``)."""

    at: float
    endpoint: str
    adapter: str
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class TrafficReport:
    """Every outcome of a run and the events marked during it."""

    outcomes: tuple[Outcome, ...]
    events: tuple[tuple[float, str], ...] = ()

    def counts(self, start: float = 0.0, end: float = float("inf")) -> Counter[str]:
        """How many requests sent in ``[start, end)`` went each way."""
        return Counter(o.kind for o in self.outcomes if start <= o.at < end)

    def failed(self, start: float = 0.0, end: float = float("inf")) -> list[Outcome]:
        """The requests sent in ``[start, end)`` that did not answer 200."""
        return [o for o in self.outcomes if start <= o.at < end and o.kind != "ok"]

    def window(self, event: str) -> tuple[float, float]:
        """From the mark ``event`` to the next mark (or the end of the run)."""
        times = [t for t, name in self.events if name == event]
        if not times:
            raise KeyError(f"no event {event!r} was marked")
        later = [t for t, _ in self.events if t > times[0]]
        return times[0], min(later, default=float("inf"))


def ready_endpoints(slices: Sequence[dict[str, Any]], port_name: str = "http") -> list[str]:
    """Pure: ``host:port`` of every endpoint a slice lists as ready, at the port named
    ``port_name`` (as kube-proxy picks them: ``conditions.ready`` true or absent)."""
    found: list[str] = []
    for item in slices:
        ports = [p for p in item.get("ports") or [] if p.get("name") == port_name]
        if not ports or ports[0].get("port") is None:
            continue
        port = int(ports[0]["port"])
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            found += [f"{address}:{port}" for address in endpoint.get("addresses") or []]
    return sorted(set(found))


def classify(status: int, body: str) -> str:
    """Pure: an answer's outcome kind (SGLang's 400 for an adapter it does not hold is
    ``not_loaded``)."""
    if status == 200:
        return "ok"
    if status == 400 and "never been loaded" in body:
        return "not_loaded"
    return f"http_{status}"


@dataclass
class Traffic:
    """Requests for ``adapters`` to the ready endpoints of Service ``service`` (see the module
    docstring). Use as a context manager, or :meth:`start` and :meth:`stop`."""

    client: Client
    namespace: str
    service: str
    adapters: Sequence[str]
    rate: float = 50.0
    refresh: float = 0.2
    timeout: float = 10.0
    seed: int | None = None
    _endpoints: list[str] = field(default_factory=list)
    _outcomes: list[Outcome] = field(default_factory=list)
    _events: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> Traffic:
        """Follow the slices and start sending (the first request waits for the first look)."""
        self._follow_once()
        for target in (self._follow, self._send):
            thread = threading.Thread(target=target, name=f"traffic-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> TrafficReport:
        """Stop sending (a request in flight finishes) and report."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)
        return self.report()

    def mark(self, event: str) -> float:
        """Record that ``event`` starts now (``time.monotonic``); returns its time."""
        now = time.monotonic()
        with self._lock:
            self._events.append((now, event))
        return now

    def report(self) -> TrafficReport:
        """What happened so far."""
        with self._lock:
            return TrafficReport(tuple(self._outcomes), tuple(self._events))

    @property
    def endpoints(self) -> list[str]:
        """The ready endpoints as last seen."""
        with self._lock:
            return list(self._endpoints)

    def _follow_once(self) -> None:
        selector: dict[str, Any] = {SERVICE_NAME_LABEL: self.service}
        listed = self.client.list(EndpointSlice, namespace=self.namespace, labels=selector)
        slices = [dict(item) for item in listed]
        found = ready_endpoints(slices)
        with self._lock:
            self._endpoints = found

    def _follow(self) -> None:
        while not self._stop.wait(self.refresh):
            try:
                self._follow_once()
            except Exception:  # noqa: S112 - a missed look: the last one stands
                continue

    def _send(self) -> None:
        rng = random.Random(self.seed)  # noqa: S311 - a load pattern, not a secret
        gap = 1.0 / self.rate
        with httpx2.Client(timeout=self.timeout, trust_env=False) as http:
            next_at = time.monotonic()
            while not self._stop.is_set():
                next_at += gap
                self._one(http, rng)
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, http: httpx2.Client, rng: random.Random) -> None:
        adapter = rng.choice(list(self.adapters))
        endpoints = self.endpoints
        at = time.monotonic()
        if not endpoints:
            self._record(Outcome(at, "", adapter, "no_endpoint"))
            return
        endpoint = rng.choice(endpoints)
        body = {
            "text": "Hello",
            "lora_path": adapter,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        }
        try:
            answer = http.post(f"http://{endpoint}/generate", json=body)
        except httpx2.TimeoutException as exc:
            self._record(Outcome(at, endpoint, adapter, "timeout", type(exc).__name__))
            return
        except httpx2.TransportError as exc:
            self._record(Outcome(at, endpoint, adapter, "refused", type(exc).__name__))
            return
        kind = classify(answer.status_code, answer.text)
        detail = "" if kind == "ok" else answer.text[:200]
        self._record(Outcome(at, endpoint, adapter, kind, detail))

    def _record(self, outcome: Outcome) -> None:
        with self._lock:
            self._outcomes.append(outcome)


@contextlib.contextmanager
def sampled(sample: Callable[[], object], every: float = 0.05) -> Iterator[None]:
    """Call ``sample`` every ``every`` seconds on a thread while the block runs (a sample that
    raises is skipped): e.g. how many endpoints are in rotation during a swap,
    ``with sampled(lambda: seen.append(len(traffic.endpoints))): ...``."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            with contextlib.suppress(Exception):  # a missed sample
                sample()

    thread = threading.Thread(target=run, name="sampled", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
