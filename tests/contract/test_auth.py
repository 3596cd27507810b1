"""--api-key and --admin-api-key: bearer tokens, 401 {"error": "Unauthorized"}."""

from __future__ import annotations

import pytest

from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator

UNAUTHORIZED = {"error": "Unauthorized"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed(start: StartEmulator) -> Emulator:
    return start(**LORA, api_key="plain-key")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/server_info"),
        ("GET", "/model_info"),
        ("POST", "/load_lora_adapter"),
        ("POST", "/unload_lora_adapter"),
        ("POST", "/generate"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/no/such/route"),
    ],
)
@pytest.mark.parametrize("headers", [{}, bearer("wrong"), {"Authorization": "plain-key"}])
def test_api_key_is_required_everywhere_else(
    keyed: Emulator, method: str, path: str, headers: dict[str, str]
) -> None:
    response = keyed.client.request(method, path, headers=headers, json={})
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


def test_api_key_opens_every_route(keyed: Emulator, make_adapter: AdapterFactory) -> None:
    headers = bearer("plain-key")
    assert keyed.client.get("/v1/models", headers=headers).status_code == 200
    body = {"lora_name": "sql", "lora_path": make_adapter("sql")}
    assert keyed.client.post("/load_lora_adapter", json=body, headers=headers).status_code == 200


def test_health_and_metrics_need_no_key(keyed: Emulator) -> None:
    assert keyed.client.get("/health").status_code == 200
    assert keyed.client.get("/health_generate").status_code == 200
    # exempt from the key, and not served without --enable-metrics: a 404, not a 401
    assert keyed.client.get("/metrics").status_code == 404


def test_admin_key_is_the_only_key_of_the_lora_routes(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, api_key="plain-key", admin_api_key="admin-key")
    body = {"lora_name": "sql", "lora_path": make_adapter("sql")}
    for route in ("/load_lora_adapter", "/unload_lora_adapter"):
        refused = emulator.client.post(route, json=body, headers=bearer("plain-key"))
        assert refused.status_code == 401
        assert refused.json() == UNAUTHORIZED
    loaded = emulator.client.post("/load_lora_adapter", json=body, headers=bearer("admin-key"))
    assert loaded.status_code == 200
    assert emulator.client.get("/v1/models", headers=bearer("plain-key")).status_code == 200
    unloaded = emulator.client.post(
        "/unload_lora_adapter", json={"lora_name": "sql"}, headers=bearer("admin-key")
    )
    assert unloaded.status_code == 200


def test_admin_key_alone_guards_only_the_lora_routes(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, admin_api_key="admin-key")
    assert emulator.client.get("/v1/models").status_code == 200
    body = {"lora_name": "sql", "lora_path": make_adapter("sql")}
    assert emulator.client.post("/load_lora_adapter", json=body).status_code == 401
    ok = emulator.client.post("/load_lora_adapter", json=body, headers=bearer("admin-key"))
    assert ok.status_code == 200


def test_the_admin_api_needs_no_key(keyed: Emulator) -> None:
    assert keyed.client.get("/_emulator/state").status_code == 200


def test_keys_never_appear_in_the_config_repr(keyed: Emulator) -> None:
    assert "plain-key" not in repr(keyed.server.config)
