"""A cluster's kubeconfig *object* handed to pulumi-lora, as pulumi-eks' ``Cluster.kubeconfig``
is (issue 53): through the real CLI, ``up``, a clean ``preview --refresh`` and ``destroy`` work,
and no printed text nor ``pulumi stack export`` shows a piece of its credentials, through a
check failure (a bad type), a create failure (a server nobody answers), and a read and a
delete failure (the cluster's endpoint gone).

The kubeconfig carries a ServiceAccount's token made for this test, so any piece of it found is
a leak; nothing else can reach the cluster (``KUBECONFIG`` names no file, no stack config).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora.testing.engine import LocalEngine, ProjectDir
from pulumi_lora.testing.testbed import Testbed
from tests.e2e.test_secrets import service_account_kubeconfig

from .conftest import UserVenv, assert_clean_refresh, assert_nothing_left, ready_service, served

PROGRAM = '''"""A platform stack: its cluster's kubeconfig object, as from pulumi-eks."""

import json

import pulumi

from pulumi_lora import LoRAAdapter

config = pulumi.Config()


def cluster_kubeconfig(key: str) -> pulumi.Output:
    """As ``eks.Cluster(...).kubeconfig`` arrives: an Output of an object, not marked secret."""
    with open(config.require(key)) as file:
        return pulumi.Output.from_input(json.load(file)).apply(lambda document: document)


kubeconfig = cluster_kubeconfig("clusterKubeconfig")
if config.get_bool("wrapInList"):  # a program bug: the kubeconfig in a list
    kubeconfig = kubeconfig.apply(lambda document: [document])
common = {"inference_service": "llama", "namespace": config.require("namespace")}
adapter = LoRAAdapter(
    "sql", adapter_name="sql-lora", path="/adapters/sql-lora", kubeconfig=kubeconfig, **common
)
pulumi.export("loaded", adapter.loaded)
if config.get("otherClusterKubeconfig"):
    LoRAAdapter(
        "other",
        adapter_name="other-lora",
        path="/adapters/sql-lora",
        kubeconfig=cluster_kubeconfig("otherClusterKubeconfig"),
        **common,
    )
'''


class Relay:
    """The cluster's endpoint as the kubeconfig names it: a TCP relay to the apiserver on a port
    of its own, which can go away (connections refused) and come back on the same port."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None

    def start(self) -> Relay:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    @property
    def running(self) -> bool:
        return self._listener is not None

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: the endpoint is gone
            server = socket.create_connection(self.upstream)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError), closing(source), closing(sink):
            while chunk := source.recv(65536):
                sink.sendall(chunk)


@pytest.fixture
def relay(testbed: Testbed) -> Iterator[Relay]:
    host, _, port = testbed.server.removeprefix("https://").rpartition(":")
    started = Relay((host, int(port))).start()
    yield started
    started.stop()


def kubeconfig_object(testbed: Testbed, token: str, user: str, server: str) -> dict[str, Any]:
    """The testbed's kubeconfig for ``token`` at ``server``, as an object (CA embedded)."""
    document = testbed.kubeconfig_dict(token, user)
    document["clusters"][0]["cluster"]["server"] = server
    return document


def pieces(token: str) -> list[str]:
    """What would betray the token: its head, its middle and its tail."""
    middle = len(token) // 2
    return [token[:12], token[middle - 6 : middle + 6], token[-12:]]


def test_a_kubeconfig_object_works_and_no_failure_prints_its_credentials(
    testbed: Testbed, namespace: str, tmp_path: Path, user_venv: UserVenv, relay: Relay
) -> None:
    handle = ready_service(testbed, namespace)
    token, _ = service_account_kubeconfig(testbed, namespace)  # cluster-admin, made for this test
    user = f"system:serviceaccount:{namespace}:deployer"
    folder = tmp_path / "platform"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text(
        "name: platform\nruntime:\n  name: python\n  options:\n    virtualenv: venv\n"
    )
    (folder / "__main__.py").write_text(PROGRAM)
    (folder / "venv").symlink_to(user_venv.path, target_is_directory=True)
    engine = LocalEngine(tmp_path / "engine", extra_env={"KUBECONFIG": str(tmp_path / "none")})
    runner = ProjectDir(engine, folder, venv=folder / "venv")
    cluster = tmp_path / "cluster.json"
    cluster.write_text(
        json.dumps(kubeconfig_object(testbed, token, user, f"https://127.0.0.1:{relay.port}"))
    )
    with closing(socket.socket()) as probe:  # a port nobody answers on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(kubeconfig_object(testbed, token, user, f"https://127.0.0.1:{dead}"))
    )

    printed: list[str] = []

    def pulumi(*args: str, ok: bool = True) -> str:
        done = runner.pulumi(*args, check=False)
        text = done.stdout + done.stderr
        printed.append(f"$ pulumi {' '.join(args)}\n{text}")
        assert (done.returncode == 0) == ok, text
        return text

    pulumi("stack", "init", "dev")
    pulumi("config", "set", "namespace", namespace)
    pulumi("config", "set", "clusterKubeconfig", str(cluster))
    try:
        pulumi("up", "--yes")
        assert all(
            adapters == {"sql-lora": "/adapters/sql-lora"} for adapters in served(handle).values()
        )
        assert_clean_refresh(runner)
        pulumi("preview", "--refresh", "--expect-no-changes", "--diff")
        exported = pulumi("stack", "export")
        resources = json.loads(exported)["deployment"]["resources"]
        (adapter,) = [r for r in resources if str(r.get("id", "")).endswith("/sql-lora")]
        assert "ciphertext" in adapter["inputs"]["kubeconfig"]
        assert "ciphertext" in adapter["outputs"]["kubeconfig"]

        # check: a bad type, named and not quoted
        pulumi("config", "set", "wrapInList", "true")
        said = pulumi("preview", ok=False)
        assert "kubeconfig (a list; its value is not shown: it holds credentials)" in said, said
        pulumi("config", "rm", "wrapInList")

        # create: a second cluster's endpoint that nobody answers
        pulumi("config", "set", "otherClusterKubeconfig", str(other))
        said = pulumi("up", "--yes", ok=False)
        assert f"127.0.0.1:{dead}" in said, said  # the failure names where it could not connect
        pulumi("config", "rm", "otherClusterKubeconfig")

        # read and delete: the cluster's endpoint goes away
        relay.stop()
        said = pulumi("refresh", "--yes", ok=False)
        assert f"127.0.0.1:{relay.port}" in said, said
        said = pulumi("destroy", "--yes", ok=False)
        assert f"127.0.0.1:{relay.port}" in said, said
        relay.start()  # back on the same port
        pulumi("destroy", "--yes")
        exported_after = pulumi("stack", "export")
    finally:
        if not relay.running:
            relay.start()
        runner.pulumi("destroy", "--yes", "--skip-preview", check=False)
    assert_nothing_left(testbed, [handle])
    every_text = "\n".join(printed) + exported + exported_after
    found = [piece for piece in pieces(token) if piece in every_text]
    assert not found, f"pieces of the token printed: {found}"
    assert testbed.admin_token[:12] not in every_text
