"""The re-sync loop (``pulumi-lora resync``): keeps every LoRAAdapter true on every Ready pod.

``_views``, ``_decide``, ``_world`` and ``_status`` are pure and import no I/O library, even
transitively. See docs/resync.md.
"""

from pulumi_lora._resync._settings import LeaseSettings, ResyncSettings

__all__ = ["LeaseSettings", "ResyncSettings"]
