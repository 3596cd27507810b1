"""Routing (404, 405), keep-alive, and /health during and after the start-up delay."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.contract._emulators import AdapterFactory, Emulator, StartEmulator, wait_until


@pytest.mark.parametrize(
    "path", ["/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/ready", "/metrics", "/"]
)
def test_wrong_path_is_fastapis_404(lora: Emulator, path: str) -> None:
    response = lora.client.post(path, json={})
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/load_lora_adapter"),
        ("PUT", "/unload_lora_adapter"),
        ("POST", "/v1/models"),
        ("POST", "/health"),
        ("DELETE", "/server_info"),
        ("GET", "/generate"),
        ("GET", "/v1/chat/completions"),
    ],
)
def test_wrong_method_is_fastapis_405(lora: Emulator, method: str, path: str) -> None:
    response = lora.client.request(method, path)
    assert response.status_code == 405
    assert response.json() == {"detail": "Method Not Allowed"}
    assert response.headers["allow"]


def test_query_strings_do_not_change_the_route(lora: Emulator) -> None:
    assert lora.client.get("/v1/models?x=1").status_code == 200


def test_requests_share_one_kept_alive_connection(lora: Emulator) -> None:
    ports = set()
    for _ in range(5):
        response = lora.client.get("/v1/models")
        stream = response.extensions["network_stream"]
        ports.add(stream.get_extra_info("client_addr")[1])
    assert len(ports) == 1


@pytest.mark.parametrize("path", ["/health", "/health_generate"])
def test_health_is_200_with_an_empty_body(lora: Emulator, path: str) -> None:
    response = lora.client.get(path)
    assert response.status_code == 200
    assert response.content == b""


def test_health_is_503_during_the_startup_delay(start: StartEmulator) -> None:
    started = time.monotonic()
    emulator = start(startup_delay=0.3)
    for path in ("/health", "/health_generate"):
        response = emulator.client.get(path)
        assert response.status_code == 503
        assert response.content == b""
    wait_until(lambda: emulator.client.get("/health").status_code == 200)
    assert time.monotonic() - started >= 0.3
    assert emulator.client.get("/health_generate").status_code == 200


def test_other_routes_answer_during_the_startup_delay(start: StartEmulator) -> None:
    emulator = start(startup_delay=5)
    assert emulator.client.get("/health").status_code == 503
    assert emulator.client.get("/v1/models").status_code == 200


def test_admin_api_starts_a_new_startup_delay(lora: Emulator) -> None:
    assert lora.client.post("/_emulator/faults", json={"startup_delay": 5}).status_code == 200
    assert lora.client.get("/health").status_code == 503
    assert lora.state()["ready"] is False
    lora.client.post("/_emulator/faults", json={"startup_delay": 0})
    assert lora.client.get("/health").status_code == 200


def test_a_chunked_request_body_is_read(lora: Emulator, make_adapter: AdapterFactory) -> None:
    body = json.dumps({"lora_name": "sql", "lora_path": make_adapter("sql")}).encode()
    response = lora.client.post("/load_lora_adapter", content=iter([body[:10], body[10:]]))
    assert response.status_code == 200
    assert lora.client.get("/v1/models").status_code == 200  # the connection is still in step


def test_an_unreadable_content_length_is_a_400(lora: Emulator) -> None:
    with socket.create_connection(("127.0.0.1", lora.server.port), timeout=5) as raw:
        raw.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
        assert raw.recv(1024).startswith(b"HTTP/1.1 400 ")
