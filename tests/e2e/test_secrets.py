"""Credentials never leak: not into the state, the engine's logs, the CR, the Events, or errors.

The credentials: the bearer token of the kubeconfig the provider uses (a ServiceAccount's, bound
to cluster-admin, so it is unique to this test; the testbed's admin token is checked too) and
the SGLang API key from secret stack config (``pulumi-lora:sglangApiKey``; the key from a
Secret reference is covered in ``test_stack.py``). The kubeconfig is given both ways a user can:
as a path, and as its content in secret stack config ``pulumi-lora:kubeconfig``.
"""

from __future__ import annotations

import json
import secrets
import traceback
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube.resources.core_v1 import Event
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._args import AdapterArgs
from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig, create
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed


def service_account_kubeconfig(testbed: Testbed, namespace: str) -> tuple[str, str]:
    """A cluster-admin ServiceAccount's token, and a kubeconfig (YAML text) that uses it."""
    for command in (
        ("create", "serviceaccount", "deployer", "-n", namespace),
        (
            "create",
            "clusterrolebinding",
            f"{namespace}-deployer",
            "--clusterrole=cluster-admin",
            f"--serviceaccount={namespace}:deployer",
        ),
    ):
        done = testbed.kubectl(*command)
        assert done.returncode == 0, done.stderr
    issued = testbed.kubectl("create", "token", "deployer", "-n", namespace, "--duration", "1h")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    user = f"system:serviceaccount:{namespace}:deployer"
    return token, yaml.safe_dump(testbed.kubeconfig_dict(token, user))


def served_with(handle: InferenceServiceHandle, key: str) -> list[dict[str, str]]:
    """Every Ready pod's adapters (name → path), read from a keyed server's own /v1/models."""
    found = []
    for pod in handle.ready_pods():
        answer = httpx2.get(f"{pod.url}/v1/models", headers={"Authorization": f"Bearer {key}"})
        answer.raise_for_status()
        found.append({m["id"]: m["root"] for m in answer.json()["data"] if m.get("parent")})
    return found


#: The marker of a Pulumi secret value in a state (``{SECRET_SIG: SECRET_VALUE, ...}``).
SECRET_SIG, SECRET_VALUE = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"


def outside_secrets(value: Any) -> Any:
    """``value`` with every Pulumi secret value replaced by a placeholder.

    The engine records every stack config value as the inputs of the default provider of the
    dynamic resources, the secret ones as secrets: encrypted in the stored state, decrypted only
    by ``export_stack`` (``--show-secrets``). Everything else must be free of credentials.
    """
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return "[secret]"
        return {k: outside_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [outside_secrets(v) for v in value]
    return value


def leaks(text: str, credentials: dict[str, str]) -> list[str]:
    """The credentials (by name) found in ``text``, whole or by their first 12 characters."""
    return [name for name, value in credentials.items() if value[:12] in text]


@pytest.mark.parametrize("given_as", ["path", "content"])
def test_no_credential_reaches_state_logs_cr_events_or_errors(
    testbed: Testbed, namespace: str, tmp_path: Path, given_as: str
) -> None:
    key = "sk-secret-" + secrets.token_hex(12)
    handle = testbed.deploy_inference_service(
        namespace, "keyed", replicas=2, emulator_args=("--api-key", key)
    )
    other = testbed.deploy_inference_service(
        namespace, "otherkey", replicas=1, emulator_args=("--api-key", "sk-other-" + "9" * 20)
    )
    handle.wait_ready(timeout=30)
    other.wait_ready(timeout=30)
    token, kubeconfig = service_account_kubeconfig(testbed, namespace)
    credentials = {"token": token, "admin token": testbed.admin_token, "api key": key}

    # The engine writes its verbose logs (glog files) under TMPDIR: keep them with this test.
    logs = tmp_path / "engine-logs"
    logs.mkdir()
    engine = LocalEngine(tmp_path / "engine", extra_env={"TMPDIR": str(logs)})
    path = testbed.make_adapter("secret-safe")
    declared: dict[str, dict[str, Any]] = {
        "safe": {
            "adapter_name": "safe",
            "path": path,
            "inference_service": "keyed",
            "namespace": namespace,
        }
    }

    def program() -> None:
        for name, args in declared.items():
            LoRAAdapter(name, LoRAAdapterArgs(**args))  # type: ignore[typeddict-item]

    stack = engine.inline_stack("lora-secrets", f"secrets-{given_as}", program)
    if given_as == "path":
        file = tmp_path / "deployer.kubeconfig"
        file.write_text(kubeconfig, encoding="utf-8")
        stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(file)))
    else:
        stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(kubeconfig, secret=True))
    stack.set_config("pulumi-lora:sglangApiKey", auto.ConfigValue(key, secret=True))

    output: list[str] = []
    verbose = {
        "on_output": output.append,
        "on_error": output.append,
        "log_verbosity": 9,
        "log_flow": True,
        "debug": True,
    }
    up = stack.up(**verbose)  # type: ignore[arg-type]
    assert up.summary.result == "succeeded"
    assert all(adapters.get("safe") == path for adapters in served_with(handle, key))

    # Two failing operations: a missing InferenceService, and a server with another key (401).
    failures: list[str] = []
    for target, said in (("missing", "InferenceService"), ("otherkey", "Unauthorized")):
        declared["broken"] = {
            **declared["safe"],
            "adapter_name": "broken",
            "inference_service": target,
        }
        with pytest.raises(auto.errors.CommandError) as caught:
            stack.up(**verbose)  # type: ignore[arg-type]
        failures.append(str(caught.value))
        assert said in failures[-1]
    del declared["broken"]

    exported = stack.export_stack().deployment  # the Automation API decrypts secrets here
    stored = "".join(
        p.read_text() for p in (tmp_path / "engine" / "backend").rglob("*.json") if p.is_file()
    )
    cr = json.dumps(get_adapter(testbed.client(), namespace, "safe"))
    events = json.dumps(
        [event.to_dict() for event in testbed.client().list(Event, namespace=namespace)]
    )
    stack.destroy(**verbose)  # type: ignore[arg-type]
    engine_logs = "".join(p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file())

    assert "AdapterLoaded" in events and "safe" in cr  # the places looked at are the real ones
    assert len(engine_logs) > 100_000  # verbose logs were written (and are read here)
    assert "".join(output)
    assert '"ciphertext"' in stored  # the secret stack config, encrypted by the engine
    state = json.dumps(outside_secrets(exported))
    assert "pulumi-lora:kubeconfig" in state and "safe" in state
    for where, text in {
        "state file (as stored)": stored,
        "state, outside the engine's secret values": state,
        "CR": cr,
        "Events": events,
        "engine output": "".join(output),
        "engine log files": engine_logs,
        "missing-target error": failures[0],
        "401 error": failures[1],
    }.items():
        assert not leaks(text, credentials), f"{leaks(text, credentials)} found in the {where}"
    if given_as == "content":
        assert "apiVersion" not in state  # the kubeconfig's content is not in the state either


def test_a_malformed_kubeconfig_content_is_not_quoted_in_the_error(
    testbed: Testbed, namespace: str
) -> None:
    """A YAML error's snippet would quote the line it stopped at, here the token's line."""
    token = "tok-" + secrets.token_hex(16)
    broken = (
        "apiVersion: v1\nkind: Config\nusers:\n"
        f'- name: admin\n  user: {{token: "{token}, other: x}}\n'
        "contexts: []\n"
    )
    args = AdapterArgs.parse(
        {
            "adapter_name": "x",
            "path": "/adapters/x",
            "inference_service": "llama",
            "namespace": namespace,
        }
    )
    with pytest.raises(ClusterError) as caught:
        create(args, ProviderConfig(kube=KubeSource(broken)))
    # What the dynamic provider host sends to the engine: the whole formatted chain.
    reported = "".join(traceback.format_exception(caught.value))
    assert "cannot load cluster credentials from the given kubeconfig" in reported
    assert "ScannerError: found unexpected end of stream at line 7" in reported  # still useful
    assert token[:8] not in reported, reported
