"""The provider's pure parts: check failures, the explicit diff, outputs (no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import AdapterArgs, default_resource_name
from pulumi_lora._errors import ClusterError, ConfigurationError
from pulumi_lora._lifecycle import AdapterState, PodReport, ProviderConfig
from pulumi_lora._models import Condition, ConditionStatus
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._drift import DriftReporter, drift_words, live_drift
from pulumi_lora._pulumi._outputs import outputs, refreshed_inputs
from pulumi_lora._pulumi._properties import UNKNOWN
from pulumi_lora._settings import ClientTimeouts

GOOD = {
    "adapter_name": "sql-lora",
    "path": "/adapters/sql",
    "inference_service": "llama",
    "namespace": "models",
}


def failures(**changes: Any) -> dict[str, str]:
    result = LoRAAdapterProvider().check({}, {**GOOD, **changes})
    return {f.property: f.reason for f in result.failures}


class TestCheck:
    def test_good_inputs_pass_unchanged(self) -> None:
        result = LoRAAdapterProvider().check({}, dict(GOOD))
        assert result.failures == [] and result.inputs == GOOD

    @pytest.mark.parametrize(
        ("field", "value", "rule"),
        [
            ("adapter_name", "-bad", "should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]*$'"),
            ("adapter_name", "sql\n", "should match pattern"),  # Python's $ would allow it
            ("namespace", "models\n", "should match pattern"),
            ("pinned", "maybe", "should be a valid boolean"),
            ("adapter_name", "a" * 64, "at most 63 characters"),
            ("adapter_name", "", "at least 1 character"),
            ("path", "", "at least 1 character"),
            ("inference_service", "Llama_8B", "should match pattern"),
            ("namespace", "a.b", "should match pattern"),
            ("inference_service_namespace", "x" * 64, "at most 63 characters"),
            ("resource_name", "UPPER", "should match pattern"),
            ("readiness_policy", "Most", "'AllReadyPods' or 'AnyReadyPod'"),
            ("transport", "carrier-pigeon", "'direct', 'proxy' or 'delegated'"),
            ("ready_timeout_seconds", 0, "greater than 0"),
            ("api_key_secret_key", "a b", "should match pattern"),
        ],
    )
    def test_each_bad_field_names_field_value_and_rule(
        self, field: str, value: Any, rule: str
    ) -> None:
        found = failures(**{field: value})
        assert list(found) == [field]
        assert repr(value) in found[field] and rule in found[field]

    def test_every_bad_field_is_reported_at_once(self) -> None:
        assert set(failures(adapter_name="-", path="", namespace="N")) == {
            "adapter_name",
            "path",
            "namespace",
        }

    def test_missing_required_field(self) -> None:
        result = LoRAAdapterProvider().check({}, {"path": "/x", "inference_service": "s"})
        assert [(f.property, f.reason) for f in result.failures] == [
            ("adapter_name", "adapter_name Field required")
        ]

    def test_unknown_values_during_preview_are_not_failures(self) -> None:
        assert failures(adapter_name=UNKNOWN, path=UNKNOWN) == {}

    def test_proxy_with_an_api_key_fails_before_any_cluster_call(self) -> None:
        found = failures(transport="proxy", api_key_secret_name="sglang-key")
        assert "strips the Authorization header" in found["transport"]

    def test_delegated_with_the_stacks_api_key_fails_naming_the_secret_to_use(self) -> None:
        """The loop reads keys from Secrets only: a stack key would never reach the pods."""
        provider = LoRAAdapterProvider()
        provider._config = ProviderConfig(api_key="sk-stack")
        found = provider.check({}, {**GOOD, "transport": "delegated"}).failures
        assert [f.property for f in found] == ["transport"]
        assert "api_key_secret_name" in found[0].reason
        named = {**GOOD, "transport": "delegated", "api_key_secret_name": "sglang-key"}
        assert provider.check({}, named).failures == []
        assert LoRAAdapterProvider().check({}, {**GOOD, "transport": "delegated"}).failures == []


def state(pods: list[PodReport], loaded: bool = True) -> AdapterState:
    cond = Condition(
        type="Loaded",
        status=ConditionStatus.TRUE if loaded else ConditionStatus.FALSE,
        reason="AdapterLoaded",
        last_transition_time=datetime(2026, 12, 1, tzinfo=UTC),
        observed_generation=2,
    )
    return AdapterState(
        uid="u1",
        generation=2,
        spec={},
        annotations={},
        conditions=(cond,),
        pods=tuple(pods),
        loaded_path="/adapters/sql",
        last_loaded_at="2026-12-01T00:00:00Z",
    )


def olds(pods: list[PodReport], **changes: Any) -> dict[str, Any]:
    return {**outputs(AdapterArgs.parse(GOOD), state(pods)), **changes}


OK_POD = PodReport("p0", ready=True, loaded=True, path="/adapters/sql")


class TestDiff:
    @pytest.fixture(autouse=True)
    def _cluster_unreachable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Diff's live look falls back to the recorded outputs when the cluster can't be read."""

        def unreachable(*_: Any) -> None:
            raise ClusterError("no cluster in unit tests")

        monkeypatch.setattr(lifecycle, "observe", unreachable)

    def diff(self, old: dict[str, Any], **news: Any) -> tuple[bool, list[str]]:
        result = LoRAAdapterProvider().diff("models/sql-lora", old, {**GOOD, **news})
        assert result.delete_before_replace is True
        return bool(result.changes), list(result.replaces or [])

    def test_no_change(self) -> None:
        assert self.diff(olds([OK_POD])) == (False, [])

    def test_path_change_is_an_in_place_update(self) -> None:
        assert self.diff(olds([OK_POD]), path="/adapters/sql-v2") == (True, [])

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("adapter_name", "other"),
            ("inference_service", "mistral"),
            ("inference_service_namespace", "elsewhere"),
            ("namespace", "ops"),
            ("resource_name", "renamed"),
            ("kube_context", "prod"),
        ],
    )
    def test_identity_changes_replace_old_first(self, field: str, value: str) -> None:
        assert self.diff(olds([OK_POD]), **{field: value}) == (True, [field])

    def test_unknown_identity_during_preview_is_a_replace(self) -> None:
        assert self.diff(olds([OK_POD]), inference_service=UNKNOWN) == (True, ["inference_service"])

    def test_refreshed_pod_missing_the_adapter_is_drift(self) -> None:
        gone = PodReport("p1", ready=True, loaded=False)
        assert self.diff(olds([OK_POD, gone])) == (True, [])

    def test_refreshed_pod_on_the_wrong_path_is_drift(self) -> None:
        wrong = PodReport("p1", ready=True, loaded=True, path="/elsewhere")
        assert live_drift(olds([OK_POD, wrong]), GOOD) == ["p1"]

    def test_pods_not_ready_are_not_drift(self) -> None:
        assert live_drift(olds([OK_POD, PodReport("p1", ready=False, loaded=False)]), GOOD) == []

    def test_cr_spec_edited_out_of_band_shows_as_a_path_change(self) -> None:
        assert self.diff(olds([OK_POD], path="/edited")) == (True, [])

    def test_delegated_drift_comes_from_the_loaded_condition(self) -> None:
        old = olds([], transport="delegated", loaded=False)
        assert live_drift(old, {**GOOD, "transport": "delegated"}) == ["loaded"]


class TestDiffLooksAtTheClusterWhenNothingElseChanged:
    """A plain `pulumi up` must heal drift that no refresh recorded in the state."""

    def diff_with_live(self, monkeypatch: pytest.MonkeyPatch, live: AdapterState | None) -> bool:
        monkeypatch.setattr(lifecycle, "observe", lambda *_: live)
        result = LoRAAdapterProvider().diff("id", olds([OK_POD]), dict(GOOD))
        return bool(result.changes)

    def test_live_pod_missing_the_adapter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        live = state([OK_POD, PodReport("p1", ready=True, loaded=False)])
        live = AdapterState(**{**live.__dict__, "spec": {"path": "/adapters/sql"}})
        assert self.diff_with_live(monkeypatch, live)

    def test_live_cr_gone(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert self.diff_with_live(monkeypatch, None)

    def test_live_cr_path_edited(self, monkeypatch: pytest.MonkeyPatch) -> None:
        live = AdapterState(**{**state([OK_POD]).__dict__, "spec": {"path": "/edited"}})
        assert self.diff_with_live(monkeypatch, live)

    def test_live_and_declared_agree(self, monkeypatch: pytest.MonkeyPatch) -> None:
        live = AdapterState(**{**state([OK_POD]).__dict__, "spec": {"path": "/adapters/sql"}})
        assert not self.diff_with_live(monkeypatch, live)


def test_outputs_echo_inputs_and_expose_the_truth() -> None:
    outs = outputs(AdapterArgs.parse(GOOD), state([OK_POD]))
    assert outs["adapter_name"] == "sql-lora" and outs["cr_name"] == "sql-lora"
    assert outs["loaded"] is True and outs["available"] is False
    # Only what carries something: no empty message, no generation equal to the CR's.
    assert outs["conditions"] == [
        {
            "type": "Loaded",
            "status": "True",
            "reason": "AdapterLoaded",
            "since": "2026-12-01T00:00:00Z",
        }
    ]
    assert outs["pods"] == [{"pod": "p0", "loaded": True}]


def test_pod_entries_carry_only_what_differs() -> None:
    args = AdapterArgs.parse(GOOD)
    pods = [
        PodReport("wrong", ready=True, loaded=True, path="/adapters/old"),
        PodReport("missing", ready=True, loaded=False),
        PodReport("waiting", ready=False, loaded=False),
        PodReport("down", ready=True, loaded=False, reason="Unreachable", error="refused"),
    ]
    assert outputs(args, state(pods))["pods"] == [
        {"pod": "wrong", "loaded": True, "path": "/adapters/old"},
        {"pod": "missing", "loaded": False},
        {"pod": "waiting", "loaded": False, "ready": False},
        {"pod": "down", "loaded": False, "reason": "Unreachable", "error": "refused"},
    ]


def test_an_adapter_on_eight_pods_takes_at_most_1_2_kb_of_state() -> None:
    """Issue 21: the engine writes every resource's state at each step. Realistic names: a
    Deployment's pod names, a UID, RFC 3339 times, the four conditions the provider writes."""
    args = AdapterArgs.parse({**GOOD, "namespace": "models"})
    pods = [
        PodReport(f"llama-8b-6b89d655d6-{i}x2bq", ready=True, loaded=True, path="/adapters/sql")
        for i in range(8)
    ]
    conditions = tuple(
        Condition(
            type=kind,
            status=ConditionStatus(status),
            reason=reason,
            message=message,
            last_transition_time=datetime(2026, 12, 4, 14, 24, 25, tzinfo=UTC),
            observed_generation=1,
        )
        for kind, status, reason, message in (
            ("Available", "True", "InferenceServiceReady", ""),
            ("Loaded", "True", "AdapterLoaded", "loaded on 8/8 Ready pods"),
            ("Error", "False", "NoError", ""),
            ("Ready", "True", "AdapterReady", ""),
        )
    )
    full = AdapterState(
        uid="6f1c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f",
        generation=1,
        spec={},
        annotations={},
        conditions=conditions,
        pods=tuple(pods),
        loaded_path="/adapters/sql",
        last_loaded_at="2026-12-04T14:24:25Z",
    )
    size = len(json.dumps(outputs(args, full), separators=(",", ":")))
    assert size <= 1200, size


def test_drift_in_words() -> None:
    outs = outputs(
        AdapterArgs.parse(GOOD),
        state(
            [
                OK_POD,
                PodReport("gone", ready=True, loaded=False),
                PodReport("old", ready=True, loaded=True, path="/adapters/old"),
                PodReport("waiting", ready=False, loaded=False),
            ]
        ),
    )
    assert drift_words(outs, outs) == [
        "pod gone: sql-lora not loaded",
        "pod old: serves /adapters/old, declared /adapters/sql",
    ]
    edited = {**outs, "path": "/adapters/new", "pods": []}
    assert drift_words(edited, outs) == ["CR edited: spec.path /adapters/sql -> /adapters/new"]
    # The 0.2 shape (every key on every pod) reads the same.
    old_shape = {
        **outs,
        "pods": [
            {
                "pod": "p0",
                "ready": True,
                "loaded": True,
                "path": "/adapters/old",
                "reason": "",
                "error": "",
                "since": None,
            }
        ],
    }
    assert drift_words(old_shape, old_shape) == [
        "pod p0: serves /adapters/old, declared /adapters/sql"
    ]
    assert live_drift(old_shape, GOOD) == ["p0"]


def test_a_refresh_keeps_the_programs_inputs_unless_the_cr_was_edited() -> None:
    outs = outputs(AdapterArgs.parse(GOOD), state([OK_POD]))
    assert refreshed_inputs(outs, outs) is None
    edited = {**outs, "path": "/adapters/new"}
    inputs = refreshed_inputs(outs, edited)
    assert inputs is not None and inputs["path"] == "/adapters/new"
    # settings at their defaults are not echoed: they would show as removed
    assert not {"pinned", "readiness_policy", "ready_timeout_seconds", "transport"} & set(inputs)


def test_drift_is_said_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = DriftReporter()
    args = AdapterArgs.parse(GOOD)
    reporter(args, ["pod gone: sql-lora not loaded"])
    reporter(args, ["pod gone: sql-lora not loaded", "CR deleted outside Pulumi"])
    assert capsys.readouterr().err == (
        f"drift: LoRAAdapter {args.namespace}/sql-lora: pod gone: sql-lora not loaded\n"
        f"drift: LoRAAdapter {args.namespace}/sql-lora: CR deleted outside Pulumi\n"
    )


@pytest.mark.parametrize(
    ("adapter", "cr"),
    [
        ("sql-lora", "sql-lora"),
        ("SQL_Lora.v2", "sql-lora-v2"),
        ("__", "lora"),
        ("A" * 63, "a" * 63),
    ],
)
def test_default_resource_name_is_dns_safe(adapter: str, cr: str) -> None:
    assert default_resource_name(adapter) == cr


class TestConfigure:
    """Stack config reaches the provider: credentials and the SGLang client timeouts."""

    @staticmethod
    def configured(config: dict[str, Any]) -> lifecycle.ProviderConfig:
        from pulumi.dynamic import ConfigureRequest  # noqa: PLC0415
        from pulumi.dynamic.config import Config  # noqa: PLC0415 - what the engine hands over

        provider = LoRAAdapterProvider()
        provider.configure(ConfigureRequest(Config(raw_config=config, project_name="stack")))
        return provider._config

    def test_timeouts_come_from_config_and_default_otherwise(self) -> None:
        config = self.configured(
            {
                "pulumi-lora:context": "prod",
                "pulumi-lora:loadTimeoutSeconds": "12.5",
                "pulumi-lora:connectTimeoutSeconds": 2,  # a YAML number
            }
        )
        assert config.kube.context == "prod"
        assert config.timeouts == ClientTimeouts(connect=2.0, load=12.5)
        assert lifecycle.Session(AdapterArgs(**GOOD), config).timeouts.load == 12.5

    @pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan", "inf", "true"])
    def test_a_bad_timeout_names_its_key(self, bad: str) -> None:
        with pytest.raises(ConfigurationError) as caught:
            self.configured({"pulumi-lora:unloadTimeoutSeconds": bad})
        assert str(caught.value).startswith(
            "pulumi-lora:unloadTimeoutSeconds must be a positive number of seconds"
        )

    def test_the_repr_never_shows_credentials(self) -> None:
        config = self.configured(
            {"pulumi-lora:kubeconfig": "token: s3cr3t", "pulumi-lora:sglangApiKey": "sk-live-42"}
        )
        assert "s3cr3t" not in repr(config) and "sk-live-42" not in repr(config)
