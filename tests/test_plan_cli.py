"""`hugelab plan`: blocks needed from a synthetic pilot; a too-short pilot says how many more."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hugelab.planning.pilot import pilot_pairs
from hugelab.stats.plan import detectable_effect, plan
from hugelab.store import Store, Trial
from tests.helpers import cli


def pilot(path, blocks: int, *, seed: int = 3, sd: float = 0.01, shift: float = -0.03,
          arms=("4k", "thp", "1g")) -> tuple[int, dict[str, np.ndarray]]:
    """A pilot run: per block a common block effect (cancels in pairs) plus noise per trial."""
    rng = np.random.default_rng(seed)
    exp = {"name": "pilot", "arms": [{"name": a} for a in arms], "baseline": arms[0]}
    d: dict[str, list[float]] = {a: [] for a in arms[1:]}
    with Store(path) as store:
        run_id, _ = store.get_or_create_run(f"pilot-{seed}-{blocks}", "pilot", exp, {})
        for b in range(blocks):
            block_effect = rng.normal(0, 0.05)
            vals = {a: 100 * math.exp(block_effect + (shift * i) + rng.normal(0, sd))
                    for i, a in enumerate(arms)}
            for pos, a in enumerate(rng.permutation(list(arms))):
                store.add_trial(Trial(run_id, b, pos, str(a), "ok", vals[str(a)], "t", "s",
                                      "lower"))
            for a in arms[1:]:
                d[a].append(math.log(vals[a] / vals[arms[0]]))
    return run_id, {a: np.array(v) for a, v in d.items()}


def test_plan_matches_the_stats_library_on_a_synthetic_pilot(tmp_path, capsys):
    db = tmp_path / "p.db"
    run_id, d = pilot(db, 20)
    rc, out, err = cli(["plan", "--store", str(db), "--arm", "thp", "--json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["run"] == run_id and len(data["arms"]) == 1
    p = data["arms"][0]
    # the verdicts' alpha (the report's default 0.05), not 99.99%
    assert data["confidence"] == pytest.approx(0.95)
    assert data["confidence_from"] == "alpha 0.05, the report's default for its verdicts"
    expect = plan(d["thp"], effect=0.01, confidence=0.95, power=0.9)
    assert p["blocks_needed"] == expect.blocks_needed == data["blocks_needed"]
    assert p["n_pilot"] == 20 and p["baseline"] == "4k" and p["arm"] == "thp"
    assert p["unit_sd"] == pytest.approx(expect.unit_sd)
    assert p["more_blocks"] == max(0, expect.blocks_needed - 20)
    assert p["targets"] == ["native"]


def test_plan_percent_forms_agree_and_budget_gives_detectable_effect(tmp_path, capsys):
    db = tmp_path / "p.db"
    _, d = pilot(db, 16)
    outs = []
    for eff, conf, power in (("2%", "99%", "80%"), ("0.02", "0.99", "0.8")):
        rc, out, err = cli(["plan", "1", "--store", str(db), "--effect", eff, "--confidence",
                            conf, "--power", power, "--budget", "40", "--json"], capsys)
        assert rc == 0, err
        outs.append(json.loads(out))
    assert outs[0] == outs[1]
    arms = {p["arm"]: p for p in outs[0]["arms"]}
    assert set(arms) == {"thp", "1g"}
    det = detectable_effect(d["1g"], 40, confidence=0.99, power=0.8)
    assert arms["1g"]["budget"]["effect_pct"] == pytest.approx(det.effect_pct)
    need = plan(d["1g"], effect=0.02, confidence=0.99, power=0.8).blocks_needed
    assert arms["1g"]["blocks_needed"] == need
    assert outs[0]["blocks_needed"] == max(p["blocks_needed"] for p in arms.values())


def test_plan_text_output(tmp_path, capsys):
    db = tmp_path / "p.db"
    pilot(db, 12)
    rc, out, err = cli(["plan", "--store", str(db), "--budget", "8", "--confidence", "99.99%"],
                       capsys)
    assert rc == 0, err
    assert "thp vs 4k: 12 pilot blocks" in out and "1g vs 4k" in out
    assert "at 99.99% confidence (--confidence) with 90% power" in " ".join(out.split())
    assert "can never reach 99.99% confidence" in out  # 8 blocks are too few at 99.99%
    assert "every arm:" in out


def test_too_short_pilot_says_how_many_more_blocks(tmp_path, capsys):
    db = tmp_path / "p.db"
    pilot(db, 6)
    rc, out, err = cli(["plan", "--store", str(db), "--arm", "thp"], capsys)
    assert rc != 0 and out == ""
    assert "6 paired block(s)" in err and "at least 10" in err and "run 4 more block(s)" in err
    assert "Traceback" not in err


def test_pairs_skip_flagged_and_unpaired_trials(tmp_path):
    rows = [(0, 0, "a", "native", "ok", 10.0), (0, 1, "b", "native", "ok", 11.0),
            (1, 0, "a", "native", "ok", 10.0), (1, 1, "b", "native", "flagged", 30.0),
            (2, 0, "a", "native", "ok", 10.0)]
    p = pilot_pairs(rows, "a", "b")
    assert p["d"].tolist() == pytest.approx([math.log(1.1)])


def test_plan_usage_errors(tmp_path, capsys):
    db = tmp_path / "p.db"
    pilot(db, 12)
    for argv, text in ((["--arm", "4k"], "not a non-baseline arm"),
                       (["--arm", "zz"], "not a non-baseline arm"),
                       (["--effect", "1"], "ambiguous"),
                       (["--power", "150%"], "power must lie"),
                       (["--budget", "0"], "at least 1 block")):
        rc, _, err = cli(["plan", "--store", str(db), *argv], capsys)
        assert rc != 0 and text in err, (argv, err)
    rc, _, err = cli(["plan", "--store", str(tmp_path / "none.db")], capsys)
    assert rc == 1 and "no store at" in err


def test_plan_on_an_imported_short_pilot(tmp_path, capsys):
    from pathlib import Path
    data = Path(__file__).parent / "data" / "import"
    db = tmp_path / "i.db"
    rc, _, err = cli(["import", "--store", str(db), f"off={data / 'sysbench_002_vm-off.txt'}",
                      f"on={data / 'sysbench_002_vm-on.txt'}"], capsys)
    assert rc == 0, err
    rc, out, err = cli(["plan", "--store", str(db)], capsys)
    assert rc != 0 and "3 paired block(s) of 'on' and baseline 'off'" in err
    assert "run 7 more block(s)" in err and "import at least 7 more" in err


def test_plan_recommends_repeats_when_between_repeat_variation_dominates(tmp_path, capsys):
    from tests.helpers import ISSUE_EFFECTS, store_run
    rng = np.random.default_rng(6)
    per = [e * np.exp(rng.normal(0, 0.01, 10)) for e in ISSUE_EFFECTS]
    store_run(tmp_path / "r.db", np.concatenate(per), blocks=10, repeats=4)
    rc, out, err = cli(["plan", "--store", str(tmp_path / "r.db"), "--effect", "5%",
                        "--confidence", "95%", "--power", "80%", "--json"], capsys)
    assert rc == 0, err
    rep = json.loads(out)["arms"][0]["repeats"]
    assert rep["pilot_repeats"] == 4 and rep["blocks_per_repeat"] == 10
    assert rep["between_dominates"] and rep["i2"] > 0.5 and rep["tau_pct"] > 1
    assert 3 <= rep["repeats_needed"] <= 20
    assert f"--repeats {rep['repeats_needed']}" in rep["reading"]
    rc, out, _ = cli(["plan", "--store", str(tmp_path / "r.db"), "--effect", "5%"], capsys)
    assert "between-repeat variation dominates" in out
    # one run whose blocks fall into two regimes: plan from repeats
    store_run(tmp_path / "one.db", np.where(np.arange(30) < 15, 0.87, 0.78)
              * np.exp(rng.normal(0, 0.01, 30)), blocks=30)
    rc, out, _ = cli(["plan", "--store", str(tmp_path / "one.db"), "--json"], capsys)
    rep = json.loads(out)["arms"][0]["repeats"]
    assert rep["regimes"]["split"] and "--repeats 3" in rep["reading"]


def test_plan_uses_the_verdicts_alpha_and_says_which(tmp_path, capsys):
    """Without --confidence the plan takes the verdicts' alpha: the report's default (0.05),
    or the run's --until-verdict alpha; --alpha A is --confidence 1-A; it says which."""
    db = tmp_path / "p.db"
    run_id, d = pilot(db, 12)
    rc, out, err = cli(["plan", "--store", str(db), "--arm", "thp"], capsys)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "at 95% confidence (alpha 0.05, the report's default for its verdicts)" in flat
    need = plan(d["thp"], effect=0.01, confidence=0.95, power=0.9).blocks_needed
    assert f"-> {need} blocks" in flat
    rc, out, err = cli(["plan", "--store", str(db), "--arm", "thp", "--alpha", "0.0001",
                        "--json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["confidence"] == pytest.approx(0.9999) and data["confidence_from"] == \
        "--alpha 0.0001"
    assert data["blocks_needed"] == plan(d["thp"], effect=0.01, confidence=0.9999,
                                         power=0.9).blocks_needed
    with Store(db) as st:
        st.set_run_sequential(run_id, {"family_alpha": 0.01})
    rc, out, err = cli(["plan", "--store", str(db), "--arm", "thp", "--json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["confidence"] == pytest.approx(0.99)
    assert data["confidence_from"] == "alpha 0.01, the run's --until-verdict alpha"
    with pytest.raises(SystemExit):
        cli(["plan", "--store", str(db), "--alpha", "0.01", "--confidence", "99%"], capsys)
    assert "not allowed with" in capsys.readouterr().err
