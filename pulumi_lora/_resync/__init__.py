"""The re-sync loop (``pulumi-lora resync``): keeps every LoRAAdapter true on every Ready pod.

Layers inside the package, from the bottom: pure values and decisions (``_views``, ``_decide``,
``_world``, ``_status``; no I/O library, even transitively), the I/O edges (``_kube`` for the
apiserver, ``_podrun`` for SGLang, ``_lease``, ``_server``), the orchestration (``_worker``,
``_writer``, ``_events``, ``_trust``, ``_recorder``, ``_controller``, ``_app``) and the command
(``_cli``). See docs/resync.md.
"""

from pulumi_lora._resync._cli import resync_command
from pulumi_lora._resync._settings import LeaseSettings, ResyncSettings

__all__ = ["LeaseSettings", "ResyncSettings", "resync_command"]
