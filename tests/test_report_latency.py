"""Tail latency as a verdict (report/latency.py): percentile names, the family's Holm
correction checked by simulation (A/A false positives over every percentile of two
comparisons at most alpha; a real p99 shift found), and the report of a stored run with
per-trial percentiles (a `tail_latency` JSON key, absent for runs without latencies)."""

from __future__ import annotations

import numpy as np
import pytest

from hugelab.report.analysis import analyse
from hugelab.report.latency import family
from hugelab.report.runload import load_run, percentile_of
from hugelab.store import Store, Trial

PCTS = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99_9_ms")


def test_percentile_names():
    assert [percentile_of(m) for m in PCTS] == [50.0, 90.0, 95.0, 99.0, 99.9]
    assert percentile_of("get_p99_ms") == 99.0 and percentile_of("tps") is None
    assert percentile_of("latency_avg_ms") is None and percentile_of("p99_s") is None


def _trial_percentiles(rng, n_blocks, shift=None):
    """Per block and arm a trial's percentiles: a block effect both arms share (drift),
    trial noise growing toward the tail, heavy-tailed (t with 3 df) at the top."""
    out = {}
    for arm in ("a", "b", "c"):
        rows = []
        for blk in range(n_blocks):
            level = 0.1 * np.exp(rng.normal(0, 0.05) + 0.02 * blk)
            vals = {}
            for k, m in enumerate(PCTS):
                noise = rng.normal(0, 0.03) if k < 3 else 0.08 * rng.standard_t(3)
                vals[m] = level * np.exp(0.8 * k + noise)
            rows.append(vals)
        out[arm] = rows
    if shift:
        for row in out["c"]:
            row["p99_ms"] *= shift
    return out


def _run_family(rng, n_blocks=12, shift=None):
    t = _trial_percentiles(rng, n_blocks, shift)
    pairs = [(f"{cand} vs a", m, np.array([r[m] for r in t["a"]]),
              np.array([r[m] for r in t[cand]])) for cand in ("b", "c") for m in PCTS]
    return family(pairs, alpha=0.05, margin=0.01)


@pytest.mark.slow
def test_aa_family_wise_false_positives_at_most_alpha_by_simulation():
    rng = np.random.default_rng(21)
    sims = 400
    any_claim = raw_any = 0
    for _ in range(sims):
        entries = _run_family(rng)
        assert len(entries) == 10
        any_claim += any(e.verdict in ("faster", "slower") for e in entries)
        raw_any += any(e.p_value is not None and e.p_value < 0.05 for e in entries)
    rate = any_claim / sims
    se = np.sqrt(0.05 * 0.95 / sims)
    assert rate <= 0.05 + 2.5 * se, rate
    assert raw_any / sims > rate  # unadjusted, ten looks would claim more often


@pytest.mark.slow
def test_a_real_p99_shift_is_found_and_only_there():
    rng = np.random.default_rng(5)
    found = other = 0
    for _ in range(60):
        entries = _run_family(rng, n_blocks=16, shift=1.5)
        by = {(e.comparison, e.metric): e for e in entries}
        found += by[("c vs a", "p99_ms")].verdict == "slower"
        other += sum(e.verdict in ("faster", "slower") for k, e in by.items()
                     if k != ("c vs a", "p99_ms"))
    assert found >= 50 and other <= 3


def _store(path, with_latency=True):
    rng = np.random.default_rng(2)
    st = Store(path)
    exp = {"name": "pg", "baseline": "off", "blocks": 8,
           "arms": [{"name": "off", "backing": "4k"}, {"name": "on", "backing": "hugetlb-2M"}]}
    run_id, _ = st.get_or_create_run("k", "pg", exp, {})
    for b in range(8):
        for pos, arm in enumerate(("off", "on")):
            p99 = 2.0 * (0.7 if arm == "on" else 1.0) * np.exp(rng.normal(0, 0.02))
            metrics = {"tps": 1000.0 * np.exp(rng.normal(0, 0.01))}
            if with_latency:
                metrics |= {"p50_ms": 0.1 * np.exp(rng.normal(0, 0.02)), "p99_ms": p99}
            st.add_trial(Trial(run_id, b, pos, arm, "ok", metrics["tps"], "tps",
                               "transactions/s", "higher", metrics=metrics,
                               evidence={}, monitors={}, provenance={"target": "native"},
                               target="native"))
    st.close()
    return path


def test_the_report_carries_per_percentile_verdicts(tmp_path):
    st = Store(_store(tmp_path / "s.db"))
    result = analyse(load_run(st)).json()
    tl = result["tail_latency"]
    assert tl["holm_family"] == 2 and tl["better"] == "lower"
    by = {e["metric"]: e for e in tl["entries"]}
    assert by["p99_ms"]["verdict"] == "faster" and by["p99_ms"]["effect_pct"] == \
        pytest.approx(-30, abs=3)
    assert by["p50_ms"]["verdict"] in ("equivalent", "inconclusive")
    assert all(e["comparison"] == "on vs off" and e["pairs"] == 8 for e in tl["entries"])
    st.close()
    plain = Store(_store(tmp_path / "t.db", with_latency=False))
    assert analyse(load_run(plain)).json()["tail_latency"] is None
    plain.close()
