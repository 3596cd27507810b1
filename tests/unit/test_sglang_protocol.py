"""The pure protocol: every status and message of the SGLang contract maps to one outcome/error."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulumi_lora import _sglang
from pulumi_lora._errors import (
    BadRequest,
    ConfigurationError,
    EvictionImpossible,
    IncompatibleAdapter,
    IncompleteUnload,
    InvalidAdapterPath,
    LoRADisabled,
    PinStarvation,
    PulumiLoRAError,
    ServerStarting,
    SGLangConnectionError,
    SGLangProtocolError,
    SGLangServerError,
    Unauthorized,
    UnsupportedServer,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import _answers, _protocol
from pulumi_lora._sglang._answers import (
    classify_health,
    classify_load,
    classify_models,
    classify_unload,
)
from pulumi_lora._sglang._protocol import (
    MAX_BODY_BYTES,
    AlreadyLoaded,
    Health,
    Loaded,
    ModelList,
    NotLoaded,
    Peer,
    Request,
    Unloaded,
    build_headers,
    credential_values,
)

PEER = Peer("llama-0")
KEYED = Peer("llama-0", api_key_configured=True)
NAME, PATH = "sql", "/adapters/sql"


def lora(success: bool, message: str | None = "", adapters: Any = None, **extra: Any) -> bytes:
    """A load/unload answer as SGLang ≥ 0.5.5 writes it (200 and 400 alike)."""
    body = {"rid": None, "http_worker_ipc": None, "success": success, "error_message": message}
    return json.dumps({**body, "loaded_adapters": adapters, **extra}).encode()


def load(status: int, body: bytes, peer: Peer = PEER, name: str = NAME) -> Any:
    return classify_load(status, body, name=name, path=PATH, peer=peer)


def unload(status: int, body: bytes, peer: Peer = PEER) -> Any:
    return classify_unload(status, body, name=NAME, peer=peer)


def models(status: int, body: bytes, peer: Peer = PEER) -> Any:
    return classify_models(status, body, peer=peer)


def health(status: int, body: bytes, peer: Peer = PEER) -> Any:
    return classify_health(status, body, peer=peer)


def check(classify: Callable[..., Any], status: int, body: bytes, expected: Any) -> Any:
    """Assert ``classify`` returns ``expected`` (a value) or raises it (an error class)."""
    if isinstance(expected, type) and issubclass(expected, BaseException):
        with pytest.raises(expected) as caught:
            classify(status, body)
        assert type(caught.value) is expected
        return caught.value
    assert classify(status, body) == expected
    return None


def params(cases: list[tuple[Any, ...]]) -> list[Any]:
    """Table rows ``(id, *values)`` as pytest params named by their id."""
    return [pytest.param(*values, id=case) for case, *values in cases]


FASTAPI_400 = json.dumps(
    {
        "object": "error",
        "message": "lora_name: Field required",
        "type": "Bad Request",
        "param": None,
        "code": 400,
    }
).encode()
OTHER = {"other": "/adapters/other"}
MINE = {NAME: PATH}

LOAD_CASES = [
    # 200: success, the map is the server's whole map after the load.
    ("success", 200, lora(True, "", {**OTHER, **MINE}), Loaded(NAME, PATH, {**OTHER, **MINE})),
    ("success-evicted-lru", 200, lora(True, "", MINE), Loaded(NAME, PATH, MINE)),
    ("success-null-message", 200, lora(True, None, MINE), Loaded(NAME, PATH, MINE)),
    ("success-no-map", 200, lora(True, "", None), Loaded(NAME, PATH, None)),
    ("success-reported-path", 200, lora(True, "", {NAME: "/x"}), Loaded(NAME, "/x", {NAME: "/x"})),
    (
        "success-0.4.10-no-rid",
        200,
        json.dumps({"success": True, "error_message": "", "loaded_adapters": MINE}).encode(),
        Loaded(NAME, PATH, MINE),
    ),
    ("success-unknown-keys", 200, lora(True, "", MINE, future=[1]), Loaded(NAME, PATH, MINE)),
    # 400s in the contract's order of checks.
    (
        "lora-disabled",
        400,
        lora(False, "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", None),
        LoRADisabled,
    ),
    (
        "path-not-a-dir-hub-offline",
        400,
        lora(False, "We couldn't connect to 'https://huggingface.co' to load the files.", OTHER),
        InvalidAdapterPath,
    ),
    (
        "path-bad-repo-id",
        400,
        lora(False, "Repo id must be in the form 'repo_name': '/adapters/missing'.", OTHER),
        InvalidAdapterPath,
    ),
    (
        "path-no-adapter-config",
        400,
        lora(False, "Can't find 'adapter_config.json' at '/adapters/sql'", OTHER),
        InvalidAdapterPath,
    ),
    ("path-empty-message", 400, lora(False, "", OTHER), InvalidAdapterPath),
    ("path-null-message", 400, lora(False, None, OTHER), InvalidAdapterPath),
    (
        "duplicate-same-path",
        400,
        lora(False, f"Failed to load LoRA adapter {NAME} because it is already loaded", MINE),
        AlreadyLoaded(NAME, PATH),
    ),
    (
        "duplicate-other-path",
        400,
        lora(
            False, f"Failed to load LoRA adapter {NAME} because it is already loaded", {NAME: "/o"}
        ),
        AlreadyLoaded(NAME, "/o"),
    ),
    (
        "duplicate-0.4.10-wording",
        400,
        lora(False, f"LoRA with name {NAME} already exists", MINE),
        AlreadyLoaded(NAME, PATH),
    ),
    (
        "duplicate-no-map",
        400,
        lora(False, f"Failed to load LoRA adapter {NAME} because it is already loaded", None),
        AlreadyLoaded(NAME, None),
    ),
    (
        "incompatible",
        400,
        lora(
            False,
            "LoRA adapter sql with rank 64 is incompatible with the current LoRA memory "
            "pool configuration. Please ensure that --max-lora-rank ...",
            OTHER,
        ),
        IncompatibleAdapter,
    ),
    (
        "pin-starvation",
        400,
        lora(
            False,
            "It is not allowed to pin all slots in the LoRA memory pool to avoid "
            "starvation for unpinned adapters and base models.",
            OTHER,
        ),
        PinStarvation,
    ),
    (
        "eviction-impossible",
        400,
        lora(
            False,
            "Didn't find any LoRA adapters when trying to evict LRU LoRA adapter. "
            "LoRA registry is: {}",
            None,
        ),
        EvictionImpossible,
    ),
    (
        "max-loaded-0.5.5-and-older",
        400,
        lora(
            False,
            "Cannot load LoRA adapter sql at path /adapters/sql. Maximum number of "
            "loaded LoRA adapters is 4. Please unload some LoRA adapters before loading new "
            "ones.",
            None,
        ),
        EvictionImpossible,
    ),
    (
        "evicting-failed",
        400,
        lora(False, "Error while unloading LRU LoRA adapter 'old': boom", None),
        EvictionImpossible,
    ),
    (
        "incomplete-unload-0.5.23",
        400,
        lora(False, "LoRA adapter sql has an incomplete unload; restart the server", OTHER),
        IncompleteUnload,
    ),
    ("malformed-body", 400, FASTAPI_400, BadRequest),
    ("fastapi-422", 422, b'{"detail": [{"loc": ["body", "lora_name"]}]}', BadRequest),
    # Status first: whatever the body says.
    ("dp-size-assertion", 500, b"Internal Server Error", SGLangServerError),
    ("bad-gateway", 502, b"<html>bad gateway</html>", SGLangServerError),
    ("starting", 503, b"", ServerStarting),
    ("starting-json-success", 503, lora(True, "", MINE), ServerStarting),
    ("unauthorized", 401, b'{"error": "Unauthorized"}', Unauthorized),
    ("forbidden", 403, b"forbidden", Unauthorized),
    ("no-lora-routes-0.4.8", 404, b'{"detail": "Not Found"}', UnsupportedServer),
    ("wrong-method", 405, b'{"detail": "Method Not Allowed"}', UnsupportedServer),
    ("redirect", 307, b"", SGLangProtocolError),
    ("teapot", 418, b"", SGLangProtocolError),
    # A failure is never a success, whatever the other half says.
    (
        "200-success-false",
        200,
        lora(False, f"Failed to load LoRA adapter {NAME} because it is already loaded", MINE),
        AlreadyLoaded(NAME, PATH),
    ),
    ("200-success-false-no-message", 200, lora(False, "", MINE), InvalidAdapterPath),
    ("400-success-true", 400, lora(True, "", MINE), InvalidAdapterPath),
]


@pytest.mark.parametrize(("status", "body", "expected"), params(LOAD_CASES))
def test_load(status: int, body: bytes, expected: Any) -> None:
    check(load, status, body, expected)


UNLOAD_CASES = [
    ("success", 200, lora(True, "", OTHER), Unloaded(NAME, OTHER)),
    ("success-nothing-left", 200, lora(True, None, {}), Unloaded(NAME, {})),
    ("success-no-map", 200, lora(True, "", None), Unloaded(NAME, None)),
    (
        "unknown-name",
        400,
        lora(False, f"LoRA with name {NAME} does not exist. Loaded LoRAs: dict_keys([])", None),
        NotLoaded(NAME),
    ),
    (
        "lora-disabled",
        400,
        lora(False, "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", None),
        LoRADisabled,
    ),
    ("backend-unload-failed", 400, lora(False, "CUDA error", None), SGLangServerError),
    ("malformed-body", 400, FASTAPI_400, BadRequest),
    ("dp-size-assertion", 500, b"Internal Server Error", SGLangServerError),
    ("starting", 503, b"", ServerStarting),
    ("unauthorized", 401, b'{"error": "Unauthorized"}', Unauthorized),
    ("no-lora-routes", 404, b'{"detail": "Not Found"}', UnsupportedServer),
    ("200-success-false", 200, lora(False, "does not exist", None), NotLoaded(NAME)),
]


@pytest.mark.parametrize(("status", "body", "expected"), params(UNLOAD_CASES))
def test_unload(status: int, body: bytes, expected: Any) -> None:
    check(unload, status, body, expected)


def model(id_: str, parent: str | None, root: str, created: int = 0) -> dict[str, Any]:
    return {
        "id": id_,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": root,
        "parent": parent,
        "max_model_len": None if parent else 131072,
    }


def listing(*entries: dict[str, Any]) -> bytes:
    return json.dumps({"object": "list", "data": list(entries)}).encode()


BASE = model("llama", None, "llama")
MODELS_CASES = [
    ("base-only", 200, listing(BASE), ModelList("llama", {})),
    (
        "lru-order-and-created-ignored",
        200,
        listing(model("b", "llama", "/a/b", 9), BASE, model("a", "llama", "/a/a", 3)),
        ModelList("llama", {"a": "/a/a", "b": "/a/b"}),
    ),
    (
        "pre-0.5.5-no-parent",
        200,
        json.dumps({"object": "list", "data": [{"id": "llama", "root": "llama"}]}).encode(),
        UnsupportedServer,
    ),
    ("data-missing", 200, b'{"object": "list"}', SGLangProtocolError),
    ("data-not-a-list", 200, b'{"data": {"id": "llama"}}', SGLangProtocolError),
    ("entry-not-an-object", 200, b'{"data": ["llama"]}', SGLangProtocolError),
    ("entry-without-id", 200, b'{"data": [{"parent": null}]}', SGLangProtocolError),
    (
        "adapter-without-root",
        200,
        listing(BASE, {"id": "a", "parent": "llama"}),
        SGLangProtocolError,
    ),
    ("no-base-model", 200, listing(model("a", "llama", "/a/a")), SGLangProtocolError),
    ("empty", 200, listing(), SGLangProtocolError),
    ("starting", 503, b"", ServerStarting),
    ("unauthorized", 401, b'{"error": "Unauthorized"}', Unauthorized),
    ("no-route", 404, b'{"detail": "Not Found"}', UnsupportedServer),
    ("unexpected-400", 400, b"{}", SGLangProtocolError),
    ("server-error", 500, b"Internal Server Error", SGLangServerError),
]


@pytest.mark.parametrize(("status", "body", "expected"), params(MODELS_CASES))
def test_models(status: int, body: bytes, expected: Any) -> None:
    check(models, status, body, expected)


def test_models_contract_example() -> None:
    body = b"""{"object": "list", "data": [
      {"id": "llama-8b", "object": "model", "created": 0, "owned_by": "sglang",
       "root": "llama-8b", "parent": null, "max_model_len": 131072},
      {"id": "sql-lora", "object": "model", "created": 0, "owned_by": "sglang",
       "root": "/adapters/sql-lora", "parent": "llama-8b", "max_model_len": null}]}"""
    assert models(200, body) == ModelList("llama-8b", {"sql-lora": "/adapters/sql-lora"})


HEALTH_CASES = [
    ("ready", 200, b"", Health(ready=True)),
    ("starting", 503, b"", Health(ready=False)),
    ("not-sglang", 404, b"", UnsupportedServer),
    ("server-error", 500, b"", SGLangServerError),
    ("unauthorized", 401, b"", Unauthorized),
]


@pytest.mark.parametrize(("status", "body", "expected"), params(HEALTH_CASES))
def test_health(status: int, body: bytes, expected: Any) -> None:
    check(health, status, body, expected)


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("not-json", b"<html>oops</html>"),
        ("truncated-json", b'{"success": tr'),
        ("json-array", b"[true]"),
        ("json-string", b'"success"'),
        ("invalid-utf8", b'{"success": "\xff"}'),
        ("deeply-nested", b"[" * 100_000 + b"]" * 100_000),
        ("huge-integer", b'{"success": ' + b"9" * 5000 + b"}"),
        ("too-large", b" " * MAX_BODY_BYTES + lora(True, "", MINE)),
        ("no-success", b'{"loaded_adapters": {}}'),
        ("success-a-string", json.dumps({"success": "true"}).encode()),
        ("success-an-int", json.dumps({"success": 1}).encode()),
        ("error-message-an-int", json.dumps({"success": False, "error_message": 3}).encode()),
        ("adapters-a-list", lora(True, "", [NAME])),
        ("adapters-path-not-a-string", lora(True, "", {NAME: 1})),
    ],
)
def test_malformed_lora_answers_are_protocol_errors(case: str, body: bytes) -> None:
    for classify in (load, unload):
        check(classify, 200, body, SGLangProtocolError)


def test_messages_tell_what_to_do() -> None:
    disabled = check(load, 400, lora(False, "LoRA is not enabled.", None), LoRADisabled)
    assert "`--enable-lora`" in str(disabled)
    assert "spec.extraArgs" in str(disabled)
    assert "--dp-size" in str(check(load, 500, b"Internal Server Error", SGLangServerError))
    assert "--dp-size" not in str(check(load, 502, b"", SGLangServerError))
    assert "0.5.5" in str(check(load, 404, b'{"detail": "Not Found"}', UnsupportedServer))
    pre = json.dumps({"data": [{"id": "llama", "root": "llama"}]}).encode()
    assert "0.5.5" in str(check(models, 200, pre, UnsupportedServer))
    path_error = check(
        load, 400, lora(False, "No adapter_config.json in /x", OTHER), InvalidAdapterPath
    )
    assert path_error.server_message == "No adapter_config.json in /x"
    assert "SGLang said: No adapter_config.json in /x" in str(path_error)


def test_unauthorized_says_which_key() -> None:
    body = b'{"error": "Unauthorized"}'
    lora_with_key = str(check(lambda s, b: load(s, b, peer=KEYED), 401, body, Unauthorized))
    assert "admin" in lora_with_key
    lora_without = str(check(load, 401, body, Unauthorized))
    assert "none is configured" in lora_without
    assert "--admin-api-key" in lora_without
    models_with_key = str(check(lambda s, b: models(s, b, peer=KEYED), 401, body, Unauthorized))
    assert "`--api-key`" in models_with_key
    assert "admin" not in models_with_key


def test_apiserver_answers_are_told_apart() -> None:
    status_401 = json.dumps(
        {"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401}
    ).encode()
    assert "apiserver" in str(check(load, 401, status_401, Unauthorized))
    status_404 = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "message": 'pods "llama-0" not found',
            "reason": "NotFound",
            "code": 404,
        }
    ).encode()
    gone = check(load, 404, status_404, SGLangConnectionError)
    assert gone.retryable
    assert gone.server_message == 'pods "llama-0" not found'


def test_names_containing_rule_words_do_not_confuse_the_rules() -> None:
    name = "incompatible-starvation"
    message = f"Failed to load LoRA adapter {name} because it is already loaded"
    outcome = load(400, lora(False, message, {name: PATH}), name=name)
    assert outcome == AlreadyLoaded(name, PATH)


def test_errors_carry_context_and_cut_secrets() -> None:
    peer = Peer("llama-0", api_key_configured=True, secrets=("s3cret-key",))
    error = check(
        lambda s, b: load(s, b, peer=peer), 500, b"echo: Bearer s3cret-key", SGLangServerError
    )
    assert (error.target, error.route, error.status_code) == ("llama-0", "/load_lora_adapter", 500)
    assert "s3cret-key" not in str(error) + repr(error) + error.body_excerpt
    message = lora(False, "bad path s3cret-key", None)
    refused = check(lambda s, b: load(s, b, peer=peer), 400, message, InvalidAdapterPath)
    assert "s3cret-key" not in str(refused)
    assert "s3cret-key" not in repr(peer)


def test_requests() -> None:
    timeouts = ClientTimeouts(connect=1, read=2, load=3, unload=4)
    assert _protocol.load_request(NAME, PATH, pinned=True, timeouts=timeouts) == Request(
        "POST", "/load_lora_adapter", 3, {"lora_name": NAME, "lora_path": PATH, "pinned": True}
    )
    assert _protocol.unload_request(NAME, timeouts=timeouts) == Request(
        "POST", "/unload_lora_adapter", 4, {"lora_name": NAME}
    )
    assert _protocol.models_request(timeouts=timeouts) == Request("GET", "/v1/models", 2)
    assert _protocol.health_request(timeouts=timeouts) == Request("GET", "/health", 2)


def test_headers() -> None:
    headers = build_headers("k3y", {"X-Trace": "1"})
    assert headers["Authorization"] == "Bearer k3y"
    assert headers["X-Trace"] == "1"
    assert headers["Accept"] == "application/json"
    assert headers["User-Agent"].startswith("pulumi-lora/")
    assert "Authorization" not in build_headers()
    assert build_headers(None, {"accept": "text/plain"})["accept"] == "text/plain"
    assert "Accept" not in build_headers(None, {"accept": "text/plain"})
    proxied = build_headers(None, {"Authorization": "Bearer t0ken"})
    assert proxied["Authorization"] == "Bearer t0ken"
    assert credential_values("k3y", {"Authorization": "Bearer t0ken", "X-Trace": "1"}) == (
        "k3y",
        "Bearer t0ken",
        "t0ken",
    )


@pytest.mark.parametrize(
    ("api_key", "extra"),
    [
        ("", None),
        ("s3cret\nX-Evil: 1", None),
        (" s3cret", None),
        ("s3crét", None),
        ("k3y", {"Authorization": "Bearer t0ken"}),
        (None, {"Bad Name": "v"}),
        (None, {"X-Ok": "s3cret\r\n"}),
    ],
)
def test_bad_headers_are_refused_without_quoting_them(
    api_key: str | None, extra: dict[str, str] | None
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build_headers(api_key, extra)
    assert "s3cret" not in str(caught.value)


def test_sglang_all_is_sorted_and_exported() -> None:
    def isort_style(name: str) -> tuple[bool, bool, str]:
        return (not name.isupper(), not name[:1].isupper(), name)

    for module in (_sglang, _protocol):
        assert module.__all__ == sorted(module.__all__, key=isort_style)
        assert all(hasattr(module, name) for name in module.__all__)


@pytest.mark.parametrize("module", [_protocol, _answers])
def test_protocol_imports_no_http_library(module: ModuleType) -> None:
    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name.split(".")[0] for name in imported} & {"httpx2", "httpcore2", "lightkube"}


# --- property: classification never escapes the tree --------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGES = st.sampled_from(
    [
        "",
        "already loaded",
        "already exists",
        "does not exist",
        "LoRA is not enabled",
        "incompatible",
        "starvation",
        "Didn't find any LoRA adapters when trying to evict",
        "incomplete unload",
        "Maximum number of loaded LoRA adapters",
    ]
) | st.text(max_size=30)
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=5) | JSON,
        "parent": st.none() | st.text(max_size=5) | JSON,
        "root": st.text(max_size=5) | JSON,
    },
)
SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "success": st.booleans() | JSON,
        "error_message": st.none() | MESSAGES | JSON,
        "loaded_adapters": st.none()
        | st.dictionaries(st.text(max_size=5), st.text(max_size=5))
        | JSON,
        "data": st.lists(ENTRY, max_size=4) | JSON,
        "message": MESSAGES | JSON,
        "kind": st.just("Status") | JSON,
    },
)
BODIES = (
    st.binary(max_size=256)
    | JSON.map(lambda value: json.dumps(value).encode())
    | SHAPED.map(lambda value: json.dumps(value).encode())
)
OUTCOMES = (Loaded, AlreadyLoaded, Unloaded, NotLoaded, ModelList, Health)


@settings(max_examples=400, deadline=None)
@given(status=st.integers(min_value=-1, max_value=1000), body=BODIES)
def test_classification_never_raises_outside_the_tree(status: int, body: bytes) -> None:
    for classify in (load, unload, models, health):
        try:
            outcome = classify(status, body)
        except PulumiLoRAError:
            continue
        assert isinstance(outcome, OUTCOMES)
        assert status in (200, 400, 503)
