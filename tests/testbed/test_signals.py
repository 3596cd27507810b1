"""A program that dies of SIGTERM (or just exits) still takes its testbed down with it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pulumi_lora.testing.testbed import existing_namespaces, netns_available
from pulumi_lora.testing.testbed._process import alive

PROGRAM = """
import json, sys, time
from pulumi_lora.testing.testbed import Testbed, netns_available
tb = Testbed().start()
ns = tb.create_namespace("sig")
pids = [i.pid for i in tb.deploy_inference_service(ns, "a", replicas=1).wait_ready(30)]
if netns_available():
    pids += [i.pid for i in tb.deploy_inference_service(
        ns, "b", replicas=1, network="netns").wait_ready(30)]
pids += [p for p in tb.pids.values()]
print(json.dumps({"id": tb.id, "dir": str(tb.directory), "pids": pids}), flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)
time.sleep(600)
"""


@pytest.mark.usefixtures("testbed_binaries")
@pytest.mark.parametrize("how", ["sigterm", "exit"])
def test_teardown_on_sigterm_and_exit(how: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.communicate()[1]
    info = json.loads(line)
    assert all(alive(pid) for pid in info["pids"])
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    assert code == (-signal.SIGTERM if how == "sigterm" else 0)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in info["pids"] if alive(pid)]
    assert not Path(info["dir"]).exists()
    if netns_available():
        assert not [n for n in existing_namespaces() if info["id"] in n]
