"""The pure half of living beside LLMKube's own LoRA controller (issue 20): what tells its hand on
a CR, what ``status`` and ``doctor`` print about it, the verdict the pods earn whatever its
conditions say, the policy's shape, and what the loop's manifests grant for it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml
from click.testing import CliRunner

from pulumi_lora._args import AdapterArgs
from pulumi_lora._commands._main import cli
from pulumi_lora._commands._operator import _status_table
from pulumi_lora._core._conditions import Availability
from pulumi_lora._lifecycle import PodReport, observed_conditions
from pulumi_lora._models import (
    LLMKUBE_CONTROLLER_USER,
    LLMKUBE_FINALIZER,
    Condition,
    written_by_llmkube,
)
from pulumi_lora._ops._doctor import CheckStatus, check_llmkube
from pulumi_lora._ops._status import AdapterVerdict, StatusReport, adapter_line
from pulumi_lora.deploy import RELEASE_RULE, coexistence_policy, resync_manifests

NOW = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)


def llmkube_condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-04T14:00:00Z",
        "observedGeneration": 1,
    }


def cr(*, finalizers: list[str] | None = None, conditions: list[Any] | None = None) -> Any:
    return {
        "metadata": {
            "name": "sql",
            "namespace": "models",
            "generation": 1,
            "annotations": {"pulumi-lora.dev/managed-by": "pulumi"},
            "finalizers": finalizers or [],
        },
        "spec": {"name": "sql-lora", "path": "/adapters/sql", "inferenceServiceRef": {"name": "l"}},
        "status": {"conditions": conditions or []},
    }


LOAD_400 = (
    "sglang http://llama.models.svc:30000/load_lora_adapter: 400 Bad Request: "
    '{"error":"The LoRA adapter sql-lora is already loaded."}'
)


def test_llmkube_conditions_are_told_by_reason_and_error_shape() -> None:
    def cond(reason: str, message: str) -> Condition:
        return Condition.parse(llmkube_condition("Loaded", "False", reason, message))

    assert written_by_llmkube(cond("AlreadyLoaded", "skip: already loaded within safety window"))
    assert written_by_llmkube(cond("LoadUnsuccessful", LOAD_400))
    assert written_by_llmkube(cond("FinalizerAdded", "first reconcile: not yet loaded"))
    # pulumi-lora's own LoadUnsuccessful reads differently
    assert not written_by_llmkube(cond("LoadUnsuccessful", "loaded on 1/2 Ready pods; pod a: x"))
    assert not written_by_llmkube(cond("AdapterLoaded", "loaded on 2/2 Ready pods"))


def test_status_names_llmkube_at_work_but_judges_by_the_pods() -> None:
    contested = cr(
        finalizers=[LLMKUBE_FINALIZER],
        conditions=[llmkube_condition("Loaded", "False", "LoadUnsuccessful", LOAD_400)],
    )
    pods = [
        PodReport("pod-a", True, True, "/adapters/sql"),
        PodReport("pod-b", True, True, "/adapters/sql"),
    ]
    line = adapter_line(contested, pods)
    assert line.verdict is AdapterVerdict.OK
    assert line.llmkube == (
        f"its finalizer {LLMKUBE_FINALIZER}; conditions it wrote: Loaded=False (LoadUnsuccessful)"
    )
    text = _status_table(StatusReport((line,)), where="models")
    assert "1 LoRAAdapter(s): 1 ok, 0 drift, 0 error" in text
    assert "LLMKube's own LoRA controller acts on:\n  models/sql: its finalizer" in text
    assert "fix: apply pulumi-lora's coexistence policy" in text
    assert "pulumi-lora coexistence-policy | kubectl apply -f -" in text
    clean = adapter_line(cr(), pods)
    assert clean.llmkube == ""
    assert "LLMKube" not in _status_table(StatusReport((clean,)), where="models")


def test_delegated_verdict_refuses_llmkube_loaded_condition() -> None:
    """Delegated CRs are judged by the loop's Loaded condition: LLMKube's ``Loaded=True`` (one pod
    through the Service) must not pass for it."""
    fooled = cr(conditions=[llmkube_condition("Loaded", "True", "ReconcileSuccess", "loaded")])
    line = adapter_line(fooled, None, transport="delegated")
    assert line.verdict is AdapterVerdict.ERROR
    assert "LLMKube's LoRA controller's, not the re-sync loop's" in line.error


def test_doctor_warns_with_the_fix_only_where_llmkube_acts_on_our_crs() -> None:
    ours = cr(finalizers=[LLMKUBE_FINALIZER])
    theirs = {**cr(finalizers=[LLMKUBE_FINALIZER]), "metadata": {"name": "t", "namespace": "m"}}
    check = check_llmkube([ours, theirs])
    assert check.status is CheckStatus.WARN
    assert check.message.startswith(
        "LLMKube's own LoRA controller acts on 1 of the 1 LoRAAdapter(s) pulumi-lora serves here: "
        "models/sql (its finalizer"
    )
    assert "pulumi-lora coexistence-policy | kubectl apply -f -" in check.fix
    quiet = check_llmkube([cr()])
    assert (quiet.status, quiet.message) == (
        CheckStatus.OK,
        "no sign of it on 1 LoRAAdapter(s) pulumi-lora made",
    )


def test_observed_conditions_come_from_the_pods_and_keep_since() -> None:
    args = AdapterArgs(adapter_name="sql-lora", path="/adapters/sql", inference_service="l")
    pods = [
        PodReport("a", True, True, "/adapters/sql"),
        PodReport("b", True, True, "/adapters/sql"),
    ]
    llmkube_said = [
        Condition.parse(llmkube_condition("Loaded", "False", "LoadUnsuccessful", LOAD_400))
    ]
    first = observed_conditions(
        Availability(True, "InferenceServiceReady"),
        pods,
        {},
        args,
        generation=1,
        previous=llmkube_said,
        now=NOW,
    )
    by_type = {c.type: c for c in first}
    assert set(by_type) == {"Available", "Loaded", "Error", "Ready"}
    assert (by_type["Loaded"].status.value, by_type["Loaded"].reason) == ("True", "AdapterLoaded")
    assert by_type["Loaded"].message == "loaded on 2/2 Ready pods"
    later = observed_conditions(
        Availability(True, "InferenceServiceReady"),
        pods,
        {},
        args,
        generation=1,
        previous=first,
        now=datetime(2026, 12, 4, 16, 0, tzinfo=UTC),
    )
    assert [c.wire() for c in later] == [c.wire() for c in first]  # nothing moved
    wrong = [PodReport("a", True, True, "/adapters/old"), pods[1]]
    drifted = {
        c.type: c
        for c in observed_conditions(
            Availability(True, "InferenceServiceReady"),
            wrong,
            {},
            args,
            generation=1,
            previous=first,
            now=NOW,
        )
    }
    assert drifted["Loaded"].status.value == "False"
    assert drifted["Loaded"].message == "loaded on 1/2 Ready pods"


def test_policy_shape_and_scope() -> None:
    policy, binding = coexistence_policy("p")
    spec = policy["spec"]
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == "p-llmkube-coexistence"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == [
        "loraadapters",
        "loraadapters/status",
    ]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    assert LLMKUBE_CONTROLLER_USER in spec["matchConditions"][0]["expression"]
    assert [c["name"] for c in spec["matchConditions"]] == [
        "llmkube-controller",
        "managed-by-pulumi-lora",
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    every = coexistence_policy("p", managed_only=False, llmkube_user="system:serviceaccount:x:y")
    assert [c["name"] for c in every[0]["spec"]["matchConditions"]] == ["llmkube-controller"]
    assert "system:serviceaccount:x:y" in every[0]["spec"]["matchConditions"][0]["expression"]


def test_loop_manifests_carry_the_policy_the_flag_and_the_one_rule_by_default() -> None:
    manifests = resync_manifests("ops", "example/resync:1")
    kinds = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert ("ValidatingAdmissionPolicy", "pulumi-lora-resync-llmkube-coexistence") in kinds
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--release-llmkube-finalizer" in args
    role = next(m for m in manifests if m["kind"] == "ClusterRole")
    assert RELEASE_RULE in role["rules"]
    policy = next(m for m in manifests if m["kind"] == "ValidatingAdmissionPolicy")
    assert [c["name"] for c in policy["spec"]["matchConditions"]] == ["llmkube-controller"]
    scoped = resync_manifests("ops", "example/resync:1", watch_namespace="models")
    binding = next(m for m in scoped if m["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}}
    }
    off = resync_manifests("ops", "example/resync:1", llmkube_coexistence=False)
    assert not any(m["kind"].startswith("ValidatingAdmission") for m in off)
    off_args = next(m for m in off if m["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "--release-llmkube-finalizer" not in off_args["containers"][0]["args"]
    assert RELEASE_RULE not in next(m for m in off if m["kind"] == "ClusterRole")["rules"]


def test_cli_prints_the_policy_for_kubectl() -> None:
    result = CliRunner().invoke(cli, ["coexistence-policy", "--all-adapters"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("apiVersion: admissionregistration.k8s.io/v1\n")
    assert "kind: ValidatingAdmissionPolicyBinding" in result.output
    assert "managed-by-pulumi-lora" not in result.output
    default = CliRunner().invoke(cli, ["coexistence-policy"])
    assert "managed-by-pulumi-lora" in default.output
    # its own name, not the loop's: kubectl and ResyncDeployment never own one object together
    names = {m["metadata"]["name"] for m in yaml.safe_load_all(default.output)}
    loop = {m["metadata"]["name"] for m in resync_manifests("ops", "img:1")}
    assert names == {"pulumi-lora-llmkube-coexistence"} and not names & loop
