"""The report of a run with repeats (replication across them) and of one run with regimes."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from hugelab.report import markdown, text
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests.helpers import ISSUE_EFFECTS, store_run


def report(path):
    with Store(path) as st:
        return analyse(load_run(st), Options())


def test_four_repeats_that_disagree_get_a_replication_section_and_a_warning(tmp_path):
    rng = np.random.default_rng(4)
    per = [e * np.exp(rng.normal(0, 0.015, 10)) for e in ISSUE_EFFECTS]
    store_run(tmp_path / "s.db", np.concatenate(per), blocks=10, repeats=4)
    rep = report(tmp_path / "s.db")
    r = rep.json()
    assert r["run"]["repeats"] == 4
    (one,) = r["replication"]
    assert one["name"] == "2M vs 4k" and one["pooled"]["k"] == 4
    assert [e["n"] for e in one["repeats"]] == [10, 10, 10, 10]
    assert [e["effect_pct"] for e in one["repeats"]] == \
        pytest.approx([-13.3, -13.8, -16.9, -17.6], abs=1.5)
    assert one["disagree"] and one["tau_pct"] > 1.0
    # the across-repeat interval is wider than the single interval over all 40 blocks
    comp = r["comparisons"][0]
    assert one["pooled"]["ci_high_pct"] - one["pooled"]["ci_low_pct"] > \
        comp["ci_high_pct"] - comp["ci_low_pct"]
    assert any("repeats disagree beyond their own intervals" in w for w in r["warnings"])
    json.dumps(r)
    out = io.StringIO()
    text.render(rep.result, Console(file=out, width=160))
    shown = out.getvalue()
    assert "Replication: the effect across repeats" in shown and "across 4" in shown
    assert "Replication" in markdown.render(rep.result)


def test_one_run_with_two_regimes_says_so_and_a_plain_run_has_no_replication(tmp_path):
    rng = np.random.default_rng(5)
    effects = np.where(np.arange(30) < 18, 0.87, 0.78) * np.exp(rng.normal(0, 0.01, 30))
    store_run(tmp_path / "r.db", effects, blocks=30)
    two = report(tmp_path / "r.db")
    r = two.json()
    assert r["replication"] is None and r["run"]["repeats"] == 1
    g = r["comparisons"][0]["regimes"]
    assert g["split"] and g["switches"] == 1 and (g["low"]["blocks"], g["high"]["blocks"]) == (12, 18)
    assert any("fall into two regimes" in w for w in r["warnings"])
    out = io.StringIO()
    text.render(two.result, Console(file=out, width=160))
    assert "Regimes: per-block effects that split in two" in out.getvalue()
    calm = 0.87 * np.exp(rng.normal(0, 0.01, 30))
    store_run(tmp_path / "c.db", calm, blocks=30)
    r = report(tmp_path / "c.db").json()
    assert not r["comparisons"][0]["regimes"]["split"]
    assert not any("regimes" in w for w in r["warnings"])


def test_regimes_tied_to_the_machine_load_of_their_blocks(tmp_path):
    """The blocks of the larger effect ran while the hypervisor stole 30% of the CPU."""
    rng = np.random.default_rng(6)
    slow = np.arange(30) % 3 == 0
    effects = np.where(slow, 0.78, 0.87) * np.exp(rng.normal(0, 0.01, 30))
    steal = np.where(slow, 0.30, 0.01) + rng.uniform(0, 0.01, 30)
    store_run(tmp_path / "l.db", effects, blocks=30, steal=steal)
    tied = report(tmp_path / "l.db")
    r = tied.json()
    c = r["comparisons"][0]
    assert c["regimes"]["split"] and c["regimes"]["switches"] > 10
    load = c["load_effect"]
    assert load["blocks"] == 30 and load["spearman"]["steal_share"]["rho"] < -0.5
    assert "other_busy_share" not in load["spearman"]  # constant: nothing to correlate
    assert load["low_regime_median"]["steal_share"] > 0.25 > load["high_regime_median"][
        "steal_share"]
    assert any("moved with the machine's load: CPU steal (rho -" in w for w in r["warnings"])
    out = io.StringIO()
    text.render(tied.result, Console(file=out, width=200))
    assert "median load in the low / high regime's blocks: CPU steal 31% / 1%" in \
        " ".join(out.getvalue().split())
    store_run(tmp_path / "q.db", effects, blocks=30)  # no load recorded
    assert report(tmp_path / "q.db").json()["comparisons"][0]["load_effect"] is None


def test_repeats_of_five_blocks_say_why_they_have_no_interval_and_notes_name_repeats(tmp_path):
    """A 95% signed-rank interval needs 6 pairs: 3 repeats of 5 blocks each have none, and the
    report says so instead of bare dashes; the pooled notes speak of repeats, not hosts."""
    rng = np.random.default_rng(5)
    per = [e * np.exp(rng.normal(0, 0.015, 5)) for e in ISSUE_EFFECTS[:3]]
    store_run(tmp_path / "f.db", np.concatenate(per), blocks=5, repeats=3)
    rep = report(tmp_path / "f.db")
    (one,) = rep.json()["replication"]
    assert all("host" not in n for n in one["pooled"]["notes"] + one["notes"])
    assert any(n.startswith("3 repeats: tau^2") for n in one["pooled"]["notes"])
    out = io.StringIO()
    text.render(rep.result, Console(file=out, width=200))
    shown = out.getvalue()
    assert shown.count("[needs 6 pairs, has 5]") == 3
    assert "too few blocks for a 95% interval of its own" in shown
