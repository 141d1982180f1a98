"""Request-level windows in the report: where the variance of an arm's effect lies, between
trials (fresh servers) or within them (what the windows leave uncertain). The split is checked
by simulation; the report table against a store of such trials."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.report import runtables
from hugelab.report.analysis import analyse
from hugelab.report.runload import load_run
from hugelab.stats._util import StatsInputError
from hugelab.stats.windows import split_trials
from hugelab.store import Store
from tests import runstores


@pytest.mark.parametrize(("sd_between", "se_within"), [(0.01, 0.002), (0.001, 0.005),
                                                        (0.004, 0.004)])
def test_the_split_recovers_the_parts_by_simulation(sd_between, se_within):
    """400 runs of 30 trials: each trial's effect is a server draw (between) plus its windows'
    error (within, whose SE the trial reports with a little noise of its own). Before the floor
    at 0 the between part is unbiased; the shares are within 7 points of the truth on average
    (measured: the floor lifts a true 4% to 10%, and a true 50% reads 46%)."""
    rng = np.random.default_rng(31)
    shares, raw = [], []
    for _ in range(400):
        truth = rng.normal(0.0, sd_between, 30) + rng.normal(0.0, se_within, 30)
        ses = se_within * np.sqrt(rng.chisquare(19, 30) / 19)  # a 20-batch SE's own spread
        split = split_trials(truth, ses)
        shares.append(split.share_between)
        raw.append(split.var_total - split.var_within)
    total = sd_between ** 2 + se_within ** 2
    assert abs(float(np.mean(raw)) - sd_between ** 2) < 0.05 * total
    want = sd_between ** 2 / total
    assert abs(float(np.mean(shares)) - want) < 0.07, (np.mean(shares), want)


def test_the_split_needs_two_trials_with_errors():
    with pytest.raises(StatsInputError):
        split_trials([0.01], [0.001])
    with pytest.raises(StatsInputError):
        split_trials([0.01, 0.02], [0.001])
    same = split_trials([0.01, 0.01, 0.01], [0.002, 0.002, 0.002])
    assert same.var_between == 0.0 and same.share_within == 1.0


def requests_run(path, trials: int = 8, sd_between: float = 0.01, se: float = 0.002) -> None:
    """A request-level interleaved run: arms off (baseline) and on, on's trials carrying the
    window estimate against off as hugelab.workloads.requests records it."""
    rng = np.random.default_rng(3)

    def metrics(_block: int, arm: str) -> dict[str, float]:
        if arm == "off":
            return {"ops_per_s": 1000.0, "windows": 120.0}
        lr = 0.05 + rng.normal(0, sd_between) + rng.normal(0, se)
        return {"ops_per_s": 1000 * math.exp(lr), "windows": 120.0, "window_log_ratio": lr,
                "window_se_log": se, "window_effect_pct": 100 * math.expm1(lr)}
    runstores.request_run(path, trials, metrics)


def test_the_report_says_where_each_arms_effect_varies(tmp_path):
    db = tmp_path / "r.db"
    requests_run(db)
    with Store(db) as st:
        result = analyse(load_run(st)).result
    (rep,) = result.repetitions or []
    assert rep.name == "on" and rep.boots == 8 and rep.k_run == 120 and rep.effect_of == "off"
    assert rep.share_between is not None and rep.share_between > 0.7  # 1% between vs 0.2%
    t = next(t for t in runtables.all_tables(result, full=False) if t.key == "repetitions")
    assert t.title.startswith("Request windows within trials")
    assert t.rows == [["on", "8", "120", f"{100 * rep.share_between:.0f}%",
                       f"{100 * rep.share_within:.0f}%"]]  # type: ignore[operator]
    assert any("add trials" in n for n in t.notes)
    assert any(n.startswith("on: SD of its trials' effects") for n in t.notes)
    assert "effect_of" in result.to_json()["repetitions"][0]
