"""The chaos run: faults, restarts and Pulumi runs against a real testbed, with invariants.

``python -m pulumi_lora.testing.chaos`` (``--help`` for the knobs) runs one and prints its
report; ``run_chaos(ChaosOptions(...))`` does the same from Python and returns the
:class:`ChaosReport`. docs/reliability.md describes the scenario and records measured runs.
"""

from pulumi_lora.testing.chaos._driver import run_chaos
from pulumi_lora.testing.chaos._report import ChaosReport, FaultRecord
from pulumi_lora.testing.chaos._schedule import Action, Step, build_schedule
from pulumi_lora.testing.chaos._setup import ChaosOptions

__all__ = [
    "Action",
    "ChaosOptions",
    "ChaosReport",
    "FaultRecord",
    "Step",
    "build_schedule",
    "run_chaos",
]
