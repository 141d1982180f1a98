"""Several trials per guest boot in `hugelab plan` and `hugelab report`: stores built here with
known between-boot and within-boot noise, as the runner stores them (one row per boot, its
value the geometric mean, the repetitions in provenance `reps`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hugelab.report import html, markdown, runtables, text
from hugelab.report.analysis import Report, analyse
from hugelab.report.runload import load_run
from hugelab.stats.components import K_MAX, from_boots
from hugelab.store import Store, Trial
from tests.helpers import cli

BOOT_S, TRIAL_S = 7.0, 1.0  # a guest's start-up and shutdown; one repetition


def guest_pilot(path: Path, blocks: int = 20, *, k: int = 3, sd_b: float = 0.02,
                sd_w: float = 0.04, seed: int = 5, reps: bool = True,
                plain_baseline: bool = False) -> int:
    """Arms 4k and thp (thp 3% faster) in guests: per boot a boot effect and k repetitions."""
    rng = np.random.default_rng(seed)
    arms = {"4k": 1.0, "thp": 0.97}
    exp = {"name": "guests", "baseline": "4k", "blocks": blocks,
           "arms": [{"name": a, "vm": {"trials_per_boot": k}} for a in arms]}
    with Store(path) as st:
        run_id, _ = st.get_or_create_run(f"g-{seed}-{k}-{reps}", "guests", exp, {})
        clock = 1000.0
        for b in range(blocks):
            for pos, arm in enumerate(rng.permutation(list(arms))):
                arm = str(arm)
                target = "vm0"
                boot = rng.normal(0, sd_b)
                vals = [100 * arms[arm] * math.exp(boot + rng.normal(0, sd_w)) for _ in range(k)]
                walls = [TRIAL_S * (1 + 0.05 * rng.random()) for _ in range(k)]
                value = math.exp(np.mean(np.log(vals)))
                prov = {"accel": "tcg", "kernel": "6.1.0", "trials_per_boot": k,
                        "boot_s": BOOT_S - 1, "workload_s": round(sum(walls), 3)}
                if reps and k > 1 and not (plain_baseline and arm == "4k"):
                    prov["reps"] = {"n": k, "values": vals,
                                    "wall_s": [round(w, 4) for w in walls]}
                else:
                    value = vals[0]
                ended = clock + BOOT_S + sum(walls)
                st.add_trial(Trial(run_id, b, pos, arm, "ok", value, "ns_per_load", "ns",
                                   "lower", provenance=prov, started=clock, ended=ended,
                                   target=target))
                clock = ended
    return run_id


def test_store_reads_the_repetitions_back(tmp_path):
    db = tmp_path / "g.db"
    run_id = guest_pilot(db, blocks=4)
    with Store(db) as st:
        rows = st.rep_rows(run_id)
    assert len(rows) == 8
    arm, target, block, vals, walls, boot_s, work_s, started, ended = rows[0]
    assert target == "vm0" and block == 0 and len(vals) == len(walls) == 3
    assert ended - started - work_s == pytest.approx(BOOT_S, abs=0.01)


def test_plan_recommends_k_and_boots_from_a_pilot_with_repetitions(tmp_path, capsys):
    db = tmp_path / "g.db"
    guest_pilot(db)
    rc, out, err = cli(["plan", "--store", str(db), "--json"], capsys)
    assert rc == 0, err
    p = json.loads(out)["arms"][0]
    r = p["reps"]
    assert p["arm"] == "thp" and r["k_pilot"] == 3
    assert set(r["arms"]) == {"thp", "4k"}
    for c in r["arms"].values():
        assert c["boots"] == 20 and c["trials"] == 60
        assert 0 <= c["share_between"] <= 1 and c["share_within"] > 0.5  # within dominates
    assert r["cost_boot_s"] == pytest.approx(BOOT_S, abs=0.01)
    assert r["cost_trial_s"] == pytest.approx(TRIAL_S, rel=0.05)
    # the pooled components and measured costs give the closed-form k
    both = r["pooled"]
    expect = math.sqrt(r["cost_boot_s"] / r["cost_trial_s"] * both["var_within"]
                       / both["var_between"])
    assert both["var_between"] > 0
    assert r["recommended_k"] in (max(1, math.floor(expect)), min(K_MAX, math.ceil(expect)))
    assert r["recommended_k"] > 3
    # more trials per boot shrink the paired SD, so fewer boots are needed than at k = 3
    assert r["unit_sd_at_k"] < p["unit_sd"]
    assert r["boots_needed"] <= p["blocks_needed"]
    assert r["guest_s_at_k"] < r["guest_s_at_pilot_k"]


def test_plan_text_says_where_the_variance_is(tmp_path, capsys):
    db = tmp_path / "g.db"
    guest_pilot(db)
    rc, out, err = cli(["plan", "--store", str(db)], capsys)
    assert rc == 0, err
    assert "repetitions within boots (pilot k = 3)" in out
    assert "recommended trials_per_boot = " in out and "boots per arm at k = " in out


def test_plan_without_repetitions_says_nothing_new(tmp_path, capsys):
    db = tmp_path / "g.db"
    guest_pilot(db, k=1)
    rc, out, err = cli(["plan", "--store", str(db), "--json"], capsys)
    assert rc == 0, err
    assert "reps" not in json.loads(out)["arms"][0]
    rc, out, _ = cli(["plan", "--store", str(db)], capsys)
    assert "repetitions within" not in out and "trials_per_boot" not in out


def test_plan_with_a_baseline_without_repetitions_uses_the_other_arm(tmp_path, capsys):
    db = tmp_path / "g.db"
    guest_pilot(db, plain_baseline=True)
    rc, out, err = cli(["plan", "--store", str(db), "--json"], capsys)
    assert rc == 0, err
    p = json.loads(out)["arms"][0]
    # the baseline's boots ran one trial each: thp's components stand for both arms
    assert set(p["reps"]["arms"]) == {"thp"}
    assert p["reps"]["boots_needed"] >= 15  # never below the signed-rank floor at 99.99%


def report_of(db: Path) -> Report:
    with Store(db) as st:
        data = load_run(st)
    return analyse(data)


def test_report_shows_repetitions_within_boots(tmp_path):
    db = tmp_path / "g.db"
    guest_pilot(db)
    rep = report_of(db)
    r = rep.json()
    reps = {x["name"]: x for x in r["repetitions"]}
    assert set(reps) == {"4k", "thp"}
    thp = reps["thp"]
    with Store(db) as st:
        boots = [v for a, _t, _b, v, *_ in st.rep_rows(1) if a == "thp"]
    assert thp["var_within"] == pytest.approx(from_boots(boots).var_within)
    assert thp["boots"] == 20 and thp["k_run"] == 3 and thp["recommended"]["k"] > 3
    json.dumps(r, allow_nan=False)
    t = next(t for t in runtables.all_tables(rep.result, full=False) if t.key == "repetitions")
    assert t.headers == ["arm", "boots", "k", "between boots", "within boots", "recommended k"]
    assert [row[0] for row in t.rows] == ["4k", "thp"]
    assert any(n.startswith("spend repetitions where the variance is") for n in t.notes)
    md = markdown.render(rep.result)
    assert "Repetitions within boots" in md and "spend repetitions" in md
    assert 'id="repetitions"' in html.render(rep.result)
    from rich.console import Console
    con = Console(record=True, width=120)
    text.render(rep.result, con)
    assert "Repetitions within boots" in con.export_text()


def test_report_without_repetitions_has_no_such_table(tmp_path):
    db = tmp_path / "g.db"
    guest_pilot(db, reps=False)
    rep = report_of(db)
    r = rep.json()
    assert r["repetitions"] is None
    assert all(t.key != "repetitions" for t in runtables.all_tables(rep.result))
    assert "Repetitions within boots" not in markdown.render(rep.result)


def test_report_with_one_boot_of_repetitions_says_why_no_components(tmp_path):
    db = tmp_path / "g.db"
    guest_pilot(db, blocks=1)
    rep = report_of(db)
    r = rep.json()
    assert all("error" in x for x in r["repetitions"])
    t = next(t for t in runtables.all_tables(rep.result) if t.key == "repetitions")
    assert any("at least 2 boots" in n for n in t.notes)
