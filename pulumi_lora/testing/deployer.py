"""A deployer identity bound to exactly what ``pulumi-lora rbac`` prints, as the README applies it.

Tests of least privilege run the provider as this identity: a ServiceAccount of its own namespace
whose token goes into a kubeconfig, so whatever the printed Role lacks is refused by the apiserver.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from pulumi_lora._cli import cli
from pulumi_lora.testing.testbed import Testbed


def bound_identity(testbed: Testbed, namespace: str, directory: Path, *flags: str) -> Path:
    """A ServiceAccount of its own namespace, bound in ``namespace`` to the Role
    ``pulumi-lora rbac -n NAMESPACE FLAGS...`` prints (applied with kubectl); returns a kubeconfig
    with its token, written in ``directory``."""
    home = testbed.create_namespace("deployer")
    made = testbed.kubectl("create", "serviceaccount", "deployer", "-n", home)
    assert made.returncode == 0, made.stderr
    rendered = CliRunner().invoke(
        cli, ["rbac", "-n", namespace, "--subject", f"serviceaccount:{home}/deployer", *flags]
    )
    assert rendered.exit_code == 0, rendered.output
    manifests = directory / "rbac.yaml"
    manifests.write_text(rendered.output, encoding="utf-8")
    applied = testbed.kubectl("apply", "-f", str(manifests))
    assert applied.returncode == 0, applied.stderr
    token = testbed.kubectl("create", "token", "deployer", "-n", home, "--duration", "1h")
    assert token.returncode == 0, token.stderr
    return testbed.write_kubeconfig(
        directory / "deployer.kubeconfig",
        token=token.stdout.strip(),
        user=f"system:serviceaccount:{home}:deployer",
    )
