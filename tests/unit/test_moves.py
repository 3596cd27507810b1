"""``pulumi-lora component-moves``: the state edit that moves a stack made by 0.2's component
(docs/migration.md), planned from ``pulumi stack export``. ``tests/cli/test_yaml_adoption.py``
runs the printed lines on a real stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._pulumi._migration import CHILD, TOKEN, commands, plan

STACK = "urn:pulumi:dev::lora-yaml::pulumi:pulumi:Stack::lora-yaml-dev"
PYTHON = "urn:pulumi:dev::lora-yaml::pulumi:providers:pulumi-python::default"


def adapter(name: str, cr: str, parent: str = STACK, parent_type: str = "") -> list[dict[str, Any]]:
    """A 0.2 component and its dynamic child, as ``pulumi stack export`` shows them."""
    prefix = f"{parent_type}$" if parent_type else ""
    component = f"urn:pulumi:dev::lora-yaml::{prefix}{TOKEN}::{name}"
    return [
        {"urn": component, "type": TOKEN, "parent": parent},
        {
            "urn": f"urn:pulumi:dev::lora-yaml::{prefix}{TOKEN}${CHILD}::{name}",
            "type": CHILD,
            "custom": True,
            "id": cr,
            "parent": component,
            "provider": f"{PYTHON}::9d2c0de7",
        },
    ]


def export(*resources: dict[str, Any]) -> dict[str, Any]:
    base = [
        {"urn": STACK, "type": "pulumi:pulumi:Stack"},
        {"urn": PYTHON, "type": "pulumi:providers:pulumi-python", "custom": True, "id": "9d2c0de7"},
    ]
    return {"version": 3, "deployment": {"resources": [*base, *resources]}}


def test_each_component_and_child_leave_the_state_and_come_back_by_import() -> None:
    moves = plan(export(*adapter("sql", "models/sql-lora"), *adapter("chat", "models/chat-lora")))
    assert moves.remove == (
        f"urn:pulumi:dev::lora-yaml::{TOKEN}${CHILD}::sql",
        f"urn:pulumi:dev::lora-yaml::{TOKEN}::sql",
        f"urn:pulumi:dev::lora-yaml::{TOKEN}${CHILD}::chat",
        f"urn:pulumi:dev::lora-yaml::{TOKEN}::chat",
        PYTHON,  # nothing else uses it
    )
    assert moves.imports == {
        "resources": [
            {"type": TOKEN, "name": "sql", "id": "models/sql-lora"},
            {"type": TOKEN, "name": "chat", "id": "models/chat-lora"},
        ]
    }
    assert commands(moves, "lora-imports.json") == [
        "pulumi state remove --yes " + " ".join(f"'{u}'" if "$" in u else u for u in moves.remove),
        "pulumi import --file lora-imports.json --yes --protect=false --generate-code=false",
        "pulumi preview --expect-no-changes",
    ]


def test_the_dynamic_provider_stays_while_another_resource_uses_it() -> None:
    other = {
        "urn": "urn:pulumi:dev::lora-yaml::pulumi-python:dynamic:Resource::mine",
        "type": CHILD,
        "custom": True,
        "id": "x",
        "parent": STACK,
        "provider": f"{PYTHON}::9d2c0de7",
    }
    moves = plan(export(*adapter("sql", "models/sql-lora"), other))
    assert PYTHON not in moves.remove
    assert other["urn"] not in moves.remove


def test_a_nested_component_keeps_its_parent_through_the_name_table() -> None:
    team = "urn:pulumi:dev::lora-yaml::acme:index:Team::team"
    moves = plan(
        export(
            {"urn": team, "type": "acme:index:Team", "parent": STACK},
            *adapter("sql", "models/sql-lora", parent=team, parent_type="acme:index:Team"),
        )
    )
    assert moves.imports == {
        "resources": [
            {"type": TOKEN, "name": "sql", "id": "models/sql-lora", "parent": "parent-0"}
        ],
        "nameTable": {"parent-0": team},
    }


def test_the_command_writes_the_import_file_and_prints_the_lines(tmp_path: Path) -> None:
    document = json.dumps(export(*adapter("sql", "models/sql-lora")))
    target = tmp_path / "moves.json"
    result = CliRunner().invoke(
        cli, ["component-moves", "--import-file", str(target)], input=document
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"# 1 LoRAAdapter component(s) to move; {target} written."
    assert lines[2].startswith("pulumi state remove --yes ")
    assert lines[3] == f"pulumi import --file {target} --yes --protect=false --generate-code=false"
    assert json.loads(target.read_text())["resources"][0]["id"] == "models/sql-lora"


def test_nothing_to_move_and_what_blocks_a_move_are_said() -> None:
    said = CliRunner().invoke(cli, ["component-moves"], input=json.dumps(export()))
    assert said.exit_code == 0
    assert (
        said.output
        == "nothing to move: no LoRAAdapter component with its dynamic child in this state\n"
    )
    under = {
        "urn": f"urn:pulumi:dev::lora-yaml::{TOKEN}$acme:index:Note::note",
        "type": "acme:index:Note",
        "parent": f"urn:pulumi:dev::lora-yaml::{TOKEN}::sql",
    }
    blocked = CliRunner().invoke(
        cli, ["component-moves"], input=json.dumps(export(*adapter("sql", "m/s"), under))
    )
    assert blocked.exit_code == 1
    assert "have a LoRAAdapter component as their parent" in blocked.output
    assert under["urn"] in blocked.output
    bad = CliRunner().invoke(cli, ["component-moves"], input="not json")
    assert bad.exit_code == 2 and "not the JSON of `pulumi stack export`" in bad.output
