"""Deletes that need kube-controller-manager's garbage collector finish on the testbed.

pulumi-kubernetes deletes in the foreground by default; without the collector's finalizer
handling, ``pulumi destroy`` of anything would wait forever.
"""

from __future__ import annotations

import json

from pulumi_lora.testing.testbed import Testbed


def test_foreground_and_orphan_deletes_finish(testbed: Testbed) -> None:
    ns = testbed.create_namespace("collector")
    assert testbed.kubectl("create", "configmap", "plain", "-n", ns).returncode == 0
    done = testbed.kubectl(
        "delete", "configmap", "plain", "-n", ns, "--cascade=foreground", "--timeout=30s"
    )
    assert done.returncode == 0, done.stderr

    handle = testbed.deploy_inference_service(ns, "llama", replicas=2)
    handle.wait_ready(30)
    done = testbed.kubectl(
        "delete", "inferenceservice", "llama", "-n", ns, "--cascade=foreground", "--timeout=60s"
    )
    assert done.returncode == 0, done.stderr
    left = testbed.kubectl("get", "deployments,replicasets,pods", "-n", ns, "-o", "json")
    assert json.loads(left.stdout)["items"] == []  # the dependents went first

    assert testbed.kubectl("create", "serviceaccount", "kept", "-n", ns).returncode == 0
    done = testbed.kubectl(
        "delete", "serviceaccount", "kept", "-n", ns, "--cascade=orphan", "--timeout=30s"
    )
    assert done.returncode == 0, done.stderr
