"""A failed create leaves nothing behind: its loads unloaded (late ones too), its CR removed."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from pulumi_lora._core._llmkube import PodEndpoint, Target
from pulumi_lora._core._reconcile import (
    PodOutcome,
    plan,
    rollback_plan,
    unsettled,
)
from pulumi_lora._errors import (
    ApiserverUnreachable,
)
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._session import (
    Session,
)
from pulumi_lora._sglang import SGLangClient

#: What the removal of a failed create's CR waits out: an apiserver that is briefly away.
_RETRY_DELETE_ON: tuple[type[Exception], ...] = (ApiserverUnreachable, *k8s.TRANSPORT_ERRORS)


def remove_cr_patiently(session: Session, patience: float = 30.0) -> None:
    """Delete the CR of a failed create, waiting out an apiserver that is briefly unreachable.

    Without this, an apiserver restart in the middle of a create would leave a CR that no stack
    owns, and the next ``pulumi up`` would refuse to adopt it.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            session.delete_cr()
            return
        except _RETRY_DELETE_ON as exc:
            if time.monotonic() >= deadline:
                raise ApiserverUnreachable(
                    f"{exc}; LoRAAdapter {session.args.namespace}/{session.args.cr_name} may "
                    "remain: delete it before the next run"
                ) from exc
            time.sleep(1.0)


def rollback(
    session: Session,
    target: Target,
    pods: Sequence[PodEndpoint],
    outcomes: Sequence[PodOutcome],
) -> None:
    """Unload from exactly the pods this create loaded or may have loaded (best effort; the error
    says the rest), then watch those where a timed-out load may still land (`_settle`)."""
    actions = rollback_plan(outcomes)
    if not actions:
        return
    clients = session.clients(
        [p for p in pods if p.name in {a.pod for a in actions}], session.api_key(target)
    )
    late = unsettled(outcomes, session.execute(None, actions, clients))
    if late:
        settle(session, [p for p in pods if p.name in late], clients)


#: Seconds between two looks at a pod where a timed-out load may still land.
SETTLE_POLL_SECONDS = 0.5
#: The longest a failed create watches for late loads (the load timeout, up to this).
SETTLE_MAX_SECONDS = 30.0


def settle(
    session: Session, pods: Sequence[PodEndpoint], clients: Mapping[str, SGLangClient]
) -> None:
    """Watch pods whose timed-out load may still land, unloading it when it does.

    SGLang keeps working on a request whose client gave up; one held back before the server
    started it arrives later. Each pod is watched until its late load was seen and unloaded, or
    for as long again as the load timeout but at most `SETTLE_MAX_SECONDS` (a failed create
    should not take twice a 300 s timeout to say so), reading ``/v1/models`` every
    `SETTLE_POLL_SECONDS`. A load held back longer still lands where nothing declares it (the
    chaos run's invariants report such an adapter); docs/threat-model.md states the limit.
    """
    name = session.args.adapter_name
    deadline = time.monotonic() + min(session.timeouts.load, SETTLE_MAX_SECONDS)
    waiting = list(pods)
    while waiting and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_SECONDS)
        views, _ = session.views(waiting, clients)
        unloaded = {
            o.pod for o in session.execute(None, plan(None, views, name), clients) if o.did_unload
        }
        waiting = [p for p in waiting if p.name not in unloaded]
