"""Typed settings, grouped by concern, with the unit and the reason under every field."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClientTimeouts"]


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    """How long the SGLang client waits, per phase and per route.

    SGLang's load and unload calls are synchronous and have no server-side timeout, so they get
    long read timeouts of their own; everything else should fail fast so that retries and the
    per-pod backoff, not a hung socket, decide how long a reconcile takes.
    """

    connect: float = 3.0
    """Seconds to open the TCP/TLS connection (also the wait for a pooled connection).

    Short: a pod that doesn't accept within 3 s is down, restarting or unroutable, and a retry
    later is more useful than a long wait now.
    """

    read: float = 10.0
    """Seconds to wait for each chunk of a ``/v1/models`` or ``/health`` answer (also the write
    timeout of every route: request bodies are tiny).

    These routes answer from memory; 10 s covers a server busy with inference.
    """

    load: float = 300.0
    """Seconds to wait for ``POST /load_lora_adapter`` to answer.

    The call returns only after the weights are read: seconds from local disk, minutes from the
    Hub. SGLang keeps loading when the client gives up, so a retry after a timeout sees
    "already loaded".
    """

    unload: float = 120.0
    """Seconds to wait for ``POST /unload_lora_adapter`` to answer.

    SGLang holds the 200 back until the adapter's in-flight requests finish (no server-side
    timeout); 2 minutes covers long generations. The name is unregistered at once, so a retry
    after a timeout sees "does not exist".
    """

    smoke: float = 60.0
    """Seconds to wait for the smoke generation after a load (``POST /generate``, one token).

    One token of one short prompt takes milliseconds on a GPU, but the request queues behind
    the batch the server is running and, on a busy or CPU server, a whole prefill; 60 s covers
    that without letting a hung server hold a load for the load timeout.
    """
