"""The re-sync loop (``pulumi-lora resync``): keeps every LoRAAdapter true on every Ready pod.

The pure values and decisions (``_views``, ``_decide``, ``_world``, ``_status``) import no I/O
library, even transitively; the I/O edges are ``_kube``, ``_podrun``, ``_lease`` and ``_server``.
See docs/resync.md.
"""

from pulumi_lora._resync._settings import LeaseSettings, ResyncSettings

__all__ = ["LeaseSettings", "ResyncSettings"]
