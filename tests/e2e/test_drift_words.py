"""What a person reading CI sees of drift (issue 21): the text ``pulumi preview --refresh`` prints.

One adapter on two pods, through the real CLI (the Automation API runs it; ``stdout`` is what it
prints). The clean case shows no property diff and no drift line; each kind of drift is named in
words in the command's diagnostics (``drift: LoRAAdapter NS/NAME: ...``), and a ``pulumi up``
heals it (an update, or a create after a refresh dropped a deleted CR), rewriting no output of a
pod it did not touch; destroy leaves no CR and nothing loaded.
"""

from __future__ import annotations

import json
import re

import httpx2
import pulumi
import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed


def preview(stack: auto.Stack) -> tuple[bool, str]:
    """``pulumi preview --refresh --expect-no-changes``: (drift seen, what it printed)."""
    try:
        done = stack.preview(refresh=True, expect_no_changes=True)
    except auto.errors.CommandError as error:
        text = str(error)
        assert "no changes were expected" in text, text
        return True, text
    return False, done.stdout


def drift_lines(text: str) -> list[str]:
    """The drift lines of the Diagnostics section (each said once there)."""
    section = text.split("Diagnostics:", 1)[1] if "Diagnostics:" in text else ""
    return [line.strip() for line in section.splitlines() if line.strip().startswith("drift: ")]


@pytest.fixture
def stack(
    engine: LocalEngine, testbed: Testbed, namespace: str
) -> tuple[auto.Stack, InferenceServiceHandle, str]:
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=30)
    path = testbed.make_adapter("sql-lora")

    def program() -> None:
        adapter = LoRAAdapter(
            "sql", adapter_name="sql-lora", path=path, inference_service="llama",
            namespace=namespace,
        )  # fmt: skip
        pulumi.export("pods", adapter.pods)
        pulumi.export("conditions", adapter.conditions)

    created = engine.inline_stack("drift-words", "dev", program)
    created.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    return created, handle, path


def test_every_drift_is_named_in_words_and_the_clean_case_shows_nothing(
    stack: tuple[auto.Stack, InferenceServiceHandle, str], testbed: Testbed, namespace: str
) -> None:
    st, handle, path = stack
    created = st.up()
    assert created.summary.resource_changes == {"create": 2}  # the stack and the adapter
    first = created.outputs
    waited = testbed.kubectl(
        "wait", "--for=condition=Loaded", "lora/sql-lora", "-n", namespace, "--timeout=10s"
    )
    assert waited.returncode == 0, waited.stderr
    where = f"drift: LoRAAdapter {namespace}/sql-lora: "
    a, b = (pod.name for pod in handle.ready_pods())
    url = {pod.name: pod.url for pod in handle.ready_pods()}

    def expect(*words: str) -> str:
        drifted, text = preview(st)
        assert drifted, text
        assert drift_lines(text) == [where + w for w in words], text
        return text

    def clean() -> None:
        drifted, text = preview(st)
        assert not drifted, text
        assert "[diff:" not in text and "drift:" not in text, text
        assert re.search(r"\n\s+2 unchanged", text), text

    try:
        by_pod = sorted(first["pods"].value, key=lambda p: p["pod"])
        assert by_pod == sorted(({"pod": a, "loaded": True}, {"pod": b, "loaded": True}), key=str)
        clean()

        unload = {"lora_name": "sql-lora"}
        assert httpx2.post(f"{url[a]}/unload_lora_adapter", json=unload).status_code == 200
        expect(f"pod {a}: sql-lora not loaded")
        heal = st.up()
        assert heal.summary.resource_changes.get("update") == 1
        healed = heal.outputs
        # the heal rewrites nothing it did not change: pods and conditions as before the drift
        assert healed["pods"].value == first["pods"].value
        assert healed["conditions"].value == first["conditions"].value
        clean()

        testbed.restart_pod(namespace, b)
        handle.wait_ready(timeout=30)
        expect(f"pod {b}: sql-lora not loaded")
        assert st.up().outputs["pods"].value == first["pods"].value
        clean()

        other = testbed.make_adapter("sql-other")
        assert httpx2.post(f"{url[a]}/unload_lora_adapter", json=unload).status_code == 200
        swapped = {"lora_name": "sql-lora", "lora_path": other}
        assert httpx2.post(f"{url[a]}/load_lora_adapter", json=swapped).status_code == 200
        expect(f"pod {a}: serves {other}, declared {path}")
        st.up()
        clean()

        edit = {"spec": {"path": other}}
        edited = testbed.kubectl(
            "patch", "lora", "sql-lora", "-n", namespace, "--type=merge", "-p", json.dumps(edit)
        )
        assert edited.returncode == 0, edited.stderr
        text = expect(f"CR edited: spec.path {path} -> {other}")
        assert "[diff: ~path]" in text, text  # the refresh's step names the field that moved
        st.up()
        clean()

        testbed.scale(namespace, "llama", 3)
        handle.wait_ready(timeout=30)
        (c,) = {pod.name for pod in handle.ready_pods()} - {a, b}
        expect(f"pod {c}: sql-lora not loaded")
        st.up()
        clean()

        gone = testbed.kubectl("delete", "lora", "sql-lora", "-n", namespace)
        assert gone.returncode == 0, gone.stderr
        expect("CR deleted outside Pulumi")
        # A refresh drops it from the state; the next up creates it again.
        assert st.refresh().summary.resource_changes.get("delete") == 1
        assert st.up().summary.resource_changes.get("create") == 1
        assert get_adapter(testbed.client(), namespace, "sql-lora") is not None
        clean()
    finally:
        st.destroy()
    assert get_adapter(testbed.client(), namespace, "sql-lora") is None
    assert all(adapters == {} for adapters in handle.served().values())
