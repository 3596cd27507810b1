"""``python -m pulumi_lora.testing.emulator`` (and ``pulumi-lora emulate``): run until SIGTERM.

Logs JSON lines to stderr: ``listening`` once serving, ``ignored_args`` (flag names only, as
their values may be secrets), ``launch_failed`` and ``stopped``. Never a key. SIGUSR1 writes
every thread's stack to stderr (``faulthandler``): what the testbed asks of one that does not stop.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import threading
from collections.abc import Callable

from pulumi_lora.testing.emulator._args import ignored_flag_names, parse_args
from pulumi_lora.testing.emulator._engine import EmulatorLaunchError
from pulumi_lora.testing.emulator._server import EmulatorServer

__all__ = ["main"]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How often the main thread wakes to run a stop signal's handler, at most (see ``main``).
STOP_POLL_SECONDS = 0.5


def main(argv: list[str] | None = None) -> int:
    """Run the emulator with SGLang's command line; the exit status (0 after SIGTERM).

    2 for a bad command line (argparse's usage error), 1 if the launch fails.
    """
    try:
        config, ignored = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    if ignored:
        _log_event("ignored_args", flags=ignored_flag_names(ignored))
    server = EmulatorServer(config)
    try:
        server.start()
    except (EmulatorLaunchError, OSError) as exc:
        _log_event("launch_failed", error=str(exc))
        return 1
    stop = threading.Event()
    restore = _on_stop_signals(stop.set)
    if threading.current_thread() is threading.main_thread():
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        _log_event("listening", host=config.host, port=server.port, url=server.url)
        # A timed wait: a signal the kernel gives another thread sets only a flag, which the main
        # thread acts on when it next runs Python; an untimed lock wait never would.
        while not stop.wait(STOP_POLL_SECONDS):
            pass
    finally:
        server.stop()
        restore()
    _log_event("stopped")
    return 0


def _on_stop_signals(handler: Callable[[], None]) -> Callable[[], None]:
    """Call ``handler`` on SIGTERM and SIGINT; returns what restores the previous handlers.

    Signals can only be handled in the main thread; elsewhere nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {number: signal.getsignal(number) for number in _STOP_SIGNALS}
    for number in _STOP_SIGNALS:
        signal.signal(number, lambda _number, _frame: handler())

    def restore() -> None:
        for number, old in previous.items():
            signal.signal(number, old)

    return restore


def _log_event(event: str, **fields: object) -> None:
    sys.stderr.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stderr.flush()
