"""pytest fixtures built on :class:`pulumi_lora.testing.testbed.Testbed`.

Register with ``pytest_plugins = ["pulumi_lora.testing.fixtures"]`` in a ``conftest.py``:

- ``testbed`` (session scope): one running testbed shared by every test of the session, with
  pulumi-lora's LLMKube coexistence policy applied for every LoRAAdapter (as the re-sync loop's
  manifests apply it): the testbed runs LLMKube's own LoRA controller, as every LLMKube
  install does, and the policy keeps it off the CRs the tests make;
- ``testbed_binaries`` (session scope): the located etcd, kube-apiserver and kubectl, for tests
  that start testbeds of their own;
- ``namespace`` (function scope): a fresh, uniquely named namespace for one test, whose
  InferenceServices (pods, emulator processes, CRs) are deleted when the test ends;
- ``release_test_namespaces`` (autouse): for a test of the session testbed, the same for every
  namespace the test made itself with ``testbed.create_namespace``;
- ``netns_required`` (function scope): skips a test where pods cannot get network namespaces;
- ``engine`` (function scope): a private Pulumi installation (``LocalEngine``: the built CLI,
  a file backend, its own ``PULUMI_HOME``) for one test.

When a real part is missing (a binary, or network namespaces), the tests are skipped with the
reason, except under CI (``CI=true``), where a skip would hide that the real thing did not run:
there the test fails instead.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

from pulumi_lora.deploy import coexistence_policy
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import (
    BINARIES,
    Binary,
    BinaryNotFoundError,
    CertificateError,
    Testbed,
    find_binary,
    netns_unavailable_reason,
)

__all__ = [
    "engine",
    "missing_real_part",
    "namespace",
    "netns_required",
    "release_test_namespaces",
    "testbed",
    "testbed_binaries",
]


_T = TypeVar("_T")


def run_async(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` on a fresh event loop, leaving the thread's current loop alone
    (``asyncio.run`` unsets it, and later tests' Pulumi mocks ask for it)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def missing_real_part(reason: str) -> NoReturn:
    """Skip the current test because a real part is missing; fail instead when ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: a missing real part fails instead of skipping)")
    pytest.skip(reason)


def require_real_sglang_pods() -> None:
    """Fail or skip (`missing_real_part`) unless real SGLang pods can run here: the provisioned
    server (``tools/sglang_env.py``), and root for the mount namespace each pod gets."""
    from pulumi_lora.testing.sglang import RealSGLang, RealSGLangMissingError  # noqa: PLC0415

    try:
        RealSGLang.find()
    except RealSGLangMissingError as exc:
        missing_real_part(str(exc))
    if os.geteuid() != 0:
        missing_real_part("real SGLang pods run in a mount namespace of their own: run as root")


@pytest.fixture(scope="session")
def testbed_binaries() -> dict[str, Binary]:
    """The programs a testbed runs (name → located binary with its version)."""
    try:
        return {name: find_binary(name) for name in BINARIES}
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """A started testbed for the whole session, stopped (with everything it ran) at the end.

    LLMKube's LoRA controller runs in it (the default); the coexistence policy the loop's
    manifests render (``coexistence_policy(managed_only=False)``) holds it off every CR.
    """
    bed = Testbed()
    try:
        bed.start()
    except (BinaryNotFoundError, CertificateError) as exc:
        missing_real_part(str(exc))
    bed.apply_manifests(coexistence_policy("testbed", managed_only=False))
    bed.wait_llmkube_held_off()  # the apiserver takes a moment to load a new policy
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture(autouse=True)
def release_test_namespaces(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of a test using ``testbed``, release every namespace it created.

    A test that deploys into a namespace of its own making would otherwise leave its emulators
    running (and probed) for the rest of the session. Namespaces made before the test (by
    module- or session-scoped fixtures, which pytest sets up first) are left alone.
    """
    if "testbed" not in request.fixturenames:
        yield
        return
    bed: Testbed = request.getfixturevalue("testbed")
    before = len(bed.namespaces)
    yield
    for name in bed.namespaces[before:]:
        bed.release_namespace(name)


@pytest.fixture
def namespace(testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace named after the test; its InferenceServices are deleted at teardown.

    The namespace itself is never deleted (see :meth:`Testbed.create_namespace`).
    """
    prefix = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40] or "test"
    name = testbed.create_namespace(prefix)
    yield name
    testbed.release_namespace(name)


@pytest.fixture
def engine(tmp_path: Path) -> LocalEngine:
    """A private Pulumi installation per test (the built CLI, file backend, own PULUMI_HOME)."""
    try:
        return LocalEngine(tmp_path / "engine")
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))


@pytest.fixture
def netns_required() -> None:
    """Skip (or, under CI, fail) where pods cannot get their own network namespace."""
    reason = netns_unavailable_reason()
    if reason is not None:
        missing_real_part(f"netns pods unavailable: {reason}")
