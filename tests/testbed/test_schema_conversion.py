"""The seed → structural schema conversion and the committed CRD manifests (pure, no cluster)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from _schema_walk import differences, walk

from pulumi_lora._kube import _crd

CRDS_DIR = Path(_crd.__file__).parents[1] / "crds"


@pytest.fixture
def seed() -> dict:
    return _crd.load_seed_schema()


def lora_schema() -> dict:
    return _crd.lora_adapter_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_conversion_keeps_everything_the_seed_says(seed: dict) -> None:
    assert differences(seed, _crd.structural_schema(seed)) == []


def test_type_arrays_become_type_plus_nullable(seed: dict) -> None:
    schema = _crd.structural_schema(seed)
    status = schema["properties"]["status"]
    assert status["type"] == "object" and status["nullable"] is True
    conditions = status["properties"]["conditions"]
    assert conditions["type"] == "array" and conditions["nullable"] is True
    generation = conditions["items"]["properties"]["observedGeneration"]
    assert generation == {**generation, "type": "integer", "nullable": True, "minimum": 0}
    name = schema["properties"]["spec"]["properties"]["name"]
    assert name["type"] == "string" and "nullable" not in name
    for path, node in walk(schema):
        assert isinstance(node.get("type", "object"), str), path


def test_additional_properties_false_is_dropped_everywhere(seed: dict) -> None:
    assert sum(node.get("additionalProperties") is False for _, node in walk(seed)) >= 4
    assert all("additionalProperties" not in node for _, node in walk(lora_schema()))


def test_metadata_is_a_plain_object_and_root_is_not_nullable(seed: dict) -> None:
    schema = _crd.structural_schema(seed)
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["type"] == "object" and "nullable" not in schema
    assert schema["required"] == ["spec"]


def test_conditions_stay_a_map_keyed_by_type(seed: dict) -> None:
    conditions = lora_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    reason = conditions["items"]["properties"]["reason"]
    assert reason["pattern"] == "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    assert conditions["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_conversion_is_pure(seed: dict) -> None:
    before = copy.deepcopy(seed)
    first = _crd.structural_schema(seed)
    assert seed == before
    assert _crd.structural_schema(seed) == first


def test_unions_int_or_string_and_unsupported() -> None:
    converted = _crd.structural_schema(
        {"type": "object", "properties": {"port": {"type": ["integer", "string", "null"]}}}
    )
    assert converted["properties"]["port"] == {"x-kubernetes-int-or-string": True, "nullable": True}
    with pytest.raises(_crd.SchemaConversionError, match=r"\$\.x"):
        _crd.structural_schema({"properties": {"x": {"type": ["boolean", "string"]}}})


def test_open_maps_are_kept_structurally() -> None:
    converted = _crd.structural_schema(
        {
            "type": "object",
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "anything": {"type": "object", "additionalProperties": True},
            },
        }
    )
    assert converted["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert converted["properties"]["anything"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }


def test_lora_adapter_crd_identity() -> None:
    crd = _crd.lora_adapter_crd()
    assert crd["metadata"]["name"] == "loraadapters.inference.llmkube.dev"
    spec = crd["spec"]
    assert spec["group"] == "inference.llmkube.dev" and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "LoRAAdapter",
        "listKind": "LoRAAdapterList",
        "plural": "loraadapters",
        "singular": "loraadapter",
        "shortNames": ["lora"],
    }
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Service": ".spec.inferenceServiceRef.name",
        "Adapter": ".spec.name",
        "Loaded": '.status.conditions[?(@.type=="Loaded")].status',
        "Age": ".metadata.creationTimestamp",
    }


def test_inference_service_crd_fields() -> None:
    crd = _crd.inference_service_crd()
    assert crd["spec"]["names"]["shortNames"] == ["isvc"]
    (version,) = crd["spec"]["versions"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["modelRef"]
    props = spec["properties"]
    assert props["runtime"]["default"] == "llamacpp"
    assert props["runtime"]["enum"] == [
        "llamacpp", "llamacpp-router", "personaplex", "vllm", "tgi", "sglang", "generic",
    ]  # fmt: skip
    assert (props["replicas"]["minimum"], props["replicas"]["maximum"]) == (0, 10)
    assert props["replicas"]["default"] == 1
    assert set(props["endpoint"]["properties"]) == {"port", "path", "type"}
    assert props["extraArgs"]["items"] == {"type": "string"}
    for name in ("extraVolumes", "extraVolumeMounts"):
        assert props[name]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    sglang = props["sglangConfig"]["properties"]
    assert set(sglang) == {"maxLoraRank", "loraTargetModules", "loraAdapters"}
    assert set(sglang["loraAdapters"]["items"]["properties"]) == {"name", "path"}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) == {"phase", "readyReplicas", "desiredReplicas", "endpoint", "conditions"}


@pytest.mark.parametrize("crd", _crd.all_crds(), ids=lambda c: c["metadata"]["name"])
def test_committed_manifest_is_current(crd: dict) -> None:
    path = CRDS_DIR / _crd.MANIFEST_FILES[crd["metadata"]["name"]]
    text = path.read_text(encoding="utf-8")
    assert text == _crd.render_manifest(crd), "regenerate with: python -m pulumi_lora._kube._crd"
    assert yaml.safe_load(text) == crd


def test_write_manifests(tmp_path: Path) -> None:
    written = _crd.write_manifests(tmp_path)
    assert sorted(p.name for p in written) == ["inferenceservice.yaml", "loraadapter.yaml"]
    for path in written:
        assert path.read_text() == (CRDS_DIR / path.name).read_text()
