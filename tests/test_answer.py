"""The answer in words (report/answer.py) and the lead block (report/lead.py): intervals that
never end in a dash, verdicts in words, recommendations only where a verdict supports one,
short cell names, warnings folded; on plain dicts and on analysed stores with known effects."""

from __future__ import annotations

import dataclasses
import re

import pytest

from hugelab.report import answer, lead
from hugelab.report.analysis import Options, analyse
from hugelab.report.model.comparison import Comparison
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests.helpers import factorial_store, make_store


def comp(cand: str, eff: float | None, lo: float | None, hi: float | None, verdict: str,
         n: int = 30, within: bool = False, base: str = "4k", alpha: float = 0.05) -> Comparison:
    nothing = dict.fromkeys(("hl_log", "p_value", "p_adjusted", "tost_p", "tost_p_adjusted",
                             "tost_low_pct", "tost_high_pct", "mean_ratio", "median_ratio",
                             "trimmed_mean_ratio", "ratio_of_means", "design_effect", "tails",
                             "drift", "regimes", "load_effect"))
    return Comparison(name=f"{cand} vs {base}", candidate=cand, baseline=base, blocks_dropped=0,
                      effect_pct=eff, ci_low_pct=lo, ci_high_pct=hi, verdict=verdict,
                      better="lower", alpha=alpha, n=n, n_dropped=0, n_units=n, unit="pair",
                      margin=0.01, within_margin=within, ci_method="hl", pooling_warning=False,
                      notes=[], **nothing)


def result(*comps: Comparison, warnings: list[str] | None = None) -> answer.Findings:
    return answer.Findings(list(comps), None, warnings or [], [])


def test_interval_says_why_there_is_none_and_never_ends_in_a_dash():
    assert answer.interval(comp("thp", -12.34, -14.1, -10.2, "faster")) == \
        "-12.3% [-14.1, -10.2]"
    no = answer.interval(comp("thp", -12.3, -100.0, None, "inconclusive", n=2))
    assert no == "-12.3% (no interval: 2 pairs, 6 needed for a 95% interval)"
    assert "-]" not in no and ", -" not in no
    assert answer.interval(comp("thp", None, None, None, "inconclusive", n=0)).startswith(
        "no estimate")


def test_the_pairs_an_interval_needs_follow_alpha():
    """At 99.99% a signed-rank interval needs 15 pairs, not the 6 of 95%: 10 pairs say so."""
    ten = comp("thp", -12.3, None, None, "inconclusive", n=10, alpha=0.0001)
    assert answer.interval(ten) == "-12.3% (no interval: 10 pairs, 15 needed for a 99.99% " \
        "interval)"
    assert answer.verdict(ten) == "no verdict yet"
    (rec,) = answer.recommendations(result(ten))
    assert "at least 5 more block(s)" in rec, rec
    assert [answer.needed(comp("x", 1, 0, 2, "faster", alpha=a)) for a in
            (0.2, 0.05, 0.01, 0.001, 0.0001)] == [6, 6, 8, 11, 15]
    # an interval the estimate has, with too few pairs for its level, is not shown
    assert not answer.has_interval(comp("thp", -5, -9, -1, "faster", n=10, alpha=0.0001))


@pytest.mark.parametrize(("c", "words"), [
    (comp("thp", -5, -6, -4, "faster"), "faster"),
    (comp("thp", -0.5, -0.7, -0.3, "faster", within=True), "faster, but within the ±1% margin"),
    (comp("thp", 0.1, -0.3, 0.4, "equivalent"), "equivalent (within ±1%)"),
    (comp("thp", 3, -2, 8, "inconclusive"), "inconclusive"),
    (comp("thp", 3, None, None, "inconclusive", n=3), "no verdict yet"),
])
def test_verdict_in_words(c, words):
    assert answer.verdict(c) == words


def test_an_interval_that_excludes_zero_beside_inconclusive_says_the_adjustment_did_it():
    """Its own interval and p say 'faster'; adjusted across the report's comparisons it is
    not: the words say so, rather than '-5% [-6, -1], inconclusive' without a reason."""
    c = dataclasses.replace(comp("thp", -5, -6, -1, "inconclusive"), p_value=0.02,
                            p_adjusted=0.06)
    assert answer.verdict(c) == "inconclusive after adjustment"
    # its interval spans zero, or nothing was adjusted away: plain 'inconclusive'
    for other in (dataclasses.replace(c, ci_low_pct=-6, ci_high_pct=1),
                  dataclasses.replace(c, p_value=0.06)):
        assert answer.verdict(other) == "inconclusive"


def test_recommendation_names_the_best_and_the_runner_ups_share():
    r = result(comp("thp", -20, -22, -18, "faster"), comp("hugetlb-2M", -25, -27, -23, "faster"),
               comp("hugetlb-1G", 0.2, -0.4, 0.5, "equivalent"))
    (rec,) = answer.recommendations(r)
    assert rec == "Use hugetlb-2M: -25.0% [-27.0, -23.0] vs 4k; thp gets 80% of that"
    r.comparisons[0].ci_low_pct = -24.0  # thp's interval now overlaps hugetlb-2M's
    (rec,) = answer.recommendations(r)
    assert rec == ("Use hugetlb-2M: -25.0% [-27.0, -23.0] vs 4k (thp as good within the "
                   "intervals); thp gets 80% of that")


def test_no_recommendation_without_a_verdict_that_supports_one():
    (rec,) = answer.recommendations(result(comp("thp", -30, None, None, "inconclusive", n=2)))
    assert rec.startswith("No recommendation yet") and "4 more block(s)" in rec
    (rec,) = answer.recommendations(result(comp("thp", -3, -9, 2, "inconclusive")))
    assert rec.startswith("No recommendation yet") and "hugelab plan" in rec
    (rec,) = answer.recommendations(result(comp("thp", 0.1, -0.3, 0.4, "equivalent"),
                                           comp("x", 0.4, 0.2, 0.6, "slower", within=True)))
    assert rec.startswith("Nothing to gain") and "keep 4k" in rec
    (rec,) = answer.recommendations(result(comp("thp", 5, 4, 6, "slower")))
    assert rec == "Keep 4k, since thp costs 5.0% [4.0, 6.0]"


def test_warnings_shared_by_comparisons_fold_into_one_line():
    comps = [comp(f"a{i}", 1.0, None, None, "inconclusive", n=2) for i in range(3)]
    few = "inconclusive: too few pairs (2 pairs, 6 needed for any verdict)"
    ws = [f"{c.name}: {few}" for c in comps] + ["a0 vs 4k: drifted", "blocks differ"]
    loud, notes = lead.warnings(result(*comps, warnings=ws))
    assert loud == []
    assert notes == ["blocks differ", f"all 3 comparisons: {few}", "a0 vs 4k: drifted"]
    assert lead.fold([("x", "t"), ("y", "t")], total=5) == ["2 comparisons: t (x, y)"]


def test_arm_warnings_that_differ_only_in_counts_fold_into_one_line():
    r = result(warnings=[
        "4k: 1 of 2 trials under high machine load (CPU steal in 1): may be the machine's",
        "thp: 2 of 2 trials under high machine load (CPU pressure in 2): may be the machine's",
        "thp: something else"])
    r.series = ["4k", "thp"]
    _, notes = lead.warnings(r)
    assert notes == ["2 arms: trials under high machine load: may be the machine's "
                     "(4k: 1 of 2; thp: 2 of 2)", "thp: something else"]


def test_flat_run_answers_each_comparison(tmp_path):
    make_store(tmp_path / "s.db", arms={"4k": 1.0, "thp": 0.9, "hugetlb-2M": 1.0})
    with Store(tmp_path / "s.db") as st:
        r = analyse(load_run(st), Options()).result
    ld = lead.of(r)
    texts = [a.text for a in ld.answers]
    assert re.fullmatch(r"thp vs 4k: -(9\.\d|10\.\d)% \[-1\d\.\d, -\d+\.\d\], faster\.", texts[0]), \
        texts[0]
    assert re.match(r"hugetlb-2M vs 4k: [+-]0\.\d% \[", texts[1]), texts[1]
    assert re.match(r"Use thp: -(9|10)\.\d% \[", ld.recommendations[0])


def test_factorial_answers_per_factor_with_short_cell_names(tmp_path):
    factorial_store(tmp_path / "s.db")
    with Store(tmp_path / "s.db") as st:
        r = analyse(load_run(st), Options()).result
    ld = lead.of(r)
    first = ld.answers[0].text
    assert re.match(r"backing \(2 levels vs 4k\): the largest difference is hugetlb-2M, "
                    r"-(19|20)\.\d% \[.*\], faster; all levels: 2 faster\.", first), first
    assert ld.answers[-1].subject == "interactions"
    # per scenario, the best cell by the levels that differ from the scenario's baseline cell
    assert [x.split(":")[0] for x in ld.recommendations] == ["size=64M", "size=1G"]
    best = r"use (thp=always, )?backing=hugetlb-2M: -(19|20)\."
    assert all(re.search(best, x) for x in ld.recommendations), ld.recommendations
    names = answer.Names.of(r.factorial)
    assert names.short("thp=always,backing=thp [size=1G]",
                       "thp=never,backing=4k [size=1G]") == "thp=always, backing=thp"
    assert names.scope("thp=always,backing=thp [size=1G]") == "size=1G"


def test_many_arms_warnings_fold_into_their_total_so_the_answer_stays_short():
    arms = [f"a{i}" for i in range(6)]
    r = result(warnings=[f"{a}: {1 + i % 2} of 2 trials under high machine load (CPU steal in "
                         f"{1 + i % 2}): may be the machine's" for i, a in enumerate(arms)])
    r.series = arms
    _, notes = lead.warnings(r)
    assert notes == ["6 arms: trials under high machine load: may be the machine's (9 of their "
                     "12 trials; each arm's count in the evidence and monitors table: --full, "
                     "--md, --html)"]
