"""One loop process: probes and metrics, the leader election, and the leader's controller.

Only the Lease holder runs a ``Controller``. Losing the Lease cancels it at once; SIGTERM drains
it, then releases the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._controller import Controller
from pulumi_lora._resync._events import EVENT_SENDERS
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._lease import LeaderElector
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._served import FleetState
from pulumi_lora._resync._server import HealthServer
from pulumi_lora._resync._settings import ResyncSettings
from pulumi_lora._version import __version__

#: Seconds before a controller that crashed (a bug, never an API error) is started again.
RESTART_DELAY = 1.0


class Loop:
    """The process-level state the probes read."""

    def __init__(self, settings: ResyncSettings) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.adapter_metrics)
        self.metrics.state.source = self._fleet_state
        # A thread for each status write and Event in flight, and two for Secret reads.
        threads = settings.status_concurrency + EVENT_SENDERS + 2
        self.kube = Kube(settings.kube, settings.namespace, threads=threads)
        self.elector = LeaderElector(self.kube.client, settings.lease)
        self.controller: Controller | None = None
        self._election: asyncio.Task[None] | None = None

    def _fleet_state(self) -> FleetState | None:
        """The leader's picture for the state metrics (standbys have none)."""
        controller = self.controller
        return controller.fleet_state() if controller is not None else None

    def alive(self) -> tuple[bool, str]:
        """Liveness: the event loop answers and the election has not died."""
        election = self._election
        if election is not None and election.done() and not election.cancelled():
            return False, "leader election stopped"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Readiness: a standby that reached the apiserver, or a leader whose caches are synced."""
        if self.elector.is_leader:
            synced = self.controller is not None and self.controller.synced
            return synced, "leader" if synced else "leader, syncing caches"
        return self.elector.contacted, "standby" if self.elector.contacted else "starting"

    async def serve(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down gracefully."""
        settings = self.settings
        server = HealthServer(self.metrics, self.alive, self.ready)
        port = await server.start(settings.metrics_host, settings.metrics_port)
        logs.event(
            "serving",
            version=__version__,
            host=settings.metrics_host,
            port=port,
            identity=settings.lease.identity,
            lease=f"{settings.lease.namespace}/{settings.lease.name}",
            namespace=settings.namespace or "*",
        )
        self._election = asyncio.create_task(self.elector.run(stop), name="election")
        run: asyncio.Task[None] | None = None
        try:
            while not stop.is_set():
                waits: set[asyncio.Future[Any]] = {
                    asyncio.ensure_future(stop.wait()),
                    asyncio.ensure_future(self.elector.changed.wait()),
                }
                if run is not None:
                    waits.add(run)
                _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in pending - {run}:
                    task.cancel()
                self.elector.changed.clear()
                if run is not None and run.done():
                    if not run.cancelled() and run.exception() is not None:
                        logs.event("controller_crashed", logging.ERROR, error=repr(run.exception()))
                        await asyncio.sleep(RESTART_DELAY)
                    run, self.controller = None, None
                if self.elector.is_leader and run is None and not stop.is_set():
                    self.controller = Controller(settings, self.kube, self.metrics)
                    run = asyncio.create_task(self.controller.run(), name="controller")
                    self.metrics.leader.set(1)
                elif not self.elector.is_leader and run is not None:
                    logs.event("stopped_acting", logging.WARNING, why="the Lease was lost")
                    await _cancel(run)
                    run, self.controller = None, None
                    self.metrics.leader.set(0)
        finally:
            logs.event("shutting_down")
            if run is not None and self.controller is not None:
                await self.controller.drain(settings.shutdown_timeout)
                await _cancel(run)
            self.metrics.leader.set(0)
            stop.set()
            await self._election
            await self.elector.release()
            await server.close()
            await self.kube.close()
            logs.event("stopped")


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def serve(settings: ResyncSettings, stop: asyncio.Event | None = None) -> None:
    """Run the loop until SIGTERM/SIGINT (or ``stop``, when given, is set)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    await Loop(settings).serve(stop)
