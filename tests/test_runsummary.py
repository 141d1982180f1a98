"""The summary `hugelab run` prints (cli/runsummary.py): answer first, in the report's words,
saying which analysis each verdict comes from; compact rows named by the levels that differ;
at 80, 120 and 200 columns no line too wide and no word split, for the examples' real cell
names (001 and 002 need guests: their runs are fabricated from the real experiment files)."""

from __future__ import annotations

import re

import pytest

from hugelab.report.model.replicas import Replication
from tests import runstores
from tests.helpers import cell_words, check_layout, printed, result_of

EXAMPLES = ["001-mnstory-factorial.toml", "002-host-x-guest-2x2.toml", "mthp-sizes.toml", None]


@pytest.fixture(scope="module", params=EXAMPLES, ids=lambda e: e or "default")
def fabricated(request, tmp_path_factory):
    exp = runstores.experiment(request.param)
    db = tmp_path_factory.mktemp("rs") / "s.db"
    runstores.fabricate(db, exp, blocks=12)
    return exp, result_of(db, exp)


@pytest.mark.parametrize("width", [80, 120, 200])
def test_no_line_too_wide_and_no_word_split(fabricated, width):
    exp, res = fabricated
    out = printed(exp, res, width)
    check_layout(out, width, cell_words(exp))
    # every cell is on the page, by the levels that differ from its baseline cell
    arms = {a.name: dict(a.levels) for a in exp.arms}
    arm_factors = {f.name for f in exp.factors if not f.scenario}
    for a in exp.arms:
        base = arms[exp.baseline_of(a.name)]
        diff = [f"{f}={lv}" for f, lv in a.levels if f in arm_factors and lv != base[f]]
        if len(arm_factors) > 1:
            assert ", ".join(diff) in out, (a.name, diff)


def test_answer_first_then_cells_then_the_effect_note(fabricated):
    exp, res = fabricated
    out = printed(exp, res, 120)
    assert out.index("What matters") < out.index("each ") < out.index("effect: Hodges-Lehmann")
    assert "(the report's analysis: alpha 0.05, margin ±1%" in out
    assert "[-100" not in out and ", -]" not in out
    for a in exp.arms if not exp.factors else []:  # a flat run's arms by their own names
        assert re.search(rf"^ {re.escape(a.name)} +12 ", out, re.M), out


def test_factorial_cells_by_the_levels_that_differ_one_heading_per_scenario(tmp_path):
    exp = runstores.experiment("mthp-sizes.toml")
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    out = printed(exp, result_of(tmp_path / "s.db", exp), 80)
    assert "workload=chase: each cell against its baseline" in out
    assert "workload=populate: each cell against its baseline" in out
    assert "backing=mthp-16K [workload=chase]" not in out  # the short name instead
    assert re.search(r"^ mthp-16K +8 +0/0 ", out, re.M), out


def test_sequential_decisions_say_they_are_the_runs_own_analysis(tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    seq = {"plan": {"looks": 5, "look_sizes": [6, 12, 18, 24, 30], "margin": 0.01},
           "family_alpha": 0.0001, "decided": {"thp": {"decision": "equivalent", "look": 3}},
           "stopped_at_look": 3}
    out = printed(exp, result_of(tmp_path / "s.db", exp, sequential=seq), 120)
    one = " ".join(out.split())
    assert "stopped at look 3 of 5" in one
    assert "the sequential decisions below use the run's alpha 0.0001 and margin ±1%, not the " \
        "report's defaults" in one
    assert "thp: equivalent at look 3" in one
    assert "(the report's analysis: alpha 0.05, margin ±1%" in one


def test_a_margin_out_of_reach_is_said_with_the_look_and_the_margin_the_budget_can_reach(
        tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    said = "cannot reach ±1% in 30 blocks (P 0.01); it can reach ±2.1% (P 0.8)"
    seq = {"plan": {"looks": 5, "look_sizes": [17, 20, 23, 26, 30], "margin": 0.01},
           "family_alpha": 0.01, "decided": {"thp": {"decision": "inconclusive", "look": 2}},
           "unreachable": {"thp": {"look": 2, "blocks": 20, "statement": said,
                                   "reachable_margin_pct": 2.1}},
           "stopped_at_look": 2}
    one = " ".join(printed(exp, result_of(tmp_path / "s.db", exp, sequential=seq), 120).split())
    assert "thp: inconclusive at look 2" in one
    assert f"thp: at look 2 (20 blocks): {said}" in one
    reached = "its 30 blocks reach ±1.2%: effect +0.28%, per-block SD 1.83% after 30 blocks"
    seq.update(unreachable={}, decided={"thp": {"decision": "inconclusive", "look": 5,
                                                "reach": {"statement": reached}}})
    one = " ".join(printed(exp, result_of(tmp_path / "s.db", exp, sequential=seq), 120).split())
    assert f"thp: inconclusive at look 5 thp: {reached}" in one


def test_what_went_wrong_is_said_once(tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    res = result_of(tmp_path / "s.db", exp, skipped={"hugetlb-1G": "no 1 GiB page free"},
                    pool_warnings=["the 2M pool is shared with pid 7 (postgres)"])
    res.warnings = [*res.warnings, "the 2M pool is shared with pid 7 (postgres)"]
    out = printed(exp, res, 80)
    assert out.count("no 1 GiB page free") == 1 and "skipped hugetlb-1G:" in out
    assert out.count("pid 7 (postgres)") == 1  # in the lead's warnings, not again below
    res.warnings = res.warnings[:-1]
    assert "shared pool: the 2M pool is shared" in printed(exp, res, 80)


def test_a_run_of_repeats_says_each_comparison_across_them(tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    rep = [Replication("thp vs 4k", "4k", "thp", 3,
                       reading="-9.8% [-12.0, -7.5] across 3 repeats, tau 1.2%")]
    out = printed(exp, result_of(tmp_path / "s.db", exp, replication=rep), 120)
    assert out.count("across repeats: thp vs 4k: -9.8% [-12.0, -7.5] across 3 repeats") == 1


def test_warnings_about_arms_fold_as_in_the_report(tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    res = result_of(tmp_path / "s.db", exp)
    res.warnings = [f"{a}: 2 of 8 trials under high machine load (CPU steal in 2): "
                       "may be the machine's" for a in ("4k", "thp")]
    out = " ".join(printed(exp, res, 120).split())
    assert "2 arms: trials under high machine load: may be the machine's (4k: 2 of 8; thp: " \
        "2 of 8)" in out and out.count("under high machine load") == 1


def test_a_run_whose_only_other_arm_was_skipped_says_so_in_its_answer(tmp_path, capsys):
    """004 on a host with one free 1 GiB page: vm-1G skipped, vm-thp alone. The answer said
    nothing (an empty 'What matters', the run summary not even the TCG warning) and the
    verdicts 'a single arm or no baseline arm'; now the skip is a warning of the answer, said
    once, and the verdicts note names it."""
    from hugelab.store import Store, Trial
    from tests.helpers import cli
    exp = runstores.experiment("004-thp-vs-1g-vms.toml")
    why = "1G pool: requested 2 pages, achieved 1 after compaction for 10s"
    db = tmp_path / "s.db"
    with Store(db) as st:
        run_id, _ = st.get_or_create_run("k", exp.name, exp.to_dict(), {})
        st.add_trial(Trial(run_id, 0, 0, "vm-thp", "ok", 100.0, "ns_per_access", "ns", "lower",
                           target="guest", provenance={"accel": "tcg"}))
        st.set_run_status(run_id, "finished", skipped={"vm-1G": why})
    out = printed(exp, result_of(db, exp, skipped={"vm-1G": why}), 80)
    flat = " ".join(out.split())
    assert "TCG (software emulation)" in flat
    assert flat.count(why) == 1 and f"arm vm-1G was skipped, so it is in no comparison: {why}" \
        in flat, out
    rc, rep, err = cli(["report", "--store", str(db)], capsys)
    assert rc == 0, err
    flat = " ".join(rep.split())
    assert f"What matters WARNING: arm vm-1G was skipped, so it is in no comparison: {why}" \
        in flat, rep
    assert "no comparisons: arm(s) vm-1G skipped (the warnings say why)" in flat
    assert "single arm or no baseline arm" not in flat


def test_a_budgeted_run_says_its_block_time_and_where_the_budget_cut_it(tmp_path):
    exp = runstores.experiment(None)
    runstores.fabricate(tmp_path / "s.db", exp, blocks=8)
    reason = ("the next block would end past the budget of 300 s: the last look is this "
              "block's and spends the alpha left")
    seq = {"plan": {"looks": 4, "look_sizes": [19, 23, 27, 33], "margin": 0.01},
           "family_alpha": 0.01, "decided": {"thp": {"decision": "equivalent", "look": 4}},
           "stopped_at_look": 4,
           "budget": {"budget_s": 300.0, "elapsed_s": 296.4, "block_s": 8.6, "blocks_timed": 33,
                      "cut": {"blocks": 33, "planned_blocks": 36, "reason": reason}}}
    one = " ".join(printed(exp, result_of(tmp_path / "s.db", exp, sequential=seq), 120).split())
    assert "budget 5 min: 33 blocks at 8.6 s a block (median), 4 min 56 s in all" in one
    assert f"cut at block 33: {reason}" in one
    seq.update(budget={**seq["budget"], "cut": None})
    one = " ".join(printed(exp, result_of(tmp_path / "s.db", exp, sequential=seq), 120).split())
    assert "in all" in one and "cut at block" not in one
