"""A "laptop" for e2e tests: a network namespace that reaches the testbed's apiserver (through a
relay at the same ``127.0.0.1:PORT``) and nothing else, so pod IPs are not routable from it, as
from a laptop or CI runner outside a cluster. Commands run in it with ``ip netns exec``.

Also an exec credential plugin for it: :func:`exec_kubeconfig` writes a kubeconfig whose user
runs a script that asks the apiserver for a ServiceAccount token (``kubectl create token``) and
states a short ``expirationTimestamp``; :func:`rotate` deletes and recreates the ServiceAccount,
which revokes every token issued before (bound tokens name the ServiceAccount's UID), so a
client that kept a token past its stated expiry is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from pulumi_lora._kube._source import KubeSource
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.testbed._relay import Relay, listen_in_netns

PLUGIN = """\
import datetime, json, os, pathlib, subprocess, sys
lifetime = float(os.environ["PLUGIN_LIFETIME_SECONDS"])
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
token = subprocess.run(
    [os.environ["PLUGIN_KUBECTL"], "--kubeconfig", os.environ["PLUGIN_ADMIN_KUBECONFIG"],
     "create", "token", os.environ["PLUGIN_SA"], "-n", os.environ["PLUGIN_NS"],
     "--duration", "10m"],
    capture_output=True, text=True, check=True).stdout.strip()
now = datetime.datetime.now(datetime.UTC)
expires = now + datetime.timedelta(seconds=lifetime)
log = pathlib.Path(os.environ["PLUGIN_LOG"])
with log.open("a") as out:  # the test's own record (0600 folder): when, until when, which token
    out.write(json.dumps({"at": now.isoformat(), "expires": expires.isoformat(),
                          "token": token}) + "\\n")
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": token,
                             "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


@dataclass(frozen=True)
class Laptop:
    """A network namespace with only the apiserver reachable."""

    netns: str

    def run(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace, capturing text."""
        ip = shutil.which("ip") or "ip"
        return subprocess.run(
            [ip, "netns", "exec", self.netns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )


@contextlib.contextmanager
def laptop(testbed: Testbed) -> Iterator[Laptop]:
    """A :class:`Laptop` for ``testbed``, removed afterwards."""
    ip = shutil.which("ip") or "ip"
    name = f"plora-laptop-{os.getpid()}"
    subprocess.run([ip, "netns", "add", name], check=True, capture_output=True)
    relay: Relay | None = None
    try:
        subprocess.run([ip, "-n", name, "link", "set", "lo", "up"], check=True)
        port = int(urlsplit(testbed.server).port or 443)
        listener = listen_in_netns(name, "127.0.0.1", port)
        relay = Relay(listener, ("127.0.0.1", port), name="laptop").start()
        yield Laptop(name)
    finally:
        if relay is not None:
            relay.close()
        subprocess.run([ip, "netns", "delete", name], check=False, capture_output=True)


@dataclass(frozen=True)
class ExecUser:
    """The kubeconfig of an exec-plugin user, and the plugin's record of what it issued."""

    kubeconfig: Path
    log: Path
    namespace: str
    account: str
    env: dict[str, str]  # the plugin's settings (the scenario in the laptop reads them too)

    def issued(self) -> list[dict[str, str]]:
        """Every credential the plugin printed, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


def exec_kubeconfig(
    testbed: Testbed, folder: Path, namespace: str, api_version: str, lifetime: float
) -> ExecUser:
    """A ServiceAccount with cluster-admin, and a kubeconfig whose user is an exec plugin
    issuing its tokens with a stated lifetime of ``lifetime`` seconds."""
    account = "laptop-user"
    for args in (
        ("create", "serviceaccount", account, "-n", namespace),
        (
            "create",
            "clusterrolebinding",
            f"{namespace}-{account}",
            "--clusterrole=cluster-admin",
            f"--serviceaccount={namespace}:{account}",
        ),
    ):
        done = testbed.kubectl(*args)
        assert done.returncode == 0, done.stderr
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    plugin = folder / "token-plugin"
    plugin.write_text(f"#!{sys.executable}\n" + textwrap.dedent(PLUGIN))
    plugin.chmod(0o755)
    log = folder / "issued.jsonl"
    env = {
        "PLUGIN_LIFETIME_SECONDS": str(lifetime),
        "PLUGIN_KUBECTL": str(testbed.binaries["kubectl"]),
        "PLUGIN_ADMIN_KUBECONFIG": str(testbed.kubeconfig_path),
        "PLUGIN_SA": account,
        "PLUGIN_NS": namespace,
        "PLUGIN_LOG": str(log),
    }
    config = testbed.kubeconfig_dict()
    user: dict[str, object] = {
        "apiVersion": api_version,
        "command": str(plugin),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "interactiveMode": "Never",
    }
    config["users"] = [{"name": "laptop", "user": {"exec": user}}]
    config["contexts"][0]["context"]["user"] = "laptop"
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return ExecUser(path, log, namespace, account, env)


def rotate(testbed: Testbed, user: ExecUser) -> None:
    """Delete and recreate the ServiceAccount: every token issued so far is refused from now."""
    for args in (
        ("delete", "serviceaccount", user.account, "-n", user.namespace, "--wait=true"),
        ("create", "serviceaccount", user.account, "-n", user.namespace),
    ):
        done = testbed.kubectl(*args)
        assert done.returncode == 0, done.stderr


def provider_across_expiry(kubeconfig: str, admin: str, namespace: str, path: str) -> None:
    """Run in the laptop (``python -m tests.e2e.laptop``): create through ``proxy`` with the
    exec user, let the token's stated expiry pass, rotate, read, delete; print what happened as
    one JSON line."""
    import time  # noqa: PLC0415 - the scenario's own imports, off the test's import path
    from datetime import UTC, datetime  # noqa: PLC0415

    import httpx2  # noqa: PLC0415

    from pulumi_lora._lifecycle import ProviderConfig  # noqa: PLC0415
    from pulumi_lora._provider import LoRAAdapterProvider  # noqa: PLC0415

    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(kubeconfig))
    props = {
        "adapter_name": "laptop-lora",
        "path": path,
        "inference_service": "execpods",
        "namespace": namespace,
        "transport": "proxy",
    }
    report: dict[str, object] = {}
    created = provider.create(dict(props))
    report["create"] = created.outs
    log = Path(os.environ["PLUGIN_LOG"])
    last = json.loads(log.read_text().splitlines()[-1])
    while datetime.now(UTC) <= datetime.fromisoformat(last["expires"]):
        time.sleep(0.2)
    admin_config = yaml.safe_load(Path(admin).read_text())
    server = admin_config["clusters"][0]["cluster"]["server"]
    for args in (
        ("delete", "serviceaccount", os.environ["PLUGIN_SA"], "-n", namespace, "--wait=true"),
        ("create", "serviceaccount", os.environ["PLUGIN_SA"], "-n", namespace),
    ):
        subprocess.run(
            [os.environ["PLUGIN_KUBECTL"], "--kubeconfig", admin, *args], check=True, timeout=60
        )
    # The apiserver caches a token's successful review for 10 s (--token-auth cache TTL): the
    # old token is refused once that has passed. Wait for it, so the read below must renew.
    deadline = time.monotonic() + 60
    while True:
        stale = httpx2.get(
            f"{server}/api/v1/namespaces/{namespace}/pods",
            headers={"Authorization": f"Bearer {last['token']}"},
            verify=False,  # only the status matters: the stale token is refused
            timeout=30,
        )
        if stale.status_code == 401 or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    report["stale_status"] = stale.status_code
    report["read"] = provider.read(created.id, created.outs).outs
    provider.delete(created.id, report["read"])  # type: ignore[arg-type]
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    provider_across_expiry(*sys.argv[1:5])
