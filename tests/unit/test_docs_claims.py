"""The claims in the docs that a user acts on hold: how to install, where an alert's runbook is,
which SDKs exist, what the examples are. Pure file reads (issue 41's sweep, kept from going
stale)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
REGISTRY_INSTALL = ROOT / "docs" / "registry" / "installation-configuration.md"
SCHEMA = json.loads((ROOT / "provider" / "schema.json").read_text(encoding="utf-8"))

PIP_INSTALL = re.compile(r"\bpip3?\s+install((?:\s+(?:'[^']*'|\"[^\"]*\"|[^\s`'\"|;#&)]+))*)")
ARGUMENT = re.compile(r"'[^']*'|\"[^\"]*\"|[^\s`'\"|;#&)]+")
REGISTRY_NAME = re.compile(r"pulumi[-_]lora(?:[-_]testing)?(?:\[[^\]]*\])?(?:[=<>!~]=?\S*)?", re.I)
NOT_PUBLISHED = re.compile(
    r"\b(once|when|after|until|before|not|nothing)\b[^.|;]{0,40}\bpublished\b", re.I
)
#: The schema's ``language`` section: each language's package-name key and its folder in sdk/.
SDKS = {
    "nodejs": ("packageName", "nodejs"),
    "go": ("importBasePath", "go"),
    "csharp": ("rootNamespace", "dotnet"),
    "java": ("basePackage", "java"),
    "python": ("packageName", "python"),
}


def user_docs() -> list[Path]:
    """The docs users read: README.md, docs/, the examples' and provider/'s READMEs."""
    found = [ROOT / "README.md", ROOT / "provider" / "README.md"]
    found += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "examples").rglob("README.md"))
    return [p for p in found if "node_modules" not in p.parts and "venv" not in p.parts]


def blocks(text: str) -> list[str]:
    """Paragraphs (runs of non-blank lines, joined by spaces); each table row, and each line of
    a fenced code block, on its own."""
    found: list[str] = []
    paragraph: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        fence = line.lstrip().startswith("```")
        fenced ^= fence
        alone = not fence and (fenced or line.lstrip().startswith("|"))
        if fence or alone or not line.strip():
            found += [" ".join(paragraph), line if alone else ""]
            paragraph = []
        else:
            paragraph.append(line)
    return [b for b in found if b.strip()]


def registry_installs(block: str) -> list[str]:
    """Each ``pip install`` in ``block`` that names pulumi-lora (or -testing) by its name, as
    from an index, not a path or a wheel file."""
    found = []
    for command in PIP_INSTALL.finditer(block):
        arguments = [a.strip("'\"").rstrip(".,:") for a in ARGUMENT.findall(command.group(1))]
        if any(REGISTRY_NAME.fullmatch(a) for a in arguments if not a.startswith("-")):
            found.append(command.group(0))
    return found


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lowercase, punctuation dropped, spaces to '-'."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text: str) -> set[str]:
    """The anchors of ``text``'s headings (outside code fences), with GitHub's -N for repeats."""
    anchors: set[str] = set()
    fenced = False
    for line in text.splitlines():
        fenced ^= line.lstrip().startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            anchor, n = github_anchor(line), 0
            while (anchor if n == 0 else f"{anchor}-{n}") in anchors:
                n += 1
            anchors.add(anchor if n == 0 else f"{anchor}-{n}")
    return anchors


def test_no_doc_tells_users_to_pip_install_from_an_index_as_if_published() -> None:
    """Nothing is on PyPI: ``pip install pulumi-lora`` (or ``pulumi-lora-testing``, with extras
    or a version), by name, only in a paragraph, table row or code line that says it is not
    published yet or works once it is (a path, a wheel file, ``-r requirements.txt`` always do)."""
    wrong = [
        f"{path.relative_to(ROOT)}: {command}"
        for path in user_docs()
        for block in blocks(path.read_text(encoding="utf-8"))
        for command in registry_installs(block)
        if not NOT_PUBLISHED.search(block)
    ]
    assert not wrong, "say 'once published', or give the checkout's or wheel's command:\n" + (
        "\n".join(wrong)
    )


def test_every_runbook_url_is_absolute_and_names_a_heading_of_operations_md() -> None:
    """Alert receivers open ``runbook_url`` as a link: an https URL of docs/operations.md in the
    schema's repository, whose anchor is a heading there (by GitHub's rules)."""
    rules = yaml.safe_load((ROOT / "pulumi_lora" / "_monitoring" / "rules.yaml").read_text())
    anchors = headings(OPERATIONS.read_text(encoding="utf-8"))
    page = f"{SCHEMA['repository']}/blob/main/docs/operations.md"
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        url = urlsplit(rule["annotations"]["runbook_url"])
        assert url.scheme == "https" and url._replace(fragment="").geturl() == page, url
        assert url.fragment in anchors, f"{rule['alert']}: no heading #{url.fragment}"


def test_the_registry_page_names_only_sdks_that_exist_in_sdk() -> None:
    """A language's SDK package name (from the schema) is on the install page only when its
    generated SDK is in ``sdk/``; every ``sdk/X`` it names exists, and it names each one."""
    page = REGISTRY_INSTALL.read_text(encoding="utf-8")
    present = {p.name for p in (ROOT / "sdk").iterdir() if p.is_dir()}
    for language, (key, folder) in SDKS.items():
        if SCHEMA["language"][language][key] in page:
            assert folder in present, f"{language}: named, but no sdk/{folder}"
    named = set(re.findall(r"`sdk/(\w+)`", page))
    assert named == present, f"names sdk/{sorted(named)}, sdk/ holds {sorted(present)}"


def test_operations_md_describes_examples_yaml_and_the_go_sdk_as_they_are() -> None:
    """``examples/yaml`` is a plain custom resource served by ``provider/``, not 0.2's component;
    and Go has a generated SDK in ``sdk/go``, so no sentence says Go would need one."""
    text = OPERATIONS.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `examples/yaml/`"))
    program = yaml.safe_load((ROOT / "examples" / "yaml" / "Pulumi.yaml").read_text())
    assert "component" not in row.lower(), row
    assert all(f"`{r['type']}`" in row for r in program["resources"].values()), row
    assert "`provider/`" in row and (ROOT / "sdk" / "go").is_dir()
    sentences = re.split(r"(?<=\.)\s", " ".join(text.split("## Other Pulumi languages")[1].split()))
    assert not [s for s in sentences if re.search(r"\bGo\b", s) and re.search(r"\bneeds?\b", s)]
