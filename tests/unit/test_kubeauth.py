"""Kubeconfig users with credential plugins: tokens renewed before their expiry and after a 401,
for ExecCredential v1beta1 and v1, on every client (lightkube's and the pod proxy's)."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, Client
from lightkube.config.models import NameValue, UserExec
from lightkube.resources.core_v1 import Pod

from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._auth import (
    ExecCredentials,
    HttpxAuth,
    LightkubeAuth,
    OidcCredentials,
    Token,
    parse_exec_credential,
    plugin_credentials,
    use_credentials,
)
from pulumi_lora._kube._source import KubeSource, make_client, proxy_access, resolve

V1, V1BETA1 = "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def credential(token: str, api: str = V1, expires: datetime | None = None) -> bytes:
    status: dict[str, str] = {"token": token}
    if expires is not None:
        status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"apiVersion": api, "kind": "ExecCredential", "status": status}).encode()


class Plugin:
    """A fake plugin: each run prints the next token, valid ``lifetime`` from the clock."""

    def __init__(self, api: str = V1, lifetime: timedelta | None = timedelta(minutes=5)) -> None:
        self.api, self.lifetime, self.now = api, lifetime, T0
        self.runs: list[Mapping[str, str]] = []

    def run(self, argv: Sequence[str], env: Mapping[str, str], hint: str | None) -> bytes:
        self.runs.append(env)
        expires = self.now + self.lifetime if self.lifetime else None
        return credential(f"tok-{len(self.runs)}", self.api, expires)

    def credentials(self) -> ExecCredentials:
        spec = UserExec(apiVersion=self.api, command="plugin", args=["get-token"])
        return ExecCredentials(spec, run=self.run, clock=lambda: self.now)


@pytest.mark.parametrize("api", [V1, V1BETA1])
def test_a_token_is_renewed_before_its_expiry_never_after(api: str) -> None:
    plugin = Plugin(api, lifetime=timedelta(minutes=5))
    creds = plugin.credentials()
    assert creds.bearer() == "tok-1"
    plugin.now = T0 + timedelta(minutes=4)  # 60 s left: more than the 30 s margin
    assert creds.bearer() == "tok-1"
    plugin.now = T0 + timedelta(minutes=4, seconds=31)  # inside the margin: a new one
    assert creds.bearer() == "tok-2"
    assert len(plugin.runs) == 2
    assert json.loads(plugin.runs[0]["KUBERNETES_EXEC_INFO"]) == {
        "apiVersion": api,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }


def test_a_short_lived_token_is_renewed_a_fifth_of_its_life_early() -> None:
    plugin = Plugin(lifetime=timedelta(seconds=20))
    creds = plugin.credentials()
    assert creds.bearer() == "tok-1"
    plugin.now = T0 + timedelta(seconds=15)
    assert creds.bearer() == "tok-1"
    plugin.now = T0 + timedelta(seconds=16)
    assert creds.bearer() == "tok-2"


def test_a_token_without_expiry_is_kept_until_the_apiserver_refuses_it() -> None:
    plugin = Plugin(lifetime=None)
    creds = plugin.credentials()
    assert creds.bearer() == "tok-1"
    plugin.now = T0 + timedelta(days=1)
    assert creds.bearer() == "tok-1"
    creds.rejected("tok-0")  # an older token refused: nothing to forget
    assert creds.bearer() == "tok-1"
    creds.rejected("tok-1")
    assert creds.bearer() == "tok-2"


def test_the_plugins_output_is_checked_and_never_quoted() -> None:
    cases = {
        b"not json tok-secret": "is not JSON",
        json.dumps({"kind": "Other", "apiVersion": V1, "token": "tok-secret"}).encode(): (
            "is not an ExecCredential"
        ),
        credential("tok-secret", V1BETA1): "has apiVersion 'client.authentication.k8s.io/v1beta1'",
        json.dumps(
            {"apiVersion": V1, "kind": "ExecCredential", "status": {"clientCertificateData": "x"}}
        ).encode(): "holds a client certificate, not a token",
    }
    for output, problem in cases.items():
        with pytest.raises(ClusterError) as caught:
            parse_exec_credential(output, V1, T0)
        assert problem in str(caught.value)
        assert "tok-secret" not in str(caught.value)
    token = parse_exec_credential(credential("tok-secret"), V1, T0)
    assert "tok-secret" not in repr(token)


def test_an_unknown_exec_api_version_is_named() -> None:
    spec = UserExec(apiVersion="client.authentication.k8s.io/v1alpha1", command="aws")
    with pytest.raises(ClusterError, match=r"uses apiVersion .*v1alpha1.*; supported: .*/v1, "):
        ExecCredentials(spec)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "plugin"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_a_real_plugin_runs_with_the_users_env_and_its_failures_read_as_messages(
    tmp_path: Path,
) -> None:
    plugin = script(
        tmp_path,
        """
        import json, os, sys
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        if os.environ.get("FAIL"):
            sys.exit("token request refused: not logged in")
        print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": {"token": "tok-" + os.environ["WHO"]}}))
        """,
    )
    env = [NameValue("WHO", "ci")]
    creds = ExecCredentials(UserExec(apiVersion=V1, command=str(plugin), env=env))
    assert creds.bearer() == "tok-ci"
    failing = UserExec(apiVersion=V1, command=str(plugin), env=[*env, NameValue("FAIL", "1")])
    with pytest.raises(ClusterError, match=r"exited 1: token request refused: not logged in"):
        ExecCredentials(failing).bearer()
    missing = UserExec(apiVersion=V1, command="no-such-plugin", installHint="brew install it")
    with pytest.raises(ClusterError, match="'no-such-plugin' is not installed: brew install it"):
        ExecCredentials(missing).bearer()


def jwt(exp: datetime) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"exp": exp.timestamp()}).encode())
    return f"e30.{claims.decode().rstrip('=')}.sig"


def test_an_oidc_id_token_is_used_until_its_jwt_expiry_then_named() -> None:
    now = T0
    token = jwt(T0 + timedelta(minutes=10))
    creds = OidcCredentials({"id-token": token}, clock=lambda: now)
    assert creds.bearer() == token
    now = T0 + timedelta(minutes=10)
    with pytest.raises(ClusterError, match="oidc auth-provider holds an id-token that has expired"):
        creds.bearer()


KUBECONFIG = """apiVersion: v1
clusters: [{{name: c, cluster: {{server: "https://apiserver.test:6443"}}}}]
contexts: [{{name: prod, context: {{cluster: c, user: u}}}}]
current-context: prod
users: [{{name: u, user: {user}}}]
"""


def test_legacy_auth_providers_name_their_replacement() -> None:
    source = KubeSource(kubeconfig=KUBECONFIG.format(user="{auth-provider: {name: gcp}}"))
    with pytest.raises(ClusterError) as caught:
        make_client(source)
    assert str(caught.value) == (
        "context 'prod' authenticates with the auth-provider 'gcp', which kubectl dropped in "
        "1.26; install gke-gcloud-auth-plugin, which writes an exec-plugin user (exec plugins "
        "and oidc are supported)"
    )


class Apiserver:
    """Answers 401 to every token but the current one; records what it was sent."""

    def __init__(self, valid: str) -> None:
        self.valid, self.seen = valid, list[str]()

    def answer(self, bearer: str) -> tuple[int, dict[str, object]]:
        self.seen.append(bearer)
        if bearer != f"Bearer {self.valid}":
            return 401, {}
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}

    def lightkube(self) -> httpx2.MockTransport:
        def handle(request: httpx2.Request) -> httpx2.Response:
            status, body = self.answer(request.headers.get("Authorization", ""))
            return httpx2.Response(status, json=body)

        return httpx2.MockTransport(handle)

    def proxy(self) -> httpx2.MockTransport:
        def handle(request: httpx2.Request) -> httpx2.Response:
            status, body = self.answer(request.headers.get("Authorization", ""))
            return httpx2.Response(status, json=body)

        return httpx2.MockTransport(handle)


def exec_source(tmp_path: Path, api: str) -> KubeSource:
    counter = tmp_path / "runs"
    plugin = script(
        tmp_path,
        f"""
        import json, pathlib
        runs = pathlib.Path({str(counter)!r})
        n = int(runs.read_text()) + 1 if runs.exists() else 1
        runs.write_text(str(n))
        print(json.dumps({{"apiVersion": {api!r}, "kind": "ExecCredential",
                          "status": {{"token": f"tok-{{n}}"}}}}))
        """,
    )
    user = f"{{exec: {{apiVersion: {api}, command: {plugin}}}}}"
    return KubeSource(kubeconfig=KUBECONFIG.format(user=user))


@pytest.mark.parametrize("api", [V1, V1BETA1])
def test_lightkube_and_the_pod_proxy_share_one_plugin_and_renew_on_a_401(
    tmp_path: Path, api: str
) -> None:
    source = exec_source(tmp_path, api)
    config, creds = resolve(source)
    assert creds is not None and config.user is not None and config.user.exec is None
    server = Apiserver(valid="tok-1")
    kube = use_credentials(Client(config=config, transport=server.lightkube()), creds)
    assert list(kube.list(Pod, namespace="x")) == []
    access = proxy_access(source)
    assert isinstance(access.auth, HttpxAuth) and access.auth.credentials is creds
    generic: Any = make_client(source)._client
    assert isinstance(generic._client.auth, LightkubeAuth)
    with httpx2.Client(auth=access.auth, transport=server.proxy()) as proxy:
        assert proxy.get("https://apiserver.test:6443/api/v1/x").status_code == 200
        server.valid = "tok-2"  # the apiserver revoked tok-1: one 401, a new token, success
        assert proxy.get("https://apiserver.test:6443/api/v1/x").status_code == 200
    assert list(kube.list(Pod, namespace="x")) == []  # lightkube takes the renewed token
    assert server.seen == [f"Bearer tok-{n}" for n in (1, 1, 1, 2, 2)]
    assert creds.obtained == 2


def test_the_async_client_runs_the_plugin_off_the_event_loop(tmp_path: Path) -> None:
    config, creds = resolve(exec_source(tmp_path, V1))
    server = Apiserver(valid="tok-1")

    async def listing() -> list[Pod]:
        kube = use_credentials(AsyncClient(config=config, transport=server.lightkube()), creds)
        try:
            return [pod async for pod in kube.list(Pod, namespace="x")]
        finally:
            await kube.close()

    assert asyncio.run(listing()) == []
    assert server.seen == ["Bearer tok-1"]


def test_a_plugin_free_kubeconfig_is_left_to_lightkube() -> None:
    source = KubeSource(kubeconfig=KUBECONFIG.format(user="{token: tok-static}"))
    config, creds = plugin_credentials(source.load())
    assert creds is None and config.user is not None and config.user.token == "tok-static"
    assert proxy_access(source).auth is None
    assert Token("x", T0) == Token("x", T0)


def test_callers_waiting_for_one_plugin_run_share_its_failure(tmp_path: Path) -> None:
    """A failing (or hung) plugin runs once for every caller waiting on that run, threads and
    coroutines alike, and each gets its error; the next call after that runs it again."""
    runs, go, refuse = tmp_path / "runs", tmp_path / "go", tmp_path / "refuse"
    refuse.touch()
    plugin = script(
        tmp_path,
        f"""
        import json, pathlib, sys, time
        runs = pathlib.Path({str(runs)!r})
        with runs.open("a") as log:
            log.write(".")
        while not pathlib.Path({str(go)!r}).exists():  # held until every caller waits
            time.sleep(0.01)
        if pathlib.Path({str(refuse)!r}).exists():
            sys.exit("token request refused: not logged in")
        print(json.dumps({{"apiVersion": {V1!r}, "kind": "ExecCredential",
                          "status": {{"token": f"tok-{{len(runs.read_text())}}"}}}}))
        """,
    )
    creds = ExecCredentials(UserExec(apiVersion=V1, command=str(plugin)))
    failures: dict[str, BaseException] = {}

    def ask(who: str) -> None:
        try:
            creds.bearer()
        except BaseException as exc:
            failures[who] = exc

    async def ask_async(count: int, asked: threading.Event) -> None:
        auth = LightkubeAuth(creds)

        async def one(who: str) -> None:
            flow = auth.async_auth_flow(httpx2.Request("GET", "https://apiserver.test:6443/api"))
            try:
                await flow.__anext__()
            except BaseException as exc:
                failures[who] = exc

        tasks = [asyncio.create_task(one(f"task-{n}")) for n in range(count)]
        for _ in range(5):
            await asyncio.sleep(0)  # every task has asked
        asked.set()
        await asyncio.gather(*tasks)

    def in_bearer(thread: threading.Thread) -> bool:
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None and frame.f_code.co_name != "bearer":
            frame = frame.f_back
        return frame is not None

    def wait_for(condition: Callable[[], bool], what: str) -> None:
        for _ in range(3000):
            if condition():
                return
            time.sleep(0.01)
        raise AssertionError(f"gave up waiting for {what}")

    first = threading.Thread(target=ask, args=("thread-0",))
    first.start()
    wait_for(runs.exists, "the plugin to start")
    threads = [threading.Thread(target=ask, args=(f"thread-{n}",)) for n in range(1, 8)]
    asked = threading.Event()
    threads.append(threading.Thread(target=lambda: asyncio.run(ask_async(4, asked))))
    for thread in threads:
        thread.start()
    wait_for(lambda: asked.is_set() and all(map(in_bearer, threads[:-1])), "every caller")
    go.touch()
    for thread in [first, *threads]:
        thread.join(timeout=120)

    assert runs.read_text() == "."  # one run for all twelve
    assert sorted(failures) == sorted(
        [f"thread-{n}" for n in range(8)] + [f"task-{n}" for n in range(4)]
    )
    expected = f"the kubeconfig's exec plugin {str(plugin)!r} exited 1: token request refused"
    assert {type(e) for e in failures.values()} == {ClusterError}
    assert {str(e) for e in failures.values()} == {f"{expected}: not logged in"}
    refuse.unlink()
    assert creds.bearer() == "tok-2"  # a new call after the failure runs the plugin again
    assert runs.read_text() == ".."
