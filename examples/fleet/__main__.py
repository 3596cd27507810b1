"""Fleet: many LoRA adapters declared in one data file, across InferenceServices and namespaces.

``adapters.yaml`` lists, per InferenceService, the adapters it serves; this program declares one
``LoRAAdapter`` per entry and exports a readable table of which pod serves what (``pulumi stack
output table``) plus a ``loaded`` map for scripts. Adding an adapter is a one-line change to
the data file; ``pulumi up`` loads it on every Ready pod, ``pulumi destroy`` unloads it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    """One adapter of the fleet, on one InferenceService."""

    namespace: str
    inference_service: str
    name: str
    path: str
    pinned: bool = False

    @property
    def key(self) -> str:
        """A name unique in the stack (and readable in the table): ``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def load_fleet(file: Path) -> list[Entry]:
    """Read the data file; a malformed one fails with the entry it is about (not a KeyError)."""
    data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    entries: list[Entry] = []
    for i, service in enumerate(data.get("services") or []):
        where = f"{file.name}: services[{i}]"
        try:
            namespace, isvc = str(service["namespace"]), str(service["inferenceService"])
            for item in service.get("adapters") or []:
                entries.append(
                    Entry(
                        namespace,
                        isvc,
                        str(item["name"]),
                        str(item["path"]),
                        bool(item.get("pinned", False)),
                    )
                )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: missing or malformed field {exc}") from exc
    keys = [e.key for e in entries]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{file.name}: adapters declared twice in one namespace: {duplicates}")
    if not entries:
        raise ValueError(f"{file.name}: no adapters declared")
    return entries


def format_table(entries: Sequence[Entry], pods: Sequence[Sequence[dict[str, Any]]]) -> str:
    """Pure: one line per adapter and pod, aligned (``pods[i]`` are ``entries[i]``'s outputs)."""
    header = ("NAMESPACE", "SERVICE", "ADAPTER", "POD", "LOADED", "PATH")
    rows = [header]
    for entry, lines in zip(entries, pods, strict=True):
        head = (entry.namespace, entry.inference_service, entry.name)
        if not lines:
            rows.append((*head, "-", "no pods", "-"))
        for pod in lines:
            # ``ready`` is only there when false, ``path`` only when not the declared one
            ready = pod.get("ready", True)
            loaded = "yes" if pod.get("loaded") else ("no" if ready else "not ready")
            path = pod.get("path", entry.path) if pod.get("loaded") else "-"
            rows.append((*head, str(pod.get("pod")), loaded, str(path)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def program() -> None:
    """Declare every adapter of the data file; export the table and the loaded map."""
    file = Path(pulumi.Config().require("adaptersFile"))
    entries = load_fleet(file if file.is_absolute() else HERE / file)
    adapters = [
        LoRAAdapter(
            entry.key.replace("/", "-"),
            LoRAAdapterArgs(
                adapter_name=entry.name,
                path=entry.path,
                inference_service=entry.inference_service,
                namespace=entry.namespace,
                pinned=entry.pinned,
            ),
        )
        for entry in entries
    ]
    pulumi.export(
        "loaded",
        pulumi.Output.all(*[a.loaded for a in adapters]).apply(
            lambda flags: {e.key: bool(f) for e, f in zip(entries, flags, strict=True)}
        ),
    )
    pulumi.export(
        "table",
        pulumi.Output.all(*[a.pods for a in adapters]).apply(
            lambda pods: format_table(entries, pods)
        ),
    )


if __name__ == "__main__":
    program()
