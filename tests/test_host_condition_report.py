"""A host condition (issue 38 item 4): `host_state` as a factor is the background of every
comparison, as a scenario is. Each backing is compared with the baseline backing on a host in
the same state, the answer gives each backing's effect per state with what the state measured,
the factorial table says whether the state interacts with the backing, and the recommendation
names the condition it holds for."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hugelab.experiment import load_experiment
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store, Trial

ROOT = Path(__file__).resolve().parents[1]
# ns per load, lower is better: THP gains 30% on the fresh host and 10% on the fragmented one
TRUTH = {("4k", "fresh"): 100.0, ("thp", "fresh"): 70.0,
         ("4k", "fragmented"): 104.0, ("thp", "fragmented"): 93.6}
UNUSABLE = {"fresh": 0.30, "fragmented": 0.95}  # what each state's trials measured


def _store(path: Path, blocks: int = 12) -> None:
    exp = load_experiment(ROOT / "examples" / "aged-host.toml")
    rng = np.random.default_rng(38)
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("key-aged", exp.name, exp.to_dict(), {})
        for b in range(blocks):
            block = float(np.exp(rng.normal(0, 0.03)))
            for pos, arm in enumerate(exp.arms):
                lv = dict(arm.levels)
                value = TRUTH[lv["backing"], lv["host"]] * block * float(np.exp(rng.normal(0, .01)))
                costs = {"footprint_kb": 2.1e6, "compact_stall": 0.0,
                         "host_unusable": UNUSABLE[lv["host"]] + float(rng.normal(0, 0.005))}
                st.add_trial(Trial(run_id, b, pos, arm.name, "ok", value, "ns_per_load", "ns",
                                   "lower", metrics={}, evidence={}, monitors={"costs": costs},
                                   provenance={"accel": "native", "kernel": "6.18",
                                               "target": "native"}, target="native"))


def test_a_host_condition_is_the_background_of_every_comparison(tmp_path: Path) -> None:
    exp = load_experiment(ROOT / "examples" / "aged-host.toml")
    assert [f.name for f in exp.condition_factors] == ["host"]
    base = {a.name: exp.baseline_of(a.name) for a in exp.arms}
    assert base["backing=thp,host=fragmented"] == "backing=4k,host=fragmented"
    assert base["backing=thp,host=fresh"] == "backing=4k,host=fresh"
    # a factor of backings only is no condition: 002's host x guest keeps one baseline
    two = load_experiment(ROOT / "examples" / "002-host-x-guest-2x2.toml")
    assert two.condition_factors == ()

    _store(tmp_path / "s.db")
    with Store(tmp_path / "s.db") as st:
        rep = analyse(load_run(st), Options()).json()
    pairs = {(c["baseline"], c["candidate"]) for c in rep["comparisons"]}
    assert pairs == {("backing=4k,host=fresh", "backing=thp,host=fresh"),
                     ("backing=4k,host=fragmented", "backing=thp,host=fragmented")}
    host = next(f for f in rep["factorial"]["factors"] if f["name"] == "host")
    assert host["condition"] is True
    assert abs(host["measured"]["fragmented"] - 0.95) < 0.01
    per = {e["scope"]: e for e in rep["factorial"]["main_effects"] if e["factor"] == "backing"}
    assert set(per) == {"overall", "host=fresh", "host=fragmented"}
    assert abs(per["host=fresh"]["effect_pct"] + 30) < 1.5
    assert abs(per["host=fragmented"]["effect_pct"] + 10) < 1.5
    inter = rep["factorial"]["interactions"]
    assert [e["interaction_verdict"] for e in inter] == ["interaction"]

    lead = rep["answer"]
    said = [a["text"] for a in lead["what_matters"]]
    frag = next(t for t in said if t.startswith("host=fragmented"))
    assert "5% of free memory in blocks of order ≥ 9, measured" in frag
    assert "backing thp vs 4k -10." in frag and "faster" in frag
    recs = lead["recommendations"]
    assert len(recs) == 2
    assert recs[0].startswith("host=fresh (70% of free memory") and "use thp: -" in recs[0]
    assert recs[1].startswith("host=fragmented (5% of free memory") and "use thp: -" in recs[1]
    assert abs(float(recs[1].split("use thp: ")[1].split("%")[0]) + 10) < 1.5
