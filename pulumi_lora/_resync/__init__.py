"""The re-sync loop (``pulumi-lora resync``): keeps every LoRAAdapter true on every Ready pod.

From the bottom: pure values and decisions (``_views``, ``_decide``, ``_world``, ``_status``; no
I/O library, even transitively), the I/O edges (``_kube``, ``_podrun``, ``_lease``, ``_server``),
then the orchestration (``_worker`` ... ``_controller``, ``_app``). See docs/resync.md.
"""

from pulumi_lora._resync._settings import LeaseSettings, ResyncSettings

__all__ = ["LeaseSettings", "ResyncSettings"]
