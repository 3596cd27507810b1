"""``KUBECONFIG`` with several files, merged as kubectl merges them (issue 41)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._kubeconfigs import kubeconfig_files, load_merged, merge
from pulumi_lora._kube._source import KubeSource


def cluster(name: str, server: str, **more: str) -> dict[str, object]:
    return {"name": name, "cluster": {"server": server, **more}}


def user(name: str, **body: object) -> dict[str, object]:
    return {"name": name, "user": body}


def context(name: str, cluster_name: str, user_name: str) -> dict[str, object]:
    return {"name": name, "context": {"cluster": cluster_name, "user": user_name}}


def write(path: Path, **document: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_the_first_file_wins_per_name_and_for_the_current_context(tmp_path: Path) -> None:
    first = tmp_path / "a" / "config"
    second = tmp_path / "b" / "config"
    merged = merge(
        [
            (
                first,
                {
                    "current-context": "eks",
                    "clusters": [cluster("shared", "https://first.example.com")],
                },
            ),
            (
                second,
                {
                    "current-context": "kind",
                    "clusters": [
                        cluster("shared", "https://second.example.com"),
                        cluster(
                            "eks", "https://eks.example.com", **{"certificate-authority": "ca.crt"}
                        ),
                    ],
                    "users": [user("eks", exec={"command": "./bin/get-token", "apiVersion": "v1"})],
                    "contexts": [context("eks", "eks", "eks")],
                },
            ),
        ]
    )
    assert merged["current-context"] == "eks"
    servers = {c["name"]: c["cluster"]["server"] for c in merged["clusters"]}
    assert servers == {"shared": "https://first.example.com", "eks": "https://eks.example.com"}
    eks = next(c for c in merged["clusters"] if c["name"] == "eks")
    # a relative file is relative to the kubeconfig that names it, as kubectl reads it
    assert eks["cluster"]["certificate-authority"] == str(second.parent / "ca.crt")
    (plugin_user,) = merged["users"]
    assert plugin_user["user"]["exec"]["command"] == str(second.parent / "bin" / "get-token")


def test_a_plain_command_name_stays_a_name_on_the_path() -> None:
    merged = merge([(Path("/k/config"), {"users": [user("u", exec={"command": "aws"})]})])
    assert merged["users"][0]["user"]["exec"]["command"] == "aws"


def test_the_listed_files_in_order_without_empties_or_repeats(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    value = os.pathsep.join([str(a), "", str(b), str(a)])
    assert kubeconfig_files(value) == [a, b]


def test_a_missing_file_is_skipped_and_none_at_all_is_an_error(tmp_path: Path) -> None:
    real = write(tmp_path / "config", **{"current-context": "x"})
    merged, first = load_merged(os.pathsep.join([str(tmp_path / "absent"), str(real)]))
    assert merged["current-context"] == "x" and first == real
    with pytest.raises(FileNotFoundError, match="none of the files"):
        load_merged(str(tmp_path / "absent"))


def test_kube_source_reads_every_file_of_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file names the context (as a team's own file on top of a generated one); the
    second defines it: the cluster, user and context resolve across the two."""
    top = write(tmp_path / "mine", **{"current-context": "prod"})
    generated = write(
        tmp_path / "generated" / "config",
        clusters=[cluster("prod", "https://prod.example.com:6443")],
        users=[user("prod", token="t0k3n")],
        contexts=[context("prod", "prod", "prod")],
    )
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(top), str(generated)]))
    single = KubeSource().load()
    assert single.context_name == "prod"
    assert single.cluster.server == "https://prod.example.com:6443"
    assert single.user.token == "t0k3n"


def test_kube_source_names_kubeconfig_when_no_file_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(ClusterError, match="KUBECONFIG"):
        KubeSource().load()
