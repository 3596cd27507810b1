"""The real Pulumi engine, offline: Automation API stacks and CLI project folders.

Everything runs against the project's built ``pulumi`` CLI with a file backend, a passphrase
secrets provider and a private ``PULUMI_HOME``. Beside the CLI, ``tools/provision.py`` installs
what Pulumi's own distribution ships there: the language hosts and the host scripts, among them
``pulumi-resource-pulumi-python``, which the engine runs for dynamic resources.

Two ways in:

- ``LocalEngine.inline_stack``: an Automation API inline program, run in this process (no
  language host; the fast path of the tests). Dynamic resources run with this interpreter
  (``PULUMI_PYTHON_CMD``), plugin downloads off.
- ``LocalEngine.project``: a Pulumi project folder driven by ``pulumi`` subcommands, as a user
  types them at a shell (``ProjectDir``), optionally with a virtualenv activated; plugin
  acquisition is left as a user has it.

With the language host built here (``pulumi-language-python`` v3.79, see "Language hosts" in
docs/development.md), a Python program runs in the *activated* virtualenv: CLI v3.274 sends the
project's ``virtualenv`` option inside the request, which that host does not read (it takes a flag).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from pulumi_lora.testing.testbed._binaries import Binary, BinaryNotFoundError, find_binary

__all__ = ["LocalEngine", "ProjectDir", "PulumiCommandError", "find_pulumi", "plugin_script"]

PASSPHRASE = "pulumi-lora-local-testbed"  # noqa: S105 - a public, documented test value
"""The local stacks' passphrase: these stacks protect nothing, the value only satisfies Pulumi."""


def find_pulumi() -> Binary:
    """The built Pulumi CLI (raises ``BinaryNotFoundError`` naming the provisioning command)."""
    return find_binary("pulumi")


def plugin_script() -> Path:
    """The dynamic-provider plugin script installed beside the CLI (by the provisioner)."""
    script = find_pulumi().path.parent / "pulumi-resource-pulumi-python"
    if not script.exists():
        raise BinaryNotFoundError("pulumi-resource-pulumi-python", [script.parent])
    return script


PROVISIONED_PLUGINS = ("kubernetes",)
"""Resource plugins the provisioner builds beside the CLI (``pulumi-resource-NAME``)."""


def install_provisioned_plugins(pulumi_home: Path, bin_dir: Path) -> list[str]:
    """Put each provisioned resource plugin into ``pulumi_home``'s plugin cache, as ``pulumi
    plugin install resource NAME VERSION --file BINARY`` would (a link, not a 245 MB copy).

    ``pulumi install`` and the engine then find it offline at the version the SDK asks for;
    without it ``pulumi install`` tries to download it. The version comes from the stamp the
    provisioner writes beside the binary. Returns the plugin directories made.
    """
    made = []
    for name in PROVISIONED_PLUGINS:
        binary = bin_dir / f"pulumi-resource-{name}"
        stamp = bin_dir / f"pulumi-resource-{name}.stamp.json"
        if not binary.exists() or not stamp.exists():
            continue
        version = json.loads(stamp.read_text())["version"]
        folder = pulumi_home / "plugins" / f"resource-{name}-v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / binary.name
        if not link.exists():
            link.symlink_to(binary.resolve())
        made.append(folder.name)
    return made


class PulumiCommandError(RuntimeError):
    """A ``pulumi`` subcommand exited non-zero; the message holds the command and its output."""

    def __init__(self, command: str, done: subprocess.CompletedProcess[str]) -> None:
        self.command = command
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        super().__init__(
            f"`{command}` exited {done.returncode}\n--- stdout\n{done.stdout}\n"
            f"--- stderr\n{done.stderr}"
        )


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
        self.plugins = install_provisioned_plugins(
            self.home / "pulumi-home", self.pulumi.path.parent
        )

    @property
    def shell_env(self) -> dict[str, str]:
        """What a user's shell holds: the CLI's folder on ``PATH``, a backend and a passphrase.

        Nothing names an interpreter: programs run in their project's ``virtualenv``.
        """
        path = os.pathsep.join([str(self.pulumi.path.parent), os.environ.get("PATH", "")])
        env = {
            "PULUMI_BACKEND_URL": f"file://{self.home / 'backend'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_HOME": str(self.home / "pulumi-home"),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PATH": path,
        }
        env.update(self.extra_env or {})
        return env

    @property
    def env(self) -> dict[str, str]:
        """Variables for Automation API inline stacks: this interpreter serves dynamic resources,
        and nothing is ever downloaded."""
        return {
            **self.shell_env,
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            "PULUMI_PYTHON_CMD": sys.executable,
            **(self.extra_env or {}),
        }

    def stored_state(self, project: str, stack: str) -> str:
        """The stack's state as the file backend keeps it: secrets encrypted (the Automation
        API's ``export_stack`` shows them in plaintext)."""
        path = self.home / "backend" / ".pulumi" / "stacks" / project / f"{stack}.json"
        return path.read_text(encoding="utf-8")

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

    def project(
        self, path: Path, echo: Callable[[str], None] | None = None, venv: Path | None = None
    ) -> ProjectDir:
        """The project folder ``path``, driven through the CLI as a user does (``venv``
        activated, when given)."""
        return ProjectDir(self, path, echo, venv)


@dataclass
class ProjectDir:
    """A Pulumi project folder and the ``pulumi`` commands a user types in it.

    ``echo``, when given, receives each command as the user would type it (``pulumi up --yes``),
    so a demo can print what it runs. ``venv``, when given, is activated as ``source
    venv/bin/activate`` does: first on ``PATH``, and ``VIRTUAL_ENV``.
    """

    engine: LocalEngine
    path: Path
    echo: Callable[[str], None] | None = None
    venv: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """The shell's variables for a command here."""
        env = {**os.environ, **self.engine.shell_env}
        if self.venv is not None:
            env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env["PATH"]])
            env["VIRTUAL_ENV"] = str(self.venv)
            env.pop("PYTHONHOME", None)
        return env

    def pulumi(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run ``pulumi ARGS`` here; a non-zero exit raises ``PulumiCommandError`` if ``check``."""
        command = shlex.join(["pulumi", *args])
        if self.echo is not None:
            self.echo(f"$ {command}")
        done = subprocess.run(
            [str(self.engine.pulumi.path), *args, "--non-interactive"],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise PulumiCommandError(command, done)
        return done

    def outputs(self) -> dict[str, Any]:
        """The selected stack's outputs (``pulumi stack output --json``; secrets stay masked)."""
        parsed: dict[str, Any] = json.loads(self.pulumi("stack", "output", "--json").stdout)
        return parsed
