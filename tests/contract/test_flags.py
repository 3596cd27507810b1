"""The command line: SGLang's flags, its three --lora-paths formats, its launch-time refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulumi_lora.testing.emulator import (
    EmulatorConfig,
    EmulatorConfigError,
    EmulatorLaunchError,
    EmulatorServer,
    Fault,
    StartupAdapter,
    main,
    parse_args,
)
from pulumi_lora.testing.emulator._args import ignored_flag_names
from tests.contract._emulators import AdapterFactory, StartEmulator


def test_defaults_are_sglangs() -> None:
    config, ignored = parse_args([])
    assert ignored == ()
    assert (config.host, config.port) == ("127.0.0.1", 30000)
    assert config.max_loras_per_batch == 8
    assert config.max_loaded_loras is None
    assert config.lora_enabled is False
    assert config.dp_size == 1


def test_lora_paths_accepts_sglangs_three_item_formats() -> None:
    item = json.dumps({"lora_name": "json", "lora_path": "/adapters/j", "pinned": True})
    config, _ = parse_args(["--lora-paths", "/adapters/bare", "named=/adapters/n", item])
    assert config.lora_paths == (
        StartupAdapter("/adapters/bare", "/adapters/bare"),  # SGLang: the path is the name
        StartupAdapter("named", "/adapters/n"),
        StartupAdapter("json", "/adapters/j", pinned=True),
    )
    assert config.lora_enabled is True  # --lora-paths implies --enable-lora


@pytest.mark.parametrize("item", ['{"lora_name": "x"}', "{not json}"])
def test_lora_paths_json_item_needs_name_and_path(
    item: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--lora-paths", item])
    assert exited.value.code == 2
    assert "--lora-paths" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "quoted"),
    [
        (["--enable-lora"], "you need to specify both --max-lora-rank and --lora-target-modules"),
        (["--enable-lora", "--max-lora-rank", "8"], "--max-lora-rank and --lora-target-modules"),
        (["--enable-lora", "--lora-target-modules", "all"], "--max-lora-rank and"),
        (
            ["--lora-paths", "/a", "--max-loras-per-batch", "4", "--max-loaded-loras", "2"],
            "max_loaded_loras should be greater than or equal to max_loras_per_batch",
        ),
        (
            ["--lora-paths", "/a", "/b", "--max-loras-per-batch", "1", "--max-loaded-loras", "1"],
            "The number of LoRA paths should not exceed max_loaded_loras",
        ),
        (
            ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all", "q_proj"],
            "it should be the only module specified",
        ),
        (
            ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "fc9"],
            "Unsupported --lora-target-modules",
        ),
        (["--lora-paths", "/a", "--max-loras-per-batch", "0"], "must be positive"),
    ],
)
def test_sglangs_launch_refusals_exit_2_with_its_text(
    argv: list[str], quoted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert quoted in capsys.readouterr().err


def test_the_same_refusals_apply_in_process() -> None:
    with pytest.raises(EmulatorConfigError, match="--max-lora-rank and --lora-target-modules"):
        EmulatorConfig(enable_lora=True)


def test_enable_lora_with_rank_and_modules() -> None:
    config, _ = parse_args(
        ["--enable-lora", "--max-lora-rank", "32", "--lora-target-modules", "q_proj", "v_proj"]
    )
    assert config.max_lora_rank == 32
    assert config.lora_target_modules == ("q_proj", "v_proj")


def test_unknown_sglang_flags_are_ignored_and_returned() -> None:
    argv = [
        "--model-path", "Qwen/Qwen2.5-0.5B", "--tp-size", "2", "--mem-fraction-static=0.8",
        "--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all",
        "--lora-backend", "triton", "--trust-remote-code",
    ]  # fmt: skip
    config, ignored = parse_args(argv)
    assert config.model_path == "Qwen/Qwen2.5-0.5B"
    assert config.lora_enabled
    assert ignored == (
        "--tp-size", "2", "--mem-fraction-static=0.8", "--lora-backend", "triton",
        "--trust-remote-code",
    )  # fmt: skip
    assert ignored_flag_names(ignored) == [
        "--tp-size", "--mem-fraction-static", "--lora-backend", "--trust-remote-code",
    ]  # fmt: skip


def test_every_known_flag(tmp_path: Path) -> None:
    config, ignored = parse_args(
        [
            "--host", "0.0.0.0", "--port", "0", "--served-model-name", "qwen",
            "--lora-paths", "a=/adapters/a", "--max-lora-rank", "16",
            "--lora-target-modules", "all", "--max-loras-per-batch", "2",
            "--max-loaded-loras", "3", "--api-key", "k1", "--admin-api-key", "k2",
            "--random-seed", "5", "--dp-size", "1", "--context-length", "4096",
            "--emulator-fs-root", str(tmp_path), "--emulator-startup-delay", "1.5",
            "--emulator-latency", "/generate=0.2", "--emulator-latency", "*=0.01",
            "--emulator-fault", "/load_lora_adapter:status=503,times=2", "--emulator-admin",
        ]
    )  # fmt: skip
    assert ignored == ()
    assert config.host == "0.0.0.0"
    assert config.model_name == "qwen"
    assert (config.api_key, config.admin_api_key, config.random_seed) == ("k1", "k2", 5)
    assert (config.max_loras_per_batch, config.max_loaded_loras) == (2, 3)
    assert config.context_length == 4096
    assert config.fs_root == tmp_path
    assert config.startup_delay == 1.5
    assert dict(config.latency) == {"/generate": 0.2, "*": 0.01}
    assert config.faults == (Fault(kind="status", route="/load_lora_adapter", times=2),)
    assert config.admin is True


@pytest.mark.parametrize(
    "argv",
    [
        ["--emulator-latency", "generate=1"],
        ["--emulator-latency", "/x"],
        ["--emulator-fault", "boom"],
    ],
)
def test_bad_emulator_flags_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_startup_adapters_are_loaded_at_launch(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    boot, pinned = make_adapter("boot"), make_adapter("pinned")
    emulator = start(lora_paths=(StartupAdapter("boot", boot), StartupAdapter("p", pinned, True)))
    assert emulator.models() == {"boot": boot, "p": pinned}
    assert [ref["pinned"] for ref in emulator.state()["adapters"]] == [False, True]


def test_the_pool_is_sized_from_the_startup_adapters(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    boot = make_adapter("boot", r=16, target_modules=["q_proj", "o_proj"])
    emulator = start(lora_paths=(StartupAdapter("boot", boot),))
    assert emulator.load("same", make_adapter("same", r=8, target_modules=["v_proj"])).is_success
    too_big = emulator.load("big", make_adapter("big", r=32))
    assert "incompatible" in too_big.json()["error_message"]
    mlp = emulator.load("mlp", make_adapter("mlp", target_modules=["down_proj"]))
    assert "incompatible" in mlp.json()["error_message"]


@pytest.mark.parametrize(
    ("setup", "quoted"),
    [("missing", "Repo id must be in the form"), ("no-config", "No such file or directory")],
)
def test_an_unreadable_startup_adapter_fails_the_launch(
    fs_root: Path, make_adapter: AdapterFactory, setup: str, quoted: str
) -> None:
    path = make_adapter("boot", config=False) if setup == "no-config" else "/adapters/missing"
    config = EmulatorConfig(lora_paths=(StartupAdapter("boot", path),), fs_root=fs_root)
    with pytest.raises(EmulatorLaunchError, match="Failed to load LoRA adapter boot") as failed:
        EmulatorServer(config).start()
    assert quoted in str(failed.value)


def test_a_refused_startup_adapter_fails_the_launch(
    fs_root: Path, make_adapter: AdapterFactory
) -> None:
    config = EmulatorConfig(
        lora_paths=(StartupAdapter("big", make_adapter("big", r=32)),),
        max_lora_rank=16,
        fs_root=fs_root,
    )
    with pytest.raises(EmulatorLaunchError, match="incompatible"):
        EmulatorServer(config).start()


def test_startup_adapters_load_despite_dp_size(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    boot = make_adapter("boot")
    emulator = start(lora_paths=(StartupAdapter("boot", boot),), dp_size=2)
    assert emulator.models() == {"boot": boot}


def test_main_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--enable-lora"]) == 2
    assert "--max-lora-rank" in capsys.readouterr().err
    assert main(["--port", "0", "--lora-paths", "/definitely/missing"]) == 1
    failure = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert failure["event"] == "launch_failed"
    assert "Failed to load LoRA adapter /definitely/missing" in failure["error"]
    assert main(["--help"]) == 0
