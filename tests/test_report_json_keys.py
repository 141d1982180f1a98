"""The JSON report keeps its key paths: every path listed here (as of the answer-first
report, issue 22) is still present in the report of a flat run, of a factorial or of a
request-level run, so a reader's script does not break. Add to the list when the report gains
a key; never remove one. Maps keyed by data (arm names, kernels, vmstat counters) are checked
as one key."""

from __future__ import annotations

from typing import Any

import pytest

from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.report.summary import run_summary
from hugelab.store import Store
from tests import runstores
from tests.helpers import make_store, requests_run

OPAQUE = {"cell_levels", "accel_by_target", "hugelab_versions", "kernels", "kernel_page_size_kB",
          "vmstat_median", "checks", "layers", "workload", "skipped", "median_cpu_s"}
KEYS = [
    # answer (the lead every renderer prints first)
    "answer", "answer.what_matters", "answer.what_matters[].subject", "answer.what_matters[].text",
    "answer.what_matters[].verdict", "answer.recommendations", "answer.warnings",
    # block_variance
    "block_variance", "block_variance.design_effect", "block_variance.effective_n",
    "block_variance.f_p", "block_variance.f_stat", "block_variance.icc",
    "block_variance.kruskal_p", "block_variance.mean_block_size", "block_variance.n",
    "block_variance.n_blocks", "block_variance.note", "block_variance.pooling_warning",
    "block_variance.reading", "block_variance.reading_paired", "block_variance.var_between",
    "block_variance.var_within",
    # blocks
    "blocks",
    # comparisons
    "comparisons", "comparisons[].alpha", "comparisons[].baseline", "comparisons[].better",
    "comparisons[].blocks_dropped", "comparisons[].candidate", "comparisons[].ci_high_pct",
    "comparisons[].ci_low_pct", "comparisons[].ci_method", "comparisons[].design_effect",
    "comparisons[].drift", "comparisons[].drift.alpha", "comparisons[].drift.change_pct",
    "comparisons[].drift.checked", "comparisons[].drift.drifting",
    "comparisons[].drift.first_pct", "comparisons[].drift.last_pct",
    "comparisons[].drift.method", "comparisons[].drift.n", "comparisons[].drift.p_value",
    "comparisons[].drift.reading", "comparisons[].drift.rho", "comparisons[].drift.segment_pct",
    "comparisons[].drift.segment_sizes", "comparisons[].drift.segments",
    "comparisons[].drift.split_p", "comparisons[].drift.trend_p", "comparisons[].effect_pct",
    "comparisons[].hl_log", "comparisons[].margin", "comparisons[].mean_ratio",
    "comparisons[].median_ratio", "comparisons[].n", "comparisons[].n_dropped",
    "comparisons[].n_units", "comparisons[].name", "comparisons[].notes",
    "comparisons[].p_adjusted", "comparisons[].p_value", "comparisons[].pooling_warning",
    "comparisons[].ratio_of_means", "comparisons[].regimes", "comparisons[].regimes.alpha",
    "comparisons[].regimes.high", "comparisons[].regimes.high.blocks",
    "comparisons[].regimes.high.effect", "comparisons[].regimes.high.effect_pct",
    "comparisons[].regimes.high.share", "comparisons[].regimes.low",
    "comparisons[].regimes.low.blocks", "comparisons[].regimes.low.effect",
    "comparisons[].regimes.low.effect_pct", "comparisons[].regimes.low.share",
    "comparisons[].regimes.n", "comparisons[].regimes.p_value", "comparisons[].regimes.r2",
    "comparisons[].regimes.reading", "comparisons[].regimes.separation",
    "comparisons[].regimes.split", "comparisons[].regimes.switches", "comparisons[].tails",
    "comparisons[].tails.confidence", "comparisons[].tails.n_boot", "comparisons[].tails.notes",
    "comparisons[].tails.outliers", "comparisons[].tails.outliers.baseline_bad_side_rate",
    "comparisons[].tails.outliers.baseline_rate",
    "comparisons[].tails.outliers.candidate_bad_side_rate",
    "comparisons[].tails.outliers.candidate_rate", "comparisons[].tails.outliers.difference",
    "comparisons[].tails.outliers.high", "comparisons[].tails.outliers.low",
    "comparisons[].tails.paired", "comparisons[].tails.pairs_used",
    "comparisons[].tails.quantiles", "comparisons[].tails.quantiles[].baseline",
    "comparisons[].tails.quantiles[].candidate", "comparisons[].tails.quantiles[].high",
    "comparisons[].tails.quantiles[].low", "comparisons[].tails.quantiles[].q",
    "comparisons[].tails.quantiles[].ratio", "comparisons[].tost_high_pct",
    "comparisons[].tost_low_pct", "comparisons[].tost_p", "comparisons[].tost_p_adjusted",
    "comparisons[].trimmed_mean_ratio", "comparisons[].unit", "comparisons[].verdict",
    "comparisons[].within_margin",
    # factorial
    "factorial", "factorial.along", "factorial.cell_levels", "factorial.cells",
    "factorial.factors", "factorial.factors[].levels", "factorial.factors[].name",
    "factorial.factors[].ordered", "factorial.factors[].scenario", "factorial.interactions",
    "factorial.interactions[].alpha", "factorial.interactions[].base_level",
    "factorial.interactions[].better", "factorial.interactions[].blocks_used",
    "factorial.interactions[].by", "factorial.interactions[].by_base",
    "factorial.interactions[].by_level", "factorial.interactions[].by_scenario",
    "factorial.interactions[].ci_high_pct", "factorial.interactions[].ci_low_pct",
    "factorial.interactions[].ci_method", "factorial.interactions[].design_effect",
    "factorial.interactions[].effect_pct", "factorial.interactions[].factor",
    "factorial.interactions[].hl_log", "factorial.interactions[].interaction_verdict",
    "factorial.interactions[].kind", "factorial.interactions[].level",
    "factorial.interactions[].margin", "factorial.interactions[].mean_ratio",
    "factorial.interactions[].median_ratio", "factorial.interactions[].n",
    "factorial.interactions[].n_dropped", "factorial.interactions[].n_units",
    "factorial.interactions[].name", "factorial.interactions[].notes",
    "factorial.interactions[].p_adjusted", "factorial.interactions[].p_value",
    "factorial.interactions[].pooling_warning", "factorial.interactions[].ratio_of_means",
    "factorial.interactions[].scope", "factorial.interactions[].tost_high_pct",
    "factorial.interactions[].tost_low_pct", "factorial.interactions[].tost_p",
    "factorial.interactions[].tost_p_adjusted", "factorial.interactions[].trimmed_mean_ratio",
    "factorial.interactions[].unit", "factorial.interactions[].verdict",
    "factorial.interactions[].within_margin", "factorial.main_effects",
    "factorial.main_effects[].alpha", "factorial.main_effects[].base_level",
    "factorial.main_effects[].better", "factorial.main_effects[].blocks_used",
    "factorial.main_effects[].ci_high_pct", "factorial.main_effects[].ci_low_pct",
    "factorial.main_effects[].ci_method", "factorial.main_effects[].design_effect",
    "factorial.main_effects[].effect_pct", "factorial.main_effects[].factor",
    "factorial.main_effects[].hl_log", "factorial.main_effects[].kind",
    "factorial.main_effects[].level", "factorial.main_effects[].margin",
    "factorial.main_effects[].mean_ratio", "factorial.main_effects[].median_ratio",
    "factorial.main_effects[].n", "factorial.main_effects[].n_dropped",
    "factorial.main_effects[].n_units", "factorial.main_effects[].name",
    "factorial.main_effects[].notes", "factorial.main_effects[].p_adjusted",
    "factorial.main_effects[].p_value", "factorial.main_effects[].pooling_warning",
    "factorial.main_effects[].ratio_of_means", "factorial.main_effects[].scope",
    "factorial.main_effects[].tost_high_pct", "factorial.main_effects[].tost_low_pct",
    "factorial.main_effects[].tost_p", "factorial.main_effects[].tost_p_adjusted",
    "factorial.main_effects[].trimmed_mean_ratio", "factorial.main_effects[].unit",
    "factorial.main_effects[].verdict", "factorial.main_effects[].within_margin",
    "factorial.not_estimable", "factorial.summary", "factorial.two_way",
    # grid
    "grid",
    # options
    "options", "options.alpha", "options.confidence", "options.holm_family", "options.margin",
    # provenance
    "provenance", "provenance.accel_by_target", "provenance.hugelab_versions",
    "provenance.kernels",
    # repetitions
    "repetitions",
    # replication
    "replication",
    # run
    "run", "run.baseline", "run.blocks_planned", "run.created", "run.description", "run.design",
    "run.finished", "run.hardware_counters", "run.id", "run.key", "run.name", "run.repeats",
    "run.seed", "run.sequential", "run.skipped", "run.status", "run.workload",
    # series
    "series", "series[].arm", "series[].better", "series[].classic",
    "series[].classic.beyond_3sigma_high", "series[].classic.beyond_3sigma_low",
    "series[].classic.beyond_6sigma_high", "series[].classic.beyond_6sigma_low",
    "series[].classic.confidence", "series[].classic.expected_beyond_3sigma",
    "series[].classic.margin_of_error", "series[].classic.max", "series[].classic.max_sigma",
    "series[].classic.mean", "series[].classic.min", "series[].classic.n",
    "series[].classic.normality", "series[].classic.normality.p_value",
    "series[].classic.normality.reading", "series[].classic.normality.statistic",
    "series[].classic.normality.test", "series[].classic.stddev", "series[].counts",
    "series[].counts.failed", "series[].counts.flagged", "series[].counts.ok",
    "series[].details_sampled", "series[].error_reasons", "series[].evidence",
    "series[].evidence.anon_huge_share_median", "series[].evidence.checks",
    "series[].evidence.kernel_page_size_kB", "series[].evidence.layers",
    "series[].evidence.reading", "series[].evidence.trials", "series[].flag_reasons",
    "series[].median", "series[].metric", "series[].monitors", "series[].monitors.load",
    "series[].monitors.reading", "series[].monitors.thp_fault_share",
    "series[].monitors.trials", "series[].monitors.vmstat_median", "series[].name",
    "series[].non_positive", "series[].retried", "series[].retry_reasons", "series[].target",
    "series[].unit",
    # server_cpu (request-level runs)
    "server_cpu", "server_cpu.better", "server_cpu.entries", "server_cpu.entries[].alpha",
    "server_cpu.entries[].baseline_us_per_op", "server_cpu.entries[].better",
    "server_cpu.entries[].candidate_us_per_op", "server_cpu.entries[].ci_high_pct",
    "server_cpu.entries[].ci_low_pct", "server_cpu.entries[].ci_method",
    "server_cpu.entries[].client_cpu_share", "server_cpu.entries[].comparison",
    "server_cpu.entries[].design_effect", "server_cpu.entries[].effect_pct",
    "server_cpu.entries[].hl_log", "server_cpu.entries[].margin",
    "server_cpu.entries[].mean_ratio", "server_cpu.entries[].median_ratio",
    "server_cpu.entries[].n", "server_cpu.entries[].n_dropped", "server_cpu.entries[].n_units",
    "server_cpu.entries[].notes", "server_cpu.entries[].p_adjusted",
    "server_cpu.entries[].p_value", "server_cpu.entries[].pairs",
    "server_cpu.entries[].pooling_warning", "server_cpu.entries[].ratio_of_means",
    "server_cpu.entries[].round_trip_ci_high_pct", "server_cpu.entries[].round_trip_ci_low_pct",
    "server_cpu.entries[].round_trip_effect_pct", "server_cpu.entries[].round_trip_metric",
    "server_cpu.entries[].tost_high_pct", "server_cpu.entries[].tost_low_pct",
    "server_cpu.entries[].tost_p", "server_cpu.entries[].tost_p_adjusted",
    "server_cpu.entries[].trimmed_mean_ratio", "server_cpu.entries[].unit",
    "server_cpu.entries[].verdict", "server_cpu.entries[].within_margin",
    "server_cpu.holm_family", "server_cpu.method", "server_cpu.thp_daemons",
    "server_cpu.thp_daemons[].median_cpu_s", "server_cpu.thp_daemons[].series",
    "server_cpu.thp_daemons[].trials",
    # trials
    "trials",
    # warnings
    "warnings",
]
RUN_JSON_KEYS = ["skipped", "arms", "comparisons", "unit", "factorial", "problems", "retried",
                 "pool_warnings", "replication", "options", "warnings"]


def paths(obj: Any, pre: str = "") -> set[str]:
    """'a.b' for a key b under a, 'a[].b' under a list's items."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{pre}.{k}" if pre else k
            out.add(p)
            if k not in OPAQUE:
                out |= paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= paths(v, pre + "[]")
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    make_store(d / "flat.db", arms={"4k": 1.0, "thp": 0.95})
    exp = runstores.experiment("001-mnstory-factorial.toml")
    runstores.fabricate(d / "f.db", exp, blocks=12)
    requests_run(d / "req.db")
    return d, exp


def test_every_key_path_of_the_report_is_still_there(stores):
    d, _ = stores
    found: set[str] = set()
    for db in ("flat.db", "f.db", "req.db"):
        with Store(d / db) as st:
            found |= paths(analyse(load_run(st), Options()).json())
    missing = sorted(set(KEYS) - found)
    assert not missing, f"the JSON report lost keys: {missing}"


def test_the_run_summary_json_keeps_its_keys(stores):
    d, exp = stores
    with Store(d / "f.db") as st:
        res = run_summary(st, exp, 1, {}).to_json()
    assert set(RUN_JSON_KEYS) <= set(res), sorted(set(RUN_JSON_KEYS) - set(res))
