"""pulumi-lora beside LLMKube's own LoRA controller, as every LLMKube cluster runs it (issue 20).

A testbed of this module's own, with the played LLMKube controller's clocks shrunk fifty times
(its 30 s requeue is 0.6 s, its 2 minute skip window 2.4 s), so a few seconds hold many of its
cycles. The InferenceService sets ``endpoint.port`` to the container's port, so LLMKube's
through-the-Service loads really reach a pod: the hostile case.

What is asserted is what users see: the pods' own ``/v1/models``, the CR as ``kubectl`` returns
it, the provider's outputs; and, from the played controller's own record, every request it sent
to a pod and every write the apiserver refused it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._models import LLMKUBE_CONTROLLER_USER, LLMKUBE_FINALIZER
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    BinaryNotFoundError,
    InferenceServiceHandle,
    LLMKubeLoRAController,
    Testbed,
)
from tests.e2e.conftest import adapter_props, provider_for, served, served_by_every_running_pod

SCALE = 0.02
"""The played controller's clocks: 30 s → 0.6 s, 2 minutes → 2.4 s."""


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    testbed = Testbed(audit=False, llmkube_time_scale=SCALE)
    try:
        testbed.start()
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))
    try:
        yield testbed
    finally:
        testbed.stop()


@pytest.fixture
def llmkube(bed: Testbed) -> LLMKubeLoRAController:
    assert bed.llmkube is not None, "a default testbed runs LLMKube's LoRA controller"
    return bed.llmkube


def deploy(bed: Testbed, prefix: str) -> tuple[str, InferenceServiceHandle]:
    namespace = bed.create_namespace(prefix)
    handle = bed.deploy_inference_service(namespace, "llama", replicas=2, endpoint_port=30000)
    handle.wait_ready(timeout=30)
    return namespace, handle


def kubectl_cr(bed: Testbed, namespace: str, name: str) -> dict[str, Any] | None:
    got = bed.kubectl("get", "lora", name, "-n", namespace, "-o", "json")
    if got.returncode != 0:
        assert "NotFound" in got.stderr, got.stderr
        return None
    found: dict[str, Any] = json.loads(got.stdout)
    return found


def apply_plain_cr(bed: Testbed, namespace: str, name: str, path: str) -> None:
    """A LoRAAdapter as kubectl users write it (no pulumi-lora annotation)."""
    manifest = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"inferenceServiceRef": {"name": "llama"}, "name": name, "path": path},
    }
    assert bed.kubectl("apply", "-f", "-", input=json.dumps(manifest)).returncode == 0


def conditions(cr: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c["reason"])
        for c in ((cr or {}).get("status") or {}).get("conditions") or []
    }


def wait_for(
    what: str, check: Any, timeout: float = 20.0, explain: Callable[[], str] | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{explain()}" if explain else ""))


def provider(bed: Testbed) -> LoRAAdapterProvider:
    return provider_for(ProviderConfig(kube=KubeSource(str(bed.kubeconfig_path))))


props = adapter_props


def readme_command(bed: Testbed) -> None:
    """Run the README's coexistence command as written (this venv's ``pulumi-lora``, the
    testbed's kubectl and kubeconfig)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    line = next(
        raw.split("#")[0].strip()
        for raw in readme.splitlines()
        if raw.startswith("pulumi-lora coexistence-policy")
    )
    assert line == "pulumi-lora coexistence-policy | kubectl apply -f -"
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(bed.binaries["kubectl"].parent), os.environ["PATH"]]
    )
    env = {**os.environ, "PATH": path, "KUBECONFIG": str(bed.kubeconfig_path)}
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", line], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/" in done.stdout


def refused_to_llmkube(bed: Testbed, namespace: str, name: str) -> bool:
    """Whether the apiserver refuses LLMKube's controller a status write on the CR (dry run): a
    policy just applied holds within a moment, not at once."""
    tried = bed.kubectl(
        "patch",
        "lora",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"loadedPath": "/adapters/x"}}',
        f"--as={LLMKUBE_CONTROLLER_USER}",
        "--as-group=system:serviceaccounts",
        "--dry-run=server",
    )
    return tried.returncode != 0 and "pulumi-lora coexistence policy" in tried.stderr


class Flips:
    """Every change of the CR's Loaded/Ready/Error status, polled every 20 ms in a thread."""

    def __init__(self, bed: Testbed, namespace: str, name: str) -> None:
        self.client = bed.client()
        self.namespace, self.name = namespace, name
        self.seen: list[dict[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flips:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from pulumi_lora._kube._objects import get_adapter  # noqa: PLC0415 - the test's own reads

        while not self._stop.wait(0.02):
            cr = get_adapter(self.client, self.namespace, self.name)
            now = {k: v[0] for k, v in conditions(cr).items() if k in ("Loaded", "Ready", "Error")}
            if not self.seen or self.seen[-1] != now:
                self.seen.append(now)

    @property
    def changes(self) -> int:
        return len(self.seen) - 1


def test_played_controller_loads_one_random_pod_through_the_service(
    bed: Testbed, llmkube: LLMKubeLoRAController
) -> None:
    """LLMKube's controller as its source has it: finalizer first, then loads through the
    Service (each into one pod of two) and its own conditions; deletion unloads through the Service
    (one pod, at random: a pod without it answers 400 and the adapter leaks) and drops the
    finalizer regardless.
    It acts as its own ServiceAccount, with LLMKube's RBAC (``kubectl auth can-i`` agrees).

    What the pods serve at the end is what its own request log says: every 200 load, minus every
    200 unload, minus the pods restarted since (SGLang forgets on restart). The log is read only
    once the controller let the CR go: a reconcile queued by its own status write during the
    deletion may read its cache before the deletion arrived and unload through the Service a
    second time (CI saw that second unload land after the first was read)."""
    namespace, handle = deploy(bed, "llmkube-played")
    path = bed.make_adapter("played")
    service = json.loads(bed.kubectl("get", "svc", "llama", "-n", namespace, "-o", "json").stdout)
    assert service["spec"]["ports"][0]["port"] == 30000
    apply_plain_cr(bed, namespace, "played", path)
    # Each load goes through the Service to one pod at random. A reconcile that read its cache
    # before its own last write arrived (or one past its skip window) loads again: to a pod
    # that has it, SGLang's 400; to the other, 200. A status write from a stale read is refused
    # (409) and retried: it can even lose the record of a load it made (loadedPath unset while
    # pods serve it), so what is asserted is the pods against its requests.

    def sent(route: str, status: int) -> list[str]:
        return sorted(
            {
                str(r.pod)
                for r in llmkube.requests(route)
                if r.lora_name == "played" and r.status == status
            }
        )

    def serving() -> list[str]:
        found = served_by_every_running_pod(handle)
        return sorted(p for p, adapters in found.items() if "played" in adapters)

    wait_for("LLMKube's first load", lambda: sent("/load_lora_adapter", 200), timeout=60)
    wait_for(
        "the serving pods to be those LLMKube loaded",
        lambda: serving() == sent("/load_lora_adapter", 200),
        timeout=60,
    )
    starts = {pod.name: pod.restart_count for pod in handle.pods()}
    cr = kubectl_cr(bed, namespace, "played")
    assert cr is not None and cr["metadata"]["finalizers"] == [LLMKUBE_FINALIZER]
    reasons = {"FinalizerAdded", "ReconcileSuccess", "AlreadyLoaded", "LoadUnsuccessful"}
    assert conditions(cr)["Loaded"][1] in reasons, conditions(cr)  # LLMKube's words only
    can = bed.kubectl(
        "auth", "can-i", "update", "loraadapters/finalizers", f"--as={LLMKUBE_CONTROLLER_USER}"
    )
    assert can.stdout.strip() == "yes"

    assert bed.kubectl("delete", "lora", "played", "-n", namespace, "--wait=true").returncode == 0
    assert kubectl_cr(bed, namespace, "played") is None
    wait_for("LLMKube's controller to let the CR go", lambda: llmkube.let_go(namespace, "played"))
    unloads = [r for r in llmkube.requests("/unload_lora_adapter") if r.lora_name == "played"]
    # A container the kubelet restarted since (its liveness probe, on a starved machine) lost
    # its adapters as SGLang does: what LLMKube loaded there is no longer served.
    now = {pod.name: pod.restart_count for pod in handle.pods()}
    restarted = {name for name, count in starts.items() if now.get(name, count + 1) != count}
    unloaded = set(sent("/unload_lora_adapter", 200))
    loaded = sent("/load_lora_adapter", 200)
    expected = [p for p in loaded if p not in restarted and p not in unloaded]
    pods = [(p.name, p.ready, p.restart_count) for p in handle.pods()]
    seen = {"unloads": unloads, "loaded": loaded, "restarted": restarted, "pods": pods}
    assert unloads, seen  # the deletion unloads through the Service before the finalizer goes
    assert serving() == expected, seen
    if unloads[0].status == 400:  # the Service picked a pod without it: finalizer dropped anyway
        assert unloads[0].pod not in loaded or unloads[0].pod in restarted, seen


def test_without_the_policy_pulumi_lora_still_works(
    bed: Testbed, llmkube: LLMKubeLoRAController
) -> None:
    """No policy: LLMKube marks the CR and rewrites its status, yet a path swap succeeds on every
    pod, the outputs say what the pods serve (not LLMKube's ``Loaded=False``), and deletion
    finishes at once."""
    namespace, handle = deploy(bed, "llmkube-nopolicy")
    v1, v2 = bed.make_adapter("nopolicy-v1"), bed.make_adapter("nopolicy-v2")
    p = provider(bed)
    outs = p.create(props(namespace, v1)).outs
    wait_for(
        "LLMKube's finalizer",
        lambda: (
            LLMKUBE_FINALIZER
            in ((kubectl_cr(bed, namespace, "sql-lora") or {})["metadata"].get("finalizers") or [])
        ),
    )
    outs = p.update("", outs, props(namespace, v2)).outs
    assert outs["loaded"] and outs["ready"]
    assert served(handle) == {pod.name: {"sql-lora": v2} for pod in handle.ready_pods()}
    # Past its skip window, any event (here a label someone adds) makes LLMKube re-send the load
    # through the Service; SGLang answers 400 (already loaded) and LLMKube writes Loaded=False.
    time.sleep(120 * SCALE * 1.5)
    touched = bed.kubectl("label", "lora", "sql-lora", "-n", namespace, "team=ml")
    assert touched.returncode == 0, touched.stderr
    wait_for(
        "LLMKube's Loaded=False",
        lambda: (
            conditions(kubectl_cr(bed, namespace, "sql-lora")).get("Loaded")
            == ("False", "LoadUnsuccessful")
        ),
    )
    # What an operator runs: both commands say LLMKube acts on the CR, and what to do.
    kubeconfig = ("--kubeconfig", str(bed.kubeconfig_path))
    status = CliRunner().invoke(cli, ["status", "-n", namespace, *kubeconfig])
    assert status.exit_code == 0, status.output  # the pods serve it: the verdict is ok
    assert f"LLMKube's own LoRA controller acts on:\n  {namespace}/sql-lora: its finalizer" in (
        status.output
    ), status.output
    assert "Loaded=False (LoadUnsuccessful)" in status.output
    assert "fix: apply pulumi-lora's coexistence policy" in status.output
    doctor = CliRunner().invoke(cli, ["doctor", "llama", "-n", namespace, *kubeconfig])
    assert re.search(
        r"warn\s+llmkube-controller\s+LLMKube's own LoRA controller acts on 1", (doctor.output)
    ), doctor.output
    assert "fix: apply pulumi-lora's coexistence policy" in doctor.output

    read = p.read(f"{namespace}/sql-lora", outs)
    assert read.outs["loaded"] and read.outs["ready"], read.outs["conditions"]
    loaded = next(c for c in read.outs["conditions"] if c["type"] == "Loaded")
    assert (loaded["status"], loaded["reason"], loaded["message"]) == (
        "True",
        "AdapterLoaded",
        "loaded on 2/2 Ready pods",
    )
    assert p.diff(f"{namespace}/sql-lora", read.outs, props(namespace, v2)).changes is False

    p.delete("", read.outs)  # releases LLMKube's finalizer itself: it would time out waiting
    assert kubectl_cr(bed, namespace, "sql-lora") is None
    assert all("sql-lora" not in adapters for adapters in served(handle).values())


def test_policy_holds_llmkube_off_and_takes_over_older_crs(
    bed: Testbed, llmkube: LLMKubeLoRAController
) -> None:
    """With ``coexistence_policy()``: over ten of LLMKube's minutes, no flip of Loaded/Ready/Error
    on pulumi-lora's CRs and no request from LLMKube to a pod for them; a path swap and deletion
    work; a CR LLMKube marked before the policy is taken over by its next update; a CR nobody
    made with pulumi-lora is still LLMKube's."""
    namespace, handle = deploy(bed, "llmkube-policy")
    old_v1, old_v2 = bed.make_adapter("older-v1"), bed.make_adapter("older-v2")
    p = provider(bed)
    older = p.create(props(namespace, old_v1, "older")).outs
    wait_for(
        "LLMKube's finalizer on the older CR",
        lambda: (
            LLMKUBE_FINALIZER
            in ((kubectl_cr(bed, namespace, "older") or {})["metadata"].get("finalizers") or [])
        ),
    )
    readme_command(bed)
    wait_for("the policy to hold", lambda: refused_to_llmkube(bed, namespace, "older"))
    try:
        older = p.update("", older, props(namespace, old_v2, "older")).outs
        taken = kubectl_cr(bed, namespace, "older")
        assert taken is not None
        assert LLMKUBE_FINALIZER not in (taken["metadata"].get("finalizers") or [])
        # A reconcile LLMKube began on its cached copy from before the takeover still loads
        # through the Service (controller-runtime's cache lags the same way); count from the
        # moment no reconcile can read that copy any more.
        wait_for(
            "LLMKube's cache to see the takeover",
            lambda: llmkube.reads(
                namespace,
                "older",
                lambda cr: LLMKUBE_FINALIZER not in (cr["metadata"].get("finalizers") or []),
            ),
        )

        v1, v2 = bed.make_adapter("policy-v1"), bed.make_adapter("policy-v2")
        since = time.monotonic()
        outs = p.create(props(namespace, v1)).outs
        with Flips(bed, namespace, "sql-lora") as flips:
            time.sleep(10 * 60 * SCALE / 2)
            outs = p.update("", outs, props(namespace, v2)).outs
            time.sleep(10 * 60 * SCALE / 2)
        assert flips.seen and flips.seen[0] == {"Loaded": "True", "Ready": "True", "Error": "False"}
        assert flips.changes == 0, flips.seen
        ours = {"sql-lora", "older"}
        sent = [r for r in llmkube.requests() if r.lora_name in ours and r.at > since]
        assert sent == [], sent
        assert llmkube.stats.finalizer_refused + llmkube.stats.status_refused > 0
        for name in ours:
            cr = kubectl_cr(bed, namespace, name)
            assert cr is not None and LLMKUBE_FINALIZER not in (
                cr["metadata"].get("finalizers") or []
            )
        assert served(handle) == {
            pod.name: {"sql-lora": v2, "older": old_v2} for pod in handle.ready_pods()
        }

        # A CR without pulumi-lora's annotation is LLMKube's to serve, policy or not: LLMKube
        # takes its finalizer and loads it into a pod through the Service. (Not its Loaded=True:
        # LLMKube reconciles on its own status writes and kube-proxy picks a pod each time, so a
        # later load meets SGLang's "already loaded" 400 and LLMKube writes LoadUnsuccessful;
        # once its 2 minute skip window passes, on every requeue. Loaded=True is transient.)
        theirs = bed.make_adapter("theirs")
        apply_plain_cr(bed, namespace, "theirs", theirs)
        loaded = wait_for(
            "LLMKube's load of its own CR into a pod",
            lambda: [
                r
                for r in llmkube.requests("/load_lora_adapter")
                if r.lora_name == "theirs" and r.status == 200
            ],
            explain=lambda: f"CR: {kubectl_cr(bed, namespace, 'theirs')}\nLLMKube: {llmkube.stats}",
        )
        assert served(handle)[loaded[0].pod] == {"sql-lora": v2, "older": old_v2, "theirs": theirs}
        cr = kubectl_cr(bed, namespace, "theirs")
        assert cr is not None and LLMKUBE_FINALIZER in (cr["metadata"].get("finalizers") or [])

        p.delete("", outs)
        p.delete("", older)
        assert kubectl_cr(bed, namespace, "sql-lora") is None
        assert all(
            not ({"sql-lora", "older"} & set(adapters)) for adapters in served(handle).values()
        )
    finally:
        bed.kubectl(
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "pulumi-lora-llmkube-coexistence",
        )
