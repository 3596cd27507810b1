"""The traffic kit's pure parts: which endpoints a slice offers, and how an answer counts."""

from __future__ import annotations

import time

from pulumi_lora.testing.traffic import (
    Outcome,
    TrafficReport,
    classify,
    ready_endpoints,
    sampled,
)


def test_ready_endpoints_and_classify_read_as_kube_proxy_does() -> None:
    slices = [
        {
            "ports": [{"name": "http", "port": 30000}],
            "endpoints": [
                {"addresses": ["198.18.0.2"], "conditions": {"ready": True}},
                {"addresses": ["198.18.0.3"], "conditions": {"ready": False}},
                {"addresses": ["198.18.0.4"]},  # no conditions: ready (the API's default)
            ],
        },
        {"ports": [{"name": "metrics", "port": 9090}], "endpoints": [{"addresses": ["x"]}]},
    ]
    assert ready_endpoints(slices) == ["198.18.0.2:30000", "198.18.0.4:30000"]
    never = '{"error": {"message": "Got LoRA adapter that has never been loaded: sql"}}'
    assert classify(400, never) == "not_loaded"
    assert classify(200, "{}") == "ok" and classify(503, "starting") == "http_503"


def test_a_report_cuts_by_event() -> None:
    outcomes = (
        Outcome(1.0, "a:1", "sql", "ok"),
        Outcome(2.5, "b:1", "sql", "not_loaded"),
        Outcome(3.5, "a:1", "sql", "ok"),
    )
    report = TrafficReport(outcomes, ((2.0, "restart"), (3.0, "steady")))
    assert report.window("restart") == (2.0, 3.0)
    assert report.counts(*report.window("restart")) == {"not_loaded": 1}
    assert [o.endpoint for o in report.failed()] == ["b:1"]
    assert report.window("steady") == (3.0, float("inf"))


def test_sampled_samples_while_the_block_runs_and_skips_a_sample_that_raises() -> None:
    seen: list[int] = []

    def sample() -> None:
        seen.append(len(seen))
        if len(seen) == 2:
            raise RuntimeError("a missed look")

    with sampled(sample, every=0.01):
        deadline = time.monotonic() + 5
        while len(seen) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    stopped = len(seen)
    time.sleep(0.05)
    assert stopped >= 5 and len(seen) == stopped  # on through the error, and stopped with it
