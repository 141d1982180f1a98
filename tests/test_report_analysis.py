"""Report analysis on stores built here with known injected effects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hugelab.errors import UsageError
from hugelab.report.analysis import Options, Report, analyse
from hugelab.report.runload import from_rows, load_run
from hugelab.stats import signedrank
from hugelab.stats.tails import BOOT_MAX_VALUES
from hugelab.store import Store, Trial
from tests.helpers import make_store

PAGE_KB = {"4k": 4, "thp": 4}


def report_for(path: Path, **opts: Any) -> dict[str, Any]:
    with Store(path) as st:
        data = load_run(st)
    return analyse(data, Options(**opts)).json()


def comp(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in result["comparisons"] if c["name"] == name)


def test_five_percent_faster_arm_is_faster_and_identical_arm_is_not(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, arms={"4k": 1.0, "thp": 0.95, "4k-again": 1.0})
    r = report_for(db)
    thp = comp(r, "thp vs 4k")
    assert thp["verdict"] == "faster"
    assert -6.0 < thp["effect_pct"] < -4.0
    assert thp["drift"]["checked"] and not thp["drift"]["drifting"]
    assert thp["ci_low_pct"] < thp["effect_pct"] < thp["ci_high_pct"]
    same = comp(r, "4k-again vs 4k")
    assert same["verdict"] not in ("faster", "slower")
    assert abs(same["effect_pct"]) < 1.0
    assert r["options"]["holm_family"] == 2
    for c in r["comparisons"]:
        assert c["p_adjusted"] >= c["p_value"]
    json.dumps(r, allow_nan=False)


def test_higher_is_better_reads_the_other_way(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, arms={"4k": 1.0, "thp": 1.05})
    with Store(db) as st:
        st.db.execute("UPDATE trials SET better = 'higher'")
        st.db.commit()
    assert comp(report_for(db), "thp vs 4k")["verdict"] == "faster"


def test_flagged_trials_are_excluded_and_their_reasons_listed(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, flagged={"thp": {1, 4, 7, 9}})
    r = report_for(db)
    thp = next(s for s in r["series"] if s["name"] == "thp")
    assert thp["counts"] == {"ok": 26, "flagged": 4, "failed": 0}
    assert thp["classic"]["n"] == 26
    assert thp["classic"]["max"] < 200  # the 1000x flagged values never count
    assert thp["flag_reasons"] == [{"reason": "asked for thp, but only 2% of the mapping is "
                                    "in huge pages", "count": 4}]
    c = comp(r, "thp vs 4k")
    assert c["n"] == 26 and c["blocks_dropped"] == 4
    assert c["verdict"] == "faster"


def test_blocks_missing_an_arm_are_dropped_and_counted(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, missing={"thp": {0, 5}}, failed={"4k": {2}})
    r = report_for(db)
    c = comp(r, "thp vs 4k")
    assert c["n"] == 27
    assert c["blocks_dropped"] == 3
    assert any("3 block(s) dropped" in n for n in c["notes"])
    k = next(s for s in r["series"] if s["name"] == "4k")
    assert k["counts"]["failed"] == 1
    assert k["error_reasons"][0]["reason"] == "workload exited 1"


def test_too_few_blocks_is_inconclusive_not_an_error(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, blocks=4)
    r = report_for(db)
    c = comp(r, "thp vs 4k")
    assert c["verdict"] == "inconclusive"
    assert "needed for any verdict" in c["notes"][0]
    assert any("too few pairs" in w for w in r["warnings"])  # said once, as a warning
    assert c["tails"] is None
    assert any("too few pairs" in w for w in r["warnings"])
    assert c["drift"]["checked"] is False
    assert c["drift"]["reading"].startswith("not enough pairs to check drift")


def test_pairs_option_and_unknown_names(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, arms={"4k": 1.0, "thp": 0.95, "other": 0.97})
    r = report_for(db, pairs=(("thp", "other"),))
    assert [c["name"] for c in r["comparisons"]] == ["other vs thp"]
    assert r["comparisons"][0]["verdict"] == "slower"
    with pytest.raises(UsageError, match="nope"):
        report_for(db, pairs=(("4k", "nope"),))


def test_monitor_and_evidence_summary(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, thp_share=0.97)
    r = report_for(db)
    thp = next(s for s in r["series"] if s["name"] == "thp")
    assert thp["monitors"]["reading"].startswith("host-wide: 97% of THP faults served by huge pages")
    assert thp["evidence"]["anon_huge_share_median"] == pytest.approx(0.98)
    assert "page size 4 KiB" in thp["evidence"]["reading"]


def test_trials_under_high_machine_load_are_counted_and_warned_about(tmp_path):
    db = tmp_path / "s.db"
    make_store(db, blocks=20, steal={3: 0.30, 4: 0.12})
    r = report_for(db)
    load = next(s for s in r["series"] if s["name"] == "thp")["monitors"]["load"]
    assert (load["trials"], load["high"], load["high_kinds"]) == (20, 2, {"CPU steal": 2})
    assert load["max"]["steal_share"] == 0.30 and load["median"]["steal_share"] == 0.0
    assert "2 of 20 trials under high machine load (CPU steal in 2)" in \
        next(s for s in r["series"] if s["name"] == "thp")["monitors"]["reading"]
    assert any("4k: 2 of 20 trials under high machine load" in w for w in r["warnings"])
    quiet = tmp_path / "q.db"
    make_store(quiet, blocks=20, steal={})
    r = report_for(quiet)
    assert r["series"][0]["monitors"]["load"]["reading"] == "machine load low in all 20 trials"
    assert not any("machine load" in w for w in r["warnings"])
    make_store(tmp_path / "n.db", blocks=20)  # runs from before load was recorded
    assert report_for(tmp_path / "n.db")["series"][0]["monitors"]["load"] is None


def test_tcg_guest_trials_give_a_loud_warning_and_a_grid(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as st:
        make_store(db, store=st, name="g", seed=1)
        run_id = st.runs()[-1]["id"]
        rng = np.random.default_rng(2)
        for b in range(30):
            for pos, (arm, f) in enumerate((("4k", 1.25), ("thp", 1.1))):
                st.add_trial(Trial(run_id, b, pos + 2, arm, "ok",
                                   100 * f * float(np.exp(rng.normal(0, 0.01))),
                                   better="lower", provenance={"accel": "tcg"}, target="vm0"))
    r = report_for(db)
    assert r["warnings"][0].startswith("TCG")
    assert "do NOT represent hardware virtualization" in r["warnings"][0]
    names = [c["name"] for c in r["comparisons"]]
    assert names == ["thp@native vs 4k@native", "thp@vm0 vs 4k@vm0"]
    g = r["grid"]
    assert g["medians"]["guests"] == ["native", "vm0"]
    pct = dict(zip(g["percent_of_native"]["hosts"], g["percent_of_native"]["values"],
                   strict=True))
    assert pct["4k"][0] == pytest.approx(100.0)
    assert 75 < pct["4k"][1] < 85  # guest 25% slower: 80% of native


def test_large_runs_use_every_pair_and_stay_correct():
    rng = np.random.default_rng(5)
    n = BOOT_MAX_VALUES + 5000  # above the bootstrap limit for tails
    base = 100 * np.exp(rng.normal(0, 0.02, n))
    cand = base * 0.99 * np.exp(rng.normal(0, 0.01, n))
    rows: list[tuple[int, int, str, str, str, float | None]] = []
    for b in range(n):
        rows.append((b, 0, "4k", "native", "ok", float(base[b])))
        rows.append((b, 1, "thp", "native", "ok", float(cand[b])))
    run = {"id": 1, "name": "big", "experiment": {"baseline": "4k",
                                                  "arms": [{"name": "4k"}, {"name": "thp"}]}}
    data = from_rows(run, rows)
    for d in data.details:
        d.better = "lower"
    r = analyse(data).json()
    c = r["comparisons"][0]
    assert c["unit"] == "pair" and c["n_units"] == n and c["n"] == n
    assert c["verdict"] == "faster"
    assert -1.1 < c["effect_pct"] < -0.9
    # exact: the same as the signed-rank core on the same log-ratios
    hl, ((lo, hi),), _ = signedrank.hl_and_intervals((np.log(cand) - np.log(base))[None, :], (0.05,))
    assert c["hl_log"] == hl[0]
    assert c["ci_low_pct"] == pytest.approx(100 * np.expm1(lo[0]), rel=1e-12)
    assert c["ci_high_pct"] == pytest.approx(100 * np.expm1(hi[0]), rel=1e-12)
    assert c["tails"]["pairs_used"] == n and c["tails"]["n_boot"] is None
    assert any("order-statistic" in note for note in c["tails"]["notes"])
    assert not any("grouped" in note for note in c["notes"])
    assert c["drift"]["n"] == n and c["drift"]["checked"] and not c["drift"]["drifting"]


def _run_with_effect(effects: np.ndarray, seed: int = 8) -> Report:
    """One native 4k/thp pair per block; `effects` is the thp factor in each block (in order).
    The machine also slows down by 20% over the run for both arms (cancels in the pairs)."""
    rng = np.random.default_rng(seed)
    n = effects.size
    common = 100 * np.exp(np.linspace(0, 0.2, n) + rng.normal(0, 0.02, n))
    base = common * np.exp(rng.normal(0, 0.01, n))
    cand = common * effects * np.exp(rng.normal(0, 0.01, n))
    rows: list[tuple[int, int, str, str, str, float | None]] = []
    for b in range(n):
        rows.append((b, 0, "4k", "native", "ok", float(base[b])))
        rows.append((b, 1, "thp", "native", "ok", float(cand[b])))
    run = {"id": 1, "name": "drift", "experiment": {"baseline": "4k",
                                                    "arms": [{"name": "4k"}, {"name": "thp"}]}}
    data = from_rows(run, rows)
    for d in data.details:
        d.better = "lower"
    return analyse(data)


def test_a_fading_effect_is_flagged_and_a_steady_one_is_not():
    from hugelab.report import markdown, runtables

    fading_report = _run_with_effect(np.r_[np.full(40, 0.92), np.full(20, 0.95),
                                           np.full(40, 0.98)])
    fading = fading_report.json()
    c = fading["comparisons"][0]
    assert c["verdict"] == "faster"  # the verdict stands; the warning qualifies it
    dr = c["drift"]
    assert dr["checked"] and dr["drifting"] and dr["n"] == 100
    assert dr["first_pct"] == pytest.approx(-8.0, abs=1.0)
    assert dr["last_pct"] == pytest.approx(-2.0, abs=1.0)
    assert any(w.startswith("thp vs 4k: the effect changed during the run") and
               "rerun, or report the segments" in w for w in fading["warnings"])
    t = next(t for t in runtables.all_tables(fading_report.result) if t.key == "drift")
    assert t.headers[:3] == ["comparison", "first third", "last third"]
    assert t.rows[0][0] == "thp vs 4k" and t.rows[0][-1] == "CHANGED"
    assert "Drift of the effect over the run" in markdown.render(fading_report.result)
    json.dumps(fading, allow_nan=False)

    steady_report = _run_with_effect(np.full(100, 0.95))  # same slowdown, constant effect
    steady = steady_report.json()
    s = steady["comparisons"][0]["drift"]
    assert s["checked"] and not s["drifting"]
    assert not any("changed during the run" in w for w in steady["warnings"])
    t = next(t for t in runtables.all_tables(steady_report.result) if t.key == "drift")
    assert t.rows[0][-1] == "none detected"
