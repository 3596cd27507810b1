"""Pure: what the chaos run does and when, drawn from one seed (the same seed, the same run).

A schedule is a list of :class:`Step` values spaced a random interval apart. Pods and adapters
are named by index and resolved when the step runs (pods come and go), so the schedule itself
needs no cluster. Exactly one apiserver restart sits near the middle of every run long enough
to hold one; scale-ups are followed by the matching scale-down a few steps later.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["EMULATOR_FAULTS", "Action", "Step", "build_schedule"]


class Action(StrEnum):
    """One thing the driver does to the system."""

    RESTART_POD = "restart-pod"  # container restart: same pod, adapters gone
    REPLACE_POD = "replace-pod"  # delete and recreate: new name, UID and process
    CRASH_POD = "crash-pod"  # SIGKILL, not Ready for a moment, then the kubelet restarts it
    SCALE_UP = "scale-up"  # one replica more (a new pod to load)
    SCALE_DOWN = "scale-down"  # back to the declared replica count
    LOAD_500 = "load-500"  # the pod's next loads answer 500
    LOAD_STALL = "load-stall"  # the pod's next load stalls past the client's load timeout
    LOAD_DROP = "load-drop"  # the pod drops the connection of its next loads
    LOAD_LOST_ANSWER = "load-lost-answer"  # the pod loads, then drops the answer
    SLOW_LOADS = "slow-loads"  # every load on the pod takes 0.3 s longer from now on
    MODELS_500 = "models-500"  # the pod's /v1/models answers 500 for a while
    UNLOAD_OUT_OF_BAND = "unload-out-of-band"  # someone unloads adapters behind our back
    WRONG_PATH = "wrong-path"  # someone reloads an adapter from another path
    APISERVER_RESTART = "apiserver-restart"  # stop and start kube-apiserver (once per run)
    PULUMI_UP = "pulumi-up"  # change the program (swap a path, remove or re-add) and `up`
    PULUMI_REFRESH = "pulumi-refresh"  # `pulumi refresh`


#: Emulator fault specs armed by the fault actions (``{stall}`` is the load timeout plus 2 s).
EMULATOR_FAULTS = {
    Action.LOAD_500: "/load_lora_adapter:status=500,body=Internal Server Error,times=3",
    Action.LOAD_STALL: "/load_lora_adapter:stall={stall},times=1",
    Action.LOAD_DROP: "/load_lora_adapter:drop,times=2",
    Action.LOAD_LOST_ANSWER: "/load_lora_adapter:drop,after,times=1",
    Action.MODELS_500: "/v1/models:status=500,times=3",
}

#: How often each action is drawn (the apiserver restart and scale-downs are placed, not drawn).
_WEIGHTS = {
    Action.RESTART_POD: 4,
    Action.REPLACE_POD: 3,
    Action.CRASH_POD: 2,
    Action.SCALE_UP: 1,
    Action.LOAD_500: 2,
    Action.LOAD_STALL: 2,
    Action.LOAD_DROP: 2,
    Action.LOAD_LOST_ANSWER: 1,
    Action.SLOW_LOADS: 1,
    Action.MODELS_500: 1,
    Action.UNLOAD_OUT_OF_BAND: 2,
    Action.WRONG_PATH: 1,
    Action.PULUMI_UP: 2,
    Action.PULUMI_REFRESH: 1,
}


@dataclass(frozen=True, slots=True)
class Step:
    """One action at ``at`` seconds into the fault phase, on pod/adapter picks by index."""

    at: float
    action: Action
    pod: int  # an index into the Ready pods at the time (modulo their count)
    adapters: tuple[int, ...]  # indexes into the declared adapters (modulo their count)
    change: str = ""  # PULUMI_UP: "swap", "remove" or "add"


def build_schedule(
    seed: int,
    duration: float,
    *,
    gap: tuple[float, float] = (1.0, 3.0),
    apiserver_restart: bool = True,
) -> list[Step]:
    """Every step of a run of ``duration`` seconds, ``gap`` seconds apart (uniform)."""
    if duration <= 0 or gap[0] <= 0 or gap[1] < gap[0]:
        raise ValueError("duration and gaps must be positive, and gap a (low, high) pair")
    rng = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret
    actions = list(_WEIGHTS)
    weights = list(_WEIGHTS.values())
    steps: list[Step] = []
    restart_at = duration * 0.4 if apiserver_restart and duration >= 20 else None
    scaled_down_in: int | None = None  # steps until the pending scale-down
    at = rng.uniform(*gap)
    while at < duration:
        if restart_at is not None and at >= restart_at:
            action, restart_at = Action.APISERVER_RESTART, None
        elif scaled_down_in == 0:
            action, scaled_down_in = Action.SCALE_DOWN, None
        else:
            action = rng.choices(actions, weights)[0]
            if action is Action.SCALE_UP and scaled_down_in is not None:
                action = Action.RESTART_POD  # one extra replica at a time
        if action is Action.SCALE_UP:
            scaled_down_in = rng.randint(2, 4)
        elif scaled_down_in is not None and action is not Action.SCALE_DOWN:
            scaled_down_in -= 1
        steps.append(
            Step(
                at=round(at, 3),
                action=action,
                pod=rng.randrange(1 << 16),
                adapters=tuple(rng.randrange(1 << 16) for _ in range(rng.randint(1, 3))),
                change=rng.choice(("swap", "swap", "remove", "add"))
                if action is Action.PULUMI_UP
                else "",
            )
        )
        at += rng.uniform(*gap)
    if scaled_down_in is not None:
        steps.append(Step(at=round(at, 3), action=Action.SCALE_DOWN, pod=0, adapters=()))
    return steps
