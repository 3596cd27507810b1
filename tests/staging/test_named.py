"""What names a staged directory of a claim (issue 53): the CRs of every InferenceService
mounting the claim, by content key and claim, whatever path each mounts it at."""

from __future__ import annotations

import dataclasses
from typing import Any

from pulumi_lora._core._llmkube import Target
from pulumi_lora._staging._named import claim_mounts, named_keys
from pulumi_lora._staging._plan import AdapterMount

KEY, OTHER, THIRD = "0123456789abcdef", "fedcba9876543210", "00000000000000aa"
MOUNT = AdapterMount("adapters", "/adapters")


def workload(name: str, mount_path: str, claim: str = "adapters", **more: Any) -> Target:
    """An InferenceService of ``models`` whose SGLang container mounts ``claim``."""
    mount = {"name": "weights", "mountPath": mount_path, **more}
    return Target(
        namespace="models",
        name=name,
        runtime="sglang",
        replicas=1,
        volumes=({"name": "weights", "persistentVolumeClaim": {"claimName": claim}},),
        volume_mounts=(mount,),
    )


def cr(
    name: str,
    path: str,
    isvc: str = "llama",
    namespace: str = "models",
    namespace_of_isvc: str | None = None,
) -> Any:
    ref = {"name": isvc, **({"namespace": namespace_of_isvc} if namespace_of_isvc else {})}
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"name": name, "path": path, "inferenceServiceRef": ref},
    }


def test_a_key_is_named_through_any_workload_mounting_the_claim_at_any_path() -> None:
    workloads = {
        "llama": workload("llama", "/adapters"),
        "qwen": workload("qwen", "/models/lora"),  # the same claim, elsewhere
        "phi": workload("phi", "/adapters", claim="other"),  # another claim at the same path
    }
    crs = [
        cr("sql", f"/adapters/{KEY}"),
        cr("chat", f"/models/lora/{OTHER}/", isvc="qwen"),
        cr("phi", f"/adapters/{THIRD}", isvc="phi"),  # not on this claim
        cr("by-path", "/adapters/sql-lora"),  # not a content key
        cr("deep", f"/adapters/x/{THIRD}"),  # not in the stager's root
    ]
    assert named_keys(crs, workloads, "models", MOUNT) == {
        KEY: ["LoRAAdapter models/sql"],
        OTHER: ["LoRAAdapter models/chat"],
    }


def test_the_stagers_root_is_the_claims_sub_path() -> None:
    """The stager mounts the claim with the SGLang container's ``subPath``: a workload mounting
    the claim's top names ``<subPath>/<key>``; one mounting another sub path names nothing
    here."""
    mount = AdapterMount("adapters", "/adapters", sub_path="team-a")
    workloads = {
        "llama": workload("llama", "/adapters", subPath="team-a"),
        "top": workload("top", "/claim"),
        "b": workload("b", "/adapters", subPath="team-b"),
    }
    crs = [
        cr("a", f"/adapters/{KEY}"),
        cr("top", f"/claim/team-a/{OTHER}", isvc="top"),
        cr("b", f"/adapters/{THIRD}", isvc="b"),
    ]
    assert set(named_keys(crs, workloads, "models", mount)) == {KEY, OTHER}


def test_crs_of_other_namespaces_count_only_through_a_workload_of_the_claims() -> None:
    workloads = {"llama": workload("llama", "/adapters")}
    crs = [
        cr("tenant", f"/adapters/{KEY}", namespace="team"),  # its own namespace's llama
        cr("cross", f"/adapters/{OTHER}", namespace="team", namespace_of_isvc="models"),
    ]
    assert named_keys(crs, workloads, "models", MOUNT) == {OTHER: ["LoRAAdapter team/cross"]}


def test_a_cr_whose_workload_is_unknown_names_what_its_path_ends_with() -> None:
    """Gone or unreadable InferenceService: the CR keeps the key its path ends with."""
    crs = [cr("orphan", f"/anywhere/{KEY}", isvc="gone"), cr("odd", "/x/y", isvc="gone")]
    assert named_keys(crs, {"gone": None}, "models", MOUNT) == {KEY: ["LoRAAdapter models/orphan"]}
    assert named_keys(crs, {}, "models", MOUNT) == {KEY: ["LoRAAdapter models/orphan"]}


def test_an_inference_services_own_adapters_name_keys_too() -> None:
    target = workload("llama", "/adapters")
    loaded = dataclasses.replace(
        target, sglang_adapters=({"name": "a", "path": f"/adapters/{KEY}"},)
    )
    assert named_keys([], {"llama": loaded}, "models", MOUNT) == {
        KEY: ["InferenceService models/llama"]
    }
    assert claim_mounts(loaded, "adapters") == [("/adapters", "")]
    assert claim_mounts(loaded, "other") == []
