"""One place pins every version: tools/versions.toml; the wrappers and pyproject agree with it."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def provision() -> ModuleType:
    spec = importlib.util.spec_from_file_location("provision", ROOT / "tools" / "provision.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_wrapper_go_mods_pin_the_versions_of_versions_toml() -> None:
    tool = provision()
    assert tool.check_gomods(tool.load_versions()) == []


def test_every_kube_replace_pins_the_staging_version() -> None:
    versions = provision().load_versions()
    staging = versions["kubernetes"]["staging"]
    gomod = (ROOT / "tools/go/kube/go.mod").read_text()
    replaces = re.findall(r"^\s*(k8s\.io/[\w.-]+) => (k8s\.io/[\w.-]+) (v\S+)$", gomod, re.M)
    assert len(replaces) >= 25
    assert all(src == dst and ver == f"v{staging}" for src, dst, ver in replaces)


def test_kube_replaces_are_generated_from_what_kubernetes_requires() -> None:
    served = """module k8s.io/kubernetes
require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20250820121507-0af2bda4dd1d
)
replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
)
"""
    assert provision().kube_replaces(served, "0.36.3") == [
        "k8s.io/api => k8s.io/api v0.36.3",
        "k8s.io/client-go => k8s.io/client-go v0.36.3",
    ]


def test_python_pins_fit_pyproject_and_the_sdk_is_pinned() -> None:
    tool = provision()
    versions = tool.load_versions()
    pins = tool.constraints(versions)
    assert f"pulumi=={versions['pulumi']['python_sdk']}\n" in pins
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = " ".join(project["dependencies"])
    for name in ("pulumi", "httpx", "pydantic", "lightkube", "click"):
        assert name in declared and f"{name}==" in pins
