"""The plugin archive's launcher (``tools/release_files/pulumi-resource-pulumi-lora``), run for
real on a plugin folder unpacked from an archive that ``tools/release.py`` makes.

The archive's wheel is a stand-in ``pulumi-lora`` whose
``pulumi_lora._pulumi._plugin`` prints one line
(as the real plugin prints its port) naming where it was imported from; pip installs it offline
(``PIP_NO_INDEX``, no dependencies), so each virtualenv the launcher makes costs a few seconds
(pip's own install into it) and no network. The fast tier makes one (a venv whose Python is
gone, rebuilt); the shadowing test uses a venv made by hand without pip; first runs, the other
kinds of broken venv (no pulumi_lora; a folder, not a link) and two starts at once are the full
tier's. The real wheel, with its
dependencies, is installed by ``tests/release/test_release_install.py``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.unit.test_release import release

BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))
"""The interpreter this venv was made from: what a user's python3 would be."""
PLUGIN = "import sys; print('plugin', __file__, *sys.argv[1:], flush=True)\n"
"""The stand-in plugin: one line on stdout, naming the file it runs from and its arguments."""
SHADOW = "print('shadowed: a pulumi_lora outside the venv ran', flush=True)\n"


def stand_in_wheel(folder: Path) -> Path:
    """A minimal ``pulumi-lora`` wheel: ``pulumi_lora/__init__.py`` and ``_pulumi/_plugin.py``."""
    files = {
        "pulumi_lora/__init__.py": b"",
        "pulumi_lora/_pulumi/_plugin.py": PLUGIN.encode(),
        "pulumi_lora-9.9.9.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: pulumi-lora\nVersion: 9.9.9\n"
        ),
        "pulumi_lora-9.9.9.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [
        f"{name},sha256="
        f"{base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}"
        for name, data in files.items()
    ]
    record.append("pulumi_lora-9.9.9.dist-info/RECORD,,")
    files["pulumi_lora-9.9.9.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / "pulumi_lora-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def unpacked_plugin(tmp: Path) -> Path:
    """A plugin folder as ``pulumi plugin install`` leaves it: the release's archive, unpacked."""
    tmp.mkdir(parents=True, exist_ok=True)
    archive = release().plugin_archive(tmp / "plugin.tar.gz", [stand_in_wheel(tmp)], "")
    folder = tmp / "plugin"
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="tar")  # "tar" keeps the launcher's mode
    return folder


def start(folder: Path, cwd: Path, **env: str) -> subprocess.Popen[str]:
    """Start the launcher as the engine does (its address as the argument), with pip offline."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.Popen(
        [str(folder / "pulumi-resource-pulumi-lora"), "127.0.0.1:1"],
        cwd=cwd,
        env={
            **base,
            "PULUMI_LORA_PYTHON": str(BASE_PYTHON),
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def launch(folder: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    proc = start(folder, cwd, **env)
    stdout, stderr = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def ran_from_the_venv(done: subprocess.CompletedProcess[str], folder: Path) -> bool:
    """Whether stdout is exactly the stand-in plugin's one line, run from ``folder/venv``'s
    target, with the engine's address."""
    words = done.stdout.split()
    if done.returncode != 0 or done.stdout.count("\n") != 1 or len(words) != 3:
        return False
    here = Path(words[1]).resolve().is_relative_to((folder / "venv").resolve())
    return here and words[0] == "plugin" and words[2] == "127.0.0.1:1"


def venv_copies(folder: Path) -> list[str]:
    """The launcher's own files beside its venv link: ``venv.<pid>`` folders, leftovers."""
    names = (p.name for p in folder.iterdir())
    return sorted(n for n in names if n.startswith("venv.") and n != "venv.lock")


def shadow_package(folder: Path) -> Path:
    """A folder holding a ``pulumi_lora`` package whose ``_pulumi._plugin`` prints
    :data:`SHADOW`."""
    package = folder / "pulumi_lora"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_pulumi").mkdir()
    (package / "_pulumi" / "_plugin.py").write_text(SHADOW)
    return folder


def installed_by_hand(folder: Path) -> None:
    """A working ``venv -> venv.222`` made without pip (milliseconds, not a real install): the
    stand-in package copied into its site-packages."""
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", folder / "venv.222"], check=True)
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    package = folder / "venv.222" / "lib" / python / "site-packages" / "pulumi_lora"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_pulumi").mkdir()
    (package / "_pulumi" / "_plugin.py").write_text(PLUGIN)
    (folder / "venv").symlink_to("venv.222")


def test_a_pulumi_lora_in_the_working_directory_or_on_pythonpath_does_not_shadow_the_venvs(
    tmp_path: Path,
) -> None:
    folder = unpacked_plugin(tmp_path)
    installed_by_hand(folder)
    elsewhere = shadow_package(tmp_path / "shadow")
    in_cwd = launch(folder, cwd=elsewhere)
    assert ran_from_the_venv(in_cwd, folder), in_cwd
    on_path = launch(folder, cwd=tmp_path, PYTHONPATH=str(elsewhere))
    assert ran_from_the_venv(on_path, folder), on_path
    assert (in_cwd.stderr, on_path.stderr) == ("", "")  # a working venv: nothing to say
    assert venv_copies(folder) == ["venv.222"]


def broken_venv(folder: Path, how: str) -> None:
    """Leave ``venv`` broken: ``venv -> venv.111`` (an earlier start's) whose Python is gone
    (upgraded away) or that holds no pulumi_lora, or ``venv`` a folder whose Python is gone."""
    old = folder / ("venv" if how == "a folder" else "venv.111")
    if how == "no pulumi_lora":
        subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", old], check=True)
    else:
        (old / "bin").mkdir(parents=True)
        (old / "bin" / "python").symlink_to(folder / "gone" / "python3.11")
    if how != "a folder":
        (folder / "venv").symlink_to("venv.111")


# Each test below makes real virtualenvs (pip included: seconds each); the fast tier runs one.
def test_the_first_start_makes_the_venv_and_only_the_plugin_writes_stdout(tmp_path: Path) -> None:
    folder = unpacked_plugin(tmp_path)
    done = launch(folder, cwd=tmp_path)
    assert ran_from_the_venv(done, folder), done
    assert "first run: making" in done.stderr
    assert "rebuilding" not in done.stderr
    assert (folder / "venv").is_symlink()
    assert venv_copies(folder) == [os.readlink(folder / "venv")]


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("python gone", "does not run"),
        ("no pulumi_lora", "cannot import pulumi_lora"),
        ("a folder", "does not run"),
    ],
)
def test_a_venv_that_does_not_work_is_rebuilt_and_replaced(
    tmp_path: Path, how: str, said: str
) -> None:
    folder = unpacked_plugin(tmp_path)
    broken_venv(folder, how)
    # from a folder holding a pulumi_lora: the check must not take that one for the venv's
    cwd = shadow_package(tmp_path / "cwd")
    done = launch(folder, cwd=cwd)
    assert ran_from_the_venv(done, folder), done
    assert f"rebuilding the plugin's virtualenv: venv/bin/python {said}" in done.stderr
    assert "first run" not in done.stderr
    new = os.readlink(folder / "venv")
    assert new != "venv.111"
    assert venv_copies(folder) == [new]  # the broken one removed, no link left over
    assert (folder / "venv").is_symlink()
    again = launch(folder, cwd=cwd)
    assert ran_from_the_venv(again, folder), again
    assert again.stderr == ""
    assert os.readlink(folder / "venv") == new


def test_two_starts_at_once_on_a_broken_venv_leave_one_working_venv(tmp_path: Path) -> None:
    folder = unpacked_plugin(tmp_path)
    broken_venv(folder, "python gone")
    first, second = start(folder, cwd=tmp_path), start(folder, cwd=tmp_path)
    done = []
    for proc in (first, second):
        stdout, stderr = proc.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    for each in done:
        assert ran_from_the_venv(each, folder), each
    assert venv_copies(folder) == [os.readlink(folder / "venv")]  # the other copy removed
