"""The provider's side of the stager (``_lifecycle._stager``), without a cluster: how its
answers are read, and a lost server replaced once."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from pulumi_lora._errors import Forbidden
from pulumi_lora._kube._source import ProxyAccess
from pulumi_lora._lifecycle import _stager
from pulumi_lora._lifecycle._stager import Stager, StagerLost, Stagers
from pulumi_lora._staging._errors import StagingError
from pulumi_lora._staging._plan import AdapterMount


def stager() -> Stager:
    server = Stager(
        kube=None,  # type: ignore[arg-type] - no call reaches the apiserver here
        access=ProxyAccess(server="https://apiserver.example:6443/"),
        namespace="models",
        name="pulumi-lora-stager-0a1b2c3d4e",
        token="tok-81fe",
    )
    server.pod = "pulumi-lora-stager-0a1b2c3d4e-x7k2p"
    return server


def status(code: int, message: str) -> httpx2.Response:
    return httpx2.Response(code, json={"kind": "Status", "code": code, "message": message})


def test_the_server_is_reached_through_the_pod_proxy_and_never_shows_its_token() -> None:
    server = stager()
    assert server.url("/stage") == (
        "https://apiserver.example:6443/api/v1/namespaces/models/pods/"
        "pulumi-lora-stager-0a1b2c3d4e-x7k2p:8470/proxy/stage"
    )
    assert "tok-81fe" not in repr(server)


def test_answers_are_read_as_the_servers_or_the_apiservers() -> None:
    server = stager()
    assert server._document(httpx2.Response(200, json={"state": "running"})) == {"state": "running"}
    with pytest.raises(StagerLost, match="connection refused"):  # the pod no longer listens
        server._document(status(503, "error trying to reach service: connection refused"))
    with pytest.raises(StagerLost, match="not found"):  # the pod is gone
        server._document(status(404, 'pods "x" not found'))
    with pytest.raises(StagerLost):
        server._document(httpx2.Response(502, text="Bad Gateway"))
    with pytest.raises(Forbidden, match="pods/proxy"):
        server._document(status(403, "cannot create resource pods/proxy"))
    with pytest.raises(StagingError, match="HTTP 400"):
        server._document(httpx2.Response(400, json={"error": "not a valid request"}))


def test_an_evicted_or_failed_pod_counts_as_ended() -> None:
    evicted = {"status": {"phase": "Failed", "reason": "Evicted"}}
    assert _stager._terminated(evicted) == {"message": None, "exitCode": None, "reason": "Evicted"}
    assert _stager._terminated({"status": {"phase": "Running"}}) is None
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}}
    assert _stager._failed(failed) == "X" and _stager._failed({}) == ""


class FakeStagers(Stagers):
    """Servers that are made up, not started: ``run``'s replacement logic alone."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[Stager] = []

    def _server(self, key: Any, *args: Any, **kwargs: Any) -> Stager:
        with self._lock:
            found = self._servers.get(key)
        if found is not None:
            return found
        made = stager()
        made.close = made.lost.set  # type: ignore[method-assign]
        self.made.append(made)
        with self._lock:
            self._servers[key] = made
        return made


SETTINGS: Any = {
    "namespace": "models",
    "mount": AdapterMount("adapters", "/adapters"),
    "image": "localhost/pulumi-lora:0.3.0",
    "secret_name": None,
    "service_account": None,
    "hf_endpoint": None,
    "server_flags": ["--max-lora-rank", "8"],
    "deadline_seconds": 3600,
}
NO_KUBE: Any = None  # no call reaches the apiserver here


def run(
    stagers: Stagers, use: Any, label: str = "l", settings: Any = SETTINGS, **kwargs: Any
) -> Any:
    return stagers.run(
        NO_KUBE, lambda: NO_KUBE, "scope", settings, use, say=print, label=label, **kwargs
    )


def test_a_lost_server_is_replaced_once_and_the_call_sent_again() -> None:
    stagers, calls = FakeStagers(), []

    def use(server: Stager) -> str:
        calls.append(server)
        if len(calls) == 1:
            raise StagerLost("HTTP 503: connection refused")
        return "staged"

    got = run(stagers, use)
    assert got == "staged"
    assert len(stagers.made) == 2 and calls == stagers.made
    assert stagers.made[0].lost.is_set() and not stagers.made[1].lost.is_set()
    assert run(stagers, lambda s: s) is stagers.made[1]


def test_a_server_lost_twice_fails_saying_what_to_do() -> None:
    stagers = FakeStagers()

    def use(server: Stager) -> str:
        raise StagerLost("HTTP 503: connection refused")

    with pytest.raises(StagingError) as failed:
        run(stagers, use, "staging sql")
    assert "staging sql: the stager models/pulumi-lora-stager-" in str(failed.value)
    assert "stopped answering (HTTP 503: connection refused); run `pulumi up` again" in str(
        failed.value
    )


def test_a_call_that_fetches_nothing_takes_any_server_of_the_claim() -> None:
    """Verify and unstage take the staging server already running on the claim (one pod start
    for a command's stagings, checks and removals); a staging with other credentials or
    another endpoint never shares a server."""
    stagers = FakeStagers()
    private = {**SETTINGS, "secret_name": "hub-token", "hf_endpoint": "https://hub.example"}
    staging = run(stagers, lambda s: s, settings=private)
    bare = {**SETTINGS, "server_flags": []}
    assert run(stagers, lambda s: s, settings=bare, any_credentials=True) is staging
    public = run(stagers, lambda s: s)  # a staging without the Secret: a server of its own
    assert public is not staging and len(stagers.made) == 2
    other_claim = {**bare, "mount": AdapterMount("other", "/other")}
    assert run(stagers, lambda s: s, settings=other_claim, any_credentials=True) not in (
        staging,
        public,
    )
