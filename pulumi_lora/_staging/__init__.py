"""Staging an adapter's weights on a volume: the in-cluster stager (``pulumi-lora stage``).

Layers inside the package, from the bottom: ``_errors`` (its branch of the exception tree),
``_source`` (the source, the pinning rule and the content key: pure values), ``_verify`` (digests,
``adapter_config.json``, the server's flags, the staged directory's manifest: reads local files,
no I/O library), ``_transfer`` (the bounds of a fetch: bytes, the deadline, no https → http),
``_write`` (the one writer of fetched bytes: counted, hashed, flushed as written), ``_hub`` (hf://
over plain ``httpx2`` GETs) and ``_clients`` (``boto3``, ``httpx2``, and the dispatch: the only
code that talks to a source), ``_fetch`` (temporary directory, verify, record, rename into
place) and ``_cli`` (the command a Job runs). See docs/staging.md.

Nothing is imported here, so the pure parts can be imported without the ``staging`` extra.
"""
