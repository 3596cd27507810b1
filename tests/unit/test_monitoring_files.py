"""What ships for the monitoring stack: the dashboard imports into Grafana, every query and alert
names metrics the loop exports, every alert has a runbook, and the manifests carry both files."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pulumi
import pytest

from pulumi_lora._resync._metrics import STATE_METRICS, Metrics
from pulumi_lora.deploy import (
    ResyncDeployment,
    alert_rules,
    grafana_dashboard,
    monitoring_manifests,
    resync_manifests,
)

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
METRIC = re.compile(r"\bpulumi_lora_resync_\w+")


def exported_names() -> set[str]:
    """Every sample name the loop can export: its counters and histograms, and the state."""
    names = set(STATE_METRICS)
    for family in Metrics().registry.collect():
        names |= {s.name for s in family.samples} | {family.name}
    for family in Metrics().registry.collect():  # histograms have no samples for _bucket yet
        if family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
    names |= {f"{n}_total" for n in list(names)}  # counters with labels have no sample yet
    return names


def alerts() -> list[dict[str, Any]]:
    return [rule for group in alert_rules()["groups"] for rule in group["rules"]]


def test_the_dashboard_has_what_grafana_needs_to_import_it() -> None:
    board = grafana_dashboard()
    assert board["uid"] == "pulumi-lora-resync" and len(board["uid"]) <= 40
    assert board["title"] and isinstance(board["schemaVersion"], int)
    assert "id" not in board or board["id"] is None  # an id would overwrite another dashboard
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in board["panels"]:
        assert panel["type"] and panel["title"], panel
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"] and target["datasource"] == panel["datasource"]


def test_every_query_and_alert_names_metrics_the_loop_exports() -> None:
    exported = exported_names()
    queries = [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
    for expr in queries + [a["expr"] for a in alerts()]:
        named = set(METRIC.findall(expr))
        assert named and named <= exported, f"{expr}: unknown {named - exported}"


def test_the_leader_is_judged_per_loop() -> None:
    """A loop that leads must not hide one that does not (loops are deployed per namespace):
    every query of the Lease gauge groups by the loop's target labels, and the alert also fires
    when no loop reports at all (promtool runs the cases: tests/resync/rules_test.yaml)."""
    queries = [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
    using = [e for e in queries + [a["expr"] for a in alerts()] if "_resync_leader" in e]
    assert len(using) == 2, using  # the dashboard's Leader panel and PulumiLoRAResyncNoLeader
    for expr in using:
        assert "by (namespace, job) (pulumi_lora_resync_leader)" in expr, expr
    no_leader = next(a for a in alerts() if a["alert"] == "PulumiLoRAResyncNoLeader")
    assert "absent(pulumi_lora_resync_leader)" in no_leader["expr"]


def test_every_alert_has_a_runbook_and_names_what_it_is_about() -> None:
    headings = {
        re.sub(r"[^a-z0-9-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in OPERATIONS.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    names = [a["alert"] for a in alerts()]
    assert names == [
        "PulumiLoRAAdapterNotServed",
        "PulumiLoRAResyncNoLeader",
        "PulumiLoRALoadsFailing",
        "PulumiLoRACapacityExhausted",
        "PulumiLoRALLMKubeContested",
        "PulumiLoRAPodHeldUnready",
    ]
    for alert in alerts():
        anchor = alert["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor == alert["alert"].lower() and anchor in headings, alert["alert"]
        assert alert["labels"]["severity"] in ("warning", "critical")
    not_served = alerts()[0]["annotations"]["summary"]
    assert "{{ $labels.adapter }}" in not_served and "{{ $labels.pod }}" in not_served


def test_monitoring_is_opt_in_and_carries_the_files() -> None:
    assert not any(
        m["kind"] in ("PodMonitor", "PrometheusRule", "ConfigMap")
        for m in resync_manifests("ops", "img")
    )
    manifests = resync_manifests(
        "ops", "img", name="loop", monitoring=True, monitoring_labels={"release": "kps"}
    )
    found = {m["kind"]: m for m in manifests}
    monitor, rule, board = found["PodMonitor"], found["PrometheusRule"], found["ConfigMap"]
    pod_labels = found["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    assert rule["spec"] == alert_rules()
    assert json.loads(board["data"]["pulumi-lora-resync.json"]) == grafana_dashboard()
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    for manifest in (monitor, rule, board):
        assert manifest["metadata"]["namespace"] == "ops"
        assert manifest["metadata"]["labels"]["release"] == "kps"
    assert monitoring_manifests("ops", "loop", labels={"release": "kps"}) == [monitor, rule, board]


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_component_creates_the_monitoring_objects() -> None:
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    loop = ResyncDeployment("resync", namespace="ops", image="img", monitoring=True)
    done: list[Any] = []
    loop.deployment.apply(done.append)

    def custom_kinds() -> dict[Any, Any]:
        return {
            r.inputs.get("kind"): r
            for r in mocks.resources
            if r.typ.startswith("kubernetes:monitoring.coreos.com")
        }

    # Until the registrations are in (a fixed 0.2 s was too short on a busy machine), then until
    # every task on this loop ends: the next test's mocks must not meet them on another loop.
    events = asyncio.get_event_loop()
    deadline = time.monotonic() + 30
    while not (done and {"PodMonitor", "PrometheusRule"} <= set(custom_kinds())):
        assert time.monotonic() < deadline, f"registered: {[r.typ for r in mocks.resources]}"
        events.run_until_complete(asyncio.sleep(0.05))
    pending = [task for task in asyncio.all_tasks(events) if not task.done()]
    if pending:
        events.run_until_complete(asyncio.wait(pending, timeout=30))
    custom = custom_kinds()
    assert set(custom) == {"PodMonitor", "PrometheusRule"}
    assert custom["PrometheusRule"].inputs["spec"] == alert_rules()
    assert any(r.typ == "kubernetes:core/v1:ConfigMap" for r in mocks.resources)
