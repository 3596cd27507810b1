"""Real parts for the staging tests: a played Hugging Face Hub and moto's S3 server, both on
loopback; adapters made of random bytes; a tiny tmpfs for a full volume."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.s3 import MotoServer, MotoUnavailableError

from .played import PlayedHttp, self_signed

TOKEN = "hf_played_token_0123456789"
ADAPTER_CONFIG = {"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "v_proj"]}


@dataclass(frozen=True)
class Adapter:
    """An adapter directory's files and their sha256."""

    files: dict[str, bytes]

    @property
    def digests(self) -> dict[str, str]:
        return {name: hashlib.sha256(data).hexdigest() for name, data in self.files.items()}


def make_adapter(weights_bytes: int = 256 << 10, **config: object) -> Adapter:
    """An adapter: a LoRA ``adapter_config.json`` and random weights of the given size."""
    text = json.dumps({**ADAPTER_CONFIG, **config}).encode()
    weights = os.urandom(weights_bytes)
    return Adapter({"adapter_config.json": text, "adapter_model.safetensors": weights})


@pytest.fixture
def adapter() -> Adapter:
    return make_adapter()


@pytest.fixture(scope="module")
def hub() -> Iterator[PlayedHub]:
    with PlayedHub(tokens=frozenset({TOKEN})) as played:
        yield played


def leftovers(root: Path) -> list[str]:
    """What a failed staging left in ``root`` (nothing, when it cleaned up)."""
    return sorted(os.listdir(root)) if root.exists() else []


def staged_names(key: str) -> list[str]:
    """What a staging leaves in its root: the directory, and its key's in-use mark."""
    return sorted([key, f".{key}.used"])


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    """moto's S3-compatible server (``moto_server``) on 127.0.0.1, a free port."""
    try:
        with MotoServer() as server:
            yield server
    except MotoUnavailableError as exc:
        missing_real_part(str(exc))


@pytest.fixture
def tiny_volume(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs of 1 MiB, or of the MiB an indirect parameter gives (root only): a volume that
    fills up for real."""
    mebibytes = int(getattr(request, "param", 1))
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        missing_real_part("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mebibytes}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing_real_part(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def played() -> Iterator[PlayedHttp]:
    """A hostile plain-HTTP server on 127.0.0.1 (see `played.PlayedHttp`)."""
    server = PlayedHttp()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    if shutil.which("openssl") is None:
        missing_real_part("making a test certificate needs the openssl command")
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def played_tls(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlayedHttp]:
    """The hostile server over TLS, its certificate trusted by httpx2 (``SSL_CERT_FILE``)."""
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = PlayedHttp(tls=context)
    try:
        yield server
    finally:
        server.close()
