"""The fetch's bounds, against a hostile server on loopback: an endless or oversized answer is cut
at --max-bytes, a dripping one at --deadline (whichever client fetches it), and an https source
is never followed down to plain http.

No test measures time: each asserts what the server managed to send before the stager gave up
(less than half of what a patient client would have taken).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pulumi_lora._staging._errors import InsecureRedirect, SourceTooLarge, SourceTooSlow
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora._staging._transfer import TransferLimits

from .conftest import ADAPTER_CONFIG, leftovers
from .played import PlayedHttp, Reply, endless

CONFIG = json.dumps(ADAPTER_CONFIG).encode()
WEIGHTS = "adapter_model.safetensors"
DRIP = 0.02
"""Seconds between dripped bytes: 400 bytes take 8 s, against a `DEADLINE` of 0.4 s."""
DEADLINE = 0.4
"""Seconds a dripped fetch may take in all (connect and TLS included)."""
DRIPPED = os.urandom(400)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_endless_body_is_cut_off_at_max_bytes(played: PlayedHttp, tmp_path: Path) -> None:
    played.routes["GET /sql/adapter_config.json"] = Reply(body=endless())
    request = parse_source(f"{played.url}/sql/", digests={"adapter_config.json": "0" * 64})
    with pytest.raises(SourceTooLarge) as large:
        stage(request, tmp_path, transfer=TransferLimits(max_bytes=1 << 20))
    assert large.value.file == "adapter_config.json"
    assert large.value.detail == (
        "adapter_config.json: the source sent more than --max-bytes 1048576 over all files: cut off"
    )
    assert played.count("GET /sql/adapter_config.json").body < 32 << 20  # cut, not waited out
    assert leftovers(tmp_path) == []


def test_a_declared_size_beyond_max_bytes_is_refused_before_its_body(
    played: PlayedHttp, tmp_path: Path
) -> None:
    weights = os.urandom(300 << 10)
    played.routes["GET /sql/adapter_config.json"] = Reply(body=CONFIG)
    played.routes[f"GET /sql/{WEIGHTS}"] = Reply(body=weights)
    request = parse_source(
        f"{played.url}/sql/", digests={"adapter_config.json": sha(CONFIG), WEIGHTS: sha(weights)}
    )
    with pytest.raises(SourceTooLarge) as large:
        stage(request, tmp_path, transfer=TransferLimits(max_bytes=200 << 10))
    left = (200 << 10) - len(CONFIG)
    assert large.value.detail == (
        f"{WEIGHTS}: the source declares {300 << 10} bytes, more than the {left} bytes left of "
        f"--max-bytes {200 << 10}"
    )
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("drip_head", [False, True], ids=["body", "status-and-headers"])
def test_a_dripping_https_source_is_cut_off_at_the_deadline(
    played: PlayedHttp, tmp_path: Path, drip_head: bool
) -> None:
    """Every byte comes well within the 60 s read timeout; the whole answer never does."""
    played.routes["GET /sql/adapter_config.json"] = Reply(
        body=DRIPPED, drip=DRIP, drip_head=drip_head
    )
    request = parse_source(f"{played.url}/sql/", digests={"adapter_config.json": sha(DRIPPED)})
    with pytest.raises(SourceTooSlow) as slow:
        stage(request, tmp_path, transfer=TransferLimits(deadline=DEADLINE))
    assert slow.value.file == "adapter_config.json" and slow.value.retryable
    assert f"adapter_config.json: the fetch did not end within --deadline {DEADLINE:g} s" in str(
        slow.value
    )
    sent = played.count("GET /sql/adapter_config.json")
    assert sent.body < len(DRIPPED) // 2, sent  # cut off, not waited out
    assert leftovers(tmp_path) == []


def test_a_dripping_hub_is_cut_off_at_the_deadline(played: PlayedHttp, tmp_path: Path) -> None:
    commit = "c" * 40
    path = f"/acme/drip/resolve/{commit}/adapter_config.json"
    headers = {"X-Repo-Commit": commit, "ETag": '"e"', "Content-Length": str(len(DRIPPED))}
    played.routes[f"HEAD {path}"] = Reply(headers=headers)
    played.routes[f"GET {path}"] = Reply(body=DRIPPED, drip=DRIP)
    request = parse_source(
        f"hf://acme/drip@{commit}", digests={"adapter_config.json": sha(DRIPPED)}
    )
    with pytest.raises(SourceTooSlow) as slow:
        stage(
            request,
            tmp_path,
            env={"HF_ENDPOINT": played.url},
            transfer=TransferLimits(deadline=DEADLINE),
        )
    assert slow.value.file == "adapter_config.json"
    assert played.count(f"GET {path}").body < len(DRIPPED) // 2  # cut off, not waited out
    assert leftovers(tmp_path) == []


def test_a_hub_asking_to_wait_past_the_deadline_fails_now(
    played: PlayedHttp, tmp_path: Path
) -> None:
    """A 429's Retry-After is waited for only within the deadline: not past it."""
    commit = "e" * 40
    path = f"/acme/busy/resolve/{commit}/adapter_config.json"
    played.routes[f"GET {path}"] = Reply(429, {"Retry-After": "86400", "X-Repo-Commit": commit})
    request = parse_source(f"hf://acme/busy@{commit}", digests={"adapter_config.json": sha(CONFIG)})
    with pytest.raises(SourceTooSlow, match="did not end within --deadline 600 s"):
        stage(
            request,
            tmp_path,
            env={"HF_ENDPOINT": played.url},
            transfer=TransferLimits(deadline=600.0),
        )
    assert played.count(f"GET {path}").requests == 1
    assert leftovers(tmp_path) == []


def test_a_dripping_s3_object_is_cut_off_at_the_deadline(
    played: PlayedHttp, tmp_path: Path
) -> None:
    """boto3's sockets are out of reach: the stager stops waiting for its reading thread."""
    played.routes["GET /bucket/sql/adapter_config.json"] = Reply(body=DRIPPED, drip=DRIP)
    request = parse_source(
        "s3://bucket/sql/",
        digests={"adapter_config.json": sha(DRIPPED)},
        s3_endpoint=played.url,
        s3_public=True,  # the played server asks for no credential
    )
    with pytest.raises(SourceTooSlow) as slow:
        stage(request, tmp_path, env={}, transfer=TransferLimits(deadline=DEADLINE))
    assert slow.value.file == "adapter_config.json"
    assert played.count("GET /bucket/sql/adapter_config.json").body < len(DRIPPED) // 2
    assert leftovers(tmp_path) == []


def test_an_https_source_is_never_followed_down_to_plain_http(
    played_tls: PlayedHttp, played: PlayedHttp, tmp_path: Path
) -> None:
    plain = f"http://localhost:{played.port}/sql/adapter_config.json"
    played_tls.routes["GET /sql/adapter_config.json"] = Reply(302, {"Location": plain})
    played.routes["GET /sql/adapter_config.json"] = Reply(body=CONFIG)
    request = parse_source(f"{played_tls.url}/sql/", digests={"adapter_config.json": sha(CONFIG)})
    with pytest.raises(InsecureRedirect) as insecure:
        stage(request, tmp_path)
    assert insecure.value.file == "adapter_config.json"
    assert insecure.value.detail == (
        "adapter_config.json: the https source redirected to plain http on localhost"
    )
    assert played_tls.count("GET /sql/adapter_config.json").requests == 1
    assert played.count("GET /sql/adapter_config.json").requests == 0  # never asked
    assert leftovers(tmp_path) == []


def test_an_https_hub_is_never_followed_down_to_plain_http(
    played_tls: PlayedHttp, played: PlayedHttp, tmp_path: Path
) -> None:
    """The Hub's answer for a file names where to download it: a plain-http location is refused."""
    commit = "d" * 40
    cdn = f"http://localhost:{played.port}/cdn/blob"
    headers = {
        "X-Repo-Commit": commit,
        "Location": cdn,
        "X-Linked-Etag": f'"{sha(CONFIG)}"',
        "X-Linked-Size": str(len(CONFIG)),
    }
    played_tls.routes[f"GET /acme/down/resolve/{commit}/adapter_config.json"] = Reply(302, headers)
    played.routes["GET /cdn/blob"] = Reply(body=CONFIG)
    request = parse_source(f"hf://acme/down@{commit}", digests={"adapter_config.json": sha(CONFIG)})
    with pytest.raises(InsecureRedirect, match="redirected to plain http on localhost"):
        stage(request, tmp_path, env={"HF_ENDPOINT": played_tls.url})
    assert played.count("GET /cdn/blob").requests == 0  # never asked
    assert leftovers(tmp_path) == []
