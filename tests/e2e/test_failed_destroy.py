"""A destroy that fails on a pod keeps the CR until every Ready pod has unloaded (issue 31).

LLMKube's LoRA controller unloads through the Service (one random pod) when a CR it marked is
deleted, and drops its finalizer whatever the pod answered. So its finalizer cannot be what
holds the CR while pulumi-lora unloads: pulumi-lora's own (``pulumi-lora.dev/unload``) does, from
just before the deletion until every Ready pod has unloaded.

Each test plays a user's failed ``pulumi destroy`` (one pod's ``/unload_lora_adapter`` answers
500) and its retry, and asserts what they see: the provider's error, ``kubectl get lora``, the
CR's conditions and Events, what each pod serves. Three clusters: LLMKube's controller acting
on the CR (a default ``Testbed()``, no coexistence policy), held off by the policy, and absent.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._models import LLMKUBE_FINALIZER, UNLOAD_FINALIZER
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import BinaryNotFoundError, InferenceServiceHandle, Testbed
from tests.e2e.conftest import adapter_props, provider_for, served
from tests.e2e.test_llmkube_coexistence import kubectl_cr, wait_for

UNLOAD_REFUSED = ["/unload_lora_adapter:status=500,times=always"]


def arm(url: str, faults: list[str]) -> None:
    answer = httpx2.post(f"{url}/_emulator/faults", json={"faults": faults}, timeout=10)
    assert answer.status_code == 200, answer.text


def disarm(url: str) -> None:
    assert httpx2.delete(f"{url}/_emulator/faults", timeout=10).status_code == 200


def finalizers(cr: dict[str, Any] | None) -> list[str]:
    return list(((cr or {}).get("metadata") or {}).get("finalizers") or [])


def unload_events(bed: Testbed, namespace: str) -> list[str]:
    got = bed.kubectl(
        "get", "events", "-n", namespace, "--field-selector=involvedObject.name=sql-lora", "-o=json"
    )
    assert got.returncode == 0, got.stderr
    items = json.loads(got.stdout)["items"]
    return [e["message"] for e in items if e["reason"] == "UnloadUnsuccessful"]


def settled_cr(bed: Testbed, namespace: str) -> dict[str, Any]:
    """The CR once LLMKube's controller is done with it: nothing it had in flight can still
    land over what is read (the CI run that filed the fix saw its Error land last)."""
    llmkube = bed.llmkube
    assert llmkube is not None

    def read() -> dict[str, Any] | None:
        cr = kubectl_cr(bed, namespace, "sql-lora")
        assert cr is not None
        version = str(cr["metadata"]["resourceVersion"])
        return cr if llmkube.caught_up(namespace, "sql-lora", version) else None

    settled: dict[str, Any] = wait_for("LLMKube's controller to be done with the CR", read, 60)
    return settled


def finish_delete(bed: Testbed, namespace: str) -> str:
    """``pulumi-lora finish-delete NAMESPACE/sql-lora`` as an operator types it; its output."""
    done = CliRunner().invoke(
        cli, ["finish-delete", f"{namespace}/sql-lora", "--kubeconfig", str(bed.kubeconfig_path)]
    )
    assert done.exit_code == 0, done.output
    return done.output


def fail_once(
    bed: Testbed,
    namespace: str,
    handle: InferenceServiceHandle,
    *,
    llmkube: bool,
    late: bool = False,
) -> tuple[LoRAAdapterProvider, dict[str, Any], str]:
    """Up on every pod, then a destroy while one pod refuses to unload: the provider, the
    outputs, the adapter's path, and what is asserted of the cluster after the failure.

    ``late``: LLMKube's controller reaches the deletion only after the destroy failed (busy or
    backing off, as on a loaded cluster), the order in which its status could land last.
    """
    provider = provider_for(ProviderConfig(kube=KubeSource(str(bed.kubeconfig_path))))
    path = bed.make_adapter("held")
    outs = provider.create(adapter_props(namespace, path)).outs
    assert outs["loaded"]
    if llmkube:  # LLMKube's controller marks the CR it acts on
        wait_for(
            "LLMKube's finalizer",
            lambda: LLMKUBE_FINALIZER in finalizers(kubectl_cr(bed, namespace, "sql-lora")),
            timeout=60,
        )
    stuck, *others = handle.ready_pods()
    arm(stuck.url, UNLOAD_REFUSED)

    with contextlib.ExitStack() as held_off, pytest.raises(PulumiLoRAError) as failed:
        if late:
            assert bed.llmkube is not None
            held_off.enter_context(bed.llmkube.paused())
        provider.delete("", outs)
    message = str(failed.value)
    assert f"pod {stuck.name}" in message, message
    assert f"LoRAAdapter {namespace}/sql-lora stays, being deleted" in message, message
    assert "run `pulumi destroy` again" in message, message

    # LLMKube's finalizer is released as the deletion begins (its unload through the Service
    # proves nothing); the CR stays, held by pulumi-lora's, while the refusing pod serves the
    # adapter, and no status LLMKube had in flight lands over the conditions naming the pod.
    listed = bed.kubectl("get", "lora", "-n", namespace)
    assert listed.returncode == 0 and "sql-lora" in listed.stdout, listed
    cr = settled_cr(bed, namespace) if llmkube else kubectl_cr(bed, namespace, "sql-lora")
    assert cr is not None and cr["metadata"].get("deletionTimestamp"), cr
    assert finalizers(cr) == [UNLOAD_FINALIZER], cr
    by_type = {c["type"]: c for c in cr["status"]["conditions"]}
    assert (by_type["Error"]["status"], by_type["Error"]["reason"]) == (
        "True",
        "UnloadUnsuccessful",
    )
    assert f"pod {stuck.name}" in by_type["Error"]["message"], by_type
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "Deleting")
    events = unload_events(bed, namespace)
    assert any(m.startswith(f"pod {stuck.name} still serves sql-lora") for m in events), events
    now = served(handle)
    assert now[stuck.name] == {"sql-lora": path}, now
    assert all(now[pod.name] == {} for pod in others), now
    # What an on-call engineer's `pulumi-lora status` says of it.
    status = CliRunner().invoke(
        cli, ["status", "-n", namespace, "--kubeconfig", str(bed.kubeconfig_path)]
    )
    assert status.exit_code == 1, status.output
    rows = {line.split()[4]: line for line in status.output.splitlines() if "sql-lora" in line}
    assert "yes (deleting)" in rows[stuck.name], status.output
    assert all("no (unloaded)" in rows[pod.name] for pod in others), status.output
    assert "0 error, 1 deleting" in status.output, status.output
    assert f"`pulumi-lora finish-delete {namespace}/sql-lora`" in status.output, status.output
    return provider, outs, stuck.url


def fail_then_retry(
    bed: Testbed,
    namespace: str,
    handle: InferenceServiceHandle,
    *,
    llmkube: bool,
    by_cli: bool,
    late: bool = False,
) -> None:
    """The user's story, step by step: up on every pod; destroy while one pod refuses to
    unload; look at the cluster; destroy again while it still refuses; then once it answers
    (``by_cli``: ``pulumi-lora finish-delete`` instead of the retried destroy)."""
    provider, outs, stuck = fail_once(bed, namespace, handle, llmkube=llmkube, late=late)
    with pytest.raises(PulumiLoRAError):  # a retry while the pod still refuses changes nothing
        provider.delete("", outs)
    assert finalizers(kubectl_cr(bed, namespace, "sql-lora")) == [UNLOAD_FINALIZER]
    # A `pulumi up` that changes the resource meanwhile is refused: its apply would drop the
    # finalizer, and the CR would go while the pod still serves the adapter.
    with pytest.raises(PulumiLoRAError) as refused:
        provider.update("", outs, {**outs, "pinned": True})
    assert "is being deleted: a failed `pulumi destroy` left it" in str(refused.value)
    assert finalizers(kubectl_cr(bed, namespace, "sql-lora")) == [UNLOAD_FINALIZER]

    disarm(stuck)
    if by_cli:
        said = finish_delete(bed, namespace)
        assert f"unloaded sql-lora from every Ready pod of InferenceService {namespace}/llama" in (
            said
        ), said
    else:
        provider.delete("", outs)
    assert kubectl_cr(bed, namespace, "sql-lora") is None
    assert all(adapters == {} for adapters in served(handle).values()), served(handle)


@pytest.fixture(scope="module")
def plain_bed() -> Iterator[Testbed]:
    """A default ``Testbed()`` as a user starts it: LLMKube's LoRA controller acts on every CR,
    no coexistence policy holds it off (the session's ``testbed`` applies one)."""
    bed = Testbed()
    try:
        bed.start()
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))
    try:
        yield bed
    finally:
        bed.stop()


def deploy(bed: Testbed, prefix: str) -> tuple[str, InferenceServiceHandle]:
    namespace = bed.create_namespace(prefix)
    handle = bed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=60)
    return namespace, handle


@pytest.mark.parametrize("late", [False, True], ids=["llmkube-prompt", "llmkube-late"])
def test_beside_llmkubes_controller(plain_bed: Testbed, late: bool) -> None:
    """LLMKube's controller marks the CR; pulumi-lora takes its finalizer off as the deletion
    begins; the CR stays until pulumi-lora unloaded everywhere, and its conditions keep naming
    the pod that still serves, whether LLMKube reaches the deletion at once or after the
    destroy failed (a CI run saw its ``Error`` written last: "post http://llama…: connection
    refused", no pod named)."""
    assert plain_bed.llmkube is not None, "a default Testbed() runs LLMKube's LoRA controller"
    namespace, handle = deploy(plain_bed, "held-llmkube")
    fail_then_retry(plain_bed, namespace, handle, llmkube=True, by_cli=False, late=late)


def test_with_the_coexistence_policy(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    """The session's testbed holds LLMKube off with the coexistence policy (it cannot add its
    finalizer): the same story, pulumi-lora's finalizer alone holding the CR."""
    fail_then_retry(testbed, namespace, isvc, llmkube=False, by_cli=False)


def test_a_namespace_deleted_after_a_failed_destroy(plain_bed: Testbed) -> None:
    """The stack is abandoned after the failed destroy and its namespace deleted: the pods go,
    the held CR keeps the namespace Terminating (the namespace says why), and
    ``pulumi-lora finish-delete`` lets it go with nothing left to unload. A CR no destroy failed
    on carries no pulumi-lora finalizer: its namespace deletes at once
    (tests/testbed/test_namespace_deletion.py); where the loop runs, it finishes such a delete
    itself (tests/resync/test_loop_finishes_held_deletes.py)."""
    namespace, handle = deploy(plain_bed, "held-ns")
    fail_once(plain_bed, namespace, handle, llmkube=True)
    asked = plain_bed.kubectl("delete", "namespace", namespace, "--wait=false")
    assert asked.returncode == 0, asked.stderr

    def why_terminating() -> str:
        got = plain_bed.kubectl("get", "namespace", namespace, "-o", "json")
        assert got.returncode == 0, got.stderr
        conditions = json.loads(got.stdout).get("status", {}).get("conditions") or []
        remaining = [c for c in conditions if c["type"] == "NamespaceFinalizersRemaining"]
        return remaining[0]["message"] if remaining and remaining[0]["status"] == "True" else ""

    held = wait_for("the namespace to wait on the CR", why_terminating, timeout=120)
    assert UNLOAD_FINALIZER in held, held

    def pods_left() -> str:
        return str(plain_bed.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip())

    wait_for("the pods to go", lambda: not pods_left(), timeout=120)
    said = finish_delete(plain_bed, namespace)
    assert f"LoRAAdapter {namespace}/sql-lora is gone" in said, said
    wait_for(
        "the namespace to go",
        lambda: "NotFound" in plain_bed.kubectl("get", "namespace", namespace).stderr,
        timeout=120,
    )


def test_without_llmkubes_controller(plain_bed: Testbed) -> None:
    """LLMKube's manager down (the last test of the module: its controller is stopped for good):
    pulumi-lora's finalizer alone holds the CR; an operator finishes the deletion with
    ``pulumi-lora finish-delete``."""
    assert plain_bed.llmkube is not None
    plain_bed.llmkube.stop()
    namespace, handle = deploy(plain_bed, "held-quiet")
    fail_then_retry(plain_bed, namespace, handle, llmkube=False, by_cli=True)
