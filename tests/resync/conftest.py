"""Fixtures for the re-sync loop's tests: its least-privilege identity, loop processes, a cluster.

Every loop in these tests runs as the ServiceAccount of the rendered manifests
(``pulumi_lora.deploy.resync_manifests``), applied with kubectl and authenticated with a token
from ``kubectl create token``, so each test also proves the RBAC rules are enough.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from _resync_harness import Cluster, LoopProcess

from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.testbed import Testbed

#: The one Lease name the test identity may get and update (its Role names it).
TEST_LEASE = "resync-tests"
#: Fast settings for tests: a 1 s sweep, a 3 s Lease, short backoff.
FAST = {
    "--verify-interval": "1",
    "--lease-duration": "3",
    "--lease-renew-deadline": "2",
    "--lease-retry-period": "0.3",
    "--backoff-base": "0.2",
    "--backoff-max": "2",
    "--shutdown-timeout": "10",
    "--metrics-host": "127.0.0.1",
    "--metrics-port": "0",
    "--log-level": "debug",
}


@dataclass(frozen=True)
class Identity:
    """A ServiceAccount bound to the rendered roles, and a kubeconfig holding its token."""

    namespace: str
    service_account: str
    kubeconfig: Path
    lease: str

    @property
    def user(self) -> str:
        """The apiserver's user name for the account (as the audit log records it)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def apply_manifests(testbed: Testbed, manifests: list[dict[str, Any]], path: Path) -> None:
    """``kubectl apply -f`` the rendered manifests (as a user would)."""
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False), encoding="utf-8")
    done = testbed.kubectl("apply", "-f", str(path))
    assert done.returncode == 0, done.stderr


def rendered(
    namespace: str,
    *,
    name: str,
    lease: str,
    watch_namespace: str | None = None,
    secret_namespaces: Sequence[str] = (),
    readiness_gate: bool = False,
) -> list[dict[str, Any]]:
    """The loop's manifests as these tests apply them (with no replicas: the testbed would run
    its pods, real loops on this Lease, and these tests start their loops themselves, with flags
    of their choosing)."""
    manifests = resync_manifests(
        namespace,
        "pulumi-lora:test",
        name=name,
        watch_namespace=watch_namespace,
        secret_namespaces=secret_namespaces,
        lease_name=lease,
        replicas=0,
        readiness_gate=readiness_gate,
    )
    # Not the LLMKube coexistence policy: the session testbed holds LLMKube off every CR already
    # (pulumi_lora.testing.fixtures), and a second copy of it by this name would collide with
    # the one tests/resync/test_deploy.py creates through pulumi-kubernetes.
    return [m for m in manifests if not m["kind"].startswith("ValidatingAdmission")]


def make_identity(
    testbed: Testbed,
    directory: Path,
    *,
    name: str = "pulumi-lora-resync",
    watch_namespace: str | None = None,
    secret_namespaces: Sequence[str] = (),
    lease: str = TEST_LEASE,
    readiness_gate: bool = False,
) -> Identity:
    """Render and apply the loop's manifests in a new namespace; return a kubeconfig for them."""
    namespace = testbed.create_namespace("resync-system")
    kept = rendered(
        namespace,
        name=name,
        lease=lease,
        watch_namespace=watch_namespace,
        secret_namespaces=secret_namespaces,
        readiness_gate=readiness_gate,
    )
    apply_manifests(testbed, kept, directory / f"{namespace}.yaml")
    token = testbed.kubectl("create", "token", name, "-n", namespace, "--duration", "2h")
    assert token.returncode == 0, token.stderr
    user = f"system:serviceaccount:{namespace}:{name}"
    kubeconfig = testbed.write_kubeconfig(
        directory / f"{namespace}.kubeconfig", token=token.stdout.strip(), user=user
    )
    return Identity(namespace, name, kubeconfig, lease)


def name_secret_namespaces(
    testbed: Testbed, identity: Identity, namespaces: Sequence[str], path: Path
) -> list[dict[str, Any]]:
    """Apply what naming ``namespaces`` in ``secret_namespaces`` adds to the manifests of
    ``identity`` (a cluster-wide one), as re-applying them would; return those objects."""
    kwargs: dict[str, Any] = {"name": identity.service_account, "lease": identity.lease}
    before = rendered(identity.namespace, **kwargs)
    after = rendered(identity.namespace, secret_namespaces=namespaces, **kwargs)
    added = [m for m in after if m not in before]
    assert [m for m in after if m in before] == before  # nothing else changes
    apply_manifests(testbed, added, path)
    return added


@pytest.fixture(scope="session")
def resync_identity(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Identity:
    """The cluster-wide identity every loop of these tests runs as."""
    return make_identity(testbed, tmp_path_factory.mktemp("resync-identity"))


LoopFactory = Callable[..., LoopProcess]


@pytest.fixture
def loops(
    request: pytest.FixtureRequest, resync_identity: Identity, tmp_path: Path
) -> Iterator[LoopFactory]:
    """Start loop processes: ``loops(namespace, identity=..., **{"--flag": value})``.

    All are stopped (SIGTERM) at teardown; a failed test prints their logs' tails.
    """
    started: list[LoopProcess] = []

    def start(
        namespace: str | None, *extra: str, identity: Identity | None = None, **flags: str
    ) -> LoopProcess:
        who = identity or resync_identity
        options = {
            **FAST,
            "--kubeconfig": str(who.kubeconfig),
            "--lease-namespace": who.namespace,
            "--lease-name": who.lease,
            **{k.replace("_", "-"): v for k, v in flags.items()},
        }
        if namespace is not None:
            options["--namespace"] = namespace
        args = [item for pair in options.items() for item in pair] + list(extra)
        loop = LoopProcess(args, tmp_path / f"loop-{len(started)}.log")
        started.append(loop)
        return loop

    yield start
    for loop in started:
        loop.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for index, loop in enumerate(started):
            print(f"--- loop {index} (pid {loop.pid}) log tail:\n{loop.tail(80)}")


@pytest.fixture
def cluster(
    testbed: Testbed, namespace: str, resync_identity: Identity, tmp_path: Path
) -> Iterator[Cluster]:
    """The test's namespace, cleaned up (CRs deleted, pods stopped) at teardown.

    It is one of the session identity's ``secret_namespaces``, as a user names the namespaces
    of keyed SGLang servers: the loops read the API-key Secrets their CRs name there.
    """
    name_secret_namespaces(testbed, resync_identity, [namespace], tmp_path / "secret-grants.yaml")
    helper = Cluster(testbed, namespace)
    yield helper
    helper.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """Keep each phase's report on the item, so fixtures can tell a failed test."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
