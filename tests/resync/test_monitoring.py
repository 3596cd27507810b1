"""The monitoring that ships with the loop, with the real tools: promtool checks and unit-tests
the rules, and a real Prometheus on loopback scrapes a loop on the testbed, alerts on a pod
whose loads fail, stops alerting after the heal, and has data for every dashboard query."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from _resync_harness import Cluster, emulator, everywhere, wait_until
from conftest import LoopFactory

from pulumi_lora.deploy import alert_rules, grafana_dashboard
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import DEFAULT_EXTRA_ARGS

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "pulumi_lora" / "_monitoring" / "rules.yaml"
NOT_SERVED = "PulumiLoRAAdapterNotServed"
SINCE = "pulumi_lora_resync_adapter_not_served_since_timestamp_seconds"
#: The comparison that ends an alert's expression (its threshold): stripped, the expression
#: must still return series, i.e. the metrics it reads exist.
THRESHOLD = re.compile(r"\s*(>=|<=|==|>|<)\s*[0-9.]+\s*$")
#: A load that always fails (the emulator's fault injection), on one InferenceService's pods.
FAILING_LOADS = ("--emulator-fault", "/load_lora_adapter:status=500,times=always")
#: Generous for a loaded two-core machine: scrapes and rule evaluations run every second.
WAIT = 60.0


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        missing_real_part(f"{name} is not installed (Debian's prometheus package; provisioned)")
    return found


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules()['groups'][0]['rules'])} rules found" in checked.stdout
    tested = promtool("test", "rules", str(HERE / "rules_test.yaml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


class Prometheus:
    """A real ``prometheus`` on loopback, scraping the replicas of one loop every second."""

    def __init__(self, directory: Path, *targets: str) -> None:
        rules = alert_rules()
        for rule in rules["groups"][0]["rules"]:
            if rule["alert"] == NOT_SERVED:  # seconds, not 5 minutes
                rule["expr"] = THRESHOLD.sub(" > 3", rule["expr"])
        (directory / "rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [
                {
                    # What the rendered PodMonitor does: honor the series' own namespace and
                    # pod, next to the target labels of the loop's pod.
                    "job_name": "pulumi-lora-resync",
                    "honor_labels": True,
                    "static_configs": [
                        {
                            "targets": list(targets),
                            "labels": {"namespace": "loop-namespace", "pod": "loop-pod"},
                        }
                    ],
                }
            ],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        with socket.socket() as probe:  # a free port (Prometheus takes no port 0)
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = directory / "prometheus.log"
        self._log = self.log.open("w")
        self.process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx2.Client(base_url=self.url, trust_env=False, timeout=10)
        wait_until(self._ready, WAIT, interval=0.2, what=f"Prometheus ready (log: {self.log})")

    def _ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        with contextlib.suppress(httpx2.HTTPError):
            return self.http.get("/-/ready").status_code == 200
        return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def alerts(self, name: str, state: str = "firing") -> list[dict[str, str]]:
        found = self.http.get("/api/v1/alerts").json()["data"]["alerts"]
        return [
            a["labels"] for a in found if a["labels"]["alertname"] == name and a["state"] == state
        ]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.http.close()
        self._log.close()


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Any]:
    tool("prometheus")
    started: list[Prometheus] = []

    def start(*targets: str) -> Prometheus:
        started.append(Prometheus(tmp_path, *targets))
        return started[-1]

    yield start
    for prom in started:
        prom.stop()


def returns_series(prom: Prometheus, exprs: list[str], seen: dict[str, int]) -> bool:
    """Whether every expression returns at least one series (``seen``: how many each did)."""
    seen.update({expr: len(prom.query(expr)) for expr in exprs})
    return all(seen.values())


def test_prometheus_alerts_on_a_pod_whose_loads_fail_and_the_dashboard_has_data(
    cluster: Cluster, loops: LoopFactory, prometheus_factory: Any
) -> None:
    limited = (*DEFAULT_EXTRA_ARGS, "--max-loaded-loras", "4", "--max-loras-per-batch", "4")
    good = cluster.deploy("llama", replicas=1, extra_args=limited)
    bad = cluster.deploy("broken", replicas=1, emulator_args=FAILING_LOADS)
    sql, chat = cluster.tb.make_adapter("sql"), cluster.tb.make_adapter("chat")
    cluster.apply_cr("sql", sql)
    cluster.apply_cr("chat", chat, isvc="broken")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(good, {"sql": sql}), WAIT, what="sql loaded")
    prom = prometheus_factory(loop.url.removeprefix("http://"))

    # Restarts after Prometheus started: recovery times to show, and the failing pod restarted
    # with its fault (the flag arms it again).
    good_pod, bad_pod = good.pods()[0].name, bad.pods()[0].name
    good.restart_pod(good_pod)
    bad.restart_pod(bad_pod)
    good.wait_ready(timeout=WAIT)
    bad.wait_ready(timeout=WAIT)
    wait_until(lambda: everywhere(good, {"sql": sql}), WAIT, what="sql re-loaded")

    firing = wait_until(
        lambda: prom.alerts(NOT_SERVED), WAIT, interval=0.5, what=f"{NOT_SERVED} firing"
    )
    assert [(a["namespace"], a["lora_adapter"], a["adapter"], a["pod"]) for a in firing] == [
        (cluster.namespace, "chat", "chat", bad_pod)
    ], firing
    assert firing[0]["inference_service"] == f"{cluster.namespace}/broken"

    # Every dashboard query and every alert expression (without its threshold) has data, but
    # the readiness gate's: it needs a gated pod held unready (no pod here is gated; promtool
    # checks that alert, tests/resync/rules_test.yaml).
    queries = [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
    rules = alert_rules()["groups"][0]["rules"]
    gate_only = {r["alert"] for r in rules if "pod_gate_unready" in r["expr"]}
    assert gate_only == {"PulumiLoRAPodHeldUnready"}
    exprs = queries + [THRESHOLD.sub("", r["expr"]) for r in rules if r["alert"] not in gate_only]
    seen: dict[str, int] = {}
    try:
        wait_until(lambda: returns_series(prom, exprs, seen), WAIT, interval=0.5)
    except AssertionError:
        empty = [e for e, n in seen.items() if not n]
        raise AssertionError(f"queries without series after {WAIT}s: {empty}") from None
    assert prom.query("pulumi_lora_resync_adapter_served == 0")[0]["metric"]["pod"] == bad_pod
    in_use = prom.query(
        "pulumi_lora_resync_pod_adapters_served / pulumi_lora_resync_pod_max_loaded_loras"
    )
    assert [float(s["value"][1]) for s in in_use] == [0.25]  # 1 of 4, on the limited pod

    # The heal: loads succeed again; the loop retries, and the alert resolves.
    emulator(bad.pods()[0].url, "DELETE", "/_emulator/faults")
    wait_until(lambda: everywhere(bad, {"chat": chat}), WAIT, what="chat loaded after the heal")
    wait_until(
        lambda: not prom.alerts(NOT_SERVED) and not prom.alerts(NOT_SERVED, "pending"),
        WAIT,
        interval=0.5,
        what=f"{NOT_SERVED} resolved",
    )
    assert prom.query("pulumi_lora_resync_adapter_not_served_since_timestamp_seconds") == []


def recorded_since(cluster: Cluster, name: str) -> float | None:
    """The loop's record of the outage on the CR: when its ``Loaded=False`` / ``Error=True``
    turned so (the earliest), or None while neither is."""
    times = [
        datetime.fromisoformat(c["lastTransitionTime"]).timestamp()
        for c in cluster.conditions(name).values()
        if (c["type"], c["status"]) in (("Loaded", "False"), ("Error", "True"))
    ]
    return min(times) if times else None


def since_by_target(prom: Prometheus, scraped_after: float = 0.0) -> dict[str, float]:
    """The not-served-since of the one failing pair, by loop replica (scrape target), from
    scrapes after ``scraped_after`` (unix time)."""
    return {
        s["metric"]["instance"]: float(s["value"][1])
        for s in prom.query(f"{SINCE} and timestamp({SINCE}) > {scraped_after}")
    }


def test_a_new_leader_reports_the_same_not_served_since(
    cluster: Cluster, loops: LoopFactory, prometheus_factory: Any
) -> None:
    """After a failover the new leader's series carries the outage's start (the CR's status
    records it), not its own first look: the alert's age goes on instead of restarting."""
    bad = cluster.deploy("broken", replicas=1, emulator_args=FAILING_LOADS)
    cluster.apply_cr("chat", cluster.tb.make_adapter("chat"), isvc="broken")
    first = loops(cluster.namespace)
    first.wait_event("leadership_acquired")
    second = loops(cluster.namespace)
    wait_until(lambda: second.get("/readyz").text.strip() == "standby", WAIT, what="a standby")
    recorded = wait_until(lambda: recorded_since(cluster, "chat"), WAIT, what="Loaded=False")
    old, new = (loop.url.removeprefix("http://") for loop in (first, second))
    prom = prometheus_factory(old, new)

    before = wait_until(lambda: since_by_target(prom), WAIT, interval=0.5, what="a since")
    assert before == {old: recorded}, before
    handed_over = time.time()
    assert first.stop() == 0
    second.wait_event("leadership_acquired", timeout=WAIT)
    ran = second.wait_event("pod_synced", timeout=WAIT)["ts"]  # its own run failed too
    after = wait_until(
        lambda: since_by_target(prom, ran).get(new), WAIT, interval=0.5, what="its since"
    )
    assert after == recorded < handed_over
    assert recorded_since(cluster, "chat") == recorded  # the new leader kept the record
    firing = wait_until(lambda: prom.alerts(NOT_SERVED), WAIT, interval=0.5, what=NOT_SERVED)
    assert [(a["lora_adapter"], a["pod"], a.get("instance")) for a in firing] == [
        ("chat", bad.pods()[0].name, None)
    ], firing
