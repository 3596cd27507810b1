#!/usr/bin/env python3
"""Generate the SDKs of the plugin's schema (``provider/schema.json``) into ``sdk/``.

    python3 tools/sdkgen.py            # rewrites sdk/nodejs and sdk/go (commit them)

The generators are the Pulumi CLI's own Go packages (``pkg/v3/codegen/nodejs`` and ``/go``,
v3.274.1), called in-process by ``pulumi-lora-sdkgen`` (``tools/go/sdkgen``, built by
``tools/provision.py`` into ``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/bin``): ``pulumi
package gen-sdk`` asks the language hosts, and the hosts built here lack that call. .NET and Java
are not generated: their generators live in pulumi-dotnet and pulumi-java, modules the Go proxy
refuses here. ``tests/cli/test_generated_sdks.py`` fails while ``sdk/`` is stale; ``tools/
release.py`` archives a fresh generation. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "provider" / "schema.json"
SDK_DIR = ROOT / "sdk"
LANGUAGES = ("nodejs", "go")
BINARY = "pulumi-lora-sdkgen"


class SdkgenMissingError(FileNotFoundError):
    """The generator is not built (``python3 tools/provision.py`` builds it)."""


def binary() -> Path:
    """The built generator: the provisioner's cache, else ``PATH``."""
    cache = Path(os.environ.get("PULUMI_LORA_CACHE", Path.home() / ".cache" / "pulumi-lora"))
    found = cache / "bin" / BINARY
    if found.exists():
        return found
    on_path = shutil.which(BINARY)
    if on_path is None:
        raise SdkgenMissingError(f"{BINARY} is not built: python3 tools/provision.py")
    return Path(on_path)


def generate(out: Path, schema: Path = SCHEMA) -> dict[str, Path]:
    """Every SDK of ``schema``, each into ``out/<language>``; returns the folders."""
    done = subprocess.run(
        [str(binary()), str(schema), str(out), *LANGUAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{BINARY} failed: {done.stdout}{done.stderr}")
    return {language: out / language for language in LANGUAGES}


def main() -> int:
    """Rewrite ``sdk/``."""
    for language in LANGUAGES:
        shutil.rmtree(SDK_DIR / language, ignore_errors=True)
    for language, folder in generate(SDK_DIR).items():
        print(f"{language}: {sum(1 for p in folder.rglob('*') if p.is_file())} files in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
