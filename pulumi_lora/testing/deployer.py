"""A deployer identity bound to exactly what ``pulumi-lora rbac`` prints, applied with kubectl.

Tests of least privilege run the provider as this identity: a ServiceAccount of its own namespace
whose token goes into a kubeconfig, so whatever the Role lacks is refused by the apiserver. The
manifests are the command's (``_kube._rbac.provider_rbac``, dumped as it dumps them; that the
command prints the same is tests/unit/test_provider_rbac.py's).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pulumi_lora._kube._rbac import parse_subject, provider_rbac
from pulumi_lora._models import Transport
from pulumi_lora.testing.testbed import Testbed


def bound_identity(
    testbed: Testbed,
    namespace: str,
    directory: Path,
    transport: Transport = Transport.DIRECT,
    *,
    staging: bool = False,
    loop_namespace: str | None = None,
) -> Path:
    """A ServiceAccount of its own namespace, bound in ``namespace`` to the Role
    ``pulumi-lora rbac -n NAMESPACE --transport T [--staging] [--loop-namespace NS]`` prints;
    returns a kubeconfig with its token, written in ``directory``."""
    home = testbed.create_namespace("deployer")
    made = testbed.kubectl("create", "serviceaccount", "deployer", "-n", home)
    assert made.returncode == 0, made.stderr
    rendered = provider_rbac(
        transport,
        [namespace],
        staging=staging,
        subject=parse_subject(f"serviceaccount:{home}/deployer"),
        loop_namespace=loop_namespace,
    )
    manifests = directory / "rbac.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered, sort_keys=False), encoding="utf-8")
    applied = testbed.kubectl("apply", "-f", str(manifests))
    assert applied.returncode == 0, applied.stderr
    token = testbed.kubectl("create", "token", "deployer", "-n", home, "--duration", "1h")
    assert token.returncode == 0, token.stderr
    return testbed.write_kubeconfig(
        directory / "deployer.kubeconfig",
        token=token.stdout.strip(),
        user=f"system:serviceaccount:{home}:deployer",
    )
