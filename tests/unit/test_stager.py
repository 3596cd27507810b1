"""The provider's side of the stager (``_lifecycle._stager``), without a cluster: how its
answers are read, and a lost server replaced once."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any

import httpx2
import pytest

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._llmkube import Target
from pulumi_lora._errors import ConfigurationError, Forbidden
from pulumi_lora._kube._source import ProxyAccess
from pulumi_lora._lifecycle import _stage, _stager
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._stager import Stager, StagerLost, Stagers
from pulumi_lora._staging._errors import StagingError
from pulumi_lora._staging._plan import AdapterMount
from pulumi_lora._staging._serve import StagerServer, Work, token_digest


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


class Loopback(ProxyAccess):
    """The stager's server on this machine's loopback, not behind a pod proxy."""

    def url(self, namespace: str, pod: str, port: int) -> str:
        return self.server.rstrip("/")


class CountingWork(Work):
    """A server's work that ends its calls once it answered ``running`` ``until`` times."""

    until = 4
    running = 0
    done = threading.Event()

    def polled(self, kind: str, run: Any, ticket: str | None, wait: float) -> dict[str, Any]:
        answer = super().polled(kind, run, ticket, wait)
        if answer["state"] == "running":
            self.running += 1
            if self.running >= self.until:
                self.done.set()
        return answer


def test_a_verification_slower_than_the_read_timeout_is_long_polled_not_lost() -> None:
    """Issue 53: ``/verify`` (a multi-GB adapter hashed on a slow volume) or ``/collect``
    (waiting behind a key's lock) may take longer than a call's read timeout; the provider
    long-polls them as ``/stage``, so a slow server is never taken for a lost one (whose Job
    would be deleted with every staging on it)."""
    key, token, read_timeout = "0123456789abcdef", "tok-5e1a", 1.5
    work = CountingWork(
        stage=lambda r, s: {}, verify=lambda k: {}, unstage=lambda k: {}, deadline=1
    )
    work.done = threading.Event()

    def verify(keys: Any) -> dict[str, Any]:
        assert work.done.wait(30)  # after ``until`` answers of ``read_timeout / 3`` seconds each
        return {"keys": dict.fromkeys(keys, "verified")}

    work.verify = verify
    server = StagerServer(("127.0.0.1", 0), work, token_digest(token))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        stager = Stager(
            kube=None,  # type: ignore[arg-type] - no call reaches the apiserver here
            access=Loopback(server=f"http://127.0.0.1:{server.server_address[1]}"),
            namespace="models",
            name="pulumi-lora-stager-0a1b2c3d4e",
            token=token,
            read_timeout=read_timeout,
        )
        said: list[str] = []
        document = stager.polled("/verify", {"keys": [key]}, say=said.append, label="verifying")
    finally:
        server.shutdown()
        server.server_close()
        work.close()
    assert document == {"keys": {key: "verified"}}
    assert work.running >= work.until and work.until * stager.wait > read_timeout
    assert len(said) == work.running and all(s.startswith("verifying: running") for s in said)
    assert not stager.lost.is_set()


def test_a_starting_stager_is_looked_at_less_and_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 53 (low): the start polled the apiserver ten times a second for up to five
    minutes; now 0.1 s growing to 2 s between looks: a pod that starts at once is seen at
    once, a slow image pull costs about 150 looks in five minutes, not 3000."""
    pending = {"metadata": {"name": "p"}, "status": {"phase": "Pending"}}
    running = {"metadata": {"name": "p"}, "status": {"phase": "Running", "podIP": "10.0.0.9"}}
    looks = iter([pending] * 7 + [running])
    monkeypatch.setattr(_stager._jobs, "job_pods", lambda kube, namespace, name: [next(looks)])
    monkeypatch.setattr(Stager, "_healthy", lambda self: True)
    slept: list[float] = []
    server = stager()
    server._wait_serving(sleep=slept.append)
    assert server.pod == "p"
    assert slept == pytest.approx([0.1 * 1.5**n for n in range(7)])
    delays = _stager.poll_delays()
    waited, count = 0.0, 0
    while waited < _stager.START_SECONDS:
        waited, count = waited + next(delays), count + 1
    assert max(itertools.islice(delays, 100)) == 2.0 and count < 160


def test_a_delegated_staged_adapters_cleanup_reads_no_secret_and_reaches_no_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 53: the cleanup of a delegated staged adapter read the SGLang key's Secret (which
    the delegated role does not grant) and asked every pod what it serves (the threat model
    says a delegated provider sends nothing to pods). What names a key is now decided from the
    CRs and the InferenceServices they name alone; the key is released and the claim
    collected."""
    key, other = "0123456789abcdef", "fedcba9876543210"
    args = AdapterArgs.parse(
        {
            "adapter_name": "sql-lora",
            "source": f"hf://acme/sql-lora@{'1' * 40}",
            "inference_service": "llama",
            "namespace": "models",
            "transport": "delegated",
            "api_key_secret_name": "sglang-key",
        }
    )
    mount = AdapterMount("adapters", "/adapters")
    claim = ({"name": "w", "persistentVolumeClaim": {"claimName": "adapters"}},)
    target = Target(
        "models",
        "llama",
        "sglang",
        2,
        volumes=claim,
        volume_mounts=({"name": "w", "mountPath": "/adapters"},),
    )
    qwen = dataclasses.replace(
        target, name="qwen", volume_mounts=({"name": "w", "mountPath": "/lora"},)
    )

    class NoPodsNoSecrets:
        kube: Any = None
        source: Any = None
        scope = ("cluster",)

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the cleanup used the session's {name} (pods or Secrets)")

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the cleanup read pods or a Secret")

    crs = [
        {
            "metadata": {"namespace": "models", "name": "chat"},
            "spec": {"path": f"/lora/{other}", "inferenceServiceRef": {"name": "qwen"}},
        }
    ]
    monkeypatch.setattr(_stage, "_claim", lambda a, c: (NoPodsNoSecrets(), target, mount))
    monkeypatch.setattr(_stage.k8s, "list_adapters", lambda kube, namespace=None: crs)
    monkeypatch.setattr(_stage.k8s, "get_target", lambda kube, ns, name: qwen)
    for name in ("list_target_pods", "list_pods", "read_secret_value"):
        monkeypatch.setattr(_stage.k8s, name, forbidden)
    sent: list[tuple[str, Any]] = []

    class Server:
        def polled(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
            sent.append((path, body))
            return {"removed": [], "young": [key], "busy": []}

    monkeypatch.setattr(_stage, "_on_server", lambda session, settings, use, **kw: use(Server()))
    said: list[str] = []
    config = ProviderConfig(staging_grace=42.0)
    assert _stage.unstage_unused(args, config, f"/adapters/{key}", say=said.append) is False
    assert sent == [("/collect", {"named": [other], "released": [key], "grace_seconds": 42.0})]
    assert said == [
        f"staged directory /adapters/{key} released: a later command on adapters removes it "
        "once nothing names it for 42s (pulumi-lora:stagingGraceSeconds)"
    ]


def test_the_grace_period_is_stack_config_and_zero_is_a_value() -> None:
    key = "pulumi-lora:stagingGraceSeconds"
    assert ProviderConfig.from_config({}).staging_grace == 600.0
    assert ProviderConfig.from_config({key: "0"}).staging_grace == 0.0
    assert ProviderConfig.from_config({key: "3600"}).staging_grace == 3600.0
    for wrong in ("-1", "soon", "inf"):
        with pytest.raises(ConfigurationError, match=key):
            ProviderConfig.from_config({key: wrong})
