"""The loop's alerts and dashboard, and the monitoring-stack objects that carry them.

``rules.yaml`` and ``dashboard.json`` beside this module are the one source of truth. Reading
them is the only I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

__all__ = ["DASHBOARD_LABEL", "alert_rules", "dashboard", "monitoring_manifests"]

DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""The label Grafana's dashboard sidecar (kube-prometheus-stack, the Grafana Helm chart) looks
for on ConfigMaps by default."""


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def alert_rules() -> dict[str, Any]:
    """The rule file ``rules.yaml`` as a dict (``{"groups": [...]}``), a fresh copy each call."""
    loaded: dict[str, Any] = yaml.safe_load(_read("rules.yaml"))
    return loaded


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard ``dashboard.json`` as a dict, a fresh copy each call."""
    loaded: dict[str, Any] = json.loads(_read("dashboard.json"))
    return loaded


def monitoring_manifests(
    namespace: str,
    name: str,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    *,
    interval: str = "15s",
    dashboard_labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Pure but for reading the two files: a PodMonitor, a PrometheusRule and a dashboard
    ConfigMap, all named ``name`` in ``namespace`` and labelled ``labels`` (add the labels your
    Prometheus's ``podMonitorSelector`` and ``ruleSelector`` ask for, e.g. ``release``).

    The PodMonitor scrapes every replica's ``metrics`` port (standbys export no state series,
    only ``pulumi_lora_resync_leader`` 0) with ``honorLabels``, so the ``namespace`` and
    ``pod`` labels of the state series stay the adapter's and the SGLang pod's instead of being
    renamed ``exported_*`` next to the loop's own pod.
    """
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    pod_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": dict(meta),
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "podMetricsEndpoints": [
                {"port": "metrics", "path": "/metrics", "interval": interval, "honorLabels": True}
            ],
        },
    }
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": dict(meta),
        "spec": alert_rules(),
    }
    board = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **meta,
            "name": f"{name}-dashboard",
            "labels": {**dict(labels), **dict(dashboard_labels or DASHBOARD_LABEL)},
        },
        "data": {"pulumi-lora-resync.json": json.dumps(dashboard(), indent=2)},
    }
    return [pod_monitor, rule, board]
