"""``pulumi-lora stage`` as the Job runs it: one JSON result line, the termination message, and
a failure's words and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._commands._stage import termination_message
from pulumi_lora._staging._source import content_key, declared_request
from pulumi_lora.testing.hub import PlayedHub

from .conftest import TOKEN, Adapter
from .played import PlayedHttp, Reply


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
    # the key the provider gives the same declaration with the Hub mirror as source_endpoint
    declared, _ = declared_request(
        {
            "source": f"hf://acme/cli@{commit}",
            "digests": adapter.digests,
            "source_endpoint": hub.endpoint,
        }
    )
    assert document["key"] == content_key(declared)
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


def termination(path: Path) -> dict[str, object]:
    """The termination message written: one JSON document within Kubernetes' 4096 bytes."""
    raw = path.read_bytes()
    assert 0 < len(raw) <= 4096, len(raw)
    document = json.loads(raw)
    assert isinstance(document, dict)
    return document


def test_a_redirect_loop_reaches_the_termination_log(played: PlayedHttp, tmp_path: Path) -> None:
    """httpx2's TooManyRedirects is no StagingError: it used to end the command in a traceback."""
    played.routes["GET /loop/adapter_config.json"] = Reply(
        302, {"Location": f"{played.url}/loop/adapter_config.json"}
    )
    log = tmp_path / "termination-log"
    log.write_text("")
    code, out, err = run(
        [
            f"--source={played.url}/loop/",
            "--digest=adapter_config.json=" + "0" * 64,
            f"--root={tmp_path / 'adapters'}",
            f"--termination-log={log}",
        ],
        {},
    )
    assert (code, out) == (1, "")
    message = f"{played.url}/loop/adapter_config.json: more than 20 redirects"
    assert err.splitlines()[-1].startswith(f"Error: {message}: check the endpoint")
    assert termination(log) == {
        "error": err.splitlines()[-1].removeprefix("Error: "),
        "reason": "SourceUnreachable",
        "file": "adapter_config.json",
    }


def test_an_unexpected_error_reaches_the_termination_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Whatever goes wrong (here a bug in a client) is reported, not raised as a traceback."""

    def broken(*_args: object) -> dict[str, str]:
        raise KeyError("Contents")

    monkeypatch.setattr("pulumi_lora._staging._fetch.fetch_files", broken)
    log = tmp_path / "termination-log"
    log.write_text("")
    code, out, err = run(
        [
            f"--source=hf://acme/cli@{'1' * 40}",
            f"--root={tmp_path / 'adapters'}",
            f"--termination-log={log}",
        ],
        {},
    )
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == "Error: unexpected KeyError: 'Contents'"
    assert termination(log) == {
        "error": "unexpected KeyError: 'Contents'",
        "reason": "StagingFailed",
        "file": None,
    }
    assert (tmp_path / "adapters").exists() and list((tmp_path / "adapters").iterdir()) == []


def test_a_usage_error_reaches_the_termination_log(tmp_path: Path) -> None:
    """An option the image does not know, or a bad value, is reported where the provider reads."""
    log = tmp_path / "termination-log"
    log.write_text("")
    code, _out, err = run(
        ["--source=hf://acme/cli@main", "--max-lora-rank=zero", f"--termination-log={log}"], {}
    )
    assert code == 2 and "'zero' is not a valid integer" in err
    document = termination(log)
    assert document["reason"] == "InvalidArguments" and document["file"] is None
    assert "'zero' is not a valid integer" in str(document["error"])


def test_max_bytes_reads_kubernetes_quantities(played: PlayedHttp, tmp_path: Path) -> None:
    played.routes["GET /big/adapter_config.json"] = Reply(body=b"x" * 2048)
    log = tmp_path / "termination-log"
    log.write_text("")
    args = [
        f"--source={played.url}/big/",
        "--digest=adapter_config.json=" + "0" * 64,
        f"--root={tmp_path / 'adapters'}",
        f"--termination-log={log}",
    ]
    code, _out, err = run([*args, "--max-bytes=lots"], {})
    assert code == 2 and "'lots' is not a positive byte count (e.g. 500Mi, 16Gi)" in err
    code, _out, _err = run([*args, "--max-bytes=1Ki"], {})
    assert code == 1 and termination(log)["error"] == (
        "adapter_config.json: the source declares 2048 bytes, more than the 1024 bytes left of "
        "--max-bytes 1024: check the source (an endless or wrong answer?); raise --max-bytes if "
        "the adapter is really that large; the partial download was removed"
    )


def test_a_very_long_error_keeps_the_termination_message_valid_json(tmp_path: Path) -> None:
    """Kubernetes keeps the last 4096 bytes of a longer message: it must never be longer."""
    name = "a" * 6000 + ".safetensors"
    log = tmp_path / "termination-log"
    log.write_text("")
    code, _out, err = run(
        [
            "--source=hf://acme/cli@main",
            f"--digest={name}=zz",
            f"--root={tmp_path}",
            f"--termination-log={log}",
        ],
        {},
    )
    assert code == 1 and len(err) > 6000  # stderr has it all
    document = termination(log)
    assert document["reason"] == "InvalidSource"
    error, file = str(document["error"]), str(document["file"])
    assert error.startswith("digest of aaaa") and error.endswith(
        ".safetensors is not 64 hex characters of sha256: 'zz'"
    )
    assert "…" in error and file.startswith("aaa") and file.endswith("a.safetensors")


@pytest.mark.parametrize("text", ["x" * 9000, "é" * 9000, '"\\' * 3000])
def test_a_long_error_is_shortened_in_the_message_not_cut_from_the_document(text: str) -> None:
    message = termination_message({"error": text, "reason": "StagingFailed", "file": "f"})
    assert len(message.encode()) <= 4096
    document = json.loads(message)
    assert document["reason"] == "StagingFailed" and document["file"] == "f"
    assert document["error"].startswith(text[:100]) and document["error"].endswith(text[-50:])
    assert "…" in document["error"]


def test_a_long_result_keeps_within_kubernetes_4096_bytes() -> None:
    files = {f"shard-{i:04}.safetensors": {"bytes": 1, "sha256": "a" * 64} for i in range(100)}
    text = termination_message({"key": "k", "files": files, "bytes": 100})
    assert len(text) <= 4096
    assert json.loads(text) == {"key": "k", "files": 100, "filesTruncated": True, "bytes": 100}


def stage_without(
    module: str, source: str, root: Path, env: dict[str, str], digest: str = "0" * 64
) -> Any:
    """``pulumi-lora stage --source=SOURCE`` in a Python where ``module`` cannot be imported."""
    program = (
        f"import sys; sys.modules[{module!r}] = None; "
        "from pulumi_lora._commands._main import main; sys.argv[0] = 'pulumi-lora'; main()"
    )
    return subprocess.run(
        [
            sys.executable,
            "-c",
            program,
            "stage",
            f"--source={source}",
            f"--root={root}",
            f"--digest=adapter_config.json={digest}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, **env},
    )


def test_without_the_staging_extra_the_command_names_it(tmp_path: Path) -> None:
    done = stage_without("boto3", "s3://bucket/x/", tmp_path, {})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.endswith(
        "Error: staging from s3:// needs boto3: pip install 'pulumi-lora[staging]'\n"
    )


def test_staging_from_the_hub_needs_no_extra(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    """hf:// is plain httpx2 GETs (a dependency): huggingface_hub is never imported."""
    config = adapter.files["adapter_config.json"]
    commit = hub.publish("acme/no-extra", {"adapter_config.json": config})
    done = stage_without(
        "huggingface_hub",
        f"hf://acme/no-extra@{commit}",
        tmp_path,
        {"HF_ENDPOINT": hub.endpoint},
        digest=adapter.digests["adapter_config.json"],
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"]["adapter_config.json"]["bytes"] == len(config)
