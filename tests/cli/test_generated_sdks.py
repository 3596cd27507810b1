"""The generated SDKs in ``sdk/`` are what the schema generates today (``tools/sdkgen.py``,
the Pulumi CLI's own generators at v3.274.1): regenerate with ``python3 tools/sdkgen.py``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from pulumi_lora import __version__
from pulumi_lora.testing.fixtures import missing_real_part

from .conftest import ROOT


def sdkgen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sdkgen", ROOT / "tools" / "sdkgen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_the_committed_sdks_are_what_the_schema_generates(tmp_path: Path) -> None:
    tool = sdkgen()
    try:
        tool.binary()
    except tool.SdkgenMissingError as exc:
        missing_real_part(str(exc))
    for language, folder in tool.generate(tmp_path).items():
        committed = tree(ROOT / "sdk" / language)
        assert committed == tree(folder), f"sdk/{language} is stale: python3 tools/sdkgen.py"


def test_the_sdks_name_the_plugin_users_install() -> None:
    package = json.loads((ROOT / "sdk" / "nodejs" / "package.json").read_text())
    assert package["name"] == "@pulumi-lora/pulumi-lora"
    assert package["pulumi"] == {"resource": True, "name": "pulumi-lora", "version": __version__}
    plugin = json.loads((ROOT / "sdk" / "go" / "lora" / "pulumi-plugin.json").read_text())
    assert (plugin["name"], plugin["version"]) == ("pulumi-lora", __version__)
    resource = (ROOT / "sdk" / "go" / "lora" / "loRAAdapter.go").read_text()
    assert '"pulumi-lora:index:LoRAAdapter"' in resource
