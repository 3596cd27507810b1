"""The pure core: decisions on pods, adapters and conditions; no I/O library."""
