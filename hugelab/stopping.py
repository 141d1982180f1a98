"""`--until-verdict`: group-sequential looks while a run is in progress.

The design is declared before the first trial (max blocks, looks, alpha, margin) and stored
with the run; at each planned look the paired log-ratios of every arm against the baseline are
tested against the Lan-DeMets O'Brien-Fleming boundary (hugelab.stats.sequential). The looks:
`looks` equally spaced ones, or (looks=None, the CLI's default) a look every few blocks from
the first block count at which an `equivalent` can stop (look_schedule). At each look from 10
blocks on, each open comparison also records what its budget can still reach
(hugelab.stats.reach): the first look at which the margin is out of reach is kept in
`unreachable` with the margin the budget can reach, and a comparison that can reach neither
verdict stops `inconclusive` there (a non-binding futility stop: no false claim added).
The run stops when every comparison has stopped. Alpha is split evenly across comparisons
(Bonferroni), which keeps the family-wise error at alpha. No "stop when it looks stable".

With a time budget (`clock`, `--budget 5m`) the most blocks come from the blocks' measured
time, not the file: until the first look the plan is set again at each block end for the
blocks the budget still holds (the experiment's blocks are then only a cap), and from the first
look it is fixed; when the next block would end past the budget, the look at this block is the
last and spends all the alpha left (hugelab.stats.sequential.truncated). Both depend on block
times alone, never on the values, so alpha holds (tests/test_stats_budget.py simulates it).

In a request-interleaved run (every arm's server of a block up at once, started in the block's
order, which each trial's position records) the log-ratios are adjusted for start order at
every look (hugelab.stats.startslot: slot effects fitted on every arm of every complete block
so far), the same adjustment the report's intervals make for that run; `describe` says so
(`start_slot_adjusted`), and each look keeps the slot effects it subtracted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hugelab.experiment import Experiment
from hugelab.planning.blockclock import BlockClock
from hugelab.stats import startslot, weighted
from hugelab.stats.reach import GAMMA, reach
from hugelab.stats.sequential import (
    SequentialPlan,
    look_schedule,
    sequential_decision,
    sequential_plan,
    truncated,
)
from hugelab.store import SqlStore

Rows = list[tuple[int, int, str, str, str, float | None]]
SE_METRIC = "window_hl_se_log"  # a request-level trial's own SE of its log-ratio


def paired_blocks(rows: Rows, baseline: str, arm: str, upto_block: int
                  ) -> list[tuple[int, float, float]]:
    """(block, baseline value, arm value) of the blocks before `upto_block` where both have an
    ok, positive value, in block order: the pairs every look's log-ratios come from."""
    by: dict[int, dict[str, float]] = defaultdict(dict)
    for block, _pos, name, _target, status, value in rows:
        if block < upto_block and status == "ok" and value is not None and value > 0:
            by[block][name] = value
    return [(blk, v[baseline], v[arm]) for blk, v in sorted(by.items())
            if baseline in v and arm in v]


def paired_log_ratios(rows: Rows, baseline: str, arm: str, upto_block: int) -> np.ndarray:
    pairs = paired_blocks(rows, baseline, arm, upto_block)
    if not pairs:
        return np.empty(0)
    _blk, b, c = np.array(pairs).T
    out: np.ndarray = np.log(c / b)
    return out


def slot_matrices(rows: Rows, arms: list[str],
                  upto_block: int) -> tuple[np.ndarray, np.ndarray]:
    """(blocks x arms) log values of ok trials (NaN elsewhere) and positions (start slots of a
    request-interleaved block; -1 where no trial) of the blocks before `upto_block`."""
    blocks = sorted({r[0] for r in rows if r[0] < upto_block})
    at = {b: i for i, b in enumerate(blocks)}
    col = {a: j for j, a in enumerate(arms)}
    y = np.full((len(blocks), len(arms)), np.nan)
    slot = np.full((len(blocks), len(arms)), -1, dtype=np.int64)
    for block, pos, name, _target, status, value in rows:
        if block in at and name in col:
            slot[at[block], col[name]] = pos
            if status == "ok" and value is not None and value > 0:
                y[at[block], col[name]] = math.log(value)
    return y, slot


def request_interleaved(trial: dict[str, Any]) -> bool:
    """Whether a trial ran as one of a request-interleaved block's servers."""
    prov = trial.get("provenance")
    inter = prov.get("interleaved") if isinstance(prov, dict) else None
    return isinstance(inter, dict) and inter.get("design") == "requests"


@dataclass
class SequentialStopper:
    exp: Experiment
    store: SqlStore
    looks: int | None = 5  # None: look_schedule's looks
    alpha: float = 0.05
    margin: float = 0.01
    target_effect: float | None = None
    better: str = "lower"
    history: list[dict[str, Any]] = field(default_factory=list)
    decided: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreachable: dict[str, dict[str, Any]] = field(default_factory=dict)
    adjust_slots: bool = True  # False: the unadjusted log-ratios (a replay's "before")
    slot_adjusted: bool = False  # set at the first look: a request-interleaved run
    clock: BlockClock | None = None  # a time budget: the most blocks from their measured time
    cut: dict[str, Any] | None = None  # where the budget ended the plan early
    weigh_trials: bool = True  # request-level trials weighted by their own SEs (False: ranked)

    def __post_init__(self) -> None:
        # every cell against the baseline cell of its scenario (a flat experiment: one baseline)
        arms = [a.name for a in self.exp.arms if a.name != self.exp.baseline_of(a.name)]
        self.comparisons = arms
        self.per_alpha = self.alpha / max(1, len(arms))
        self.plan: SequentialPlan = self._plan_for(self.exp.blocks, 0)

    def _plan_for(self, most: int, now: int) -> SequentialPlan:
        """The design for `most` blocks, its looks after `now` blocks (a look now for any the
        schedule puts before it: a budget that shrank before the first look)."""
        looks = min(self.looks, most // 6) if self.looks is not None else None
        plan = sequential_plan(
            most, looks=looks or 1, alpha=self.per_alpha, margin=self.margin, better=self.better,
            target_effect=self.target_effect,
            look_sizes=look_schedule(most, self.per_alpha) if looks is None else None)
        if now < 6 or plan.look_sizes[0] >= now:
            return plan
        return sequential_plan(most, alpha=self.per_alpha, margin=self.margin, better=self.better,
                               target_effect=self.target_effect,
                               look_sizes=(now, *(n for n in plan.look_sizes if n > now)))

    def describe(self) -> dict[str, Any]:
        stopped = self.history and (self.done or self.history[-1]["look"] == self.plan.looks)
        out = {"plan": self.plan.to_dict(), "family_alpha": self.alpha,
               "comparisons": self.comparisons, "looks": self.history,
               "decided": self.decided, "unreachable": self.unreachable,
               "stopped_at_look": self.history[-1]["look"] if stopped else None}
        if self.slot_adjusted:
            out["start_slot_adjusted"] = True
        if self.clock is not None:
            out["budget"] = {**self.clock.to_dict(), "cut": self.cut}
        return out

    @property
    def done(self) -> bool:
        return all(a in self.decided for a in self.comparisons)

    def __call__(self, run_id: int, blocks_done: int, skipped: dict[str, str]) -> bool:
        """Called after each completed block; True means: stop the run now."""
        if self.clock is not None and self._fit_budget(blocks_done, skipped):
            return True
        if blocks_done not in self.plan.look_sizes:
            return False
        look = self.plan.look_sizes.index(blocks_done) + 1
        rows = self.store.values(run_id)
        if look == 1 or not self.history:  # direction comes from the workload's own metric
            trials = list(self.store.trials(run_id))
            better = next((t["better"] for t in trials if t["better"]), None)
            if better in ("lower", "higher") and better != self.plan.better:
                self.plan = replace(self.plan, better=better)
            self.slot_adjusted = self.adjust_slots and self.exp.design == "interleaved" and \
                any(request_interleaved(t) for t in trials)
        entry: dict[str, Any] = {"look": look, "blocks": blocks_done, "decisions": {}}
        ratios = self._slot_ratios(rows, blocks_done, entry) if self.slot_adjusted else None
        ses = self.store.trial_metric(run_id, SE_METRIC) \
            if self.slot_adjusted and self.weigh_trials else {}
        for arm in self.comparisons:
            if arm in self.decided or arm in skipped:
                continue
            d = ratios(arm) if ratios is not None else \
                paired_log_ratios(rows, self.exp.baseline_of(arm), arm, blocks_done)
            if d.size < 6:
                continue
            dec = self._decide(d, self._trial_ses(ses, rows, arm, blocks_done), look)
            if dec["decision"] in ("continue", "inconclusive"):
                self._reach(arm, dec, d, look, blocks_done)
            entry["decisions"][arm] = dec
            if dec["stopped"]:
                self.decided[arm] = {**dec, "look": look}
        for arm in skipped:
            self.decided.setdefault(arm, {"decision": "skipped", "look": look})
        self.history.append(entry)
        return self.done or look == self.plan.looks  # the last: too few pairs end there too

    def _trial_ses(self, ses: dict[tuple[int, str], float], rows: Rows, arm: str,
                   blocks: int) -> np.ndarray | None:
        """The arm's trials' own SEs beside its log-ratios, in their blocks' order; None (rank
        them) unless every pair's trial has one and its windows were timed against this
        comparison's baseline (the block's reference: the experiment's baseline)."""
        base = self.exp.baseline_of(arm)
        if not ses or base != self.exp.baseline:
            return None
        found = [ses.get((blk, arm)) for blk, _b, _c in paired_blocks(rows, base, arm, blocks)]
        if any(s is None or not s > 0 for s in found):
            return None
        return np.array(found, dtype=float)

    def _decide(self, d: np.ndarray, se: np.ndarray | None, look: int) -> dict[str, Any]:
        """One comparison's decision at a look, its effect, and with trials' SEs the weighted
        reading (its interval at the look's equivalence bound, the instance SD beyond the SEs);
        `shift_sd` is what the budget's reach forecasts from."""
        dec = sequential_decision(d, look, self.plan, se=se).to_dict()
        if se is None:
            dec.update(statistic="signed-rank", effect_pct=100 * math.expm1(float(np.median(d))))
            return dec
        r = weighted.reading(d, se, self.plan.equivalence_bounds[look - 1])
        dec.update(statistic="weighted", effect_pct=100 * math.expm1(r.estimate),
                   interval_pct=[100 * math.expm1(r.lo), 100 * math.expm1(r.hi)]
                   if math.isfinite(r.hi - r.lo) else None,
                   instance_sd_pct=100 * r.tau, effective_trials=r.effective_n,
                   shift_sd=[r.estimate, r.unit_sd])
        return dec

    def _fit_budget(self, blocks: int, skipped: dict[str, str]) -> bool:
        """A time budget at a block's end: before the first look, the plan for the blocks the
        budget holds at their measured time; after it, the plan cut short at this block when
        the next would end past the budget. True: the budget ended before 6 blocks (every
        comparison `inconclusive`, said why)."""
        assert self.clock is not None
        self.clock.block_done()
        most = min(self.exp.blocks, blocks + self.clock.blocks_left())
        if not self.history:
            if most >= 6:
                self.plan = self._plan_for(most, blocks)
                return False
            if most > blocks:
                return False
            why = f"the budget held {blocks} blocks; a verdict needs 6 or more"
            for arm in self.comparisons:
                self.decided.setdefault(arm, {"decision": "skipped" if arm in skipped else
                                              "inconclusive", "look": 0, "reason": why})
            self.cut = {"blocks": blocks, "planned_blocks": None, "reason": why}
            return True
        if most <= blocks < self.plan.max_blocks:
            self.cut = {"blocks": blocks, "planned_blocks": self.plan.max_blocks,
                        "reason": f"the next block would end past the budget of "
                                  f"{self.clock.budget_s:g} s: the last look is this block's "
                                  f"and spends the alpha left"}
            self.plan = truncated(self.plan, len(self.history), blocks)
        return False

    def _slot_ratios(self, rows: Rows,
                     blocks: int, entry: dict[str, Any]) -> Callable[[str], np.ndarray] | None:
        """Each arm's log-ratios adjusted for start order from the blocks so far (None when
        too few complete blocks fit the slot effects: the plain ones then)."""
        arms = [a.name for a in self.exp.arms]
        y, slot = slot_matrices(rows, arms, blocks)
        found = startslot.fit(y, slot)
        if found is None:
            return None
        entry["start_slots_pct"] = found.effects_pct
        return lambda arm: startslot.adjust(y, slot, arms.index(arm),
                                            arms.index(self.exp.baseline_of(arm)), found)

    def _reach(self, arm: str, dec: dict[str, Any], d: np.ndarray, look: int,
               blocks: int) -> None:
        """What the rest of the budget can reach: recorded in the decision, the first look
        that puts the margin out of reach kept in `unreachable` (unless a difference is all
        but certain by the last look: a +30% arm that cannot be shown within ±1% of its
        baseline is no news), a futile comparison stopped here (not at the last look, whose
        decision stands)."""
        r = reach(d, self.plan, shift_sd=tuple(dec["shift_sd"]) if "shift_sd" in dec else None)
        if r is None:
            return
        said = r.sentence(self.plan.margin)
        dec["reach"] = {**r.to_dict(), "statement": said}
        if not r.reaches_margin and arm not in self.unreachable and r.n < r.max_blocks \
                and r.p_difference < 1 - GAMMA:  # not an arm bound for `faster`/`slower`
            self.unreachable[arm] = {"look": look, "blocks": blocks, "statement": said,
                                     "reachable_margin_pct": r.reachable_margin_pct}
        if r.futile and not dec["stopped"]:
            dec.update(decision="inconclusive", stopped=True, reason=f"futile: {said}")
