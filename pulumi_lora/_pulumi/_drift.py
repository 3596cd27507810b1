"""Drift in words: what a refresh found changed outside Pulumi, printed where CI logs show it."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from msgspec import ValidationError

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import AdapterArgs
from pulumi_lora._models import ConditionKind, Transport
from pulumi_lora._pulumi._outputs import inputs, pod_path, unknown


def effective_inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """Inputs with defaults applied, so an omitted setting equals its default (pure).

    Values unknown during preview are kept as the engine's placeholder.
    """
    given = {k: v for k, v in inputs(props).items() if v is not None}
    pending = {k: v for k, v in given.items() if unknown(v)}
    try:
        known = AdapterArgs.parse({k: v for k, v in given.items() if k not in pending})
    except ValidationError:
        return given
    return {**known.to_dict(), **pending}


def live_drift(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """Pods (or the delegated status) that don't serve the declared path: each is a change."""
    path = news.get("path")
    if unknown(path):
        return []
    if news.get("transport") == Transport.DELEGATED.value:
        return [] if olds.get("loaded") else ["loaded"]
    return [
        str(p.get("pod"))
        for p in olds.get("pods") or []
        if p.get("ready", True) and pod_path(p, olds) != path
    ]


def drift_words(live: Mapping[str, Any], declared: Mapping[str, Any]) -> list[str]:
    """Pure: what drifted, in words: the CR's spec against ``declared`` (the recorded outputs or
    the program's inputs), then each Ready pod of ``live`` against the declared path (the pods
    serving what the stack declared are not drift, even under an edited CR).

    ``pod llama-7c9-x2bq: sql-lora not loaded``, ``pod ...: serves /adapters/old, declared
    /adapters/new``, ``CR edited: spec.path /adapters/a -> /adapters/b``, and for a delegated
    adapter ``Ready unknown: the re-sync loop's Lease ... is gone ...``.
    """
    words = [
        f"CR edited: spec.{field} {declared.get(key)} -> {live.get(key)}"
        for key, field in (("adapter_name", "name"), ("path", "path"))
        if declared.get(key) is not None
        and not unknown(declared.get(key))
        and live.get(key) != declared.get(key)
    ]
    name = live.get("adapter_name")
    path = declared.get("path")
    path = live.get("path") if path is None or unknown(path) else path
    for pod in live.get("pods") or []:
        served = pod_path(pod, live)
        if not pod.get("ready", True):
            continue
        if pod.get("error"):
            words.append(f"pod {pod['pod']}: could not be read ({pod['error']})")
        elif served is None:
            words.append(f"pod {pod['pod']}: {name} not loaded")
        elif served != path:
            words.append(f"pod {pod['pod']}: serves {served}, declared {path}")
    words += [  # a delegated adapter's loop gone or stale: its verdict is not current
        f"Ready unknown: {c.get('message')}"
        for c in live.get("conditions") or []
        if c.get("type") == ConditionKind.READY.value and c.get("reason") == lifecycle.STALE_REASON
    ]
    return words


def _to_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


class DriftReporter:
    """Says each drift once per process, where the engine shows it to the user.

    The engine prints a dynamic provider's stderr lines among the command's diagnostics (what
    ``pulumi preview --refresh`` users and CI logs read); a dynamic provider has no other way to
    put words there (its diff can name only changed inputs). One line per drift, prefixed with
    the CR, each said once by this provider process (the engine starts one per command).
    ``write`` is where the lines go: stderr, or, in ``provider/``'s plugin, whose stderr the
    engine hides, the engine's own log (``_pulumi._native``).
    """

    def __init__(self, write: Callable[[str], None] = _to_stderr) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()
        self.write = write

    def __call__(self, args: AdapterArgs, words: list[str]) -> None:
        where = f"drift: LoRAAdapter {args.namespace}/{args.cr_name}: "
        with self._lock:
            fresh = [where + w for w in words if where + w not in self._said]
            self._said.update(fresh)
        if fresh:
            self.write("".join(line + "\n" for line in fresh))


def progress(line: str) -> None:
    """A line of a long operation's progress (staging), where drift lines go: the command's
    output for the dynamic provider, the engine's log for ``provider/``'s plugin."""
    report_drift.write(line + "\n")


def changed(old: Any, new: Any) -> bool:
    return unknown(new) or old != new


report_drift = DriftReporter()
