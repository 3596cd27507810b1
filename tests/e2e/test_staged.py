"""Staged adapters on the testbed (issue 40): the provider stages a declared source onto the
claim the InferenceService mounts, through its stager (a real Job: kube-controller-manager's Job
and TTL controllers, the project's image under podman and runc, reached through the apiserver's
pod proxy), then loads the staged directory on every pod.

The source is a played Hugging Face Hub on this machine's loopback, reached from the Job's pod
as a cluster reaches a Service (``Testbed.expose_to_pods``). Tests that call the provider in
this process end its "command" with ``STAGERS.close()``, as the process's exit does; through the
engine, the stager ends by itself once the provider process is gone."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi import automation as auto
from pulumi.dynamic import CreateResult

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._lifecycle._stage import VERIFIED
from pulumi_lora._lifecycle._stager import STAGERS
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.s3 import MotoServer, MotoUnavailableError
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

from .conftest import adapter_props, drift_report, provider_for, served

COMMIT = "1" * 40
NEXT = "2" * 40
TOKEN = "hf_staged_e2e_token_0123456789"


@pytest.fixture(autouse=True)
def one_command(namespace: str) -> Iterator[None]:
    """Each test is one command of this process: its stagers end with it (as at exit), before
    its namespace goes."""
    yield
    STAGERS.close()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    """A PEFT adapter for the emulated model: its files' bytes."""
    write_adapter(tmp_path / "sql-lora", seed="sql")
    return {p.name: p.read_bytes() for p in (tmp_path / "sql-lora").iterdir()}


@pytest.fixture
def hub(testbed: Testbed, files: dict[str, bytes]) -> Iterator[PlayedHub]:
    """A played Hub holding ``acme/sql-lora`` at :data:`COMMIT`, reachable from pods."""
    with PlayedHub(tokens=frozenset({TOKEN})) as played:
        lfs = frozenset({"adapter_model.safetensors"})
        played.publish("acme/sql-lora", files, lfs=lfs, commit=COMMIT)
        played.publish("acme/private-lora", files, lfs=lfs, commit=COMMIT, private=True)
        testbed.expose_to_pods(played.port)
        yield played


@dataclasses.dataclass(frozen=True)
class S3Adapter:
    """``s3://adapters/sql-lora/`` on a moto server reachable from pods, its keys in the Secret
    ``s3-keys`` of the test's namespace."""

    server: MotoServer
    digests: dict[str, str]

    def inputs(self, namespace: str) -> dict[str, Any]:
        return {
            "source": "s3://adapters/sql-lora/",
            "digests": self.digests,
            "source_endpoint": self.server.endpoint,
            "source_secret_name": "s3-keys",
            "inference_service": "llama",
            "namespace": namespace,
        }


@pytest.fixture
def s3(testbed: Testbed, namespace: str, files: dict[str, bytes]) -> Iterator[S3Adapter]:
    import boto3  # noqa: PLC0415 - the staging extra, installed with the test extra

    try:
        server = MotoServer().start()
    except MotoUnavailableError as exc:
        missing_real_part(str(exc))
    try:
        client = boto3.client("s3", endpoint_url=server.endpoint, **_keys(server.env))
        client.create_bucket(Bucket="adapters")
        for name, data in files.items():
            client.put_object(Bucket="adapters", Key=f"sql-lora/{name}", Body=data)
        testbed.expose_to_pods(server.port)
        literals = [f"--from-literal={k}={v}" for k, v in server.env.items() if k != "AWS_REGION"]
        made = testbed.kubectl("create", "secret", "generic", "s3-keys", "-n", namespace, *literals)
        assert made.returncode == 0, made.stderr
        digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        yield S3Adapter(server, digests)
    finally:
        server.stop()


@pytest.fixture
def claimed(testbed: Testbed, namespace: str) -> InferenceServiceHandle:
    """``llama``: two Ready pods mounting the claim ``adapters`` read-only at ``/adapters``."""
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=60)
    return handle


def left_in(testbed: Testbed, namespace: str, kinds: str) -> str:
    """The objects of ``kinds`` (kubectl's comma list) left in ``namespace``, by name."""
    listed = testbed.kubectl("get", kinds, "-n", namespace, "-o", "name")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.strip()


def stager_jobs(testbed: Testbed, namespace: str) -> list[str]:
    """This namespace's stager Jobs, by name."""
    return [
        name
        for name in left_in(testbed, namespace, "jobs").split()
        if name.startswith("job.batch/pulumi-lora-stager-")
    ]


def visible(root: Path) -> list[str]:
    """The staged directories on a claim (not their keys' in-use marks)."""
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def staged_props(namespace: str, hub: PlayedHub, **extra: Any) -> dict[str, Any]:
    props = adapter_props(namespace, "", **extra)
    del props["path"]
    return {
        **props,
        "source": f"hf://acme/sql-lora@{COMMIT}",
        "source_endpoint": hub.endpoint,
        **extra,
    }


def test_a_source_is_staged_once_verified_and_loaded_on_every_pod(
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    files: dict[str, bytes],
    config: ProviderConfig,
) -> None:
    provider = provider_for(config)
    props = staged_props(namespace, hub)
    assert provider.check({}, props).failures == []
    made: CreateResult = provider.create(props)
    outs = made.outs or {}
    key = outs["content_key"]
    assert outs["path"] == f"/adapters/{key}"
    directory = testbed.claim_directory(namespace, "adapters") / key
    for name, data in files.items():
        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == (
            hashlib.sha256(data).hexdigest()
        )
    assert json.loads((directory / ".pulumi-lora-staged.json").read_text())["key"] == key
    assert all(pod == {"sql-lora": outs["path"]} for pod in served(claimed).values())
    fetched = [r for r in hub.requests if "/resolve/" in r.path or "/cdn/" in r.path]
    assert fetched  # fetched from the Hub, once: a second adapter of the same content is not
    second = provider.create(staged_props(namespace, hub, adapter_name="sql-lora-2"))
    assert (second.outs or {})["path"] == outs["path"]
    assert [r for r in hub.requests if "/cdn/" in r.path] == [
        r for r in fetched if "/cdn/" in r.path
    ]
    assert len(stager_jobs(testbed, namespace)) == 1  # one stager for both, while it runs
    STAGERS.close()
    assert left_in(testbed, namespace, "jobs") == ""


def test_a_wrong_digest_fails_naming_the_file_and_loads_nothing(
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    config: ProviderConfig,
) -> None:
    provider = provider_for(config)
    wrong = {"adapter_model.safetensors": "0" * 64}
    with pytest.raises(PulumiLoRAError) as failed:
        provider.create(staged_props(namespace, hub, digests=wrong))
    assert "adapter_model.safetensors" in str(failed.value)
    assert type(failed.value).__name__ == "DigestMismatch"
    assert all(pod == {} for pod in served(claimed).values())
    root = testbed.claim_directory(namespace, "adapters")
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []
    assert left_in(testbed, namespace, "loraadapters") == ""
    STAGERS.close()
    assert left_in(testbed, namespace, "jobs") == ""


def program_of(declared: dict[str, dict[str, Any]]) -> Callable[[], None]:
    def program() -> None:
        for name, args in declared.items():
            adapter = LoRAAdapter(name, LoRAAdapterArgs(**args))
            pulumi.export(f"{name}_path", adapter.path)
            pulumi.export(f"{name}_key", adapter.content_key)

    return program


def test_a_stack_stages_refreshes_clean_swaps_a_new_commit_and_destroys(
    engine: LocalEngine,
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    s3: S3Adapter,
    files: dict[str, bytes],
    config: ProviderConfig,
    tmp_path: Path,
) -> None:
    """The issue's path through Pulumi: three staged adapters (a Hub repository at a commit, a
    private one with its token in a Secret, an S3 prefix with its keys in a Secret; the provider
    reads neither), a clean refresh, no credential in the state (``stack export --show-secrets``),
    a replacement (a new ``adapter_name``) that reuses the staged directory (issue 53: its
    delete ran first and removed it), a wrong digest failing the up naming the file with
    nothing loaded, a new commit swapped on every pod and the old directory released (kept for
    the grace period), a destroy that leaves no CR and no Job and releases every directory, and
    a later command on the claim that removes them once the grace period passed."""
    made = testbed.kubectl(
        "create",
        "secret",
        "generic",
        "hub-token",
        "-n",
        namespace,
        f"--from-literal=HF_TOKEN={TOKEN}",
    )
    assert made.returncode == 0, made.stderr
    base = {"inference_service": "llama", "namespace": namespace, "source_endpoint": hub.endpoint}
    declared: dict[str, dict[str, Any]] = {
        "sql": {**base, "adapter_name": "sql-lora", "source": f"hf://acme/sql-lora@{COMMIT}"},
        "private": {
            **base,
            "adapter_name": "private-lora",
            "source": f"hf://acme/private-lora@{COMMIT}",
            "source_secret_name": "hub-token",
        },
        "bucket": {"adapter_name": "bucket-lora", **s3.inputs(namespace)},
    }
    stack = engine.inline_stack("staged-e2e", "dev", program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    up = stack.up()
    sql_path = up.outputs["sql_path"].value
    assert sql_path == f"/adapters/{up.outputs['sql_key'].value}"
    private_path = up.outputs["private_path"].value
    assert private_path.startswith("/adapters/") and private_path != sql_path  # another source
    bucket_path = up.outputs["bucket_path"].value
    assert all(
        pod == {"sql-lora": sql_path, "private-lora": private_path, "bucket-lora": bucket_path}
        for pod in served(claimed).values()
    )
    assert drift_report(stack) is None
    state = json.dumps(stack.export_stack().deployment)  # --show-secrets
    assert TOKEN not in state and "hub-token" in state and "s3-keys" in state
    assert all(value not in state for value in s3.server.env.values() if value != "us-east-1")

    # A replacement (delete first, then create) finds the directory there: nothing fetched.
    def downloads() -> int:
        return len([r for r in hub.requests if "/resolve/" in r.path or "/cdn/" in r.path])

    before, printed = downloads(), []
    declared["sql"]["adapter_name"] = "sql-renamed"
    renamed = stack.up(on_output=printed.append)
    assert renamed.summary.resource_changes is not None
    assert renamed.summary.resource_changes.get("replace") == 1, renamed.summary.resource_changes
    assert renamed.outputs["sql_path"].value == sql_path
    assert downloads() == before  # the Hub saw no second download
    shown = "".join(printed)
    assert f"staging sql-renamed ({Path(sql_path).name})" in shown, shown
    assert ": already staged, " in shown and f"staged directory {sql_path} released" in shown
    assert all(pod.get("sql-renamed") == sql_path for pod in served(claimed).values())

    # A wrong digest fails the up naming the file; nothing of it is loaded anywhere.
    wrong = {"adapter_config.json": "0" * 64}
    declared["wrong"] = {
        **base,
        "adapter_name": "wrong-lora",
        "source": f"hf://acme/sql-lora@{COMMIT}",
        "digests": wrong,
    }
    with pytest.raises(auto.errors.CommandError) as failed:
        stack.up()
    assert "DigestMismatch" in str(failed.value) and "adapter_config.json" in str(failed.value)
    assert all("wrong-lora" not in pod for pod in served(claimed).values())
    del declared["wrong"]

    # A new commit: staged beside the old directory, then swapped on every pod.
    write_adapter(tmp_path / "next", seed="next")
    changed = {p.name: p.read_bytes() for p in (tmp_path / "next").iterdir()}
    hub.publish("acme/sql-lora", changed, lfs=frozenset({"adapter_model.safetensors"}), commit=NEXT)
    declared["sql"]["source"] = f"hf://acme/sql-lora@{NEXT}"
    swapped = stack.up()
    new_path = swapped.outputs["sql_path"].value
    assert new_path != sql_path
    assert swapped.summary.resource_changes == {"update": 1, "same": 3}
    assert all(pod["sql-renamed"] == new_path for pod in served(claimed).values())
    root = testbed.claim_directory(namespace, "adapters")
    staged = visible(root)
    kept = {Path(private_path).name, Path(new_path).name, Path(bucket_path).name}
    assert staged == sorted({*kept, Path(sql_path).name})  # the old one released, still there

    destroyed: list[str] = []
    stack.destroy(on_output=destroyed.append)
    assert testbed.jobs_left(namespace) == []  # the stager went with the command
    assert left_in(testbed, namespace, "loraadapters") == ""
    assert all(pod == {} for pod in served(claimed).values())
    # Released, not removed: each directory stays for the grace period (10 minutes), ...
    assert visible(root) == staged, "".join(destroyed)
    assert f"staged directory {new_path} released" in "".join(destroyed)

    # ... and a later command on the claim removes them once it passed (their marks aged).
    for mark in root.glob(".*.used"):
        ago = time.time() - 11 * 60
        os.utime(mark, (ago, ago))
    commit = hub.publish("acme/later-lora", files, lfs=frozenset({"adapter_model.safetensors"}))
    later = staged_props(namespace, hub, adapter_name="later-lora")
    later["source"] = f"hf://acme/later-lora@{commit}"
    provider = provider_for(config)
    made = provider.create(later)
    key = (made.outs or {})["content_key"]
    provider.delete(made.id, {**later, **(made.outs or {})})
    assert sorted(p.name for p in root.iterdir()) == [f".{key}.used", key]  # just released


def test_a_private_repository_without_its_secret_fails_saying_so(
    engine: LocalEngine,
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
) -> None:
    declared = {
        "private": {
            "adapter_name": "private-lora",
            "source": f"hf://acme/private-lora@{COMMIT}",
            "source_endpoint": hub.endpoint,
            "inference_service": "llama",
            "namespace": namespace,
        }
    }
    stack = engine.inline_stack("staged-e2e", "private", program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    with pytest.raises(auto.errors.CommandError) as failed:
        stack.up()
    text = str(failed.value)
    assert "SourceUnauthorized" in text or "401" in text, text
    assert "source_secret_name" in text or "HF_TOKEN" in text, text
    assert all(pod == {} for pod in served(claimed).values())
    assert testbed.jobs_left(namespace) == []
    assert left_in(testbed, namespace, "loraadapters") == ""


def test_an_s3_source_with_its_keys_in_a_secret_is_staged_and_loaded(
    namespace: str,
    claimed: InferenceServiceHandle,
    s3: S3Adapter,
    config: ProviderConfig,
) -> None:
    """From a real S3-compatible server (moto) on loopback: the keys only in a Secret the Job
    reads, the digests pinning every object; nothing of the keys in the outputs."""
    props = {"adapter_name": "sql-lora", **s3.inputs(namespace)}
    provider = provider_for(config)
    assert provider.check({}, props).failures == []
    outs = provider.create(props).outs or {}
    assert all(pod == {"sql-lora": outs["path"]} for pod in served(claimed).values())
    shown = json.dumps(outs)
    assert all(value not in shown for value in s3.server.env.values() if value != "us-east-1")


def _keys(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_REGION"],
    }


def test_a_changed_or_missing_staged_directory_is_drift_healed_by_the_next_up(
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    files: dict[str, bytes],
    config: ProviderConfig,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Refresh checks a staged directory in place (a Job that fetches nothing): a file changed
    on the claim, or the directory gone, is drift in words, and the next up stages it again."""
    provider = provider_for(config)
    props = staged_props(namespace, hub)
    made = provider.create(props)
    outs = {**props, **(made.outs or {})}
    directory = testbed.claim_directory(namespace, "adapters") / outs["content_key"]
    assert "content_key" in (provider.read(made.id, outs).outs or {})  # untouched: no drift

    weights = directory / "adapter_model.safetensors"
    weights.chmod(0o644)
    weights.write_bytes(b"tampered" + files["adapter_model.safetensors"][8:])
    time.sleep(VERIFIED.max_age)  # the first read's verdict is shared that long
    capfd.readouterr()
    read = provider.read(made.id, outs).outs or {}
    said = capfd.readouterr().err
    assert "content_key" not in read
    assert (
        f"drift: LoRAAdapter {namespace}/sql-lora: staged directory {outs['path']} changed" in said
    )
    assert "adapter_model.safetensors" in said
    assert provider.diff(made.id, {**props, **read}, props).changes
    healed = provider.update(made.id, {**props, **read}, props).outs or {}
    assert healed["content_key"] == outs["content_key"] and healed["path"] == outs["path"]
    assert weights.read_bytes() == files["adapter_model.safetensors"]

    shutil.rmtree(directory)
    time.sleep(VERIFIED.max_age)
    capfd.readouterr()
    gone = provider.read(made.id, {**props, **healed}).outs or {}
    assert "content_key" not in gone
    assert f"staged directory {outs['path']} missing" in capfd.readouterr().err


def test_a_staging_job_that_cannot_start_fails_at_once_and_leaves_nothing(
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    config: ProviderConfig,
) -> None:
    """An image the nodes cannot pull (``pulumi-lora:image`` wrong): the up fails with the
    kubelet's reason within seconds, not at the Job's deadline; no CR, no Job, nothing loaded."""
    provider = provider_for(dataclasses.replace(config, image="localhost/pulumi-lora:no-such"))
    started = time.monotonic()
    with pytest.raises(PulumiLoRAError) as failed:
        provider.create(staged_props(namespace, hub))
    assert time.monotonic() - started < 60
    assert "cannot start: ErrImagePull" in str(failed.value)
    assert "pulumi-lora:image" in str(failed.value)
    assert all(pod == {} for pod in served(claimed).values())
    assert left_in(testbed, namespace, "jobs,loraadapters") == ""


def test_the_adapters_one_command_stages_share_one_stager(
    testbed: Testbed,
    namespace: str,
    claimed: InferenceServiceHandle,
    hub: PlayedHub,
    files: dict[str, bytes],
    config: ProviderConfig,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Three staged adapters created at once (as the engine's parallel creates) start one
    stager Job between them, not three; each is staged and loaded on every pod; once the
    process's command ends, no Job is left."""
    provider = provider_for(config)
    declared = {}
    for index in range(3):
        repo = f"acme/batch-{index}"
        hub.publish(repo, files, lfs=frozenset({"adapter_model.safetensors"}), commit=COMMIT)
        props = staged_props(namespace, hub, adapter_name=f"batch-{index}")
        declared[f"batch-{index}"] = {**props, "source": f"hf://{repo}@{COMMIT}"}
    for props in declared.values():
        assert provider.check({}, props).failures == []
    capfd.readouterr()
    with ThreadPoolExecutor(max_workers=3) as pool:  # the engine's parallel creates
        made = dict(zip(declared, pool.map(provider.create, declared.values()), strict=True))
    said = capfd.readouterr().err
    assert said.count(f"stager Job {namespace}/pulumi-lora-stager-") == 1, said
    assert said.count(": fetched, ") == 3, said
    paths = {name: (result.outs or {})["path"] for name, result in made.items()}
    assert len(set(paths.values())) == 3
    assert all(pod == paths for pod in served(claimed).values())
    assert len(stager_jobs(testbed, namespace)) == 1
    STAGERS.close()
    assert left_in(testbed, namespace, "jobs") == ""
