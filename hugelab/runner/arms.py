"""A unit's trials run: each arm's workload natively or in its guests, one arm alone
(paired), every arm at once in threads (duet) or in alternating windows (interleaved), each
inside a trial scope that records, samples and cleans up its processes. Failures become
failed outcomes with their cause: nothing here raises."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any

from hugelab.errors import HugelabError, internal_error
from hugelab.experiment import Arm, Experiment
from hugelab.planning.arms import PMD_KB, arm_thp_knobs
from hugelab.trial.contain import TrialScope
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.trial import GuestOutcome, run_guest_trial
from hugelab.workloads.base import Target, Workload, WorkloadResult
from hugelab.workloads.interleave import is_server, serve
from hugelab.workloads.registry import kind_of


class ArmTrials:
    """The trials of a run's arms: each arm's workload run natively or in its guests inside a
    trial scope. `host`: inspect_host() at the run's start; `specs`: each guest arm's guest
    spec."""

    def __init__(self, exp: Experiment, workload: Workload, target: Target, *,
                 host: dict[str, Any], specs: Mapping[str, VmSpec],
                 workloads: Mapping[str, Workload] | None = None) -> None:
        self.exp = exp
        self.workload = workload
        self.target = target
        self.host = host
        self.specs = specs
        self.workloads = dict(workloads or {})  # per arm, where a scenario sets its own

    def outcomes(self, arms: list[Arm], block: int = 0) -> list[list[GuestOutcome]]:
        """Each arm's outcomes: one arm alone (paired), every arm of a block in one process
        (interleaved), or every arm of a block at the same time, each in a thread (duet).
        An interleaved block's windows and request seeds are drawn from the run's seed and
        the block, so a run repeats them."""
        if self.exp.design == "interleaved":
            return self._interleaved(arms, random.Random(f"{self.exp.seed}:{block}"))
        if len(arms) == 1:
            return [self._execute(arms[0])]
        results: list[list[GuestOutcome]] = [[] for _ in arms]

        def work(i: int) -> None:
            results[i] = self._execute(arms[i], duet=True)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def _wants_folios(self, arm: Arm) -> bool:
        """Sample folio sizes (pagemap; some CPU during the measured phase) only where smaps
        cannot tell and the workload does not count them itself: an mthp or collapse arm, or
        any native arm while a size below the PMD's is not `never` (its 4 KiB or THP memory
        could get mTHP folios)."""
        declared = kind_of(self._workload(arm))
        if arm.vm is not None or (declared is not None and declared.counts_own_folios):
            return False  # the workload counts its own buffer's folios, race-free, after setup
        if arm.mthp_kb or arm.backing == "thp-collapse":
            return True
        anon, _ = arm_thp_knobs(arm, self.host)
        return any(mode != "never" for kb, mode in anon.items() if kb != PMD_KB)

    def _workload(self, arm: Arm) -> Workload:
        return self.workloads.get(arm.name, self.workload)

    def _execute(self, arm: Arm, duet: bool = False) -> list[GuestOutcome]:
        """Run the workload for one arm, natively or in the arm's guests, inside one trial
        scope (its processes recorded, sampled, and killed if they outlive the trial). Never
        raises: a failure becomes a failed outcome with its cause."""
        names = arm.targets() if arm.vm else [self.target.name]
        try:
            with TrialScope(f"arm {arm.name}", folios=self._wants_folios(arm)) as scope:
                outs = (run_guest_trial(arm, self._workload(arm), self.specs[arm.name])
                        if arm.vm is not None else [self._native(arm, duet)])
        except HugelabError as exc:
            return [GuestOutcome(n, None, exc.message, cause=exc.cause) for n in names]
        except Exception as exc:  # noqa: BLE001 - a bug must fail the trial, not the run
            return [GuestOutcome(n, None, internal_error(exc), cause="environment")
                    for n in names]
        for o in outs:
            if arm.vm is None:
                o.evidence["tree"] = {**scope.tree, "where": "host"}
                if scope.folios:  # sampled (a workload's own census needs no sampler)
                    o.evidence["folios"] = scope.folios
            elif scope.tree.get("samples"):
                o.monitors["host_tree"] = scope.tree  # host-side clients of a guest server
            if scope.leftovers_killed:
                o.monitors["leftovers_killed"] = scope.leftovers_killed
        return outs

    def _interleaved(self, arms: list[Arm], rng: random.Random) -> list[list[GuestOutcome]]:
        """Every arm of a block at once, measured in alternating windows (design 'interleaved'):
        one process holding every arm's buffer, or every arm's server; one outcome per arm,
        with its buffer's or its server's own evidence. Never raises."""
        name = self.target.name
        try:
            with TrialScope("interleaved block") as scope:
                if is_server(self.workload):  # every arm's server up, windows alternated
                    results = self._servers(arms, rng)
                else:
                    results = self.workload.run_interleaved(  # type: ignore[attr-defined]
                        self.target, [a.backing for a in arms])
        except HugelabError as exc:
            return [[GuestOutcome(name, None, exc.message, cause=exc.cause)] for _ in arms]
        except Exception as exc:  # noqa: BLE001 - a bug must fail the trial, not the run
            return [[GuestOutcome(name, None, internal_error(exc), cause="environment")]
                    for _ in arms]
        out = []
        for r in results:
            o = GuestOutcome(name, r, None)
            tree = {**scope.tree, "where": "host (every arm's server)"
                    if is_server(self.workload) else "host (one process: every arm's buffer)",
                    "shared_by_arms": True}  # no arm's own memory: costs.record skips it
            if "tree" in r.evidence:  # the arm's own server, judged alone
                o.monitors["host_tree"] = tree
            else:
                o.evidence["tree"] = tree
            o.monitors["perf"] = "not separable in an interleaved block"
            o.provenance["workload_s"] = r.metrics.get("duration_s")  # the measured phase
            if scope.leftovers_killed:
                o.monitors["leftovers_killed"] = scope.leftovers_killed
            out.append([o])
        return out

    def _servers(self, arms: list[Arm], rng: random.Random) -> list[WorkloadResult]:
        """Interleaved servers, started in the block's (random) order, so no arm's server is
        always the first; the windows' effects are against the baseline's."""
        ref = next((i for i, a in enumerate(arms) if a.name == self.exp.baseline), 0)
        return serve(self.target, [(self._workload(a), a.backing)  # type: ignore[misc]
                                   for a in arms], rng=rng, reference=ref)

    def _native(self, arm: Arm, duet: bool) -> GuestOutcome:
        try:
            outcome = GuestOutcome(self.target.name,
                                   self._workload(arm).run(self.target, arm.backing),
                                   None)
        except HugelabError as exc:
            outcome = GuestOutcome(self.target.name, None, exc.message, cause=exc.cause)
        take = getattr(self.target, "take_counters", None)
        if duet:  # one perf-wrapped target serves every arm of the block: counts would mix
            outcome.monitors["perf"] = "not separable in a duet block"
        else:
            outcome.monitors["perf"] = take() if take else "not available"
        return outcome
