"""The contract both ways: the same tests against the emulator and against the real SGLang server.

Each test runs twice: on the emulator (fast tier) and on real SGLang 0.5.23 on the CPU (the
``sglang`` tier: ``pytest -m sglang``), both started with the same SGLang flags and given the
same PEFT adapters (``pulumi_lora.testing.peft``). Only SGLang's public HTTP surface is used.
Where the two differ, the emulator was fixed, or the difference is written down with its reason
in docs/real-sglang.md ("Known divergences") and asserted here as it is.

Real servers take about 30 s to start, so a module-wide pool keeps one per set of flags (two at
most, 4 GB each) and unloads every adapter between tests; the tests are ordered by flags.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pulumi_lora._errors import SmokeFailed
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang._answers import classify_smoke
from pulumi_lora._sglang._protocol import Peer, smoke_request
from pulumi_lora.testing.emulator import EmulatorServer
from pulumi_lora.testing.emulator._args import parse_args
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import RealSGLang, RealSGLangMissingError
from pulumi_lora.testing.testbed._process import free_port

LORA = ("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all")
BASE = (*LORA, "--max-loras-per-batch", "4")
LIMIT_2 = (*LORA, "--max-loras-per-batch", "2", "--max-loaded-loras", "2")
KEY = "contract-" + secrets.token_hex(8)
READY_TIMEOUT = 180.0


class Server:
    """One running server (emulator or real) and a client for it."""

    def __init__(self, url: str, stop: Any, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self._stop = stop
        self.client = httpx2.Client(base_url=url, trust_env=False, timeout=60.0, headers=headers)

    def load(self, name: str, path: str, **extra: Any) -> httpx2.Response:
        body = {"lora_name": name, "lora_path": path, **extra}
        return self.client.post("/load_lora_adapter", json=body)

    def unload(self, name: str) -> httpx2.Response:
        return self.client.post("/unload_lora_adapter", json={"lora_name": name})

    def models(self) -> dict[str, str]:
        answer = self.client.get("/v1/models")
        assert answer.status_code == 200, answer.text
        return {m["id"]: m["root"] for m in answer.json()["data"] if m.get("parent")}

    def generate(self, lora: str | None = None) -> httpx2.Response:
        sampling = {"max_new_tokens": 4, "temperature": 0}
        body: dict[str, Any] = {"text": "the pod", "sampling_params": sampling}
        if lora is not None:
            body["lora_path"] = lora
        return self.client.post("/generate", json=body)

    def close(self) -> None:
        self.client.close()
        self._stop()


class Pool:
    """Servers by their flags: started on first use, reset between tests, at most two alive."""

    def __init__(self, kind: str, logs: Path) -> None:
        self.kind = kind
        self.logs = logs
        self.live: dict[tuple[str, ...], Server] = {}
        self.startup: dict[tuple[str, ...], set[str]] = {}

    def get(self, flags: tuple[str, ...], startup: frozenset[str] = frozenset()) -> Server:
        server = self.live.get(flags)
        if server is None:
            if len(self.live) >= 2:
                oldest = next(iter(self.live))
                self.live.pop(oldest).close()
            server = self._start(flags)
            self.live[flags] = server
            self.startup[flags] = set(startup)
        for name in set(server.models()) - self.startup[flags]:
            assert server.unload(name).status_code == 200
        return server

    def _start(self, flags: tuple[str, ...]) -> Server:
        headers = {"Authorization": f"Bearer {KEY}"} if "--api-key" in flags else None
        if self.kind == "emulator":
            config, _ = parse_args(["--port", "0", *flags])
            emulator = EmulatorServer(config).start()
            return Server(emulator.url, emulator.stop, headers)
        try:
            real = RealSGLang.find()
        except RealSGLangMissingError as exc:
            missing_real_part(str(exc))
        port = free_port()
        process = real.serve(port, flags, self.logs / f"sglang-{port}.log", timeout=READY_TIMEOUT)
        url = f"http://127.0.0.1:{port}"
        return Server(url, lambda: process.stop(timeout=20), headers)

    def close(self) -> None:
        for server in self.live.values():
            server.close()
        self.live.clear()


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("emulator"),
        pytest.param("sglang", id="real-sglang"),  # the sglang tier (tests/conftest.py)
    ],
)
def pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pool]:
    servers = Pool(request.param, tmp_path_factory.mktemp("servers"))
    yield servers
    servers.close()


@pytest.fixture
def adapter(tmp_path: Path) -> Any:
    """``adapter(name, **write_adapter options)`` → the host path of a fresh PEFT adapter."""

    def make(name: str, **options: Any) -> str:
        folder = tmp_path / name
        write_adapter(folder, seed=name, **options)
        return str(folder)

    return make


# --- plain LoRA server ---------------------------------------------------------------------------


def test_a_load_answers_200_and_lists_the_adapter(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    path = adapter("a")
    answer = server.load("a", path)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True and body["loaded_adapters"] == {"a": path}
    assert server.models() == {"a": path}


def test_loading_a_loaded_name_again_is_refused(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    path = adapter("a")
    assert server.load("a", path).status_code == 200
    again = server.load("a", path)
    assert again.status_code == 400
    assert "already loaded" in again.json()["error_message"]


def test_a_missing_path_is_refused_and_loads_nothing(pool: Pool, tmp_path: Path) -> None:
    server = pool.get(BASE)
    answer = server.load("gone", str(tmp_path / "nowhere"))
    assert answer.status_code == 400 and answer.json()["success"] is False
    assert server.models() == {}


def test_a_rank_above_the_maximum_is_refused(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    answer = server.load("big", adapter("big", rank=32))
    assert answer.status_code == 400 and answer.json()["success"] is False
    assert "incompatible" in answer.json()["error_message"]
    assert server.models() == {}


def test_an_unload_answers_200_and_the_name_goes(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    server.load("a", adapter("a"))
    answer = server.unload("a")
    assert answer.status_code == 200 and answer.json()["success"] is True
    assert server.models() == {}


def test_unloading_an_unknown_name_is_refused(pool: Pool) -> None:
    server = pool.get(BASE)
    answer = server.unload("never")
    assert answer.status_code == 400
    assert "does not exist" in answer.json()["error_message"]


def test_a_generation_through_an_adapter_never_loaded_is_refused(pool: Pool) -> None:
    server = pool.get(BASE)
    answer = server.generate("never")
    assert answer.status_code == 400
    assert "never been loaded" in answer.text


def test_a_generation_through_an_unloaded_adapter_reloads_it(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    server.load("a", adapter("a"))
    server.unload("a")
    assert server.generate("a").status_code == 200


def test_loads_and_generations_at_once_all_succeed(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    paths = {f"c{i}": adapter(f"c{i}") for i in range(3)}
    with ThreadPoolExecutor(6) as workers:
        loads = [workers.submit(server.load, name, path) for name, path in paths.items()]
        generations = [workers.submit(server.generate) for _ in range(6)]
        assert all(f.result().status_code == 200 for f in loads)
        assert all(f.result().status_code == 200 for f in generations)
    with ThreadPoolExecutor(6) as workers:
        through = [workers.submit(server.generate, name) for name in paths for _ in range(2)]
        assert all(f.result().status_code == 200 for f in through)
    assert server.models() == paths


def test_the_smoke_generation_answers_one_finite_logprob(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    assert server.load("a", adapter("a")).status_code == 200
    request = smoke_request("a", timeouts=ClientTimeouts())
    answer = server.client.post(request.path, json=request.json)
    assert answer.status_code == 200, answer.text
    meta = answer.json()["meta_info"]
    assert meta["output_token_logprobs_length"] == 1 and meta["completion_tokens"] == 1
    [[logprob, token_id, text]] = meta["output_token_logprobs"]
    assert isinstance(logprob, float) and math.isfinite(logprob) and logprob <= 0
    assert isinstance(token_id, int) and text is None
    smoked = classify_smoke(200, answer.content, name="a", peer=Peer("server"))
    assert smoked.logprob == logprob


# --- adapters a server cannot use -----------------------------------------------------------------


def test_nan_weights_load_but_a_generation_through_them_has_a_null_logprob(
    pool: Pool, adapter: Any
) -> None:
    server = pool.get(BASE)
    answer = server.load("nan", adapter("nan", nan=True))
    assert answer.status_code == 200 and answer.json()["success"] is True  # without a word
    request = smoke_request("nan", timeouts=ClientTimeouts())
    answer = server.client.post(request.path, json=request.json)
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta_info"]["output_token_logprobs"][0][0] is None  # NaN, as orjson
    with pytest.raises(SmokeFailed, match=re.escape("logprob is null (NaN or Inf)")):
        classify_smoke(200, answer.content, name="nan", peer=Peer("server"))
    assert server.generate().status_code == 200  # the server itself still serves


def test_an_adapter_without_weights_is_refused(pool: Pool, adapter: Any) -> None:
    server = pool.get(BASE)
    path = adapter("hollow")
    (Path(path) / "adapter_model.safetensors").unlink()
    answer = server.load("hollow", path)
    assert answer.status_code == 400 and answer.json()["success"] is False
    assert "Cannot find any model weights" in answer.json()["error_message"]
    assert server.models() == {}


def test_an_adapter_for_a_module_the_server_does_not_adapt_is_refused(
    pool: Pool, adapter: Any
) -> None:
    server = pool.get(BASE)
    answer = server.load("odd", adapter("odd", target_modules=("nope_proj",)))
    assert answer.status_code == 400 and answer.json()["success"] is False
    assert "incompatible" in answer.json()["error_message"]


# --- --max-loaded-loras 2 -------------------------------------------------------------------------


def test_a_load_beyond_the_limit_evicts_the_least_recently_used(pool: Pool, adapter: Any) -> None:
    server = pool.get(LIMIT_2)
    for name in ("a", "b", "c"):
        assert server.load(name, adapter(name)).status_code == 200
    assert set(server.models()) == {"b", "c"}


def test_a_pinned_adapter_is_never_evicted(pool: Pool, adapter: Any) -> None:
    server = pool.get(LIMIT_2)
    assert server.load("p", adapter("p"), pinned=True).status_code == 200
    for name in ("b", "c"):
        assert server.load(name, adapter(name)).status_code == 200
    assert set(server.models()) == {"p", "c"}


# --- --api-key and --lora-paths (one server: each start costs half a minute) ----------------------


def launched(pool: Pool) -> Server:
    """The server started with ``--api-key`` and adapter ``boot`` in ``--lora-paths``."""
    path = pool.logs / "boot"
    if not path.exists():
        write_adapter(path, seed="boot")
    flags = (*BASE, "--api-key", KEY, "--lora-paths", f"boot={path}")
    return pool.get(flags, startup=frozenset({"boot"}))


def test_an_api_key_server_refuses_a_load_without_it(pool: Pool, adapter: Any) -> None:
    server = launched(pool)
    path = adapter("a")
    bare = httpx2.post(
        f"{server.url}/load_lora_adapter", json={"lora_name": "a", "lora_path": path}
    )
    assert bare.status_code == 401
    assert server.load("a", path).status_code == 200
    assert httpx2.get(f"{server.url}/health").status_code == 200  # health needs no key


def test_an_adapter_named_at_launch_is_served_from_the_start(pool: Pool) -> None:
    server = launched(pool)
    boot = str(pool.logs / "boot")
    assert server.models() == {"boot": boot}
    assert server.generate("boot").status_code == 200
    assert server.load("boot", boot).status_code == 400  # already loaded, as any other
