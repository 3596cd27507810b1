"""Staged adapters on the testbed (issue 40): the provider stages a declared source onto the
claim the InferenceService mounts, through a real Job (kube-controller-manager's Job controller,
the project's image under podman and runc), then loads the staged directory on every pod.

The source is a played Hugging Face Hub on this machine's loopback, reached from the Job's pod
as a cluster reaches a Service (``Testbed.expose_to_pods``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi.dynamic import CreateResult

from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

from .conftest import adapter_props, provider_for, served

COMMIT = "1" * 40


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    """A PEFT adapter for the emulated model: its files' bytes."""
    write_adapter(tmp_path / "sql-lora", seed="sql")
    return {p.name: p.read_bytes() for p in (tmp_path / "sql-lora").iterdir()}


@pytest.fixture
def hub(testbed: Testbed, files: dict[str, bytes]) -> Iterator[PlayedHub]:
    """A played Hub holding ``acme/sql-lora`` at :data:`COMMIT`, reachable from pods."""
    with PlayedHub() as played:
        lfs = frozenset({"adapter_model.safetensors"})
        played.publish("acme/sql-lora", files, lfs=lfs, commit=COMMIT)
        testbed.expose_to_pods(played.port)
        yield played


@pytest.fixture
def claimed(testbed: Testbed, namespace: str) -> InferenceServiceHandle:
    """``llama``: two Ready pods mounting the claim ``adapters`` read-only at ``/adapters``."""
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=60)
    return handle


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
    jobs = testbed.kubectl("get", "jobs", "-n", namespace, "-o", "name")
    assert jobs.returncode == 0 and jobs.stdout.strip() == ""  # each Job deleted once read


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
    listed = testbed.kubectl("get", "jobs,loraadapters", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == ""
