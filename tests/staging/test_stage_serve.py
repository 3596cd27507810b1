"""``pulumi-lora stage-serve`` as the stager Job runs it: a real process and real HTTP, against
the played Hub: the token, stagings side by side, verification and removal, and the end once
no provider holds it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pulumi_lora._staging._serve import TOKEN_HEADER, Work, token_digest
from pulumi_lora._staging._source import content_key, parse_source
from pulumi_lora.testing.hub import PlayedHub

from .conftest import TOKEN, Adapter, make_adapter

SERVER_TOKEN = "stager-token-7c1e"
LFS = frozenset({"adapter_model.safetensors"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    root: Path
    termination: Path

    def post(self, path: str, body: Any, token: str = SERVER_TOKEN) -> httpx2.Response:
        return httpx2.post(f"{self.url}{path}", json=body, headers={TOKEN_HEADER: token})

    def stage(self, body: dict[str, Any], ticket: str = "") -> dict[str, Any]:
        """POST the request until its staging is done (as the provider polls, by ticket)."""
        return self.polled("/stage", body, ticket)

    def polled(self, path: str, body: dict[str, Any], ticket: str = "") -> dict[str, Any]:
        """POST ``body`` to ``path`` until its call is done (as the provider polls, by ticket,
        each call waiting on the server)."""
        for _ in range(60):
            answer = self.post(f"{path}?wait=1&ticket={ticket}", body).json()
            if answer["state"] == "done":
                return dict(answer["document"])
            ticket = answer["ticket"]
        raise AssertionError(f"not done: {answer}")


def visible(root: Path) -> list[str]:
    """The staged directories under ``root`` (not the keys' hidden locks and marks)."""
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def start(tmp_path: Path, hub: PlayedHub, *options: str) -> Served:
    port = free_port()
    root, termination = tmp_path / "adapters", tmp_path / "termination-log"
    termination.write_text("")
    argv = [sys.executable, "-m", "pulumi_lora", "stage-serve", f"--root={root}"]
    argv += [f"--port={port}", f"--token-sha256={token_digest(SERVER_TOKEN)}"]
    argv += [f"--termination-log={termination}", *options]
    process = subprocess.Popen(
        argv,
        env={"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(process, f"http://127.0.0.1:{port}", root, termination)
    ends = time.monotonic() + 20
    while time.monotonic() < ends:
        try:
            if httpx2.get(f"{served.url}/healthz").status_code == 200:
                return served
        except httpx2.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"never served: {process.communicate()}")


@pytest.fixture
def holder() -> Iterator[Any]:
    """Holds ``/hold`` open on a server until the test drops it (as the provider's thread)."""
    holds: list[tuple[threading.Event, threading.Thread]] = []

    def hold(served: Served) -> threading.Event:
        drop, opened = threading.Event(), threading.Event()

        def run() -> None:
            with httpx2.Client(timeout=30) as client:
                headers = {TOKEN_HEADER: SERVER_TOKEN}
                with client.stream("GET", f"{served.url}/hold", headers=headers) as answer:
                    assert answer.status_code == 200
                    opened.set()
                    drop.wait(30)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert opened.wait(10)
        holds.append((drop, thread))
        return drop

    yield hold
    for drop, thread in holds:
        drop.set()
        thread.join(10)


def test_the_server_stages_verifies_and_removes_for_its_token_only(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path, holder: Any
) -> None:
    served = start(tmp_path, hub, "--grace=0.3")
    drop = holder(served)
    good = [hub.publish(f"acme/serve-{i}", make_adapter().files, lfs=LFS) for i in range(2)]
    bad = hub.publish("acme/serve-bad", adapter.files, lfs=LFS)
    requests = [parse_source(f"hf://acme/serve-{i}@{commit}") for i, commit in enumerate(good)]
    wrong = parse_source(f"hf://acme/serve-bad@{bad}", digests={"adapter_config.json": "0" * 64})
    bodies = [json.loads(r.to_json()) for r in [*requests, wrong]]

    assert served.post("/stage", bodies[0], token="").status_code == 403
    assert served.post("/stage", bodies[0], token="guess").status_code == 403
    assert not served.root.exists()  # nothing done for a caller without the token
    assert served.post("/stage", {"source": "nope"}).status_code == 400

    first = [served.post("/stage", body).json() for body in bodies]  # all three at once
    assert {answer["state"] for answer in first} <= {"running", "done"}
    documents = [served.stage(b, a["ticket"]) for b, a in zip(bodies, first, strict=True)]
    keys = [content_key(r) for r in requests]
    assert [d["key"] for d in documents[:2]] == keys
    assert all(d["fetched"] is True for d in documents[:2])
    assert documents[2]["reason"] == "DigestMismatch"
    assert documents[2]["file"] == "adapter_config.json"
    assert visible(served.root) == sorted(keys)  # nothing partial

    again = served.stage(bodies[1])  # a new request: staged afresh (verified, not fetched)
    assert again["key"] == keys[1] and again["fetched"] is False
    (served.root / keys[0] / "adapter_config.json").write_text("{}")
    verdicts = served.polled("/verify", {"keys": keys})["keys"]
    assert verdicts[keys[1]] == "verified" and "adapter_config.json" in verdicts[keys[0]]
    bare = served.post("/verify", {"keys": keys[1:]}).json()  # a provider of 0.3.0: no wait
    assert bare == {"keys": {keys[1]: "verified"}}
    assert served.post("/unstage", {"keys": [keys[0]]}).json() == {
        "removed": [keys[0]],
        "absent": [],
    }
    assert visible(served.root) == [keys[1]]
    refused = served.post("/unstage", {"keys": ["../etc"]}).json()
    assert refused["reason"] and "not content keys" in refused["error"]

    # The collection: a released key stays for the grace period, then goes with its mark.
    released = {"named": [], "released": [keys[1]], "grace_seconds": 600}
    assert served.polled("/collect", released) == {"removed": [], "young": [keys[1]], "busy": []}
    assert served.polled("/collect", {"named": [keys[1]], "grace_seconds": 0})["removed"] == []
    assert served.polled("/collect", {"grace_seconds": 0})["removed"] == [keys[1]]
    assert list(served.root.iterdir()) == []  # marks and locks too: nothing left of any key
    assert (
        served.post("/collect?wait=1", {"named": ["../etc"], "grace_seconds": 0}).json()[
            "document"
        ]["reason"]
        == "InvalidSource"
    )
    assert served.post("/collect", {"grace_seconds": -1}).status_code == 400

    time.sleep(1.0)
    assert served.process.poll() is None  # held: it stays, however quiet
    drop.set()
    out, err = served.process.communicate(timeout=15)
    assert served.process.returncode == 0, err
    assert json.loads(served.termination.read_text()) == {"stagings": 4}
    assert SERVER_TOKEN not in out + err and TOKEN not in out + err


def test_a_sigterm_ends_a_held_server_at_once(hub: PlayedHub, tmp_path: Path, holder: Any) -> None:
    """The Job or its namespace deleted: the kubelet's SIGTERM ends the server (the pod's
    PID 1, which has no default action for it), however held."""
    served = start(tmp_path, hub)
    holder(served)
    served.process.send_signal(signal.SIGTERM)
    served.process.communicate(timeout=15)  # held and idle: only the signal ends it
    assert served.process.returncode == 0  # its own end, not the signal's default


def test_a_server_nobody_holds_ends_after_its_start_grace(hub: PlayedHub, tmp_path: Path) -> None:
    served = start(tmp_path, hub, "--start-grace=0.5")
    served.process.communicate(timeout=15)  # the default start grace is 120 s
    assert served.process.returncode == 0
    assert json.loads(served.termination.read_text()) == {"stagings": 0}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_staging_per_content_key_and_the_end_decided_by_holds_and_work() -> None:
    """``Work`` alone: a key staged once however often it is asked for; the server may end only
    when nothing runs and nothing holds it, ``grace`` after the last hold (``start_grace``
    before any came)."""
    clock, release, calls = Clock(), threading.Event(), []

    def stage(request: Any, seconds: float) -> dict[str, Any]:
        calls.append((content_key(request), seconds))
        release.wait(10)
        return {"key": content_key(request), "fetched": True}

    work = Work(
        stage=stage, verify=lambda k: {}, unstage=lambda k: {}, deadline=60.0, keep=500, clock=clock
    )
    request = parse_source(f"hf://acme/a@{'1' * 40}")
    first = work.submit(request)
    assert first["state"] == "running"
    assert work.submit(request)["ticket"] == first["ticket"]  # joined, not started again
    assert not work.finished(grace=2, start_grace=5)  # a staging runs
    release.set()
    ends = time.monotonic() + 10
    while (answer := work.submit(request, first["ticket"]))["state"] != "done":
        assert time.monotonic() < ends
        time.sleep(0.01)
    assert answer["document"]["fetched"] is True
    assert calls == [(content_key(request), 60.0)]  # staged once
    assert not work.finished(grace=2, start_grace=5)  # just asked: not quiet yet
    clock.now += 5
    assert work.finished(grace=2, start_grace=5)  # never held: the start grace
    with work.hold():
        clock.now += 100
        assert not work.finished(grace=2, start_grace=5)  # held, however long
    clock.now += 1
    assert not work.finished(grace=2, start_grace=5)
    clock.now += 1
    assert work.finished(grace=2, start_grace=5)
    assert work.submit(request, first["ticket"])["state"] == "done"  # its caller reads it
    later = work.submit(request)  # a new request: the directory may have changed since
    assert later["ticket"] != first["ticket"]
    ends = time.monotonic() + 10
    while work.submit(request, later["ticket"])["state"] != "done":
        assert time.monotonic() < ends
        time.sleep(0.01)
    assert len(calls) == 2
    clock.now += work.keep + 1
    assert work.submit(request, first["ticket"])["ticket"] != first["ticket"]  # forgotten
    work.close()


def test_a_failure_inside_a_call_is_the_stagers_error_document() -> None:
    def broken(keys: Any) -> dict[str, Any]:
        raise ValueError("ad/x//y.bin is not a plain path")

    work = Work(stage=lambda r, s: {}, verify=broken, unstage=broken, deadline=1.0)
    answer = work.claim(broken, ["0" * 16])
    assert answer["reason"] == "StagingFailed" and "ad/x//y.bin" in answer["error"]
    work.close()


def test_a_call_may_wait_for_its_staging_to_end() -> None:
    """With ``wait``, one call answers ``done`` as soon as the staging ends (no polling)."""

    def stage(request: Any, seconds: float) -> dict[str, Any]:
        time.sleep(0.3)
        return {"key": content_key(request)}

    work = Work(stage=stage, verify=lambda k: {}, unstage=lambda k: {}, deadline=60.0)
    request = parse_source(f"hf://acme/w@{'2' * 40}")
    answer = work.submit(request, wait=20)
    assert answer["state"] == "done" and answer["document"] == {"key": content_key(request)}
    assert work.submit(request, wait=0)["state"] == "running"  # a new request: not waited for
    work.close()


def test_a_slow_call_is_long_polled_by_its_ticket() -> None:
    """A verification (or removal, collection) that takes longer than a call may wait answers
    ``running`` with a ticket, then its document: each answer within ``wait``, so a slow call
    is never taken for a lost server; a ticket of another kind of call is not this one's."""
    ended, runs = threading.Event(), []

    def slow(keys: Any) -> dict[str, Any]:
        runs.append(list(keys))
        ended.wait(10)
        return {"keys": dict.fromkeys(keys, "verified")}

    work = Work(stage=lambda r, s: {}, verify=slow, unstage=slow, deadline=1.0)
    key = "0" * 16
    first = work.polled("/verify", lambda: work.claim(slow, [key]), None, wait=0.01)
    assert first["state"] == "running"
    again = work.polled("/verify", lambda: work.claim(slow, [key]), first["ticket"], wait=0.01)
    assert again["state"] == "running" and again["ticket"] == first["ticket"]  # joined
    assert not work.finished(grace=0, start_grace=0)  # a call runs
    ended.set()
    done = work.polled("/verify", lambda: work.claim(slow, [key]), first["ticket"], wait=10)
    assert done == {
        "state": "done",
        "ticket": first["ticket"],
        "document": {"keys": {key: "verified"}},
    }
    assert runs == [[key]]  # run once, however often asked
    other = work.polled("/unstage", lambda: {"removed": []}, first["ticket"], wait=10)
    assert other["ticket"] != first["ticket"]  # not the verification's
    work.close()
