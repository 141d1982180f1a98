"""Duet calibration (`hugelab run DUET --calibrate`): the two-sample shift it rests on, checked by
simulation; the claims it prints; a real native duet calibrated end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from hugelab.cli.calibrate import claims, experiments
from hugelab.errors import UsageError
from hugelab.experiment import parse_experiment
from hugelab.stats.twosample import shift
from tests.hostguard import host_state

HUGELAB = [sys.executable, "-m", "hugelab.cli"]


def test_the_shift_interval_covers_the_true_shift_at_about_its_rate():
    rng = np.random.default_rng(1)
    true, runs, hits = np.log(1.04), 300, 0
    for i in range(runs):
        a = rng.standard_t(4, 12) * 0.02
        b = rng.standard_t(4, 12) * 0.02 + true
        s = shift(a, b, confidence=0.9, n_boot=400, seed=i)
        hits += s.lo <= true <= s.hi
    assert 0.84 <= hits / runs <= 0.97  # percentile bootstrap: near nominal at n = 12
    assert shift([0.0, 0.1, 0.2], [0.0, 0.1, 0.2]).shift == 0.0


def test_claims_say_what_a_duet_can_and_cannot_claim():
    lines = claims({"slots": {"verdict": "equivalent", "effect_pct": 0.2, "ci_pct": [-0.6, 0.9]},
                    "interference": {"shift_pct": 7.5, "ci_pct": [5.0, 10.1]}})
    assert lines[0].startswith("the two slots are symmetric")
    assert "beyond ±0.9%" in lines[1] and lines[2].startswith("cannot claim")
    assert "+7.50%" in lines[2]
    asym = claims({"slots": {"verdict": "slower", "effect_pct": 4.0, "ci_pct": [2.0, 6.0]}})
    assert "not shown symmetric" in asym[0] and "cpu_pin" in asym[0]


def test_only_a_duet_is_calibrated_and_its_twin_is_the_baseline():
    arms = [{"name": "x", "backing": "4k"}, {"name": "y", "backing": "thp"}]
    together, alone = experiments(parse_experiment({"design": "duet", "arms": arms,
                                                    "baseline": "y"}))
    assert [a.name for a in together.arms] == ["A", "A-twin"]
    assert {a.backing for a in together.arms} == {"thp"}  # the baseline arm, twice
    assert together.design == "duet" and alone.design == "paired"
    assert together.key() != alone.key()
    with pytest.raises(UsageError, match="measures a duet"):
        experiments(parse_experiment({"arms": arms}))


DUET = """\
name = "duet-native"
seed = 2
blocks = 4
design = "duet"
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.3
[[arms]]
name = "4k"
backing = "4k"
[[arms]]
name = "thp"
backing = "thp"
"""


@pytest.mark.host
def test_a_real_duet_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    (tmp_path / "d.toml").write_text(DUET)
    r = subprocess.run([*HUGELAB, "run", "d.toml", "--calibrate", "--store", "s.db", "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["slots"]["verdict"] in ("equivalent", "inconclusive", "faster", "slower")
    assert out["interference"]["n_together"] == 8 and out["interference"]["n_alone"] == 8
    assert any(c.startswith("cannot claim") for c in out["claims"])
    shown = json.loads(subprocess.run([*HUGELAB, "show", "--store", "s.db", "--json"],
                                      cwd=tmp_path, capture_output=True, text=True).stdout)
    names = sorted(x["name"] for x in shown)
    assert names == ["duet-native calibration: alone", "duet-native calibration: together"]
    assert host_state() == before
