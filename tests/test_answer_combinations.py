"""Answers that hold together, on analysed stores: for every combination of a faster, a slower,
an equivalent and an inconclusive arm against one baseline, the lead's sentences give each arm
its verdict and the recommendation agrees with them (use the faster arm; keep the baseline,
naming what the slower arms cost; nothing to gain; or what is undecided). The interval's level
follows --alpha, and so do the pairs it says are missing; `signedrank.min_pairs` is the exact
signed-rank minimum."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from hugelab.report import lead
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.stats.signedrank import exact_cdf, min_pairs
from hugelab.store import Store, Trial
from tests.helpers import cli, make_store

BLOCKS = 24
# arm -> (the verdict it is built to get, its ratio to the baseline, its own noise (log SD))
KINDS = {"quick": ("faster", 0.90, 0.005), "slow": ("slower", 1.05, 0.005),
         "same": ("equivalent", 1.0, 0.0005), "noisy": ("inconclusive", 1.0, 0.08)}


def store(path: Path, arms: tuple[str, ...]) -> Path:
    """A finished run of 'base' and `arms` (KINDS), BLOCKS blocks, every trial ok; the arms
    of no effect get noise symmetric about zero (each draw and its negative), so their
    estimate is zero and only the noise's size decides between equivalent and inconclusive."""
    rng = np.random.default_rng(7)
    noise = {a: rng.normal(0, KINDS[a][2], BLOCKS) for a in arms}
    for a in set(arms) & {"same", "noisy"}:
        half = noise[a][: BLOCKS // 2]
        noise[a] = rng.permutation(np.concatenate([half, -half]))
    exp = {"name": "combo", "baseline": "base", "blocks": BLOCKS,
           "arms": [{"name": a} for a in ("base", *arms)]}
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("combo-" + "-".join(arms), "combo", exp, {})
        for b in range(BLOCKS):
            block = 100.0 * math.exp(rng.normal(0, 0.03))
            values = {"base": block} | {a: block * KINDS[a][1] * math.exp(noise[a][b])
                                       for a in arms}
            for pos, (arm, v) in enumerate(values.items()):
                st.add_trial(Trial(run_id, b, pos, arm, "ok", v, "ns_per_load", "ns", "lower"))
        st.set_run_status(run_id, "finished")
    return path


def expected(arms: tuple[str, ...]) -> str:
    """The recommendation's start (and the phrases it must hold) the verdicts support."""
    if "quick" in arms:
        return "Use quick: -10."
    if "slow" in arms:
        return "Keep base, since slow costs "
    if arms == ("same",):
        return "Nothing to gain: every arm is within ±1% of base; keep base"
    return "No recommendation yet: "


COMBOS = [c for r in range(1, 5) for c in itertools.combinations(KINDS, r)]


@pytest.mark.parametrize("arms", COMBOS, ids=["+".join(c) for c in COMBOS])
def test_lead_and_recommendation_agree_for_every_mix_of_verdicts(tmp_path, arms):
    with Store(store(tmp_path / "s.db", arms)) as st:
        r = analyse(load_run(st), Options()).result
    got = {c.candidate: str(c.verdict) for c in r.comparisons}
    assert got == {a: KINDS[a][0] for a in arms}  # the stores give the verdicts they are for
    ld = lead.of(r)
    words = {"faster": "faster", "slower": "slower", "equivalent": "equivalent (within ±1%)",
             "inconclusive": "inconclusive"}
    for a, ans in zip(arms, ld.answers, strict=True):
        assert re.fullmatch(rf"{a} vs base: [+-]\d+\.\d% \[[+-]\d+\.\d, [+-]\d+\.\d\], "
                            rf"{re.escape(words[KINDS[a][0]])}\.", ans.text), ans.text
    (rec,) = ld.recommendations
    assert rec.startswith(expected(arms)), rec
    if "quick" not in arms and "slow" in arms:  # the baseline is best: what the others are
        assert re.match(r"Keep base, since slow costs [45]\.\d% \[\d\.\d, \d\.\d\]", rec), rec
        assert ("same is within ±1% of it" in rec) == ("same" in arms), rec
        assert ("noisy is undecided (inconclusive)" in rec) == ("noisy" in arms), rec
    if "noisy" in arms and not {"quick", "slow"} & set(arms):
        assert "hugelab plan" in rec, rec
        assert "noisy is undecided" in rec or arms == ("noisy",), rec
    # no sentence denies what another states
    decided = any(KINDS[a][0] in ("faster", "slower") for a in arms)
    assert not (decided and "no arm differs from its baseline beyond doubt" in rec), rec


def test_report_interval_level_follows_alpha(tmp_path, capsys):
    """`hugelab report --alpha 0.0001` on a 10-block run: 15 pairs needed, said at 99.99%."""
    db = tmp_path / "s.db"
    make_store(db, blocks=10, arms={"4k": 1.0, "thp": 0.9, "hugetlb-2M": 0.8})
    rc, out, err = cli(["report", "--store", str(db), "--alpha", "0.0001"], capsys)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "6 needed" not in flat and "at least 6 pairs" not in flat
    assert "thp vs 4k: -9.8% (no interval: 10 pairs, 15 needed for a 99.99% interval), no " \
        "verdict yet." in flat, flat
    assert "a 99.99% interval needs at least 15 pairs (blocks); those rows have 10" in flat
    assert "run at least 5 more block(s)" in flat
    rc, out, _ = cli(["report", "--store", str(db)], capsys)  # at 95% 10 pairs give one
    assert rc == 0 and "no interval" not in out and re.search(r"thp vs 4k: -\d+\.\d% \[", out)


PLAN_LATER = "then `hugelab plan` says how many a verdict needs once the run has 10 blocks"


@pytest.mark.parametrize(("blocks", "alpha", "words"), [
    (2, "0.05", ["too few pairs (2 pairs, 6 needed for any verdict at 95%)",
                 f"run at least 4 more block(s), {PLAN_LATER} (8 more)"]),
    (2, "0.01", ["too few pairs (2 pairs, 7 needed for any verdict at 99%)",
                 f"run at least 6 more block(s), {PLAN_LATER} (8 more)"]),
    (7, "0.01", ["too few pairs for an interval or a faster/slower verdict (7 pairs, 8 needed "
                 "at 99%; an equivalence needs one fewer)",
                 f"run at least 1 more block(s), {PLAN_LATER} (3 more)"]),
    (7, "0.0001", ["too few pairs (7 pairs, 14 needed for any verdict at 99.99%)",
                   "run at least 8 more block(s), then `hugelab plan` says how many a verdict "
                   "needs WARNING"]),
])
def test_a_short_run_says_what_a_verdict_and_a_plan_need_at_its_alpha(tmp_path, capsys,
                                                                     blocks, alpha, words):
    """The warning's counts are the exact signed-rank minimums at the report's alpha (a held
    6 at 0.01 was wrong: 6 pairs give p >= 0.016 one-sided), and the next step names
    `hugelab plan` with the 10 blocks its pilot needs until they are within reach."""
    db = tmp_path / "s.db"
    make_store(db, blocks=blocks, arms={"4k": 1.0, "thp": 0.9})
    rc, out, err = cli(["report", "--store", str(db), "--alpha", alpha], capsys)
    assert rc == 0, err
    flat = " ".join(out.split())
    for w in words:
        assert w in flat, flat


def test_an_equivalence_reached_with_one_pair_fewer_than_an_interval_is_not_warned_about(
        tmp_path, capsys):
    """7 pairs at 0.01: the two one-sided tests reach 1/128 < 0.01 (equivalent), while an
    interval needs 8: no 'too few pairs' beside the verdict."""
    db = tmp_path / "s.db"
    make_store(db, blocks=7, arms={"4k": 1.0, "thp": 1.0}, noise=0.0005)
    rc, out, err = cli(["report", "--store", str(db), "--alpha", "0.01"], capsys)
    assert rc == 0, err
    flat = " ".join(out.split())
    assert "thp vs 4k" in flat and "equivalent" in flat, flat
    assert "too few pairs" not in flat, flat


@pytest.mark.parametrize("alpha", [0.3, 0.1, 0.05, 0.01, 0.001, 0.0001, 1e-6])
def test_min_pairs_is_the_exact_signed_rank_minimum(alpha):
    n = min_pairs(alpha)
    assert exact_cdf(n)[0] <= alpha / 2 < exact_cdf(n - 1)[0] if n > 1 else True
    assert n == math.ceil(math.log2(2 / alpha) - 1e-12)


@pytest.mark.parametrize("alpha", [0.3, 0.1, 0.05, 0.01, 0.001, 0.0001, 1e-6])
def test_the_one_sided_minimum_is_the_exact_signed_rank_one(alpha):
    """An equivalence's one-sided tests: the smallest n whose exact distribution puts mass
    <= alpha at its extreme, one fewer than an interval's; the stats note says it too."""
    from hugelab.stats.paired import compare
    from hugelab.stats.signedrank import min_pairs_one_sided
    n = min_pairs_one_sided(alpha)
    assert exact_cdf(n)[0] <= alpha < (exact_cdf(n - 1)[0] if n > 1 else 1.0)
    assert n == min_pairs(alpha) - 1 or min_pairs(alpha) == 1
    note = compare([1.0, 1.1, 0.9], [1.0, 1.0, 1.0], alpha=alpha).notes[-1]
    assert note.endswith(f"at least {max(6, n)} are needed for any verdict"), note
