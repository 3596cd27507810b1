"""The provider's methods against the real apiserver and emulated SGLang pods (no engine).

Lifecycle and every failure case: each failure asserts the message a user reads and that nothing
was left behind (no CR, no adapter loaded on any pod).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pulumi_lora import AdapterNotLoaded, InferenceServiceNotFound, NoReadyPods, RuntimeMismatch
from pulumi_lora._errors import ClusterError, NameCollision, PartialReach, SwapRolledBack
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._models import ANNOTATION_SMOKE_TEST, LLMKUBE_FINALIZER
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import adapter_props, emulator_post, emulator_state, provider_for, served

provider = provider_for


def props(namespace: str, path: str, **extra: Any) -> dict[str, Any]:
    return adapter_props(namespace, path, **extra)


def cr(testbed: Testbed, namespace: str, name: str = "sql-lora") -> dict[str, Any] | None:
    return get_adapter(testbed.client(), namespace, name)


def nan_adapter(testbed: Testbed, name: str) -> str:
    """An adapter whose weights are NaN: SGLang loads it, and every generation through it has
    NaN logits (``null`` logprobs). The path a pod sees."""
    write_adapter(testbed.adapter_root / "adapters" / name, base_model="llama-8b", nan=True)
    return f"/adapters/{name}"


def nothing_left(testbed: Testbed, namespace: str, handle: InferenceServiceHandle | None) -> None:
    assert cr(testbed, namespace) is None
    if handle is not None:
        assert all("sql-lora" not in adapters for adapters in served(handle).values())


class TestLifecycle:
    def test_create_read_update_delete(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        p = provider(config)
        v1, v2 = testbed.make_adapter("sql-v1"), testbed.make_adapter("sql-v2")
        created = p.create(props(namespace, v1))
        assert created.id == f"{namespace}/sql-lora"
        outs = created.outs
        assert outs["loaded"] and outs["available"] and outs["ready"]
        assert sorted(outs["pods"], key=str) == sorted(
            ({"pod": pod.name, "loaded": True} for pod in isvc.ready_pods()), key=str
        )
        assert served(isvc) == {pod.name: {"sql-lora": v1} for pod in isvc.ready_pods()}
        stored = cr(testbed, namespace)
        assert stored is not None
        conditions = {c["type"]: c for c in stored["status"]["conditions"]}
        assert {t: c["status"] for t, c in conditions.items()} == {
            "Available": "True",
            "Loaded": "True",
            "Error": "False",
            "Ready": "True",
        }
        assert conditions["Loaded"]["message"] == "loaded on 3/3 Ready pods"
        assert all(
            c["observedGeneration"] == stored["metadata"]["generation"] for c in conditions.values()
        )
        assert stored["status"]["loadedPath"] == v1 and stored["status"]["lastLoadedAt"]
        assert stored["metadata"]["annotations"]["pulumi-lora.dev/managed-by"] == "pulumi"
        assert "pulumi-lora.dev/operation" not in stored["metadata"]["annotations"]

        read = p.read(created.id, outs)
        assert read.id == created.id and read.outs["pods"] == outs["pods"]
        assert read.outs["conditions"] == outs["conditions"]  # nothing moved
        assert not p.diff(created.id, read.outs, props(namespace, v1)).changes

        # Path change: a swap on every pod (no "already loaded" error on the way).
        assert p.diff(created.id, read.outs, props(namespace, v2)).replaces == []
        updated = p.update(created.id, read.outs, props(namespace, v2)).outs
        assert updated["loaded"] and updated["loaded_path"] == v2
        assert served(isvc) == {pod.name: {"sql-lora": v2} for pod in isvc.ready_pods()}
        assert (
            conditions["Available"]["lastTransitionTime"]
            == {
                c["type"]: c
                for c in cr(testbed, namespace)["status"]["conditions"]  # type: ignore[index]
            }["Available"]["lastTransitionTime"]
        )

        p.delete(created.id, updated)
        nothing_left(testbed, namespace, isvc)

    def test_already_loaded_with_the_same_path_counts_as_loaded(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        path = testbed.make_adapter("sql-same")
        first = isvc.ready_pods()[0]
        assert (
            emulator_post(
                first.url, "/load_lora_adapter", {"lora_name": "sql-lora", "lora_path": path}
            ).status_code
            == 200
        )
        outs = provider(config).create(props(namespace, path)).outs
        assert sorted(outs["pods"], key=str) == sorted(
            ({"pod": pod.name, "loaded": True} for pod in isvc.ready_pods()), key=str
        )
        provider(config).delete("", outs)

    def test_already_loaded_with_another_path_is_swapped(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        old, new = testbed.make_adapter("sql-old"), testbed.make_adapter("sql-new")
        first = isvc.ready_pods()[0]
        emulator_post(first.url, "/load_lora_adapter", {"lora_name": "sql-lora", "lora_path": old})
        outs = provider(config).create(props(namespace, new)).outs
        assert served(isvc)[first.name] == {"sql-lora": new}
        provider(config).delete("", outs)

    def test_delete_tolerates_gone_pods_and_adapters(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        path = testbed.make_adapter("sql-gone")
        outs = provider(config).create(props(namespace, path)).outs
        pods = isvc.ready_pods()
        emulator_post(pods[0].url, "/unload_lora_adapter", {"lora_name": "sql-lora"})
        testbed.kill_pod_process(namespace, pods[1].name)
        provider(config).delete("", outs)
        nothing_left(testbed, namespace, None)
        assert "sql-lora" not in served(isvc).get(pods[2].name, {})


class TestFailuresLeaveNothingBehind:
    def test_inference_service_not_found(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        with pytest.raises(InferenceServiceNotFound, match=f"{namespace}/llama not found"):
            provider(config).create(props(namespace, "/adapters/x"))
        nothing_left(testbed, namespace, None)

    def test_runtime_mismatch(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        testbed.deploy_inference_service(namespace, "llama", replicas=1, runtime="vllm")
        with pytest.raises(RuntimeMismatch, match='runtime="vllm", expected sglang'):
            provider(config).create(props(namespace, "/adapters/x"))
        nothing_left(testbed, namespace, None)

    def test_a_server_one_load_cannot_reach_is_refused_before_anything_is_applied(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        """Several tokenizer workers keep their own adapters (issue 54, item 6)."""
        extra = ("--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all")
        extra += ("--tokenizer-worker-num", "2")
        handle = testbed.deploy_inference_service(namespace, "llama", replicas=1, extra_args=extra)
        handle.wait_ready(timeout=30)
        with pytest.raises(PartialReach) as caught:
            provider(config).create(props(namespace, testbed.make_adapter("sql-reach")))
        assert str(caught.value).startswith(
            f"InferenceService {namespace}/llama: --tokenizer-worker-num 2: each of the 2 "
            "tokenizer workers keeps its own adapter registry"
        )
        nothing_left(testbed, namespace, handle)

    def test_lora_not_enabled_tells_the_user_what_to_add(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        handle = testbed.deploy_inference_service(namespace, "llama", replicas=2, extra_args=())
        handle.wait_ready(timeout=30)
        with pytest.raises(AdapterNotLoaded) as caught:
            provider(config).create(props(namespace, testbed.make_adapter("sql-x")))
        message = str(caught.value)
        assert "loaded on 0/2 Ready pods" in message
        assert "add --enable-lora to the InferenceService's spec.extraArgs" in message
        nothing_left(testbed, namespace, handle)

    def test_a_partial_load_is_rolled_back(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        bad_pod = isvc.ready_pods()[1]
        fault = {"faults": ["/load_lora_adapter:status=500,body=boom"]}
        assert emulator_post(bad_pod.url, "/_emulator/faults", fault).status_code in (200, 201)
        with pytest.raises(AdapterNotLoaded) as caught:
            provider(config).create(props(namespace, testbed.make_adapter("sql-partial")))
        assert "loaded on 2/3 Ready pods" in str(caught.value)
        assert f"pod {bad_pod.name}:" in str(caught.value)
        nothing_left(testbed, namespace, isvc)

    def test_a_load_whose_smoke_generation_fails_is_a_failed_load(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        path = nan_adapter(testbed, "sql-nan")
        with pytest.raises(AdapterNotLoaded) as caught:
            provider(config).create(props(namespace, path))
        message = str(caught.value)
        assert "loaded on 0/3 Ready pods" in message
        for pod in isvc.ready_pods():  # each pod, in SGLang's words
            assert f"pod {pod.name}: smoke generation after the load: " in message
            assert emulator_state(pod.url)["inferences"] == {"sql-lora": 1}
        assert "SGLang said: logprob is null (NaN or Inf)" in message
        assert "smoke_test=false loads it unchecked" in message  # the advice
        nothing_left(testbed, namespace, isvc)

        unchecked = provider(config).create(props(namespace, path, smoke_test=False)).outs
        assert unchecked["loaded"] and unchecked["smoke_test"] is False
        assert served(isvc) == {pod.name: {"sql-lora": path} for pod in isvc.ready_pods()}
        stored = cr(testbed, namespace)
        assert stored is not None
        assert stored["metadata"]["annotations"][ANNOTATION_SMOKE_TEST] == "false"
        assert all(
            emulator_state(p.url)["inferences"] == {"sql-lora": 1} for p in isvc.ready_pods()
        )
        provider(config).delete("", unchecked)

    def test_a_swap_whose_smoke_generation_fails_is_rolled_back(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        p = provider(config)
        good, bad = testbed.make_adapter("sql-good"), nan_adapter(testbed, "sql-bad")
        created = p.create(props(namespace, good))
        assert all(
            emulator_state(pod.url)["inferences"] == {"sql-lora": 1} for pod in isvc.ready_pods()
        )
        with pytest.raises(SwapRolledBack, match=r"logprob is null \(NaN or Inf\)") as caught:
            p.update(created.id, created.outs, props(namespace, bad))
        message = str(caught.value)
        names = ", ".join(sorted(pod.name for pod in isvc.ready_pods()))
        assert f"rolled back to {good!r}: it serves again on {names}" in message
        # No pod kept the bad load or lost the adapter; the CR names the old revision.
        assert served(isvc) == {pod.name: {"sql-lora": good} for pod in isvc.ready_pods()}
        stored = cr(testbed, namespace)
        assert stored is not None and stored["spec"]["path"] == good
        assert stored["status"]["loadedPath"] == good
        assert "pulumi-lora.dev/operation" not in stored["metadata"]["annotations"]
        p.delete(created.id, created.outs)
        nothing_left(testbed, namespace, isvc)

    def test_a_bad_revision_on_one_pod_is_rolled_back_on_every_pod(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        p = provider(config)
        old, new = testbed.make_adapter("sql-before"), testbed.make_adapter("sql-after")
        created = p.create(props(namespace, old))
        bad_pod = isvc.ready_pods()[2]
        fault = {"faults": ["/load_lora_adapter:status=400,times=1,body=LoRA rank 512 exceeds 64"]}
        assert emulator_post(bad_pod.url, "/_emulator/faults", fault).status_code in (200, 201)
        with pytest.raises(SwapRolledBack) as caught:
            p.update(created.id, created.outs, props(namespace, new))
        message = str(caught.value)
        assert message.startswith(
            f"could not swap adapter 'sql-lora': swapping sql-lora to {new!r}"
        )
        assert f"pod {bad_pod.name}: " in message and "LoRA rank 512 exceeds 64" in message
        assert f"LoRAAdapter {namespace}/sql-lora names {old!r} again" in message
        assert served(isvc) == {pod.name: {"sql-lora": old} for pod in isvc.ready_pods()}
        stored = cr(testbed, namespace)
        assert stored is not None and stored["spec"]["path"] == old
        p.delete(created.id, created.outs)
        nothing_left(testbed, namespace, isvc)

    def test_invalid_path(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        with pytest.raises(AdapterNotLoaded, match=r"adapter_config\.json"):
            provider(config).create(props(namespace, "/adapters/does-not-exist"))
        nothing_left(testbed, namespace, isvc)

    def test_incompatible_rank(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        with pytest.raises(AdapterNotLoaded, match="raise --max-lora-rank"):
            provider(config).create(props(namespace, testbed.make_adapter("big", rank=128)))
        nothing_left(testbed, namespace, isvc)

    def test_no_ready_pod_within_the_timeout_names_pod_states(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        testbed.deploy_inference_service(namespace, "llama", replicas=1, startup_delay=30)
        with pytest.raises(NoReadyPods, match=r"has no Ready pods \(llama-.*: Running, not Ready"):
            provider(config).create(props(namespace, "/adapters/x", ready_timeout_seconds=1))
        nothing_left(testbed, namespace, None)

    def test_two_crs_claiming_one_name_collide(
        self, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
    ) -> None:
        path = testbed.make_adapter("sql-claim")
        first = provider(config).create(props(namespace, path)).outs
        with pytest.raises(NameCollision, match=f"LoRAAdapter {namespace}/sql-lora"):
            provider(config).create(props(namespace, path, resource_name="second"))
        assert cr(testbed, namespace, "second") is None
        assert all(a == {"sql-lora": path} for a in served(isvc).values())
        provider(config).delete("", first)

    def test_startup_adapter_with_another_path_collides(
        self, testbed: Testbed, namespace: str, config: ProviderConfig
    ) -> None:
        startup = testbed.make_adapter("startup-sql")
        handle = testbed.deploy_inference_service(
            namespace,
            "llama",
            replicas=1,
            extra_args=(
                "--enable-lora",
                "--lora-paths",
                f"sql-lora={startup}",
                "--max-lora-rank",
                "64",
                "--lora-target-modules",
                "all",
            ),
        )
        handle.wait_ready(timeout=30)
        with pytest.raises(NameCollision, match="startup --lora-paths"):
            provider(config).create(props(namespace, testbed.make_adapter("sql-mine")))
        nothing_left(testbed, namespace, None)


def test_check_failure_touches_nothing(
    testbed: Testbed, namespace: str, config: ProviderConfig
) -> None:
    result = provider(config).check({}, props(namespace, "", adapter_name="-bad"))
    assert {f.property for f in result.failures} == {"adapter_name", "path"}
    nothing_left(testbed, namespace, None)


def test_kubectl_sees_the_cr_and_waits_for_loaded(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    outs = provider(config).create(props(namespace, testbed.make_adapter("sql-kubectl"))).outs
    listed = testbed.kubectl("get", "lora", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert [i["spec"]["name"] for i in items] == ["sql-lora"]
    table = testbed.kubectl("get", "loraadapters.inference.llmkube.dev", "-n", namespace)
    assert table.stdout.split("\n")[0].split() == ["NAME", "SERVICE", "ADAPTER", "LOADED", "AGE"]
    assert table.stdout.split("\n")[1].split()[:4] == ["sql-lora", "llama", "sql-lora", "True"]
    waited = testbed.kubectl(
        "wait", "--for=condition=Loaded", "lora/sql-lora", "-n", namespace, "--timeout=10s"
    )
    assert waited.returncode == 0, waited.stderr
    provider(config).delete("", outs)


def test_an_existing_cr_is_not_adopted_by_create(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    path = testbed.make_adapter("sql-existing")
    first = provider(config).create(props(namespace, path)).outs
    with pytest.raises(ClusterError, match="already exists and this stack did not create it"):
        provider(config).create(props(namespace, path))
    assert cr(testbed, namespace) is not None  # the other one is untouched
    provider(config).delete("", first)


def test_update_and_delete_beside_llmkube_finalizer(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    """A CR LLMKube's LoRA controller marked (before any coexistence policy) updates and deletes:
    the update swaps on every pod and takes the finalizer off, the delete does not wait on it."""
    v1, v2 = testbed.make_adapter("sql-shared"), testbed.make_adapter("sql-shared-2")
    outs = provider(config).create(props(namespace, v1)).outs
    marked = testbed.kubectl(
        "patch",
        "lora/sql-lora",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": [LLMKUBE_FINALIZER]}}),
    )
    assert marked.returncode == 0, marked.stderr
    outs = provider(config).update("", outs, props(namespace, v2)).outs
    assert outs["loaded"]
    assert served(isvc) == {pod.name: {"sql-lora": v2} for pod in isvc.ready_pods()}
    stored = cr(testbed, namespace)
    assert stored is not None
    assert LLMKUBE_FINALIZER not in (stored["metadata"].get("finalizers") or [])
    testbed.kubectl(
        "patch",
        "lora/sql-lora",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": [LLMKUBE_FINALIZER]}}),
    )
    provider(config).delete("", outs)
    nothing_left(testbed, namespace, isvc)
