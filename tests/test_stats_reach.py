"""Stopping that does not waste the budget (issue 39 item 2): looks every few blocks from the
first that can decide, and what the rest of the budget can still reach, checked by simulation
on A/A runs shaped like the field's (fresh server instances differ: SD of trial effects
1.2-1.9%, plus each trial's own window noise). The figures with more runs: docs/statistics.md,
from bench/sequential_budget.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hugelab.experiment import Arm, Experiment
from hugelab.stats import StatsInputError, run_sequential, sequential_plan, signedrank
from hugelab.stats.reach import reach, replay
from hugelab.stats.sequential import look_schedule, max_signed_rank_z
from hugelab.stopping import SequentialStopper
from tests.helpers import PairedStore

N, ALPHA, MARGIN, WINDOW_SD = 30, 0.005, 0.01, 0.006  # the examples: alpha 0.01, 2 claims
SIMS = 500


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {"auto": sequential_plan(N, alpha=ALPHA, margin=MARGIN,
                                    look_sizes=look_schedule(N, ALPHA)),
            "five": sequential_plan(N, looks=5, alpha=ALPHA, margin=MARGIN)}


def aa(seed: int, tau: float, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    between = rng.normal(0, tau, (SIMS, N)) if kind == "normal" else \
        rng.standard_t(3, (SIMS, N)) * tau / math.sqrt(3)
    return between + rng.normal(0, WINDOW_SD, (SIMS, N))


@pytest.mark.slow  # a simulation of 500 runs: the Python lane
def test_the_schedule_starts_at_the_first_look_that_can_stop(plans) -> None:
    sizes = plans["auto"].look_sizes
    assert sizes[-1] == N and all(b > a for a, b in zip(sizes, sizes[1:], strict=False))
    first = sizes[0]
    assert max_signed_rank_z(first) >= plans["auto"].equivalence_bounds[0]
    earlier = sequential_plan(N, alpha=ALPHA, look_sizes=(first - 1, N))
    assert max_signed_rank_z(first - 1) < earlier.equivalence_bounds[0]
    assert look_schedule(N, ALPHA, every=1)[:3] == (first, first + 1, first + 2)
    with pytest.raises(StatsInputError):
        sequential_plan(N, look_sizes=(12, 20))  # must end at the budget
    with pytest.raises(StatsInputError):
        look_schedule(5, ALPHA)


@pytest.mark.slow  # a simulation of 500 runs: the Python lane
@pytest.mark.parametrize("kind", ["normal", "t3"])
def test_aa_never_claims_more_than_alpha_with_futility_stops(plans, kind: str) -> None:
    r = replay(aa(1, 0.015, kind), plans["auto"])
    fp = np.mean(np.isin(r.decision, ["faster", "slower"]))
    assert fp <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / SIMS)


@pytest.mark.slow  # a simulation of 500 runs: the Python lane
def test_an_easy_aa_stops_earlier_and_a_hard_one_keeps_its_equivalence_power(plans) -> None:
    easy = aa(2, 0.003)
    mine, five = replay(easy, plans["auto"]), run_sequential(easy, plans["five"])
    assert np.mean(mine.decision == "equivalent") > 0.98
    assert mine.blocks.mean() < np.mean(np.asarray(plans["five"].look_sizes)[
        five[1].astype(int) - 1]) - 0.5
    assert np.mean(mine.blocks < plans["five"].look_sizes[2]) > 0.1  # before five's first stop
    hard = aa(3, 0.015)
    mine = replay(hard, plans["auto"])
    five_eq = np.mean(run_sequential(hard, plans["five"])[0] == "equivalent")
    assert np.mean(mine.decision == "equivalent") > five_eq - 0.05
    assert 0.2 < mine.futile.mean() < 0.5  # the unreachable ones stop, the rest run on
    assert mine.blocks[mine.decision == "equivalent"].mean() > 20


@pytest.mark.slow  # a simulation of 500 runs: the Python lane
def test_cannot_reach_is_seldom_wrong_and_the_reachable_margin_mostly_holds(plans) -> None:
    r = replay(aa(4, 0.019), plans["auto"])
    said = ~np.isnan(r.said_at)
    assert said.mean() > 0.6
    assert np.mean(r.plain[said] == "equivalent") < 0.05  # it would have decided after all
    assert r.kept[said].mean() > 0.8  # that margin's TOST passes at the budget's end
    assert r.blocks[r.futile].mean() < N - 5


def centred(x: np.ndarray) -> np.ndarray:
    """A loud A/A that reads no effect (a large one leaves `faster`/`slower` within reach)."""
    return x - float(signedrank.hodges_lehmann(x)[0])


def test_reach_of_one_run_reads_what_it_says() -> None:
    plan = sequential_plan(N, alpha=ALPHA, margin=MARGIN, look_sizes=look_schedule(N, ALPHA))
    rng = np.random.default_rng(5)
    assert reach(rng.normal(0, 0.01, 9), plan) is None
    quiet = reach(rng.normal(0, 0.004, 17), plan)
    assert quiet is not None and quiet.reaches_margin and not quiet.futile
    loud = reach(centred(rng.normal(0, 0.04, 17)), plan)
    assert loud is not None and not loud.reaches_margin and loud.futile
    assert loud.reachable_margin_pct > 2.0 and "cannot reach ±1% in 30 blocks" in \
        loud.sentence(MARGIN)


def stopped(d: np.ndarray) -> SequentialStopper:
    exp = Experiment("aa", (Arm("a", "4k"), Arm("b", "4k")), {"kind": "fake"}, seed=1,
                     blocks=N, baseline="a")
    stop = SequentialStopper(exp, PairedStore(d), looks=None, alpha=0.01, margin=MARGIN)  # type: ignore[arg-type]
    for blocks in range(1, N + 1):
        if stop(1, blocks, {}):
            break
    return stop


def test_the_stopper_says_when_the_margin_is_out_of_reach_and_stops_there() -> None:
    loud = stopped(centred(np.random.default_rng(6).normal(0, 0.04, N)))
    info = loud.describe()
    first = info["plan"]["look_sizes"][0]
    assert info["unreachable"]["b"]["blocks"] == first
    assert info["unreachable"]["b"]["reachable_margin_pct"] > 2.0
    assert info["decided"]["b"]["decision"] == "inconclusive"
    assert info["decided"]["b"]["reason"].startswith("futile: cannot reach ±1%")
    assert info["stopped_at_look"] == 1 and len(info["looks"]) == 1
    quiet = stopped(np.random.default_rng(7).normal(0, 0.003, N)).describe()
    assert quiet["decided"]["b"]["decision"] == "equivalent" and not quiet["unreachable"]


def test_a_run_that_ends_inconclusive_states_the_margin_its_blocks_reach() -> None:
    info = stopped(np.random.default_rng(8).normal(0.004, 0.015, N)).describe()
    last = info["decided"]["b"]
    assert last["decision"] == "inconclusive" and last["look"] == info["plan"]["looks"]
    assert last["reach"]["statement"].startswith(f"its {N} blocks reach ±")
    assert "b" not in info["unreachable"]  # a forecast, and none is left at the last look


def test_looks_on_the_command_line_are_a_number_or_auto() -> None:
    import argparse

    from hugelab.cli.run import _looks
    assert _looks("auto") is None and _looks("5") == 5
    for bad in ("0", "-1", "five"):
        with pytest.raises(argparse.ArgumentTypeError):
            _looks(bad)


def test_an_arm_bound_for_faster_is_not_said_to_miss_the_equivalence_margin() -> None:
    """A +30% arm (scale 100's `on`, per-block SD ~4%) cannot be shown within ±1% of its
    baseline, and that is no news: no "cannot reach ±1%" line for it, and its decision is
    its difference, not futility."""
    info = stopped(np.random.default_rng(9).normal(0.30, 0.04, N)).describe()
    assert "b" not in info["unreachable"]
    assert info["decided"]["b"]["decision"] in ("faster", "slower")
    assert not info["decided"]["b"].get("reason", "").startswith("futile")
