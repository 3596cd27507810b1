"""`provider/` from another language: `examples/yaml` through the plugin, on the testbed.

The YAML program names the plugin folder in ``packages:``; the engine runs the folder's
executable ``pulumi-resource-pulumi-lora``, which serves ``LoRAAdapter`` as one custom resource
through the Python SDK's provider server. Its Python is ``PULUMI_PYTHON_CMD``: the fresh
project's venv, where ``pulumi_lora`` is installed as a user installs it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx2

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.s3 import MotoServer, MotoUnavailableError
from pulumi_lora.testing.testbed import Testbed

from .conftest import (
    ROOT,
    UserVenv,
    assert_clean_refresh,
    assert_nothing_left,
    example_beside_provider,
    lora_resources,
    ready_service,
    require_program,
    served,
    stack_on_testbed,
)

PROVIDER = ROOT / "provider"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""The key that marks a secret value in ``pulumi stack export``."""


def test_the_plugin_serves_the_committed_schema(
    consumer_engine: LocalEngine, tmp_path: Path
) -> None:
    require_program("pulumi-language-yaml")
    runner = consumer_engine.project(tmp_path)
    entry = PROVIDER / "pulumi-resource-pulumi-lora"  # the folder needs a PulumiPlugin.yaml
    schema = json.loads(runner.pulumi("package", "get-schema", str(entry)).stdout)
    committed = json.loads((PROVIDER / "schema.json").read_text())
    assert schema["resources"] == committed["resources"]
    assert schema["types"] == committed["types"]
    assert schema["name"] == "pulumi-lora"


def test_yaml_example_up_drift_heal_destroy(
    consumer_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    require_program("pulumi-language-yaml")
    path = "/adapters/sql-lora"
    handle = ready_service(testbed, namespace)
    folder = example_beside_provider("yaml", tmp_path, "Pulumi.*.yaml")  # as shipped
    runner = consumer_engine.project(folder)
    stack_on_testbed(runner, testbed, namespace)
    key = "sk-lora-0123456789"  # the pods take no key: it is only carried, and must stay secret
    runner.pulumi("config", "set", "--secret", "pulumi-lora:sglangApiKey", key)

    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        exported = runner.pulumi("stack", "export").stdout
        assert key not in exported  # encrypted as the default provider's input, nowhere else
        (provider,) = [
            r
            for r in json.loads(exported)["deployment"]["resources"]
            if r["type"] == "pulumi:providers:pulumi-lora"
        ]
        assert set(provider["inputs"]["sglangApiKey"]) == {SECRET_SIG, "ciphertext"}
        outputs = runner.outputs()
        assert outputs["loaded"] is True
        # one custom resource per adapter, its ID the CR's: no component, no dynamic child
        assert lora_resources(runner) == [
            ("pulumi-lora:index:LoRAAdapter", True, f"{namespace}/sql-lora")
        ]
        # a pod serving the resource's own path carries no ``path`` of its own
        by_pod = {p["pod"]: p.get("path", "declared") for p in outputs["pods"] if p["loaded"]}
        assert by_pod == {pod.name: "declared" for pod in handle.ready_pods()}
        assert all(a == {"sql-lora": path} for a in served(handle).values())
        assert_clean_refresh(runner)

        first = handle.ready_pods()[0]
        httpx2.post(f"{first.url}/unload_lora_adapter", json={"lora_name": "sql-lora"}, timeout=10)
        drift = runner.pulumi("preview", "--refresh", "--expect-no-changes", check=False)
        assert drift.returncode != 0, drift.stdout
        said = f"drift: LoRAAdapter {namespace}/sql-lora: pod {first.name}: sql-lora not loaded"
        assert said in drift.stdout, drift.stdout

        runner.pulumi("up", "--yes", "--skip-preview")
        assert all(a == {"sql-lora": path} for a in served(handle).values())
        assert_clean_refresh(runner)
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])


def test_the_staged_yaml_example_stages_loads_refreshes_clean_and_destroys(
    consumer_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """examples/staged as shipped, its sources pointed at a played Hub and at moto's S3 on this
    machine (the S3 keys in the Secret it names): both staged onto the claim and loaded on
    every pod from their output paths, no credential in ``stack export --show-secrets``, a
    clean refresh, and a destroy that leaves no CR, no Job and no directory (issue 40)."""
    require_program("pulumi-language-yaml")
    import boto3  # noqa: PLC0415 - the staging extra, installed with the test extra

    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=60)
    write_adapter(tmp_path / "weights", seed="staged-yaml")
    files = {p.name: p.read_bytes() for p in (tmp_path / "weights").iterdir()}
    commit = "4" * 40
    try:
        moto = MotoServer().start()
    except MotoUnavailableError as exc:
        missing_real_part(str(exc))
    try:
        with PlayedHub() as hub:
            lfs = frozenset({"adapter_model.safetensors"})
            hub.publish("acme/sql-lora", files, lfs=lfs, commit=commit)
            s3 = boto3.client(
                "s3",
                endpoint_url=moto.endpoint,
                aws_access_key_id=moto.env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=moto.env["AWS_SECRET_ACCESS_KEY"],
                region_name=moto.env["AWS_REGION"],
            )
            s3.create_bucket(Bucket="adapters")
            for name, data in files.items():
                s3.put_object(Bucket="adapters", Key=f"chat-lora/{name}", Body=data)
            for port in (hub.port, moto.port):
                testbed.expose_to_pods(port)
            keys = [f"--from-literal={k}={v}" for k, v in moto.env.items() if k != "AWS_REGION"]
            made = testbed.kubectl("create", "secret", "generic", "s3-keys", "-n", namespace, *keys)
            assert made.returncode == 0, made.stderr
            folder = example_beside_provider("staged", tmp_path, "Pulumi.*.yaml")
            runner = consumer_engine.project(folder)
            stack_on_testbed(runner, testbed, namespace)
            runner.pulumi("config", "set", "source", f"hf://acme/sql-lora@{commit}")
            runner.pulumi("config", "set", "sourceEndpoint", hub.endpoint)
            runner.pulumi("config", "set", "bucketEndpoint", moto.endpoint)
            for name, data in files.items():
                sha = hashlib.sha256(data).hexdigest()
                runner.pulumi("config", "set", "--path", f'bucketDigests["{name}"]', sha)
            try:
                runner.pulumi("up", "--yes", "--skip-preview")
                outputs = runner.outputs()
                assert outputs["path"] == f"/adapters/{outputs['contentKey']}" and outputs["loaded"]
                assert outputs["chatLoaded"] and outputs["chatPath"] != outputs["path"]
                want = {"sql-lora": outputs["path"], "chat-lora": outputs["chatPath"]}
                assert all(a == want for a in served(handle).values())
                exported = runner.pulumi("stack", "export", "--show-secrets").stdout
                assert all(v not in exported for k, v in moto.env.items() if k != "AWS_REGION")
                assert_clean_refresh(runner)
            finally:
                runner.pulumi("destroy", "--yes", "--skip-preview")
    finally:
        moto.stop()
    assert_nothing_left(testbed, [handle])
    # By default a destroy releases the staged directories (each key's in-use mark refreshed);
    # a later command on the claim removes them once unused for the grace period (600 s).
    root = testbed.claim_directory(namespace, "adapters")
    staged = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    assert staged == sorted(Path(v).name for v in (outputs["path"], outputs["chatPath"]))
    assert all((root / f".{key}.used").is_file() for key in staged)
    assert testbed.jobs_left(namespace) == []  # the stager went with the command


def test_an_explicit_provider_with_the_stacks_kubeconfig(
    user_venv: UserVenv, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """``pulumi:providers:pulumi-lora`` with ``kubeconfig`` (the content, from secret config as
    a cluster's output would be) and ``provider:`` on the adapter, as every Pulumi provider
    has (issue 41): no stack config ``pulumi-lora:kubeconfig`` and a ``KUBECONFIG`` naming no
    file, so the adapter reaches its cluster only through that provider; the content is secret
    in the provider's state; refresh is clean; destroy leaves nothing."""
    require_program("pulumi-language-yaml")
    handle = ready_service(testbed, namespace)
    content = testbed.kubeconfig_path.read_text()
    folder = tmp_path / "explicit"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text(
        f"""name: lora-explicit-provider
runtime: yaml
packages:
  pulumi-lora: {PROVIDER}
config:
  kubeconfig:
    type: string
    secret: true
resources:
  cluster:
    type: pulumi:providers:pulumi-lora
    properties:
      kubeconfig: ${{kubeconfig}}
  sql:
    type: pulumi-lora:index:LoRAAdapter
    properties:
      adapterName: sql-lora
      path: /adapters/sql-lora
      inferenceService: llama
      namespace: {namespace}
    options:
      provider: ${{cluster}}
outputs:
  loaded: ${{sql.loaded}}
""",
        encoding="utf-8",
    )
    engine = LocalEngine(
        tmp_path / "engine",
        extra_env={
            "PULUMI_PYTHON_CMD": str(user_venv.path / "bin" / "python"),
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            "KUBECONFIG": str(tmp_path / "none"),
        },
    )
    runner = engine.project(folder)
    runner.pulumi("stack", "init", "dev")
    runner.pulumi("config", "set", "--secret", "kubeconfig", content)
    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        assert runner.outputs()["loaded"] is True
        assert all(a == {"sql-lora": "/adapters/sql-lora"} for a in served(handle).values())
        exported = runner.pulumi("stack", "export").stdout
        token = content.split("token:")[1].split()[0]
        assert token not in exported
        (provider,) = [
            r
            for r in json.loads(exported)["deployment"]["resources"]
            if r["type"] == "pulumi:providers:pulumi-lora"
        ]
        assert set(provider["inputs"]["kubeconfig"]) == {SECRET_SIG, "ciphertext"}
        assert_clean_refresh(runner)
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])
