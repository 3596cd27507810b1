"""Staging from plain files over HTTP(S) through httpx2, and a volume that fills up for real.

The file server is plain HTTP on loopback (the source rules allow ``http://`` only to a loopback
host): a TLS server would need a CA the client trusts, and TLS is httpx2's, not ours, to test.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora._staging._errors import (
    SourceFileMissing,
    SourceUnauthorized,
    SourceUnreachable,
    VolumeFull,
)
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora.testing.hub import PlayedHub

from .conftest import Adapter, leftovers, make_adapter, staged_names

WEIGHTS = "adapter_model.safetensors"


class _Files(SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/private/"):
            self.send_error(403)
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def files_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    served = tmp_path / "served"
    served.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Files, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def put(served: Path, folder: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (served / folder / name).parent.mkdir(parents=True, exist_ok=True)
        (served / folder / name).write_bytes(data)


def test_pinned_files_over_http_land_verified(
    files_server: tuple[str, Path], adapter: Adapter, tmp_path: Path
) -> None:
    base, served = files_server
    put(served, "sql", adapter.files)
    request = parse_source(f"{base}/sql/", digests=adapter.digests)
    result = stage(request, tmp_path / "root")
    assert result.fetched and sorted(result.files) == sorted(adapter.files)
    assert leftovers(tmp_path / "root") == staged_names(result.key)


def test_a_missing_file_a_403_and_a_closed_port_are_told_apart(
    files_server: tuple[str, Path], adapter: Adapter, tmp_path: Path
) -> None:
    base, served = files_server
    root = tmp_path / "root"
    put(served, "sql", {"adapter_config.json": adapter.files["adapter_config.json"]})
    with pytest.raises(SourceFileMissing) as missing:
        stage(parse_source(f"{base}/sql/", digests=adapter.digests), root)
    assert missing.value.detail == f"{base}/sql/{WEIGHTS}: HTTP 404"
    with pytest.raises(SourceUnauthorized, match=r"/private/adapter_config.json: HTTP 403"):
        stage(parse_source(f"{base}/private/", digests=adapter.digests), root)
    with PlayedHub() as gone:
        closed = gone.endpoint  # a port that was ours a moment ago, closed now
    with pytest.raises(SourceUnreachable) as unreachable:
        stage(parse_source(f"{closed}/sql/", digests=adapter.digests), root)
    assert unreachable.value.retryable and "no answer (ConnectError)" in str(unreachable.value)
    assert leftovers(root) == []


@pytest.mark.parametrize(
    ("tiny_volume", "weights"),
    [(1, 2 << 20), (6, 12 << 20)],
    ids=["in-the-reader", "in-the-writing-thread"],  # past 4 MiB, a thread writes (_write._Sink)
    indirect=["tiny_volume"],
)
def test_a_full_volume_is_named_and_cleaned_up(
    hub: PlayedHub, tiny_volume: Path, weights: int
) -> None:
    adapter = make_adapter(weights_bytes=weights)  # twice the tmpfs
    commit = hub.publish("acme/big", adapter.files, lfs=frozenset({WEIGHTS}))
    request = parse_source(f"hf://acme/big@{commit}", digests=adapter.digests)
    with pytest.raises(VolumeFull) as full:
        stage(request, tiny_volume / "adapters", env={"HF_ENDPOINT": hub.endpoint})
    assert full.value.file == WEIGHTS
    assert str(full.value) == (
        f"no space left on the volume at {tiny_volume / 'adapters'} while writing {WEIGHTS}: "
        "the volume is full: grow the claim, or remove staged directories no adapter uses; "
        "the partial download was removed"
    )
    assert leftovers(tiny_volume / "adapters") == []
