"""The rendered RBAC rules are enough for the loop, and the loop uses every one of them.

"Enough": every loop in these tests runs as a ServiceAccount bound only to the rendered roles.
"No more": here a fresh account runs one scenario that exercises everything the loop does
(a Lease it must create, its watches, a keyed CR whose Secret it reads, status
writes, Events, LLMKube's finalizer taken off a CR), and the apiserver's audit log must show
each granted (group, resource, verb) used by that account, allowed, with no request of it ever
denied. Secrets it reads only in the namespaces named (``secret_namespaces``): never in
kube-system, and with none named, nowhere; a loop refused a key says what to set.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

from _resync_harness import Cluster, everywhere, wait_until
from conftest import Identity, LoopFactory, make_identity, name_secret_namespaces

from pulumi_lora._models import ANNOTATION_API_KEY_SECRET, LLMKUBE_FINALIZER
from pulumi_lora._resync._podrun import SECRET_REASON
from pulumi_lora._resync._releases import RELEASE_SPACING
from pulumi_lora.deploy import (
    RELEASE_RULE,
    SECRET_RULE,
    WATCH_RULES,
    lease_rules,
    resync_manifests,
)
from pulumi_lora.testing.audit import audited, granted
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import Testbed


def test_every_granted_rule_is_used_and_nothing_is_denied(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory, tmp_path: Path
) -> None:
    if testbed.audit_log_path is None:
        missing_real_part("the testbed runs without an audit log")
    identity = make_identity(
        testbed,
        tmp_path,
        name="resync-audit",
        lease="resync-audit",
        secret_namespaces=[cluster.namespace],
    )
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

    # The ClusterRole's account, watching this namespace (``-A`` is can-i's, below): a loop of
    # every namespace would act on other tests' CRs too, and be refused (rightly) the keys of
    # theirs. The flag as the rendered Deployment passes it.
    loop = loops(cluster.namespace, "--release-llmkube-finalizer", identity=identity)
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

    rules = [*WATCH_RULES, SECRET_RULE, RELEASE_RULE, *lease_rules("resync-audit")]
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


def test_secrets_are_readable_only_in_the_namespaces_named(
    testbed: Testbed, cluster: Cluster, tmp_path: Path
) -> None:
    """Issue 53's pattern, for the loop: as applied, the cluster-wide loop's account may get
    Secrets in the namespaces named in ``secret_namespaces`` and nowhere else (not kube-system,
    not its own namespace), and with none named, nowhere; ``get`` only, never a list."""
    named = make_identity(
        testbed,
        tmp_path,
        name="resync-secrets-named",
        lease="resync-secrets-named",
        secret_namespaces=[cluster.namespace],
    )
    unnamed = make_identity(
        testbed, tmp_path, name="resync-secrets-none", lease="resync-secrets-none"
    )
    elsewhere = testbed.create_namespace("elsewhere")

    def may(identity: Identity, verb: str, where: str) -> bool:
        asked = testbed.kubectl(
            "auth", "can-i", verb, "secrets", "-n", where, f"--as={identity.user}"
        )
        assert asked.stdout.strip() in {"yes", "no"}, asked.stderr
        return asked.stdout.strip() == "yes"

    assert may(named, "get", cluster.namespace)
    assert not may(named, "list", cluster.namespace)
    for where in ("kube-system", "default", named.namespace, elsewhere):
        assert not may(named, "get", where), where
    for where in (cluster.namespace, "kube-system", unnamed.namespace):
        assert not may(unnamed, "get", where), where
    # what watching needs is still granted in every namespace
    for resource in ("pods", "loraadapters.inference.llmkube.dev"):
        watch = testbed.kubectl("auth", "can-i", "watch", resource, "-A", f"--as={unnamed.user}")
        assert watch.stdout.strip() == "yes", (resource, watch.stderr)


def test_a_key_the_loop_may_not_read_says_what_to_set(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory, tmp_path: Path
) -> None:
    """A keyed CR in a namespace the loop's ``secret_namespaces`` leaves out: the CR's status
    says to name that namespace there; applying the manifests rendered with it named, the loop
    loads the adapter (its retries read the key)."""
    identity = make_identity(testbed, tmp_path, name="resync-unkeyed", lease="resync-unkeyed")
    key = f"sk-{secrets.token_hex(16)}"
    handle = cluster.deploy(replicas=1, emulator_args=("--api-key", key))
    cluster.kubectl("create", "secret", "generic", "sglang-key", f"--from-literal=api-key={key}")
    path = cluster.tb.make_adapter("sql-keyed")
    cluster.apply_cr(
        "sql-keyed", path, annotations={ANNOTATION_API_KEY_SECRET: "sglang-key/api-key"}
    )
    loop = loops(cluster.namespace, identity=identity)  # the cluster-wide account

    def loaded() -> dict[str, object]:
        return dict(cluster.conditions("sql-keyed").get("Loaded", {}))

    wait_until(lambda: loaded().get("reason") == SECRET_REASON, 20)
    message = str(loaded()["message"])
    assert f"Secret {cluster.namespace}/sglang-key" in message and "403" in message, message
    advice = f"add '{cluster.namespace}' to secret_namespaces of resync_manifests"
    assert advice in message and key not in message
    logged = [e.get("first_failure") or "" for e in loop.events("pod_synced")]
    assert any(advice in line for line in logged), logged  # within the log line's 300 chars
    assert list(handle.served(api_key=key).values()) == [{}]  # nothing loaded without the key

    name_secret_namespaces(testbed, identity, [cluster.namespace], tmp_path / "named.yaml")
    wait_until(lambda: loaded().get("status") == "True", 30)
    assert list(handle.served(api_key=key).values()) == [{"sql-keyed": path}]
    assert not loop.events("watch_broken")


def _token(testbed: Testbed, identity: Identity) -> str:
    done = testbed.kubectl("create", "token", identity.service_account, "-n", identity.namespace)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
