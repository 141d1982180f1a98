"""One target's outcome of a trial as the store's trial row: its provenance, its cost record
and its evidence judged by the trial layer's rules (hugelab.trial.judge), flagged when the
evidence contradicts the arm."""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

from hugelab import __version__
from hugelab.errors import PoolBusyError
from hugelab.experiment import Arm, Experiment, TrialSpec
from hugelab.host.paths import REAL, HostPaths
from hugelab.planning.poolkeep import holders_now
from hugelab.store import Trial
from hugelab.store.spool import write_id
from hugelab.trial import costs
from hugelab.trial.evidence import CONTRADICTED
from hugelab.trial.judge import (
    cell,
    host_state_check,
    judge_evidence,
    layer_checks,
    measurement_check,
)
from hugelab.vm.trial import GuestOutcome
from hugelab.workloads.base import Workload, WorkloadResult
from hugelab.workloads.registry import kind_of


class TrialRecorder:
    """Makes a run's trial rows. `workload_of(arm)`: the arm's workload; `held_kb(arm)`: the
    pool pages held for one of its trials."""

    def __init__(self, exp: Experiment, workload_of: Callable[[Arm], Workload],
                 held_kb: Callable[[Arm], int], paths: HostPaths = REAL) -> None:
        self.exp = exp
        self.workload_of = workload_of
        self.held_kb = held_kb
        self.paths = paths

    def record(self, run_id: int, spec: TrialSpec, arm: Arm, result: WorkloadResult | None,
               error: str | None, mon: dict[str, Any], started: float, ended: float,
               guest: GuestOutcome) -> Trial:
        """One target's outcome of a trial of `arm` as the store's trial: its provenance, and
        its evidence judged (flagged when it contradicts the arm)."""
        target = guest.target
        host_backing, guest_backing = cell(arm, self.paths)
        prov = {"hugelab": __version__, "kernel": platform.release(), "accel": "native",
                "layer": arm.layer, "target": target, "backing": arm.backing,
                "host_backing": host_backing, "guest_backing": guest_backing,
                "thp": arm.thp, "thp_defrag": arm.thp_defrag, "design": self.exp.design,
                **({"levels": dict(arm.levels)} if arm.levels else {}), **guest.provenance,
                "write_id": write_id()}  # the store writes this trial once, however often sent
        if result is None:
            if guest.cause == PoolBusyError.cause and error and "held by other users" not in error:
                error += holders_now(self.paths)  # who took the pages, while they still hold them
            return Trial(run_id, spec.block, spec.position, spec.arm, "failed", None,
                         monitors=mon, provenance=prov, error=error, started=started,
                         ended=ended, target=target, cause=guest.cause)
        evidence = {**result.evidence, **guest.evidence}
        mon = {**mon, "costs": costs.record(
            evidence.get("tree"), mon, pool_held_kb=self.held_kb(arm),
            host_tree=mon.get("host_tree"), qemu=evidence.get("qemu"),
            app=evidence.get("app_costs"), guest=arm.vm is not None)}
        declared = kind_of(self.workload_of(arm))  # the application's own switch, by its kind
        checks = layer_checks(arm, evidence, target, host_backing, self.exp.thp_min_fraction,
                              declared.judge if declared else None) + host_state_check(mon) \
            + measurement_check(result.metrics, mon)
        status, reason = judge_evidence(evidence, checks)
        flagged = status == CONTRADICTED
        return Trial(run_id, spec.block, spec.position, spec.arm, "flagged" if flagged else "ok",
                     result.value, result.primary, result.unit, result.better, result.metrics,
                     evidence, mon, {**prov, **result.info}, reason if flagged else None, None,
                     started, ended, target)
