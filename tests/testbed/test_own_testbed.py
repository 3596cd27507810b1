"""A testbed of its own: extra tokens and RBAC, the audit log, and a teardown that leaves nothing.

Runs in file order: the last test stops the testbed and checks that nothing is left behind.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Iterator

import httpx2
import pytest

from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    StaticToken,
    Testbed,
    existing_namespaces,
    netns_available,
    netns_unavailable_reason,
    new_token,
)
from pulumi_lora.testing.testbed._process import live_descendants

READER = StaticToken(new_token(), "reader", groups=("readers",))


@pytest.fixture(scope="module")
def own(testbed_binaries: object) -> Iterator[Testbed]:
    bed = Testbed(extra_tokens=[READER]).start()
    yield bed
    bed.stop()


def test_extra_token_authenticates_without_privileges(own: Testbed) -> None:
    client = httpx2.Client(
        base_url=own.server,
        verify=ssl.create_default_context(cafile=str(own.ca_path)),
        headers={"Authorization": f"Bearer {READER.token}"},
    )
    review = client.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    user = review.json()["status"]["userInfo"]
    assert user["username"] == "reader" and "readers" in user["groups"]
    assert client.get("/api/v1/namespaces/default/pods").status_code == 403
    # Grant exactly one verb and it works.
    ns = own.create_namespace("rbac")
    own.rest.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "metadata": {"name": "read-lora"},
            "rules": [
                {
                    "apiGroups": ["inference.llmkube.dev"],
                    "resources": ["loraadapters"],
                    "verbs": ["list"],
                }
            ],
        },
    )
    own.rest.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-lora",
            },
            "subjects": [
                {"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    path = f"/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/loraadapters"
    deadline = time.monotonic() + 10
    while client.get(path).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get(path).status_code == 200
    assert client.post(path, json={}).status_code == 403
    # The same, through a kubeconfig written for the token and the real kubectl.
    kubeconfig = own.write_kubeconfig(own.directory / "reader.kubeconfig", READER.token, "reader")
    auth = own.kubectl("--kubeconfig", str(kubeconfig), "auth", "can-i", "list", "lora", "-n", ns)
    assert auth.stdout.strip() == "yes", auth.stderr
    client.close()


def test_audit_log_records_who_did_what(own: Testbed) -> None:
    own.create_namespace("audited")
    path = own.audit_log_path
    assert path is not None and path.is_file()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(e["level"] == "Metadata" for e in events)
    created = [
        e
        for e in events
        if e["verb"] == "create" and e.get("objectRef", {}).get("resource") == "namespaces"
    ]
    assert created and created[-1]["user"]["username"] == "testbed-admin"
    assert any(e["user"]["username"] == "reader" for e in events)
    assert own.admin_token not in path.read_text()
    assert READER.token not in path.read_text()


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout


def test_teardown_leaves_nothing_behind(own: Testbed) -> None:
    before = live_descendants()
    ns = own.create_namespace("teardown")
    loop = own.deploy_inference_service(ns, "loop", replicas=1, startup_delay=0.2)
    pids = [i.pid for i in loop.wait_ready(30)]
    if netns_available():
        net = own.deploy_inference_service(ns, "net", replicas=1, network="netns")
        pids += [i.pid for i in net.wait_ready(30)]
        assert any(n.startswith(f"pulumi-lora-{own.id}-") for n in existing_namespaces())
        assert f"vh{own.id}-" in _links()
    directory = own.directory
    component_pids = [p for p in own.pids.values() if p]
    assert len(component_pids) == 3 and all(pids)
    # the emulators (and etcd, apiserver, controller-manager) are our children
    assert live_descendants() - before

    own.stop()

    alive = [p for p in [*pids, *component_pids] if p in live_descendants()]
    assert not alive, f"processes left: {alive}"
    assert live_descendants() - before == set()
    assert not any(n.startswith(f"pulumi-lora-{own.id}") for n in existing_namespaces())
    assert f"vh{own.id}-" not in _links() and f"vp{own.id}-" not in _links()
    assert not directory.exists()
    own.stop()  # idempotent
    if not netns_available():
        missing_real_part(f"netns part of the teardown check skipped: {netns_unavailable_reason()}")
