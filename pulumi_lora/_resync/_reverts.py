"""Bad revisions the loop rolls back (issue 54, item 5). Pure bookkeeping, kept by the World.

When a CR's ``path`` changes (a ``delegated`` swap, or an edit with kubectl) and the revision it
replaces was established (the CR had recorded a load of it, ``status.loadedPath``), that old
path is remembered for the new generation. If the new revision then fails on any pod for good
(its load or its smoke generation: not a retryable failure), the loop reverts: for the rest of
that generation every pod is given the old path again, so pods that switched swap back and the
failed one loads the old revision, and the CR's status says ``SwapRolledBack`` with the pod and
SGLang's words. The provider of a ``delegated`` swap reads that and applies the CR's old spec
again; anyone else sees the status. A new generation (the spec changed again) ends the revert.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulumi_lora._resync._views import AdapterCR, Key

#: The ``Error`` and ``Loaded`` reason of a generation rolled back (the provider's error's too).
REASON = "SwapRolledBack"


@dataclass(frozen=True)
class Revert:
    """A generation whose new path failed: its pods are given ``old_path`` again."""

    generation: int
    old_path: str
    new_path: str
    failure: str  # "pod NAME: what failed, in SGLang's words"


class Reverts:
    """The revision each swapping CR replaces, and the CRs being rolled back."""

    def __init__(self) -> None:
        self._replaced: dict[Key, tuple[int, str]] = {}  # generation → the path it replaces
        self._active: dict[Key, Revert] = {}

    def declared(self, old: AdapterCR | None, cr: AdapterCR) -> None:
        """``cr`` was stored over ``old`` (its previous copy, if any)."""
        if old is None or old.uid != cr.uid:
            self.forget(cr.key)
            return
        active = self._active.get(cr.key)
        if active is not None and active.generation != cr.generation:
            del self._active[cr.key]  # the spec changed again: what it says now stands
        if old.path != cr.path:
            if old.status.get("loadedPath") == old.path:
                self._replaced[cr.key] = (cr.generation, old.path)
            else:
                self._replaced.pop(cr.key, None)  # nothing established to go back to
        elif (found := self._replaced.get(cr.key)) is not None and found[0] != cr.generation:
            del self._replaced[cr.key]

    def failed(self, cr: AdapterCR, path: str, failure: str) -> bool:
        """A load of ``path`` for ``cr`` failed for good on a pod (``failure`` says where and
        how): when that is the new revision of a swap, start the revert; True if it started."""
        replaced = self._replaced.get(cr.key)
        if cr.key in self._active or replaced is None or replaced[0] != cr.generation:
            return False
        if path != cr.path or replaced[1] == cr.path:
            return False
        self._active[cr.key] = Revert(cr.generation, replaced[1], cr.path, failure)
        return True

    def active(self, cr: AdapterCR) -> Revert | None:
        """The revert under way for ``cr``'s generation, if any."""
        found = self._active.get(cr.key)
        return found if found is not None and found.generation == cr.generation else None

    def path(self, cr: AdapterCR) -> str:
        """The path ``cr``'s pods are given: its old one while its generation is rolled back."""
        found = self.active(cr)
        return cr.path if found is None else found.old_path

    def forget(self, key: Key) -> None:
        """The CR is gone (or was made anew)."""
        self._replaced.pop(key, None)
        self._active.pop(key, None)
