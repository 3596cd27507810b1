"""``pulumi-lora stage`` as the Job runs it: one JSON result line, the termination message, and
a failure's words and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pulumi_lora._cli import cli
from pulumi_lora._staging._cli import termination_message
from pulumi_lora.testing.hub import PlayedHub

from .conftest import TOKEN, Adapter


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["stage", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_stage_prints_the_result_and_writes_the_termination_log(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = hub.publish("acme/cli", adapter.files, lfs=frozenset({"adapter_model.safetensors"}))
    termination = tmp_path / "termination-log"
    termination.write_text("")
    digests = [f"--digest={name}={sha}" for name, sha in adapter.digests.items()]
    args = [
        f"--source=hf://acme/cli@{commit}",
        *digests,
        f"--root={tmp_path / 'adapters'}",
        "--max-lora-rank=64",
        "--lora-target-modules=q_proj k_proj v_proj o_proj",
        f"--termination-log={termination}",
    ]
    code, out, err = run(args, {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN})
    assert code == 0, err
    document = json.loads(out)
    assert out.count("\n") == 1 and json.loads(termination.read_text()) == document
    assert document["path"] == str(tmp_path / "adapters" / document["key"])
    assert document["fetched"] is True and document["rank"] == 16
    assert (
        document["files"]["adapter_config.json"]["sha256"] == adapter.digests["adapter_config.json"]
    )
    assert document["bytes"] == sum(len(data) for data in adapter.files.values())
    assert isinstance(document["seconds"], float)
    logged = [json.loads(line) for line in err.splitlines()]
    assert logged[0]["event"] == "stage"
    fetched = [(line["file"], line["bytes"]) for line in logged if line["event"] == "fetched_file"]
    assert fetched == [(name, len(data)) for name, data in sorted(adapter.files.items())]
    assert TOKEN not in out + err + termination.read_text()


def test_a_refused_source_exits_1_with_the_message_in_both_places(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.write_text("")
    code, out, err = run(
        [
            "--source=hf://acme/cli@main",
            f"--root={tmp_path}",
            f"--termination-log={termination}",
        ],
        {},
    )
    assert (code, out) == (1, "")
    assert err.startswith("Error: hf://acme/cli@main names a branch or tag, not a commit")
    assert json.loads(termination.read_text()) == {
        "error": err.removeprefix("Error: ").strip(),
        "reason": "MutableSource",
        "file": None,
    }


def test_no_termination_log_file_means_none_is_written(tmp_path: Path) -> None:
    absent = tmp_path / "nowhere" / "termination-log"
    code, _out, _err = run(
        ["--source=hf://acme/cli@main", f"--root={tmp_path}", f"--termination-log={absent}"], {}
    )
    assert code == 1 and not absent.parent.exists()


def test_a_long_result_keeps_within_kubernetes_4096_bytes() -> None:
    files = {f"shard-{i:04}.safetensors": {"bytes": 1, "sha256": "a" * 64} for i in range(100)}
    text = termination_message({"key": "k", "files": files, "bytes": 100})
    assert len(text) <= 4096
    assert json.loads(text) == {"key": "k", "files": 100, "filesTruncated": True, "bytes": 100}


@pytest.mark.parametrize("module", ["huggingface_hub", "boto3"])
def test_without_the_staging_extra_the_command_names_it(module: str, tmp_path: Path) -> None:
    source = "hf://acme/x@" + "1" * 40 if module == "huggingface_hub" else "s3://bucket/x/"
    program = (
        f"import sys; sys.modules[{module!r}] = None; "
        "from pulumi_lora._cli import main; sys.argv[0] = 'pulumi-lora'; main()"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            program,
            "stage",
            f"--source={source}",
            f"--root={tmp_path}",
            "--digest=adapter_config.json=" + "0" * 64,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    scheme = source.split(":", maxsplit=1)[0]
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.endswith(
        f"Error: staging from {scheme}:// needs {module}: pip install 'pulumi-lora[staging]'\n"
    )
