"""The spine of a run: `Runner` walks the schedule (spine.py), `ArmTrials` runs a unit's
trials (arms.py) and `TrialRecorder` makes their store rows (record.py)."""

from hugelab.runner.spine import (
    Progress,
    RunEvent,
    Runner,
    RunOutcome,
    SessionFactory,
    Stopper,
    apply_arm,
    iter_arm_values,
)

__all__ = ["Progress", "RunEvent", "RunOutcome", "Runner", "SessionFactory", "Stopper",
           "apply_arm", "iter_arm_values"]
