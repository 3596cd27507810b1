"""One LoRAAdapter's lifecycle against a live cluster: create, observe, update, delete.

The Pulumi provider (``_provider``, and ``provider/``'s plugin) is a thin translation of these
steps, and the operator commands (``_ops``) observe as a refresh does. Each step follows the
reconcile pattern: look (target, pods, what each pod serves), ask the pure core
(``_core._reconcile``) for a plan, execute it on every pod in parallel (each SGLang serializes its
own loads), record the result in the CR's status and in Events, and return an
:class:`AdapterState` that becomes the resource's outputs.

Modules, one job each:

- ``_config``: the stack config the provider reads (:class:`ProviderConfig`);
- ``_pool``: the process-wide Kubernetes and SGLang clients (:data:`POOL`);
- ``_looks``: shared looks at a target's pods and at the CRs (:data:`LOOKS`);
- ``_state``: what a step returns (:class:`PodReport`, :class:`AdapterState`), pure;
- ``_session``: one step's session with its cluster (:class:`Session`);
- ``_steps``: create, observe, update, delete, adoption;
- ``_delegated``: what the re-sync loop does for a delegated adapter: its verdict awaited, and
  doubted once the loop's Lease is gone or stale;
- ``_rollback``: a failed create leaves nothing behind;
- ``_stage``: a staged adapter's weights onto the claim its target mounts;
- ``_stager``: this process's stager servers, one Job per claim and credential set;
- ``_events``: the advice of failed loads and the Events on the CR.
"""

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
    declared_at,
    delete,
    finish_delete,
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
