"""The rendered RBAC rules are enough for the loop, and the loop uses every one of them.

"Enough": every loop in these tests runs as a ServiceAccount bound only to the rendered roles.
"No more": here a fresh account runs one scenario that exercises everything the loop does
(a Lease it must create, watches in all namespaces, a keyed CR whose Secret it reads, status
writes, Events, LLMKube's finalizer taken off a CR), and the apiserver's audit log must show
each granted (group, resource, verb) used by that account, allowed, with no request of it ever
denied.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

from _resync_harness import Cluster, everywhere, wait_until
from conftest import Identity, LoopFactory, make_identity

from pulumi_lora._models import ANNOTATION_API_KEY_SECRET, LLMKUBE_FINALIZER
from pulumi_lora._resync._controller import RELEASE_SPACING
from pulumi_lora.deploy import RELEASE_RULE, WATCH_RULES, lease_rules, resync_manifests
from pulumi_lora.testing.audit import audited, granted
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import Testbed


def test_every_granted_rule_is_used_and_nothing_is_denied(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory, tmp_path: Path
) -> None:
    if testbed.audit_log_path is None:
        missing_real_part("the testbed runs without an audit log")
    identity = make_identity(testbed, tmp_path, name="resync-audit", lease="resync-audit")
    key = f"sk-{secrets.token_hex(16)}"
    cluster.deploy(replicas=1, emulator_args=("--api-key", key))
    cluster.kubectl("create", "secret", "generic", "sglang-key", f"--from-literal=api-key={key}")
    path = cluster.tb.make_adapter("sql-audit")
    cluster.apply_cr(
        "sql-audit", path, annotations={ANNOTATION_API_KEY_SECRET: "sglang-key/api-key"}
    )
    # A CR LLMKube's controller marked before the coexistence policy: the loop takes it over.
    cluster.kubectl(
        "patch", "lora", "sql-audit", "--type=merge",
        "-p", json.dumps({"metadata": {"finalizers": [LLMKUBE_FINALIZER]}}),
    )  # fmt: skip

    # every namespace: the ClusterRole's reach; the flag as the rendered Deployment passes it
    loop = loops(None, "--release-llmkube-finalizer", identity=identity)
    loop.wait_event("leadership_acquired")
    wait_until(
        lambda: cluster.conditions("sql-audit").get("Loaded", {}).get("status") == "True", 20
    )
    wait_until(lambda: any(e["reason"] == "AdapterLoaded" for e in cluster.events()), 10)
    wait_until(lambda: len(loop.events("verify_sweep")) >= 2, 10)  # a Lease renewal or two
    wait_until(lambda: loop.events("llmkube_finalizer_released"), 10)
    stored = json.loads(cluster.kubectl("get", "lora", "sql-audit", "-o", "json"))
    assert LLMKUBE_FINALIZER not in (stored["metadata"].get("finalizers") or [])
    time.sleep(RELEASE_SPACING + 1)  # its look whether the finalizer came back
    assert loop.stop() == 0  # releasing is an update too

    rules = [*WATCH_RULES, RELEASE_RULE, *lease_rules("resync-audit")]
    used, denied = audited(testbed.audit_log_path, identity.user)  # type: ignore[arg-type]
    assert not denied, f"denied: {[(e['verb'], e['requestURI']) for e in denied]}"
    assert granted(rules) == used, (
        f"granted but never used: {granted(rules) - used}; used beyond: {used - granted(rules)}"
    )


def test_the_namespaced_variant_is_enough_in_its_namespace(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory, tmp_path: Path
) -> None:
    manifests = resync_manifests("any", "img", watch_namespace=cluster.namespace)
    assert [m["kind"] for m in manifests][2:5] == ["ServiceAccount", "Role", "RoleBinding"]
    identity: Identity = make_identity(
        testbed, tmp_path, name="resync-ns", watch_namespace=cluster.namespace, lease="resync-ns"
    )
    handle = cluster.deploy(replicas=1)
    path = cluster.tb.make_adapter("sql-ns")
    cluster.apply_cr("sql-ns", path)
    loop = loops(cluster.namespace, identity=identity)
    wait_until(lambda: everywhere(handle, {"sql-ns": path}), 20)
    wait_until(lambda: cluster.conditions("sql-ns").get("Ready", {}).get("status") == "True", 10)
    assert not loop.events("watch_broken"), "a request of the namespaced loop was refused"

    # The same account can't see beyond its namespace: the Role is all it has.
    outside = testbed.kubectl(
        f"--token={_token(testbed, identity)}",
        "get",
        "pods",
        "-A",
        "--kubeconfig=/dev/null",
        f"--server={testbed.server}",
        f"--certificate-authority={testbed.ca_path}",
    )
    assert outside.returncode != 0 and "forbidden" in outside.stderr.lower()


def _token(testbed: Testbed, identity: Identity) -> str:
    done = testbed.kubectl("create", "token", identity.service_account, "-n", identity.namespace)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
