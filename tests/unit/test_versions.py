"""One place pins every version: tools/versions.toml; the wrappers and pyproject agree with it."""

from __future__ import annotations

import importlib.util
import json
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
    for name in ("pulumi", "httpx2", "msgspec", "lightkube", "click"):
        assert name in declared and f"{name}==" in pins


def test_a_language_host_is_known_by_the_module_built_into_it() -> None:
    """The hosts print no version; ``go version -m`` names the module they were built from."""
    printed = """/cache/bin/pulumi-language-python: go1.26.8
\tpath\tgithub.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
\tmod\tgithub.com/pulumi/pulumi/sdk/v3\tv3.79.0\th1:GJ46WDwJ78jQ9qJW0nI1WdnypjCNkRQG9rVymw0go9A=
\tdep\tgithub.com/pulumi/pulumi-yaml\tv1.25.0\th1:abc=
\tdep\tgolang.org/x/text\tv0.3.6\th1:def=
"""
    tool = provision()
    assert tool.built_module_version(printed, "github.com/pulumi/pulumi/sdk/v3") == "3.79.0"
    assert tool.built_module_version(printed, "github.com/pulumi/pulumi-yaml") == "1.25.0"
    assert tool.built_module_version(printed, "github.com/pulumi/pulumi") is None


def test_every_language_host_is_pinned_and_built_from_its_wrapper() -> None:
    tool = provision()
    versions = tool.load_versions()
    hosts = {t.name: t for t in tool.go_tools(versions) if t.name.startswith("pulumi-language-")}
    assert set(hosts) == {
        "pulumi-language-python",
        "pulumi-language-nodejs",
        "pulumi-language-yaml",
    }
    for name, host in hosts.items():
        assert (ROOT / "tools" / "go" / host.module_dir / "go.mod").is_file()
        assert host.version == versions["pulumi"][name.replace("pulumi-language-", "language_")]


def test_a_binary_without_a_version_of_its_own_is_known_by_its_stamp(tmp_path: Path) -> None:
    """pulumi-resource-kubernetes prints no version; the build records it beside the binary,
    for that very file only."""
    tool = provision()
    binary = tmp_path / "pulumi-resource-kubernetes"
    binary.write_bytes(b"built")
    assert tool.stamped_version(binary) is None
    tool.write_stamp(binary, "4.25.0")
    assert tool.stamped_version(binary) == "4.25.0"
    binary.write_bytes(b"another build, another size")
    assert tool.stamped_version(binary) is None


def test_the_kubernetes_sdk_is_the_release_of_the_built_provider() -> None:
    versions = provision().load_versions()
    release = versions["pulumi_kubernetes"]["version"]
    assert versions["python"]["pulumi-kubernetes"] == release
    assert versions["pulumi_kubernetes"]["sdk"] == release


def test_the_embedded_schema_is_the_served_schema_with_its_version() -> None:
    """What the provider's generate.go writes: same content, version set, no whitespace."""
    tool = provision()
    schema = {"name": "kubernetes", "version": "", "resources": {"a": {"b": [1, 2]}}}
    embedded = tool.embedded_schema(schema, "4.25.0")
    assert json.loads(embedded) == {**schema, "version": "4.25.0"}
    assert " " not in embedded and "\n" not in embedded
