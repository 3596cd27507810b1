"""The steps addressed by a CR's ID (``NAMESPACE/NAME``) rather than a resource's inputs:
``pulumi import`` (what the CR declares) and ``pulumi-lora finish-delete`` (a held deletion
finished without Pulumi)."""

from __future__ import annotations

from typing import Any

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._readback import declared_by_cr
from pulumi_lora._errors import ConfigurationError
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._pool import POOL
from pulumi_lora._lifecycle._steps import delete
from pulumi_lora._models import UNLOAD_FINALIZER, Transport


@k8s.apiserver_errors()
def finish_delete(
    resource_id: str, config: ProviderConfig, transport: Transport | None, *, force: bool = False
) -> str:
    """``pulumi-lora finish-delete``: finish the deletion a failed ``pulumi destroy`` left (the CR
    ``NAMESPACE/NAME`` being deleted, held by :data:`UNLOAD_FINALIZER`), without Pulumi.

    Unloads from every Ready pod as the CR declares it (``transport``: how to reach them, else
    the one the CR records), then lets the CR go; ``force`` lets it go without unloading (a
    namespace being deleted, its pods already gone). Returns what happened, in words.
    """
    namespace, name = split_id(resource_id, "finish the deletion of")
    kube = POOL.kube(config.kube)
    cr = k8s.get_adapter(kube, namespace, name)
    where = f"LoRAAdapter {namespace}/{name}"
    if cr is None:
        return f"{where} is already gone"
    meta = cr.get("metadata") or {}
    if not meta.get("deletionTimestamp") or UNLOAD_FINALIZER not in (meta.get("finalizers") or []):
        raise ConfigurationError(
            f"{where} is not waiting on an unload (it would be being deleted and carry "
            f"{UNLOAD_FINALIZER}): nothing to finish; `pulumi destroy` deletes what a stack "
            "manages"
        )
    if force:
        k8s.release_finalizer(kube, namespace, name, UNLOAD_FINALIZER)
        return (
            f"{where} let go without unloading: pods may still serve "
            f"{(cr.get('spec') or {}).get('name')} (`pulumi-lora status` shows which)"
        )
    declared = declared_by_cr(cr)
    if transport is not None:
        declared["transport"] = transport.value
    args = AdapterArgs.parse(declared)
    if args.transport is Transport.DELEGATED:
        raise ConfigurationError(
            f"{where} is delegated: give --transport direct or proxy to unload from here"
        )
    delete(args, config)
    return (
        f"unloaded {args.adapter_name} from every Ready pod of InferenceService "
        f"{args.target_namespace}/{args.inference_service}; {where} is gone"
    )


def split_id(resource_id: str, doing: str) -> tuple[str, str]:
    """Pure: ``NAMESPACE/NAME`` → its two parts, or a :class:`ConfigurationError` saying how."""
    namespace, slash, name = resource_id.partition("/")
    if not (slash and namespace and name) or "/" in name:
        raise ConfigurationError(
            f"cannot {doing} {resource_id!r}: the ID of a LoRAAdapter is NAMESPACE/NAME, the "
            "CR's namespace and name (e.g. models/sql-lora)"
        )
    return namespace, name


@k8s.apiserver_errors()
def declared_at(resource_id: str, config: ProviderConfig) -> dict[str, Any] | None:
    """``pulumi import``: the arguments the CR ``NAMESPACE/NAME`` declares (``declared_by_cr``),
    read with the provider's cluster credentials; None when there is no such CR. Reads only."""
    namespace, name = split_id(resource_id, "import")
    kube = POOL.kube(config.kube)
    cr = k8s.get_adapter(kube, namespace, name)
    return None if cr is None else declared_by_cr(cr)
