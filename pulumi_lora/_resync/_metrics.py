"""Prometheus metrics of one loop, in a registry of its own (several loops can share a process).

Names start with ``pulumi_lora_resync_``. ``reason`` labels on loads, unloads and pod runs are
the :class:`~pulumi_lora._resync._decide.ReloadReason` values; on failures they are the
CamelCase condition reasons.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Buckets for the ms-to-minutes latencies (first load ≤ 250 ms is the target).
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Metrics:
    """Every metric the loop exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        prefix = "pulumi_lora_resync"
        reg = self.registry
        self.loads = Counter(
            f"{prefix}_loads", "Successful adapter loads, by trigger", ["reason"], registry=reg
        )
        self.unloads = Counter(
            f"{prefix}_unloads", "Successful adapter unloads, by trigger", ["reason"], registry=reg
        )
        self.failures = Counter(
            f"{prefix}_failures", "Failed adapter operations, by reason", ["reason"], registry=reg
        )
        self.pod_runs = Counter(
            f"{prefix}_reloads",
            "Pod runs (re-applying a pod's adapters), by trigger",
            ["reason"],
            registry=reg,
        )
        self.evictions = Counter(
            f"{prefix}_evictions",
            "Adapters a server evicted for lack of room (--max-loaded-loras)",
            registry=reg,
        )
        self.recovery = Histogram(
            f"{prefix}_pod_recovery_seconds",
            "From a pod turning Ready (as seen by the loop) to all its adapters loaded",
            buckets=_LATENCY,
            registry=reg,
        )
        self.first_load = Histogram(
            f"{prefix}_first_load_seconds",
            "From a pod turning Ready (as seen by the loop) to its first load request",
            buckets=_LATENCY,
            registry=reg,
        )
        self.sweep = Histogram(
            f"{prefix}_verify_sweep_seconds",
            "Duration of one verification sweep over every Ready pod",
            buckets=_LATENCY,
            registry=reg,
        )
        self.status_writes = Counter(
            f"{prefix}_status_writes", "CR status writes (server-side apply)", registry=reg
        )
        self.events = Counter(f"{prefix}_events", "Kubernetes Events recorded", registry=reg)
        self.write_seconds = Histogram(
            f"{prefix}_write_seconds",
            "One write to the apiserver, request to answer, by kind (status, event)",
            ["kind"],
            buckets=_LATENCY,
            registry=reg,
        )
        self.watch_seconds = Counter(
            f"{prefix}_watch_handling_seconds",
            "Event-loop time spent applying watch events to the cache, by resource",
            ["resource"],
            registry=reg,
        )
        self.watch_restarts = Counter(
            f"{prefix}_watch_restarts",
            "Watches resumed after they broke, by resource and how",
            ["resource", "action"],
            registry=reg,
        )
        self.leader = Gauge(
            f"{prefix}_leader", "1 while this replica holds the Lease", registry=reg
        )

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
