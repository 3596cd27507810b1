"""Fault injection: the SPEC syntax, every fault kind, latency, and the /_emulator/ admin API."""

from __future__ import annotations

import json
import time

import httpx2
import pytest

from pulumi_lora.testing.emulator import Fault
from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator, client

# -- the SPEC syntax ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("status=503", Fault(kind="status", status=503)),
        (
            "/load_lora_adapter:status=500,times=3",
            Fault(kind="status", route="/load_lora_adapter", status=500, times=3),
        ),
        ("*:drop", Fault(kind="drop")),
        ("/x:drop,after,times=always", Fault(kind="drop", route="/x", after=True, times=None)),
        ("/v1/models:stall=2.5", Fault(kind="stall", route="/v1/models", seconds=2.5)),
        ("malformed", Fault(kind="malformed")),
        ("huge=1000", Fault(kind="huge", size=1000)),
        ("drip=0.01,chunk=4", Fault(kind="drip", seconds=0.01, chunk=4)),
        ("drip=0.5,head", Fault(kind="drip", seconds=0.5, head=True)),
        ("/x:drop,land=2.5", Fault(kind="drop", route="/x", land=2.5)),
        (
            'status=502,times=2,body={"a": 1, "b": [1,2]}',
            Fault(kind="status", status=502, times=2, body='{"a": 1, "b": [1,2]}'),
        ),
        ("/x:status=500,body=a:b,c", Fault(kind="status", route="/x", status=500, body="a:b,c")),
    ],
)
def test_spec_syntax(spec: str, fault: Fault) -> None:
    assert Fault.parse(spec) == fault
    assert Fault.from_json(spec) == fault
    assert Fault.from_json(fault.to_json()) == fault


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "boom",
        "status",
        "drop=1",
        "status=abc",
        "status=700",
        "stall=-1",
        "drop,times=0",
        "drop,colour=red",
        "/x",
        "route:drop",
        "huge",
        "drop,head",
        "drip=1,land=2",
        "drop,after,land=1",
        "drop,land=-1",
    ],
)
def test_bad_specs_are_value_errors(spec: str) -> None:
    with pytest.raises(ValueError):
        Fault.parse(spec)


# -- every fault kind -----------------------------------------------------------------------


def test_status_fails_the_next_n_requests_of_a_route(start: StartEmulator) -> None:
    emulator = start(faults=(Fault.parse("/v1/models:status=503,times=2"),))
    assert emulator.client.get("/server_info").status_code == 200
    for _ in range(2):
        response = emulator.client.get("/v1/models")
        assert response.status_code == 503
        assert response.json() == {"detail": "Service Unavailable"}
    assert emulator.client.get("/v1/models").status_code == 200


def test_status_with_a_text_body(start: StartEmulator) -> None:
    emulator = start(faults=(Fault.parse("status=500,body=Internal Server Error"),))
    response = emulator.client.get("/v1/models")
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "Internal Server Error"


def test_status_on_every_route_until_cleared(start: StartEmulator) -> None:
    emulator = start(faults=(Fault.parse("*:status=502,times=always"),))
    for path in ("/v1/models", "/health", "/server_info", "/nope"):
        assert emulator.client.get(path).status_code == 502
    emulator.server.clear_faults()
    assert emulator.client.get("/v1/models").status_code == 200


def test_a_status_fault_does_not_handle_the_request(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:status=503"))
    assert lora.load("sql", make_adapter("sql")).status_code == 503
    assert lora.models() == {}


def test_after_handles_the_request_then_faults_the_answer(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:status=504,after"))
    assert lora.load("sql", make_adapter("sql")).status_code == 504
    assert lora.models() == {"sql": "/adapters/sql"}


def test_drop_closes_without_a_response(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:drop"))
    with pytest.raises(httpx2.RemoteProtocolError):
        lora.load("sql", make_adapter("sql"))
    assert lora.models() == {}


def test_drop_after_loses_the_answer_of_a_load_that_happened(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:drop,after"))
    with pytest.raises(httpx2.RemoteProtocolError):
        lora.load("sql", make_adapter("sql"))
    assert lora.models() == {"sql": "/adapters/sql"}


def test_drop_land_loses_the_answer_then_loads_late(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:drop,land=0.5"))
    with pytest.raises(httpx2.RemoteProtocolError):
        lora.load("sql", make_adapter("sql"))
    dropped = time.monotonic()
    assert lora.models() == {}
    while lora.models() == {} and time.monotonic() - dropped < 5:
        time.sleep(0.02)
    assert lora.models() == {"sql": "/adapters/sql"}
    assert time.monotonic() - dropped >= 0.4


def test_drip_head_trickles_the_status_line_and_headers(lora: Emulator) -> None:
    lora.server.inject(Fault.parse("/v1/models:drip=0.02,chunk=4,head"))
    started = time.monotonic()
    with lora.client.stream("GET", "/v1/models", timeout=httpx2.Timeout(5.0, read=0.1)) as stream:
        headers_took = time.monotonic() - started
        assert stream.status_code == 200
    # every read came within the per-read timeout, the ~70 bytes of head as a whole did not
    assert headers_took > 0.2


def test_stall_outlasts_a_client_timeout(lora: Emulator) -> None:
    lora.server.inject(Fault.parse("/v1/models:stall=0.2"))
    with pytest.raises(httpx2.ReadTimeout):
        lora.client.get("/v1/models", timeout=httpx2.Timeout(1.0, read=0.1))
    started = time.monotonic()
    with client(lora.server.url) as patient:
        lora.server.inject(Fault.parse("/v1/models:stall=0.05"))
        assert patient.get("/v1/models").status_code == 200
    assert time.monotonic() - started >= 0.05


def test_malformed_answers_200_with_broken_json(lora: Emulator) -> None:
    lora.server.inject(Fault.parse("/load_lora_adapter:malformed"))
    response = lora.load("sql", "/adapters/sql")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.content)


def test_huge_answers_exactly_n_bytes(lora: Emulator) -> None:
    lora.server.inject(Fault.parse("/v1/models:huge=3000000"))
    response = lora.client.get("/v1/models")
    assert response.status_code == 200
    assert len(response.content) == 3_000_000
    assert int(response.headers["content-length"]) == 3_000_000


def test_drip_trickles_the_real_answer(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("sql", make_adapter("sql"))
    normal = lora.client.get("/v1/models").json()
    lora.server.inject(Fault.parse("/v1/models:drip=0.02,chunk=100"))
    started = time.monotonic()
    chunks = []
    with lora.client.stream("GET", "/v1/models", timeout=httpx2.Timeout(5.0, read=0.5)) as stream:
        assert stream.status_code == 200
        chunks = list(stream.iter_raw())
    elapsed = time.monotonic() - started
    body = json.loads(b"".join(chunks))
    assert body["data"][1:] == normal["data"][1:]
    expected_chunks = -(-len(b"".join(chunks)) // 100)
    assert len(chunks) >= 2
    assert elapsed >= 0.02 * expected_chunks * 0.9


def test_latency_per_route(start: StartEmulator) -> None:
    emulator = start(latency={"/v1/models": 0.1})
    assert emulator.client.get("/v1/models").elapsed.total_seconds() >= 0.1
    assert emulator.client.get("/server_info").elapsed.total_seconds() < 0.1


def test_star_latency_applies_to_routes_without_their_own(start: StartEmulator) -> None:
    emulator = start(latency={"*": 0.05, "/server_info": 0.0})
    assert emulator.client.get("/model_info").elapsed.total_seconds() >= 0.05
    assert emulator.client.get("/server_info").elapsed.total_seconds() < 0.05


# -- the admin API --------------------------------------------------------------------------


def test_admin_api_arms_lists_and_clears_faults(lora: Emulator) -> None:
    armed = lora.client.post(
        "/_emulator/faults",
        json={
            "faults": ["/v1/models:status=503,times=2", {"kind": "drop", "route": "/generate"}],
            "latency": {"/server_info": 0.01},
        },
    )
    assert armed.status_code == 200
    view = lora.client.get("/_emulator/faults").json()
    assert view == armed.json()
    assert [(f["kind"], f["route"], f["remaining"]) for f in view["faults"]] == [
        ("status", "/v1/models", 2),
        ("drop", "/generate", 1),
    ]
    assert view["latency"] == {"/server_info": 0.01}
    assert lora.client.get("/v1/models").status_code == 503
    assert lora.client.get("/_emulator/faults").json()["faults"][0]["remaining"] == 1
    cleared = lora.client.delete("/_emulator/faults")
    assert cleared.json() == {"faults": [], "latency": {}}
    assert lora.client.get("/v1/models").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"faults": ["boom"]},
        {"faults": [{"kind": "drop", "colour": "red"}]},
        {"latency": {"v1/models": 1}},
        {"latency": {"/v1/models": -1}},
        {"startup_delay": -1},
        {"unknown": 1},
        ["drop"],
    ],
)
def test_admin_api_refuses_bad_updates_whole(lora: Emulator, body: object) -> None:
    response = lora.client.post(
        "/_emulator/faults", json={"faults": ["drop"], **body} if isinstance(body, dict) else body
    )
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str)
    assert lora.client.get("/_emulator/faults").json() == {"faults": [], "latency": {}}


def test_admin_state_shows_the_registry(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("a", make_adapter("a"))
    lora.load("b", make_adapter("b"), pinned=True)
    lora.generate("a")
    assert lora.state() == {
        "ready": True,
        "updating": False,
        "update_requests": 2,  # the two loads
        "adapters": [
            {"name": "b", "path": "/adapters/b", "pinned": True, "in_flight": 0},
            {"name": "a", "path": "/adapters/a", "pinned": False, "in_flight": 0},
        ],
        "draining": [],
        "ever_loaded": {"a": "/adapters/a", "b": "/adapters/b"},
        "inferences": {"a": 1},  # the generation through it
    }


def test_admin_routes_are_never_faulted(start: StartEmulator) -> None:
    emulator = start(**LORA, faults=(Fault.parse("*:drop,times=always"),))
    assert emulator.client.get("/_emulator/state").status_code == 200
    assert emulator.client.delete("/_emulator/faults").status_code == 200
    assert emulator.client.get("/v1/models").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("PUT", "/_emulator/faults", 405),
        ("POST", "/_emulator/state", 405),
        ("GET", "/_emulator/x", 404),
    ],
)
def test_admin_routing(lora: Emulator, method: str, path: str, status: int) -> None:
    assert lora.client.request(method, path).status_code == status


@pytest.mark.parametrize("path", ["/_emulator/faults", "/_emulator/state"])
def test_admin_api_is_off_without_the_flag(start: StartEmulator, path: str) -> None:
    emulator = start(admin=False)
    for method in ("GET", "POST", "DELETE"):
        response = emulator.client.request(method, path)
        assert response.status_code == 404
        assert response.json() == {"detail": "Not Found"}
