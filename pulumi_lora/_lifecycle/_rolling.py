"""Loads and swaps on a live target (issue 54, items 3 and 5): every pod at once, except the swaps
on pods in rotation behind the readiness gate, which go pod by pod, drained; a swap that fails on
any pod puts the old revision back everywhere.

Each gated pod in a wave, in turn (``_core._rollout`` decides which):

1. its gate (``pulumi-lora.dev/adapters-loaded``) turns False (``Swapping``);
2. wait until its endpoint is not ready in any EndpointSlice of the Service, then
   ``drain_seconds`` (kube-proxy's and gateways' propagation);
3. unload, load, smoke (the core's pod program);
4. its gate turns True again, written on the pod's current ``resourceVersion`` and only for the
   container the swap ran on (a restarted container has lost its adapters: the loop decides);
5. wait until its endpoint is ready again, then the next wave.

A failed load or smoke stops the waves. The old revision goes back the same way: pods out of
rotation at once, pods in rotation (already switched) drained, one wave at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._gate import SWAPPING, GateVerdict, condition_patch
from pulumi_lora._core._llmkube import PodEndpoint, PodListing, Target, all_ready
from pulumi_lora._core._reconcile import Desired, PodAction, PodOutcome, PodView, plan
from pulumi_lora._core._rollout import Rotation, failures, rollout, rotation
from pulumi_lora._errors import ClusterError, NoReadyPods
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube import _rotation as pods_api
from pulumi_lora._lifecycle._session import Session, now_utc
from pulumi_lora._models import format_time
from pulumi_lora._sglang import SGLangClient

Say = Callable[[str], None]

#: How long an endpoint may take to leave (or rejoin) the Service's EndpointSlices: the
#: EndpointSlice controller follows a pod's Ready within a second or two.
ENDPOINT_PATIENCE_SECONDS = 60.0
ENDPOINT_POLL_SECONDS = 0.1
#: The path a pod counts as serving while a call that failed on it may still land.
UNSETTLED = "(unsettled)"
#: Attempts at the gate's True when the pod moves between the read and the write (409).
TRUE_ATTEMPTS = 5


def quiet(_text: str) -> None:
    """Say nothing (where no one follows progress)."""


def desired_of(args: AdapterArgs) -> Desired:
    """Pure: the adapter ``args`` declare, as the core decides on it."""
    return Desired(args.adapter_name, args.load_path, args.pinned, args.smoke_test)


def load_everywhere(
    session: Session,
    target: Target,
    *,
    observe: bool,
    seen: PodListing | None = None,
    old: Desired | None = None,
    say: Say = quiet,
) -> tuple[list[PodOutcome], PodListing, list[PodOutcome] | None]:
    """Wait for the pods (``seen``, listed moments ago, when they are all Ready), then load (or
    swap) on every Ready one its controller chain vouches for; gated pods in rotation swap pod by
    pod. When the swap fails on a pod and ``old`` (the revision being replaced) is given, ``old``
    goes back on every pod: the third value is then what that left on each (else None)."""
    args = session.args
    listing = (
        seen
        if seen is not None and all_ready(target, seen.pods)
        else k8s.wait_for_pods(session.kube, target, args.ready_timeout_seconds)
    )
    pods = list(listing.pods)
    if not any(p.ready for p in pods):
        raise NoReadyPods(target.namespace, target.name, [f"{p.name}: {p.state}" for p in pods])
    clients = session.clients(pods, session.api_key(target))
    roller = Roller(session, target, {p.name: p for p in pods}, clients, say)
    desired = desired_of(args)
    outcomes = roller.run(desired, roller.views(observe))
    if old is None or old.path == desired.path or not failures(outcomes):
        return outcomes, listing, None
    say(f"{desired.name}: the swap failed; putting {old.path} back")
    # A pod whose failure may still land (a timed-out unload or load: SGLang goes on with it) is
    # swapped back whatever it lists now: its unload and load queue behind the late call.
    unsure = {o.pod for o in failures(outcomes) if o.unsettled}
    return outcomes, listing, roller.run(old, roller.views(True, unsure), final=True)


@dataclass
class Roller:
    """One target's pods during a load or swap: who is in rotation, whose gate this run holds."""

    session: Session
    target: Target
    pods: dict[str, PodEndpoint]
    clients: Mapping[str, SGLangClient]
    say: Say = quiet
    #: Pods whose gate this run turned False, with the condition they had before (a True).
    held: dict[str, Mapping[str, object]] = field(default_factory=dict)

    def views(self, observe: bool, unsure: Collection[str] = ()) -> list[PodView]:
        """What each pod serves now (``observe``), or only whether it can be asked; on the
        ``unsure`` pods the adapter counts as served at an unknown path (swapped, not kept)."""
        pods = list(self.pods.values())
        if not observe:
            return [
                PodView(p.name, p.ready and p.name in self.clients, p.state, p.uid) for p in pods
            ]
        name = self.session.args.adapter_name
        return [
            replace(v, adapters={**v.adapters, name: UNSETTLED})
            if v.name in unsure and v.adapters is not None
            else v
            for v in self.session.views(pods, self.clients)[0]
        ]

    def run(
        self, desired: Desired, views: Sequence[PodView], *, final: bool = False
    ) -> list[PodOutcome]:
        """``plan(desired)`` as a rollout: at once, then wave by wave; stops at the first wave
        with a failure, unless ``final`` (putting an old revision back: every pod is tried)."""
        actions = plan(desired, views, desired.name)
        rolled = rollout(actions, self.pods, self.session.args.max_unavailable)
        outcomes = self.session.execute(desired, rolled.at_once, self.clients)
        self._release([o for o in outcomes if o.pod in self.held])
        total = sum(len(w) for w in rolled.waves)
        done = 0
        for wave in rolled.waves:
            if failures(outcomes) and not final:
                break
            done += len(wave)
            self.say(
                f"{desired.name}: swapping to {desired.path} on {', '.join(a.pod for a in wave)} "
                f"({done}/{total}), out of rotation first"
            )
            outcomes += self._drained(desired, wave)
        return outcomes

    # --- one wave ---------------------------------------------------------------------------

    def _drained(self, desired: Desired, wave: Sequence[PodAction]) -> list[PodOutcome]:
        """Take the wave's pods out of rotation, swap them, put those that swapped back."""
        session = self.session
        session.apply_cr(operation="update")  # the loop's hands-off lease, renewed per wave
        listed: set[str] = set()
        try:
            for action in wave:
                pod = self.pods[action.pod]
                found = GateVerdict(False, SWAPPING, f"swapping {desired.name}")
                self._write(pod, found)
                self.held[pod.name] = dict(pod.gate or {})
                self.pods[pod.name] = replace(pod, gate={"status": "False", "reason": SWAPPING})
            listed = self._await_rotation(wave, Rotation.IN, leaving=True)
        except ClusterError as exc:  # nothing swapped in this wave yet: its gates go back
            outcomes = [
                PodOutcome(a.pod, loaded=False, reason=exc.reason, error=str(exc)) for a in wave
            ]
            self._release([PodOutcome(a.pod, loaded=True) for a in wave if a.pod in self.held])
            return outcomes
        time.sleep(session.args.drain_seconds)
        outcomes = session.execute(desired, wave, self.clients)
        back = self._release(outcomes)
        try:
            self._await_rotation(
                [a for a in wave if a.pod in listed and a.pod in back], Rotation.IN
            )
        except ClusterError as exc:  # swapped and serving (its gate says so): go on, say so
            self.say(f"warning: {exc}")
        return outcomes

    def _await_rotation(
        self, wave: Sequence[PodAction], mark: Rotation, *, leaving: bool = False
    ) -> set[str]:
        """Wait until no pod of ``wave`` stands ``mark`` (``leaving``) or each does; returns
        the pods listed in a slice at the first look (a pod in none has nothing to wait for)."""
        if not wave:
            return set()
        namespace, service = self.target.namespace, self.target.name
        deadline = time.monotonic() + ENDPOINT_PATIENCE_SECONDS
        listed: set[str] | None = None
        while True:
            slices = pods_api.list_endpoint_slices(self.session.kube, namespace, service)
            stand = {a.pod: rotation(slices, self.pods[a.pod]) for a in wave}
            if listed is None:
                listed = {p for p, r in stand.items() if r is not Rotation.ABSENT}
            waiting = [p for p, r in stand.items() if (r is mark) == leaving and p in listed]
            if not waiting:
                return listed
            if time.monotonic() > deadline:
                where = "still ready" if leaving else "not ready again"
                raise ClusterError(
                    f"pods {', '.join(sorted(waiting))} are {where} in the EndpointSlices of "
                    f"Service {namespace}/{service} after {ENDPOINT_PATIENCE_SECONDS:.0f} s: is "
                    "kube-controller-manager's EndpointSlice controller running?"
                )
            time.sleep(ENDPOINT_POLL_SECONDS)

    # --- the gate ---------------------------------------------------------------------------

    def _write(self, pod: PodEndpoint, found: GateVerdict) -> None:
        body = condition_patch(found, format_time(now_utc()), pod.gate)
        pods_api.patch_pod_status(self.session.kube, pod.namespace, pod.name, body)

    def _release(self, outcomes: Sequence[PodOutcome]) -> set[str]:
        """Turn True again the gate of each held pod whose outcome serves the adapter, on the
        container the swap ran on; returns those pods (a failed one stays out of rotation)."""
        back: set[str] = set()
        for outcome in outcomes:
            prior = self.held.get(outcome.pod)
            if prior is None or not outcome.loaded:
                continue
            before = self.pods[outcome.pod]
            for _ in range(TRUE_ATTEMPTS):
                now = pods_api.get_pod(self.session.kube, before.namespace, before.name)
                if now is None or not now.ready or now.container_id != before.container_id:
                    break  # gone or restarted: its adapters are gone, the loop decides
                found = GateVerdict(
                    True, str(prior.get("reason") or ""), str(prior.get("message") or "")
                )
                body = condition_patch(
                    found, format_time(now_utc()), now.gate, now.resource_version
                )
                if pods_api.patch_pod_status(self.session.kube, now.namespace, now.name, body):
                    back.add(outcome.pod)
                    self.held.pop(outcome.pod)
                    self.pods[outcome.pod] = replace(now, gate={**prior, "status": "True"})
                    break
        return back
