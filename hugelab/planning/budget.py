"""Budgets: a duration as a user writes it, and what to cut when an experiment's estimate is
over its budget."""

from __future__ import annotations

import argparse
import math
import re

from hugelab.errors import UsageError
from hugelab.experiment import Experiment
from hugelab.planning.blockclock import RESERVE_S
from hugelab.planning.cost import Measured, cuts, estimate, human
from hugelab.stats._util import MIN_UNITS


def parse_budget(text: str) -> float:
    """'90m', '2h', '45s', '1h30m' -> seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", text.strip().lower())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s", "", text.lower()):
        raise argparse.ArgumentTypeError(f"not a duration like 90m, 2h or 1h30m: {text!r}")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def over_budget(exp: Experiment, meas: Measured, accel: str, seconds: float,
                budget_s: float) -> str:
    """Why `seconds` is over `budget_s`, and what fits instead: the factor to cut to one
    level, or fewer blocks (never fewer than a verdict needs)."""
    text = f"estimated {human(seconds)} is over the budget of {human(budget_s)}"
    options = cuts(exp, meas, accel)  # only cuts that leave something to compare
    fits = [(name, s) for name, s in options if s <= budget_s]
    if fits:  # the factor whose cut keeps the most of the design while fitting
        scen = {f.name for f in exp.factors if f.scenario}  # on a tie: a workload parameter
        name, s = max(fits, key=lambda x: (x[1], x[0] in scen))
        text += f": cut factor '{name}' to one level ({human(s)})"
    elif options:
        name, s = options[0]
        text += f": cutting factor '{name}' to one level saves the most and still leaves " \
            f"{human(s)}"
    blocks = int(budget_s // (seconds / exp.blocks)) if seconds else exp.blocks
    if MIN_UNITS <= blocks < exp.blocks:
        text += f"; or run {blocks} blocks instead of {exp.blocks}"
    elif blocks < MIN_UNITS:
        text += f"; fewer blocks will not do: a verdict needs at least {MIN_UNITS}"
    return text


CAP_FACTOR = 2  # a budgeted run's most blocks: this many times what the estimate fits
UNKNOWN_CAP = 200  # the most blocks when the workload does not say how long it runs


def until_verdict_blocks(exp: Experiment, budget_s: float, preview: bool) -> int:
    """The blocks an `--until-verdict --budget` run is given: for a preview, about as many as
    the estimate fits in the budget; for a run, CAP_FACTOR times that, only a cap (its clock
    plans the looks from the blocks' measured time: hugelab.planning.blockclock). Refuses a budget
    the estimate fits fewer than 6 blocks into."""
    per = estimate(exp).per_block_s
    if per <= 0:
        return UNKNOWN_CAP
    fits = math.floor((budget_s - RESERVE_S) / per)
    if fits < 6:
        raise UsageError(f"a budget of {human(budget_s)} holds about {max(fits, 0)} blocks of "
                         f"this experiment by the estimate ({per:.1f} s a block); a verdict "
                         "needs 6 or more",
                         hint=f"give --budget {math.ceil((6 * per + RESERVE_S) / 60)}m or more")
    return fits if preview else CAP_FACTOR * fits
