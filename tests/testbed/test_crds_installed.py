"""The CRDs as the apiserver serves them: the seed's rules are installed and enforced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _schema_walk import differences

from pulumi_lora._kube import _crd
from pulumi_lora.testing.testbed import ApiRequestError, Testbed

LORA = "/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/loraadapters"
ISVC = "/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/inferenceservices"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


def adapter(obj: str = "a1", **spec: Any) -> dict[str, Any]:
    body = {
        "name": "sql-lora",
        "path": "/adapters/sql-lora",
        "inferenceServiceRef": {"name": "llama"},
        **spec,
    }
    return {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": obj},
        "spec": body,
    }


def condition(**overrides: Any) -> dict[str, Any]:
    return {
        "type": "Loaded",
        "status": "True",
        "reason": "ReconcileSuccess",
        "message": "loaded on 2/2 pods",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
        **overrides,
    }


def status_code(call: Any) -> int:
    with pytest.raises(ApiRequestError) as info:
        call()
    return info.value.status


def test_installed_lora_schema_matches_the_seed(testbed: Testbed) -> None:
    installed = testbed.rest.get(CRD.format(name="loraadapters.inference.llmkube.dev"))
    (version,) = installed["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert differences(_crd.load_seed_schema(), schema) == []
    assert schema == _crd.lora_adapter_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    conditions = {c["type"]: c["status"] for c in installed["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    assert installed["status"]["acceptedNames"]["shortNames"] == ["lora"]


def test_both_crds_are_served_under_their_short_names(testbed: Testbed) -> None:
    out = testbed.kubectl("api-resources", "--api-group=inference.llmkube.dev", "-o", "wide")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines()[1:]}
    assert "lora" in lines["loraadapters"] and "LoRAAdapter" in lines["loraadapters"]
    assert "isvc" in lines["inferenceservices"]
    isvc = testbed.rest.get(CRD.format(name="inferenceservices.inference.llmkube.dev"))
    assert isvc["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"]


def test_a_valid_adapter_is_accepted_and_printed(testbed: Testbed, namespace: str) -> None:
    testbed.rest.create(LORA.format(ns=namespace), adapter())
    out = testbed.kubectl("get", "lora", "-n", namespace)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["NAME", "SERVICE", "ADAPTER", "LOADED", "AGE"]
    assert row.split()[:3] == ["a1", "llama", "sql-lora"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "-bad"}, "spec.name"),
        ({"name": "has space"}, "spec.name"),
        ({"name": "a" * 64}, "spec.name"),
        ({"name": ""}, "spec.name"),
        ({"path": ""}, "spec.path"),
        ({"inferenceServiceRef": {}}, "spec.inferenceServiceRef.name"),
    ],
    ids=["leading-dash", "space", "64-chars", "empty-name", "empty-path", "no-ref-name"],
)
def test_invalid_specs_are_refused(
    testbed: Testbed, namespace: str, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiRequestError) as info:
        testbed.rest.create(LORA.format(ns=namespace), adapter(**spec))
    assert info.value.status == 422
    assert field in info.value.body


def test_63_char_name_is_the_limit(testbed: Testbed, namespace: str) -> None:
    testbed.rest.create(LORA.format(ns=namespace), adapter("long", name="a" * 63))


def test_spec_is_required(testbed: Testbed, namespace: str) -> None:
    body = adapter()
    del body["spec"]
    assert status_code(lambda: testbed.rest.create(LORA.format(ns=namespace), body)) == 422


@pytest.mark.parametrize(
    "bad",
    [
        {"reason": "not camel case"},
        {"reason": ""},
        {"status": "Maybe"},
        {"type": "bad type!"},
        {"message": "m" * 32769},
        {"observedGeneration": -1},
        {"lastTransitionTime": "yesterday"},
    ],
    ids=["reason-pattern", "reason-empty", "status-enum", "type-pattern", "message-long",
         "negative-generation", "time-format"],
)  # fmt: skip
def test_status_conditions_are_validated(
    testbed: Testbed, namespace: str, bad: dict[str, Any]
) -> None:
    path = LORA.format(ns=namespace)
    testbed.rest.create(path, adapter())
    patch = {"status": {"conditions": [condition(**bad)]}}
    code = status_code(lambda: testbed.rest.merge_patch(f"{path}/a1/status", patch))
    assert code == 422


def test_good_status_goes_through_the_status_subresource_only(
    testbed: Testbed, namespace: str
) -> None:
    path = LORA.format(ns=namespace)
    testbed.rest.create(path, adapter())
    status = {
        "conditions": [condition(), condition(type="Available", reason="ReconcileSuccess")],
        "loadedPath": "/adapters/sql-lora",
        "lastLoadedAt": "2026-01-01T00:00:00Z",
    }
    # Status written on the main resource is ignored (status subresource enabled) ...
    testbed.rest.merge_patch(f"{path}/a1", {"status": status})
    assert "status" not in testbed.rest.get(f"{path}/a1")
    # ... and accepted through /status; nullable fields accept null.
    testbed.rest.merge_patch(f"{path}/a1/status", {"status": status})
    got = testbed.rest.get(f"{path}/a1")
    assert got["status"]["loadedPath"] == "/adapters/sql-lora"
    assert {c["type"] for c in got["status"]["conditions"]} == {"Loaded", "Available"}
    out = testbed.kubectl("get", "lora", "a1", "-n", namespace, "--no-headers")
    assert out.stdout.split()[3] == "True"


def test_conditions_are_a_map_keyed_by_type(testbed: Testbed, namespace: str) -> None:
    path = LORA.format(ns=namespace)
    testbed.rest.create(path, adapter())
    patch = {"status": {"conditions": [condition(), condition(message="again")]}}
    assert status_code(lambda: testbed.rest.merge_patch(f"{path}/a1/status", patch)) == 422


def test_unknown_fields_are_pruned(testbed: Testbed, namespace: str) -> None:
    path = LORA.format(ns=namespace)
    body = adapter(extra="dropped")
    body["spec"]["inferenceServiceRef"]["cluster"] = "dropped"
    body["unknownTop"] = 1
    testbed.rest.create(path, body)
    got = testbed.rest.get(f"{path}/a1")
    assert "extra" not in got["spec"]
    assert got["spec"]["inferenceServiceRef"] == {"name": "llama"}
    assert "unknownTop" not in got
    # A strict client is told instead of silently losing the field.
    strict = testbed.rest.request(
        "POST",
        path,
        body=adapter("a2", extra="x"),
        params={"fieldValidation": "Strict"},
        allow=(400, 422),
    )
    assert strict is None


def isvc(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_inference_service_defaults_and_validation(testbed: Testbed, namespace: str) -> None:
    path = ISVC.format(ns=namespace)
    created = testbed.rest.create(path, isvc("plain", modelRef="llama-8b"))
    assert created["spec"]["runtime"] == "llamacpp"
    assert created["spec"]["replicas"] == 1
    for bad in (
        {"modelRef": "m", "runtime": "ollama"},
        {"modelRef": "m", "replicas": 11},
        {"modelRef": "m", "replicas": -1},
        {"runtime": "sglang"},
    ):
        assert status_code(lambda bad=bad: testbed.rest.create(path, isvc("bad", **bad))) == 422


def test_inference_service_full_spec_and_scale(testbed: Testbed, namespace: str) -> None:
    path = ISVC.format(ns=namespace)
    spec = {
        "modelRef": "llama-8b",
        "runtime": "sglang",
        "replicas": 2,
        "containerPort": 30000,
        "endpoint": {"port": 8080, "path": "/v1", "type": "ClusterIP"},
        "extraArgs": ["--enable-lora", "--max-lora-rank", "64"],
        "extraVolumes": [{"name": "adapters", "persistentVolumeClaim": {"claimName": "pvc"}}],
        "extraVolumeMounts": [{"name": "adapters", "mountPath": "/adapters"}],
        "sglangConfig": {
            "maxLoraRank": 64,
            "loraTargetModules": ["all"],
            "loraAdapters": [{"name": "sql", "path": "/adapters/sql"}],
        },
    }
    created = testbed.rest.create(path, isvc("full", **spec))
    assert created["spec"] == spec
    scale = testbed.rest.get(f"{path}/full/scale")
    assert scale["spec"]["replicas"] == 2
    out = testbed.kubectl(
        "scale", "inferenceservices.inference.llmkube.dev/full", "--replicas=3", "-n", namespace
    )
    assert out.returncode == 0, out.stderr
    assert testbed.rest.get(f"{path}/full")["spec"]["replicas"] == 3


@pytest.mark.parametrize("manifest", sorted(_crd.MANIFEST_FILES.values()))
def test_committed_manifests_apply_with_kubectl(testbed: Testbed, manifest: str) -> None:
    path = Path(_crd.__file__).parents[1] / "crds" / manifest
    out = testbed.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    assert out.returncode == 0, out.stderr
    assert "serverside-applied" in out.stdout
