"""Hostile LoRAAdapter CRs against the running loop, through the real apiserver (hypothesis).

Each example writes a handful of CRs with extreme but apiserver-valid values into one namespace
watched by one ``pulumi-lora resync`` process: names of every length up to 253 and every allowed
character, adapter names shared between CRs, unknown and huge annotations (near the apiserver's
256 KiB limit), odd values of the protocol's own annotations, targets that do not exist, paths
that are no adapter, and the same CR name created, deleted and re-created in a burst. Then:

- the loop never exits;
- no pod ever serves an adapter name with a path other than its owner's (the oldest CR claiming
  the name on that InferenceService): the loop never loads a name another CR owns;
- every CR gets its own status for its current generation, and ``Loaded=True`` only where every
  Ready pod serves it; a CR that lost its name to another says ``NameCollision`` itself;
- deleting every CR leaves no adapter on any pod.

CI-sized: a bounded number of examples, no deadline (each example waits for the loop).
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from _resync_harness import Cluster, served, wait_until
from conftest import LoopFactory
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pulumi_lora.testing.testbed import Testbed

#: CI-sized and reproducible; ``HOSTILE_CR_EXAMPLES=N`` draws N fresh (random) examples instead.
EXAMPLES = int(os.environ.get("HOSTILE_CR_EXAMPLES", "8"))
DNS = string.ascii_lowercase + string.digits
ADAPTER_CHARS = string.ascii_letters + string.digits + "._-"
#: Adapter names several CRs of one example may share (collisions are the point).
SHARED = ("shared", "Shared.v1_x-2")
#: The apiserver's limit on all of an object's annotations together.
ANNOTATIONS_LIMIT = 256 * 1024
PROTOCOL_ODDITIES = {
    "pulumi-lora.dev/pinned": ["TRUE", "yes", "", "false"],
    "pulumi-lora.dev/readiness-policy": ["AnyReadyPod", "bogus", ""],
    "pulumi-lora.dev/transport": ["delegated", "carrier-pigeon", ""],
    "pulumi-lora.dev/api-key-secret": ["/", "a/", "/b", "no-such-secret/key", "x" * 300],
    "pulumi-lora.dev/managed-by": ["pulumi", "someone-else"],
}


@st.composite
def cr_names(draw: st.DrawFn) -> str:
    """A DNS-1123 subdomain of 1 to 253 characters (the longest lengths drawn often)."""
    length = draw(st.sampled_from([1, 2, 63, 64, 200, 252, 253]) | st.integers(1, 253))
    chars = list(draw(st.text(alphabet=DNS + "-.", min_size=length, max_size=length)))
    for index, char in enumerate(chars):
        edge = index in (0, length - 1)
        after_dot = index > 0 and chars[index - 1] in "-."
        if char in "-." and (edge or after_dot or (index + 1 < length and chars[index + 1] in ".")):
            chars[index] = DNS[index % len(DNS)]
    return "".join(chars)


@st.composite
def adapter_names(draw: st.DrawFn) -> str:
    """``spec.name``: 1 to 63 of ``[A-Za-z0-9._-]``, starting alphanumeric; or a shared one."""
    if draw(st.booleans()):
        return draw(st.sampled_from(SHARED))
    first = draw(st.sampled_from(string.ascii_letters + string.digits))
    rest = draw(st.text(alphabet=ADAPTER_CHARS, max_size=62))
    return first + rest


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, str]:
    notes: dict[str, str] = {}
    for key, values in PROTOCOL_ODDITIES.items():
        if draw(st.booleans()):
            notes[key] = draw(st.sampled_from(values))
    for key in draw(
        st.lists(
            st.sampled_from(
                ["pulumi-lora.dev/unknown", "pulumi-lora.dev/Pinned", "example.com/x", "plain"]
            ),
            max_size=3,
            unique=True,
        )
    ):
        notes[key] = draw(st.text(max_size=40))
    if draw(st.integers(0, 3)) == 0:  # near the limit: one huge value (UTF-8 bytes counted)
        used = sum(len(k.encode()) + len(v.encode()) for k, v in notes.items())
        key = "example.com/huge"
        notes[key] = "h" * (ANNOTATIONS_LIMIT - used - len(key) - 64)
    return notes


@dataclass
class Spec:
    """One CR of an example."""

    name: str
    adapter: str
    path_kind: str  # "good", "missing" (no adapter there), "weird" (printable junk)
    target: str  # "llama" or a name nothing serves
    target_namespace: str | None  # None: the CR's own; else one that does not exist, or no name
    notes: dict[str, str] = field(default_factory=dict)
    churn: int = 0  # how many extra create/delete rounds before the final create


specs = st.builds(
    Spec,
    name=cr_names(),
    adapter=adapter_names(),
    path_kind=st.sampled_from(["good", "good", "missing", "weird"]),
    target=st.sampled_from(["llama", "llama", "llama", "no-such-isvc"]),
    target_namespace=st.sampled_from([None, None, None, "no-such-ns", "Not A/Namespace\u0085!"]),
    notes=annotations(),
    churn=st.sampled_from([0, 0, 1, 3]),
)
examples = st.lists(specs, min_size=1, max_size=4, unique_by=lambda s: s.name)


@pytest.fixture
def bench(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory
) -> Iterator[tuple[Testbed, Cluster, Any, Any]]:
    """One InferenceService of two pods and one loop watching its namespace, for every example."""
    handle = cluster.deploy(replicas=2)
    loop = loops(cluster.namespace)
    yield testbed, cluster, handle, loop
    assert loop.proc.poll() is None, f"the loop exited:\n{loop.tail(80)}"


def manifest(namespace: str, spec: Spec, path: str) -> dict[str, Any]:
    ref = {"name": spec.target}
    if spec.target_namespace is not None:  # the CRD takes any string here
        ref["namespace"] = spec.target_namespace
    return {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": spec.name, "namespace": namespace, "annotations": spec.notes},
        "spec": {"name": spec.adapter, "path": path, "inferenceServiceRef": ref},
    }


def kubectl(testbed: Testbed, *args: str, body: Any = None) -> str:
    done = testbed.kubectl(*args, input=None if body is None else yaml.safe_dump(body))
    assert done.returncode == 0, f"kubectl {' '.join(args[:3])}: {done.stderr[:2000]}"
    return done.stdout


def stored(testbed: Testbed, namespace: str) -> list[dict[str, Any]]:
    out = kubectl(
        testbed, "get", "loraadapters.inference.llmkube.dev", "-n", namespace, "-o", "json"
    )
    return list(json.loads(out)["items"])


def on_llama(cr: dict[str, Any]) -> bool:
    """Whether ``cr`` targets the example's InferenceService (``llama`` in its own namespace)."""
    ref = cr["spec"]["inferenceServiceRef"]
    return bool(
        ref["name"] == "llama" and ref.get("namespace") in (None, cr["metadata"]["namespace"])
    )


def owners(crs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Adapter name → the CR that owns it on ``llama`` (oldest, then namespace, then name)."""
    found: dict[str, dict[str, Any]] = {}
    for cr in sorted(
        crs,
        key=lambda c: (
            c["metadata"]["creationTimestamp"],
            c["metadata"]["namespace"],
            c["metadata"]["name"],
        ),
    ):
        if on_llama(cr):
            found.setdefault(cr["spec"]["name"], cr)
    return found


def loaded_condition(cr: dict[str, Any]) -> dict[str, Any] | None:
    """The ``Loaded`` condition, if it is about the CR's current generation."""
    for condition in (cr.get("status") or {}).get("conditions") or ():
        current = condition.get("observedGeneration") == cr["metadata"]["generation"]
        if condition["type"] == "Loaded" and current:
            return dict(condition)
    return None


def no_stranger_served(handle: Any, crs: list[dict[str, Any]]) -> None:
    """Every adapter any Ready pod serves is its owner's, with the owner's path."""
    owned = owners(crs)
    for pod, adapters in served(handle).items():
        for name, path in adapters.items():
            owner = owned.get(name)
            assert owner is not None, f"{pod} serves {name!r}, which no CR declares"
            assert owner["spec"]["path"] == path, (
                f"{pod} serves {name!r} from {path!r}, but its owner "
                f"{owner['metadata']['name']} declares {owner['spec']['path']!r}"
            )


@pytest.mark.timeout(900)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="HOSTILE_CR_EXAMPLES" not in os.environ,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each replay costs a loop pass
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(example=examples)
def test_hostile_crs_never_break_the_loop(
    bench: tuple[Testbed, Cluster, Any, Any], example: list[Spec]
) -> None:
    testbed, cluster, handle, loop = bench
    try:
        check_example(testbed, cluster.namespace, handle, loop, example)
    finally:
        # Every CR deleted: nothing stays loaded, the loop is still there, the next example
        # starts from an empty namespace.
        kubectl(
            testbed,
            "delete",
            "loraadapters.inference.llmkube.dev",
            "--all",
            "-n",
            cluster.namespace,
        )
        wait_until(
            lambda: all(not adapters for adapters in served(handle).values()),
            timeout=30,
            what="every adapter unloaded once every CR is gone",
        )
        assert loop.proc.poll() is None, f"the loop exited:\n{loop.tail(80)}"


def check_example(testbed: Testbed, ns: str, handle: Any, loop: Any, example: list[Spec]) -> None:
    good = testbed.make_adapter("hostile-good")
    paths = {"good": good, "missing": "/adapters/not-there", "weird": " ~/é\u00a0x?*"}
    for spec in example:
        body = manifest(ns, spec, paths[spec.path_kind])
        for _ in range(spec.churn):  # a burst: created, deleted, created again...
            kubectl(testbed, "create", "-f", "-", body=body)
            kubectl(
                testbed,
                "delete",
                "loraadapters.inference.llmkube.dev",
                spec.name,
                "-n",
                ns,
                "--wait=false",
            )
        wait_until(
            lambda body=body: (
                testbed.kubectl("create", "-f", "-", input=yaml.safe_dump(body)).returncode == 0
            ),
            timeout=20,
            what=f"CR {spec.name[:40]}... to be created again",
        )

    def reported() -> list[dict[str, Any]] | None:
        assert loop.proc.poll() is None, f"the loop exited:\n{loop.tail(80)}"
        crs = stored(testbed, ns)
        no_stranger_served(handle, crs)
        if len(crs) != len(example) or not all(loaded_condition(cr) for cr in crs):
            return None
        return crs

    try:
        crs = wait_until(reported, timeout=60, interval=0.3, what="every CR's own status")
    except AssertionError as exc:
        summary = [
            (
                cr["metadata"]["name"][:30],
                cr["metadata"]["generation"],
                [
                    (c["type"], c["status"], c.get("reason"), c.get("observedGeneration"))
                    for c in (cr.get("status") or {}).get("conditions") or ()
                ],
            )
            for cr in stored(testbed, ns)
        ]
        raise AssertionError(f"{exc}: {summary}\n{loop.tail(30)}") from None
    owned = owners(crs)
    for cr in crs:
        condition = loaded_condition(cr)
        assert condition is not None
        adapter, name = cr["spec"]["name"], cr["metadata"]["name"]
        owner = owned.get(adapter) if on_llama(cr) else None
        if owner is not None and owner["metadata"]["name"] != name:
            assert condition["status"] == "False", (name, condition)
            assert condition["reason"] == "NameCollision", (name, condition)
        if condition["status"] == "True":
            wait_until(
                lambda cr=cr: all(
                    adapters.get(cr["spec"]["name"]) == cr["spec"]["path"]
                    for adapters in served(handle).values()
                ),
                timeout=10,
                what=f"{name[:40]}'s adapter on every pod (it says Loaded=True)",
            )
        if not on_llama(cr) or cr["spec"]["path"] != good:
            assert condition["status"] == "False", (name, condition)
