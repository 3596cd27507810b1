"""Which staged directories of a claim the LoRAAdapter CRs still name, by content key. Pure.

The provider decides it from the CRs and the InferenceServices they name, never from pods or
Secrets (a delegated adapter's provider reaches neither), and by claim, not by one mount
path: another InferenceService may mount the same claim elsewhere (docs/staging.md,
"Revisions and cleanup").
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pulumi_lora._core._llmkube import Target
from pulumi_lora._staging._plan import AdapterMount
from pulumi_lora._staging._source import KEY_HEX

__all__ = ["claim_mounts", "named_keys"]

_KEY = re.compile(rf"^[0-9a-f]{{{KEY_HEX}}}$")


def claim_mounts(target: Target, claim: str) -> list[tuple[str, str]]:
    """Pure: where ``target``'s SGLang container mounts ``claim``: ``(mount path, sub path)``
    for each of its mounts of it (none, one, or several)."""
    volumes = {
        str(v.get("name")): str((v.get("persistentVolumeClaim") or {}).get("claimName"))
        for v in target.volumes
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    }
    return [
        (str(m["mountPath"]), str(m.get("subPath") or ""))
        for m in target.volume_mounts
        if volumes.get(str(m.get("name"))) == claim and m.get("mountPath")
    ]


def _on_claim(path: str, mount_path: str, sub_path: str) -> str | None:
    """Pure: ``path`` (as a pod sees it) as a path on the claim (``/`` its top), or None
    when it is not under ``mount_path``."""
    seen, mounted = posixpath.normpath(path), posixpath.normpath(mount_path).rstrip("/")
    if seen == mounted or (not mounted and seen == "/"):
        inside = ""
    elif seen.startswith(mounted + "/"):
        inside = seen[len(mounted) + 1 :]
    else:
        return None
    return posixpath.normpath(posixpath.join("/", sub_path, inside))


def _key_in(path: str, mounts: Sequence[tuple[str, str]], root: str) -> str | None:
    """Pure: the content key ``path`` names under the stager's ``root`` on the claim (seen
    through any of ``mounts``), or None."""
    for mount_path, sub_path in mounts:
        on_claim = _on_claim(path, mount_path, sub_path)
        if on_claim is None:
            continue
        parent, name = posixpath.split(on_claim)
        if parent == root and _KEY.fullmatch(name):
            return name
    return None


def named_keys(
    crs: Iterable[Mapping[str, Any]],
    workloads: Mapping[str, Target | None],
    namespace: str,
    mount: AdapterMount,
) -> dict[str, list[str]]:
    """Pure: the content keys of the stager's root on ``mount``'s claim (of ``namespace``)
    that something still names, each with what names it (``LoRAAdapter NS/NAME``).

    A CR names key K when its InferenceService (one of ``namespace``: no other can mount the
    claim) mounts the claim so that the CR's ``spec.path`` is the directory K of the stager's
    root (``mount.sub_path``), through whichever mount path. A CR whose InferenceService is
    not known (``workloads`` lacks it or maps it to None: gone or unreadable) names the key its path
    ends with, to be safe. An InferenceService's own ``sglangConfig.loraAdapters`` (loaded at
    its pods' start) name keys too.
    """
    root = posixpath.normpath(posixpath.join("/", mount.sub_path))
    named: dict[str, list[str]] = {}
    for cr in crs:
        meta, spec = cr.get("metadata") or {}, cr.get("spec") or {}
        ref = spec.get("inferenceServiceRef") or {}
        if (ref.get("namespace") or meta.get("namespace")) != namespace:
            continue
        path = str(spec.get("path") or "")
        target = workloads.get(str(ref.get("name") or ""))
        if target is None:
            found = posixpath.basename(posixpath.normpath(path)) if path else ""
            key = found if _KEY.fullmatch(found) else None
        else:
            key = _key_in(path, claim_mounts(target, mount.claim), root)
        if key is not None:
            named.setdefault(key, []).append(
                f"LoRAAdapter {meta.get('namespace')}/{meta.get('name')}"
            )
    for name, target in sorted(workloads.items()):
        if target is None:
            continue
        mounts = claim_mounts(target, mount.claim)
        for adapter in target.sglang_adapters:
            key = _key_in(str(adapter.get("path") or ""), mounts, root)
            if key is not None:
                named.setdefault(key, []).append(f"InferenceService {namespace}/{name}")
    return named
