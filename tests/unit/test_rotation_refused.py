"""A rolling swap refused by RBAC says what grants it (issue 54): a deployer role made before
the gate, or without ``--readiness-gate``, meets 403 on its first gate write; the loop's role,
rendered without the gate, on its first slice listing."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
import yaml
from click.testing import CliRunner
from lightkube import ApiError

from pulumi_lora._commands._main import cli
from pulumi_lora._errors import ClusterError, Forbidden
from pulumi_lora._kube._rotation import LOOP_GRANT, list_endpoint_slices, patch_pod_status


class Refusing:
    """A client the apiserver answers ``code`` for every call, as lightkube raises it."""

    def __init__(self, code: int) -> None:
        self.code = code

    def _refuse(self, *_: Any, **__: Any) -> None:
        reason = {403: "Forbidden", 500: "InternalError"}[self.code]
        status = {"kind": "Status", "code": self.code, "reason": reason, "message": "no"}
        raise ApiError(response=httpx2.Response(self.code, json=status))

    patch = list = _refuse


HINT = (
    "a rolling swap on gated pods needs patch on pods/status and list on endpointslices in "
    "models: `pulumi-lora rbac --readiness-gate -n models` prints the Role that grants them"
)


def test_a_refused_gate_write_or_slice_listing_names_the_grant() -> None:
    with pytest.raises(Forbidden) as refused:
        patch_pod_status(Refusing(403), "models", "llama-0", {})  # type: ignore[arg-type]
    assert str(refused.value) == (
        "writing the readiness gate of pod models/llama-0 failed: HTTP 403 Forbidden: no; " + HINT
    )
    with pytest.raises(Forbidden) as refused:
        list_endpoint_slices(Refusing(403), "models", "llama")  # type: ignore[arg-type]
    assert str(refused.value).endswith("; " + HINT)


def test_the_loop_is_told_its_own_grant_not_the_deployers() -> None:
    with pytest.raises(Forbidden) as refused:
        list_endpoint_slices(Refusing(403), "models", "llama", grant=LOOP_GRANT)  # type: ignore[arg-type]
    assert str(refused.value).endswith(
        "; the re-sync loop needs patch on pods/status and list on endpointslices in models "
        "for the readiness gate: render its manifests with readiness_gate=True"
    )
    assert "pulumi-lora rbac" not in str(refused.value)


def test_other_failures_keep_their_words() -> None:
    with pytest.raises(ClusterError) as failed:
        patch_pod_status(Refusing(500), "models", "llama-0", {})  # type: ignore[arg-type]
    assert not isinstance(failed.value, Forbidden)
    assert "pulumi-lora rbac" not in str(failed.value)


def test_the_command_the_hint_names_grants_both() -> None:
    done = CliRunner().invoke(cli, ["rbac", "--readiness-gate", "-n", "models"])
    assert done.exit_code == 0, done.output
    rules = [
        (rule["resources"], rule["verbs"])
        for doc in yaml.safe_load_all(done.output)
        if doc and doc["kind"] == "Role" and doc["metadata"]["namespace"] == "models"
        for rule in doc["rules"]
    ]
    assert (["pods/status"], ["patch"]) in rules
    assert any("endpointslices" in r and "list" in v for r, v in rules)
