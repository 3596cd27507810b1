"""One LoRAAdapter's lifecycle against a live cluster, shared by the provider and the operator
commands: the steps (``_steps``), their session (``_session``), how pods are reached
(``_transport``), delegated adapters (``_delegated``), staging (``_stage``, ``_stager``), and the
process-wide clients and looks (``_pool``, ``_looks``; docs/architecture.md lists the caches).
"""

from pulumi_lora._lifecycle._byid import declared_at, finish_delete
from pulumi_lora._lifecycle._config import CONFIG_KEYS, TIMEOUT_KEYS, ProviderConfig
from pulumi_lora._lifecycle._delegated import STALE_REASON, await_delegated
from pulumi_lora._lifecycle._events import advice
from pulumi_lora._lifecycle._looks import (
    CR_LISTINGS,
    LISTINGS,
    LOOK_MAX_AGE_SECONDS,
    LOOKS,
    OWN_CRS,
    LookKey,
    TargetLook,
    TargetPods,
)
from pulumi_lora._lifecycle._pool import POOL, ClientPool
from pulumi_lora._lifecycle._session import (
    STATUS_MANAGER,
    Session,
    now_utc,
    parallel,
    target_generation,
)
from pulumi_lora._lifecycle._stage import staged, unstage_unused, verify_staged
from pulumi_lora._lifecycle._stager import STAGERS
from pulumi_lora._lifecycle._state import AdapterState, PodReport, reports, state_from_cr
from pulumi_lora._lifecycle._steps import (
    adoption_refusal,
    create,
    delete,
    observe,
    observed_conditions,
    update,
)

__all__ = [
    "CONFIG_KEYS",
    "CR_LISTINGS",
    "LISTINGS",
    "LOOKS",
    "LOOK_MAX_AGE_SECONDS",
    "OWN_CRS",
    "POOL",
    "STAGERS",
    "STALE_REASON",
    "STATUS_MANAGER",
    "TIMEOUT_KEYS",
    "AdapterState",
    "ClientPool",
    "LookKey",
    "PodReport",
    "ProviderConfig",
    "Session",
    "TargetLook",
    "TargetPods",
    "adoption_refusal",
    "advice",
    "await_delegated",
    "create",
    "declared_at",
    "delete",
    "finish_delete",
    "now_utc",
    "observe",
    "observed_conditions",
    "parallel",
    "reports",
    "staged",
    "state_from_cr",
    "target_generation",
    "unstage_unused",
    "update",
    "verify_staged",
]
