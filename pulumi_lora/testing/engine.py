"""The real Pulumi engine, offline: environment and Automation API stacks for tests and the demo.

Everything runs against the project's built ``pulumi`` CLI with a file backend, a passphrase
secrets provider, a private ``PULUMI_HOME`` and no plugin downloads. Dynamic resources are served
by the ``pulumi-resource-pulumi-python`` script that ``tools/provision.py`` writes next to the
venv's python, so the engine's provider host imports this very package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pulumi import automation as auto

from pulumi_lora.testing.testbed._binaries import Binary, BinaryNotFoundError, find_binary

__all__ = ["LocalEngine", "find_pulumi", "plugin_script"]

PASSPHRASE = "pulumi-lora-local-testbed"  # noqa: S105 - a public, documented test value
"""The local stacks' passphrase: these stacks protect nothing, the value only satisfies Pulumi."""


def find_pulumi() -> Binary:
    """The built Pulumi CLI (raises ``BinaryNotFoundError`` naming the provisioning command)."""
    return find_binary("pulumi")


def plugin_script() -> Path:
    """The dynamic-provider plugin script beside this interpreter (written by the provisioner)."""
    script = Path(sys.executable).parent / "pulumi-resource-pulumi-python"
    if not script.exists():
        raise BinaryNotFoundError("pulumi-resource-pulumi-python", [script.parent])
    return script


@dataclass
class LocalEngine:
    """A private, offline Pulumi installation rooted at ``home`` (backend and PULUMI_HOME)."""

    home: Path
    extra_env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        self.pulumi = find_pulumi()
        self.plugin = plugin_script()
        (self.home / "backend").mkdir(parents=True, exist_ok=True)
        (self.home / "pulumi-home").mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """Variables for every CLI call (the engine and its plugins inherit them)."""
        path = os.pathsep.join(
            [str(self.plugin.parent), str(self.pulumi.path.parent), os.environ.get("PATH", "")]
        )
        env = {
            "PULUMI_BACKEND_URL": f"file://{self.home / 'backend'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_HOME": str(self.home / "pulumi-home"),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            "PULUMI_PYTHON_CMD": sys.executable,
            "PATH": path,
        }
        env.update(self.extra_env or {})
        return env

    def command(self) -> auto.PulumiCommand:
        """The Automation API's handle on the built CLI (``root/bin/pulumi``)."""
        return auto.PulumiCommand(root=str(self.pulumi.path.parent.parent))

    def inline_stack(self, project: str, stack: str, program: Callable[[], None]) -> auto.Stack:
        """Create (or select) a stack running ``program`` in-process: no language host needed.

        Its workspace (``Pulumi.yaml`` and the stack's config file) lives under ``home`` too; the
        Automation API's default is a new ``/tmp/automation-*`` directory per stack that nothing
        ever removes.
        """
        work_dir = self.home / "workspaces" / f"{project}.{stack}"
        work_dir.mkdir(parents=True, exist_ok=True)
        opts = auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            pulumi_home=str(self.home / "pulumi-home"),
            env_vars=self.env,
            pulumi_command=self.command(),
            project_settings=auto.ProjectSettings(
                name=project,
                runtime="python",
                backend=auto.ProjectBackend(self.env["PULUMI_BACKEND_URL"]),
            ),
        )
        return auto.create_or_select_stack(stack, project, program, opts=opts)
