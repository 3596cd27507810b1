"""Process-wide teardown of testbeds: every live testbed stops at interpreter exit and on SIGTERM.

A testbed registers itself when it starts (:func:`register`) and leaves when it stops
(:func:`unregister`); the hooks are installed once per process, the SIGTERM handler only where
the program installed none of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from types import FrameType
from typing import Protocol

__all__ = ["register", "unregister"]

_log = logging.getLogger("pulumi_lora.testing.testbed")


class Stoppable(Protocol):
    """What teardown needs of a testbed."""

    id: str

    def stop(self) -> None:
        """Stop everything it started."""
        ...


_live: set[Stoppable] = set()
_live_lock = threading.RLock()  # re-entered by the SIGTERM handler on the main thread
_hooks_installed = False


def register(testbed: Stoppable) -> None:
    """Stop ``testbed`` at exit and on SIGTERM unless it stopped before."""
    global _hooks_installed  # noqa: PLW0603 - install the process-wide hooks once
    with _live_lock:
        _live.add(testbed)
        if _hooks_installed:
            return
        _hooks_installed = True
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)


def unregister(testbed: Stoppable) -> None:
    """``testbed`` stopped: nothing left to do for it at exit."""
    with _live_lock:
        _live.discard(testbed)


def _stop_all() -> None:
    with _live_lock:
        live = list(_live)
    for testbed in live:
        try:
            testbed.stop()
        except Exception:  # teardown of one must not keep the others alive
            _log.exception("stopping testbed %s failed", testbed.id)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: stop every testbed, then die of SIGTERM as if no handler had been installed.

    Dying by the signal (rather than raising ``SystemExit``) keeps the default meaning of SIGTERM
    for the host program: pytest, for one, would report a ``SystemExit`` as a failed test and
    carry on. The locks the teardown takes are re-entrant, so interrupting the main thread inside
    the testbed's own code cannot deadlock it.
    """
    _log.warning("SIGTERM: stopping %d testbed(s)", len(_live))
    _stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
