"""Prometheus metrics of one loop, in a registry of its own (several loops can share a process).

:class:`StateCollector` computes the leader's current view at each scrape, so no series outlives
its CR or pod. Standbys export none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pulumi_lora._resync._served import AdapterMetrics, FleetState

#: Buckets for the ms-to-minutes latencies (first load ≤ 250 ms is the target).
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


#: Labels of the per-adapter series: the CR (``namespace``, ``lora_adapter``), its adapter name
#: and its InferenceService as ``namespace/name``; per pod, ``pod`` too (in the target's
#: namespace). Scrape with ``honor_labels`` so ``namespace`` and ``pod`` stay these, not the
#: loop's own pod's (the rendered PodMonitor does).
ADAPTER_LABELS = ("namespace", "lora_adapter", "adapter", "inference_service")
POD_LABELS = ("namespace", "pod", "inference_service")
_P = "pulumi_lora_resync"

#: name → help of every state metric (``StateCollector``).
STATE_METRICS = {
    f"{_P}_adapter_declared": "1 for every LoRAAdapter CR the leader knows",
    f"{_P}_adapter_ready_pods": "Ready pods of the CR's InferenceService",
    f"{_P}_adapter_served_pods": "Ready pods serving the CR's adapter (its path, its generation)",
    f"{_P}_adapter_served": "1 if the Ready pod serves the CR's adapter, else 0 (per-pod detail)",
    f"{_P}_adapter_not_served_since_timestamp_seconds": (
        "Unix time since which a Ready pod has not served the CR's adapter (per pod; with "
        "--adapter-metrics per-adapter, the earliest over its pods); absent while served; a "
        "new leader takes an outage's start from the CR's status"
    ),
    f"{_P}_adapter_llmkube_contested": (
        "1 when LLMKube's own LoRA controller acts on the CR (its finalizer, or conditions it "
        "wrote): the coexistence policy is missing"
    ),
    f"{_P}_pod_adapters_declared": "Adapters declared for the pod's InferenceService",
    f"{_P}_pod_adapters_served": "Declared adapters the pod serves",
    f"{_P}_pod_adapters_evicted": (
        "Declared adapters the server evicted for lack of room, reported and not reloaded"
    ),
    f"{_P}_pod_max_loaded_loras": "The server's --max-loaded-loras (only where it is set)",
    f"{_P}_pod_consecutive_failures": "Failed runs in a row on the pod (its backoff count)",
}


class StateCollector(Collector):
    """Renders a :class:`FleetState` (from ``source``, None on a standby) at every scrape."""

    def __init__(self, detail: AdapterMetrics = AdapterMetrics.PER_POD) -> None:
        self.detail = detail
        self.source: Callable[[], FleetState | None] = lambda: None

    def describe(self) -> Iterator[Metric]:
        """The families, empty: registration needs the names only."""
        for name, text in STATE_METRICS.items():
            yield GaugeMetricFamily(name, text, labels=())

    def collect(self) -> Iterator[Metric]:
        """Every state series, from the leader's cache as it is now."""
        state = self.source()
        if state is None:
            return
        family = {
            name: GaugeMetricFamily(
                name, text, labels=POD_LABELS if "_pod_" in name else ADAPTER_LABELS
            )
            for name, text in STATE_METRICS.items()
        }
        per_pod = self.detail is AdapterMetrics.PER_POD
        since_name = f"{_P}_adapter_not_served_since_timestamp_seconds"
        if per_pod:
            family[f"{_P}_adapter_served"] = GaugeMetricFamily(
                f"{_P}_adapter_served",
                STATE_METRICS[f"{_P}_adapter_served"],
                labels=(*ADAPTER_LABELS, "pod"),
            )
            family[since_name] = GaugeMetricFamily(
                since_name, STATE_METRICS[since_name], labels=(*ADAPTER_LABELS, "pod")
            )
        else:
            del family[f"{_P}_adapter_served"]
        for adapter in state.adapters:
            labels = [*adapter.cr, adapter.adapter, "/".join(adapter.target)]
            family[f"{_P}_adapter_declared"].add_metric(labels, 1)
            family[f"{_P}_adapter_ready_pods"].add_metric(labels, len(adapter.pods))
            family[f"{_P}_adapter_served_pods"].add_metric(labels, adapter.served_pods)
            family[f"{_P}_adapter_llmkube_contested"].add_metric(labels, int(adapter.contested))
            if not per_pod:
                if (since := adapter.not_served_since) is not None:
                    family[since_name].add_metric(labels, since)
                continue
            for pod in adapter.pods:
                family[f"{_P}_adapter_served"].add_metric([*labels, pod.pod], int(pod.served))
                if pod.not_served_since is not None:
                    family[since_name].add_metric([*labels, pod.pod], pod.not_served_since)
        for cap in state.pods:
            labels = [*cap.pod, "/".join(cap.target)]
            family[f"{_P}_pod_adapters_declared"].add_metric(labels, cap.declared)
            family[f"{_P}_pod_adapters_served"].add_metric(labels, cap.served)
            family[f"{_P}_pod_adapters_evicted"].add_metric(labels, cap.evicted)
            family[f"{_P}_pod_consecutive_failures"].add_metric(labels, cap.consecutive_failures)
            if cap.limit is not None:
                family[f"{_P}_pod_max_loaded_loras"].add_metric(labels, cap.limit)
        yield from family.values()


class Metrics:
    """Every metric the loop exports."""

    def __init__(self, detail: AdapterMetrics = AdapterMetrics.PER_POD) -> None:
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
        self.gate_writes = Counter(
            f"{prefix}_gate_writes",
            "Readiness gate condition writes (pulumi-lora.dev/adapters-loaded), by status",
            ["status"],
            registry=reg,
        )
        self.gate_unready_since = Gauge(
            f"{prefix}_pod_gate_unready_since_timestamp_seconds",
            "Since when a gated pod's containers are ready while its readiness gate is not True "
            "(held out of the Service: its adapters are not all loaded yet)",
            ["namespace", "pod", "inference_service"],
            registry=reg,
        )
        self.leader = Gauge(
            f"{prefix}_leader", "1 while this replica holds the Lease", registry=reg
        )
        self.state = StateCollector(detail)
        reg.register(self.state)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
