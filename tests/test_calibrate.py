"""Duet calibration (`hugelab run DUET --calibrate`): the ABBA order of its runs, the twin's
placement, the claims it prints; a real native duet calibrated end to end."""

from __future__ import annotations

import json
import subprocess

import pytest

from hugelab.errors import UsageError
from hugelab.experiment import parse_experiment
from hugelab.planning.calibration import block_order, claims, experiments
from tests.helpers import HUGELAB
from tests.hostguard import host_state


def test_together_and_alone_alternate_in_abba_order():
    assert block_order(3) == ["together", "alone", "alone", "together", "together", "alone"]
    order = block_order(20)
    assert order.count("together") == order.count("alone") == 20


def test_the_twin_sits_where_the_duets_other_arm_sits():
    arms = [{"name": "x", "backing": "4k", "vm": {"cpu_pin": [0]}},
            {"name": "y", "backing": "4k", "vm": {"cpu_pin": [1], "backing": "memfd",
                                                   "page_size": "2M"}}]
    together, _ = experiments(parse_experiment({"design": "duet", "arms": arms}))
    a, twin = together.arms
    assert a.vm is not None and twin.vm is not None
    assert a.vm.cpu_pin == (0,) and twin.vm.cpu_pin == (1,)  # the duet's two slots
    assert twin.vm.backing == a.vm.backing == "anon"  # the baseline's memory, twice


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
blocks = 6
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
    assert out["slots"]["ci_pct"][0] <= out["slots"]["effect_pct"] <= out["slots"]["ci_pct"][1]
    inter = out["interference"]
    assert inter["blocks"] == 6, inter  # every block paired together vs alone
    assert inter["ci_pct"][0] <= inter["shift_pct"] <= inter["ci_pct"][1]
    assert any(c.startswith("cannot claim") for c in out["claims"])
    shown = json.loads(subprocess.run([*HUGELAB, "show", "--store", "s.db", "--json"],
                                      cwd=tmp_path, capture_output=True, text=True).stdout)
    names = sorted((x["name"], x["trials"]) for x in shown)
    assert names == [("duet-native calibration: alone", 12),
                     ("duet-native calibration: together", 12)]
    assert host_state() == before
