"""``python -m pulumi_lora.testing.emulator`` as a real process: listens, logs, stops on SIGTERM."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

from tests.contract._emulators import AdapterFactory, client, wait_until

SECRET = "s3cret-key-never-logged"


def test_runs_as_a_process_and_stops_cleanly_on_sigterm(
    fs_root: Path, make_adapter: AdapterFactory
) -> None:
    boot = make_adapter("boot")
    argv = [
        sys.executable, "-m", "pulumi_lora.testing.emulator",
        "--host", "127.0.0.1", "--port", "0", "--lora-paths", f"boot={boot}",
        "--emulator-fs-root", str(fs_root), "--api-key", SECRET,
        "--tp-size", "1", "--hf-token=hf_also_secret",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        ignored = json.loads(process.stderr.readline())
        listening = json.loads(process.stderr.readline())
        assert ignored == {"event": "ignored_args", "flags": ["--tp-size", "--hf-token"]}
        assert listening["event"] == "listening"
        assert listening["host"] == "127.0.0.1"
        with client(listening["url"]) as http:
            wait_until(lambda: http.get("/health").status_code == 200)
            models = http.get("/v1/models", headers={"Authorization": f"Bearer {SECRET}"})
            assert [m["id"] for m in models.json()["data"]][1:] == ["boot"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
        rest = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert json.loads(rest.strip().splitlines()[-1]) == {"event": "stopped"}
    assert SECRET not in rest
    assert "hf_also_secret" not in json.dumps([ignored, listening]) + rest


#: ``tgkill``'s system call number: the one way to signal one thread of another process.
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}[platform.machine()]


def test_a_sigterm_the_kernel_gives_another_thread_still_stops_it() -> None:
    """A process-directed signal goes to any thread not blocking it; CPython's handler then only
    flags it for the main thread, which an untimed wait never woke to act on: the emulator
    stayed up until SIGKILL (a CI run: "ignored SIGTERM", exit 137 where 0 was expected)."""
    argv = [
        sys.executable,
        "-m",
        "pulumi_lora.testing.emulator",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        assert json.loads(process.stderr.readline())["event"] == "listening"
        process.send_signal(signal.SIGUSR1)  # what the testbed asks of one that does not stop
        others = [int(t) for t in os.listdir(f"/proc/{process.pid}/task") if int(t) != process.pid]
        assert others, "the emulator serves from a thread of its own"
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(SYS_TGKILL, process.pid, others[0], signal.SIGTERM) == 0
        assert process.wait(timeout=5) == 0
        rest = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "most recent call first" in rest, rest  # every thread's stack, on SIGUSR1
    assert json.loads(rest.strip().splitlines()[-1]) == {"event": "stopped"}
