"""What a user sees when an optional extra is missing: one line naming it, not a traceback."""

from __future__ import annotations

import subprocess
import sys

#: ``pulumi-lora`` as ``pip install pulumi-lora`` (no extras) leaves it: prometheus-client absent.
WITHOUT_METRICS = (
    "import sys; sys.modules['prometheus_client'] = None; "
    "from pulumi_lora._commands._main import main; sys.argv[0] = 'pulumi-lora'; main()"
)


def pulumi_lora(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", WITHOUT_METRICS, *args]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)


def test_resync_without_the_metrics_extra_names_it() -> None:
    done = pulumi_lora("resync")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: pulumi-lora resync needs prometheus-client for its /metrics: "
        "pip install 'pulumi-lora[metrics]'\n"
    )


def test_the_other_commands_do_not_need_it() -> None:
    helped = pulumi_lora("--help")
    assert helped.returncode == 0 and "resync" in helped.stdout, helped.stderr
    assert pulumi_lora("resync", "--help").returncode == 0
