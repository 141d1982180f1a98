"""`hugelab report --across`: separate runs of one experiment pooled with the run as a random
effect, on SQLite stores built here with known run-level effects (the effect itself moves
between runs, as the held-out server series showed: docs/benchmarks.md, "A run's interval and
the next run")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hugelab.errors import UsageError
from hugelab.report import fleet
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store, Trial
from tests.helpers import cli
from tests.test_report_fleet import EPYC, add_host, facts

# one host, four runs hours apart: the effect of thp moved between them (lower is better)
RUN_EFFECTS = (-0.08, -0.14, -0.10, -0.12)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "runs.db"
    with Store(path) as st:
        for seed, effect in enumerate(RUN_EFFECTS, 1):
            add_host(st, "box", effect, name=f"exp-s{seed}", seed=seed, noise=0.005)
        add_host(st, "box", 0.3, name="other", seed=9)  # run 5: not named, not pooled
    return path


@pytest.fixture(scope="module")
def report(store_path: Path) -> fleet.FleetReport:
    with Store(store_path) as st:
        return fleet.FleetReport.from_runs(st, [1, 2, 3, 4])


def test_each_run_is_a_unit_with_its_own_single_run_result(store_path: Path,
                                                           report: fleet.FleetReport) -> None:
    assert report.unit == "run"
    c = report.comparisons[0]
    # add_host labels every run with its host's name, as `hugelab run --label box` would
    assert [e.label for e in c.hosts] == ["run 1 (box)", "run 2 (box)", "run 3 (box)",
                                          "run 4 (box)"]
    with Store(store_path) as st:
        for e, effect in zip(c.hosts, RUN_EFFECTS, strict=True):
            single = analyse(load_run(st, e.run_id), Options()).json()["comparisons"][0]
            assert e.verdict == single["verdict"] == "faster"
            assert e.effect_pct == pytest.approx(single["effect_pct"])
            assert e.effect_pct == pytest.approx(100 * effect, abs=1.0)


def test_one_runs_interval_misses_the_others_and_the_pooled_one_says_so(
        report: fleet.FleetReport) -> None:
    c = report.comparisons[0]
    p = c.pooled
    assert p is not None and p.k == 4
    run1, run2 = c.hosts[0], c.hosts[1]
    assert not run1.ci_low_pct <= run2.effect_pct <= run1.ci_high_pct  # the point of it
    assert p.tau > 0.01 and p.q_p < 0.05
    assert "runs differ" in " ".join(report.warnings)
    lo, hi = 100 * np.expm1(p.pred_low), 100 * np.expm1(p.pred_high)
    assert all(lo <= e.effect_pct <= hi for e in c.hosts)  # the next run's interval holds them
    assert hi - lo > c.ci_high_pct - c.ci_low_pct > run1.ci_high_pct - run1.ci_low_pct
    # the pooled effect lies among the runs', not at the first run's
    assert min(RUN_EFFECTS) < math.expm1(p.estimate) < max(RUN_EFFECTS)
    assert "runs" in p.notes[0] and "host" not in " ".join(p.notes)


def test_an_unfinished_run_is_noted_and_an_empty_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as st:
        add_host(st, "box", -0.1, name="a", seed=1)
        add_host(st, "box", -0.1, name="a", seed=2, finished=False)
        st.get_or_create_run("a@box#3", "a", {"name": "a", "baseline": "4k"}, facts())
        report = fleet.FleetReport.from_runs(st, [1, 2])
        with pytest.raises(UsageError, match="run 3 has no trial to pool"):
            fleet.FleetReport.from_runs(st, [1, 3])
    assert any(n.startswith("run 2 (box) has not finished") for n in report.notes)
    assert report.experiment == "a"


def test_seeds_and_names_may_differ_but_other_settings_are_noted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as st:
        add_host(st, "box", -0.1, name="a", seed=1)
        add_host(st, "box", -0.1, name="b", seed=2)
        add_host(st, "box", -0.1, name="c", seed=3, blocks=12)
        quiet = fleet.FleetReport.from_runs(st, [1, 2, 3])
        st.db.execute("UPDATE runs SET experiment = json_set(experiment, '$.baseline', 'x') "
                      "WHERE id = 3")
        st.db.commit()
        odd = fleet.FleetReport.from_runs(st, [1, 2, 3])
    assert quiet.experiment == "a (and 2 other names)"
    assert not any("different version" in n for n in quiet.notes)
    assert any(n.startswith("run 3 (box) ran a different version") for n in odd.notes)


def test_cli_text_json_html_and_markdown(store_path: Path, tmp_path: Path, capsys) -> None:
    rc, out, err = cli(["report", "--store", str(store_path), "--across", "1,2,3,4",
                        "--html", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md")],
                       capsys)
    assert rc == 0, err
    assert "on 4 run(s)" in out and "Across runs" in out and "next run [95% PI]" in out
    assert "Runs (4)" in out and "made (UTC)" in out and "Per run: thp vs 4k" in out
    assert "Host facts" not in out and "Groups of alike" not in out  # one kind of host
    assert "host" not in out.split("Runs (4)")[0]  # the header, warnings and pooled table
    html = (tmp_path / "r.html").read_text()
    assert "Per run and pooled: thp vs 4k" in html and "Across runs" in html
    assert "<h1>hugelab report across runs: exp-s1 (and 3 other names)</h1>" in html
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# hugelab report across runs: exp-s1") and "Across runs" in md
    rc, out, err = cli(["report", "--store", str(store_path), "--across", "1,2,3", "--json"],
                       capsys)
    assert rc == 0, err
    got = json.loads(out)
    assert got["unit"] == "run" and len(got["hosts"]) == 3
    assert got["comparisons"][0]["pooled"]["k"] == 3


def test_runs_on_two_kinds_of_host_show_the_facts_and_groups(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.db"
    with Store(path) as st:
        add_host(st, "box", -0.1, name="a", seed=1)
        add_host(st, "box", -0.1, name="a", seed=2)
        add_host(st, "box", -0.1, name="a", seed=3, host=facts(EPYC, "6.6.13"))
    rc, out, err = cli(["report", "--store", str(path), "--across", "1,2,3"], capsys)
    assert rc == 0, err
    assert "Host facts" in out and "Groups of alike hosts" in out and EPYC in out


@pytest.mark.parametrize("args, words", [
    (["--across", "1"], "two or more runs"),
    (["--across", "1,1"], "two or more runs"),
    (["--across", "1,99"], "no run 99 in the store"),
    (["--across", "1,2", "--experiment", "exp-s1"], "give one"),
    (["--across", "1,2", "3"], "takes no RUN"),
    (["--across", "1,2", "--pair", "4k:thp"], "takes no RUN and no --pair"),
    (["--across", "one,two"], "run ids like 3,4,5 wanted"),
    (["--across", "0,1"], "1 or more"),
])
def test_bad_runs_are_usage_errors(store_path: Path, capsys, args, words) -> None:
    argv = ["report", "--store", str(store_path), *args]
    if args[1] in ("one,two", "0,1"):  # argparse's own error: exit 2 through SystemExit
        with pytest.raises(SystemExit) as exc:
            cli(argv, capsys)
        assert exc.value.code == 2
        assert words in capsys.readouterr().err
        return
    rc, out, err = cli(argv, capsys)
    assert rc == 2 and words in err


def _interleaved_run(st: Store, seed: int, effect: float, blocks: int = 12) -> None:
    """A request-interleaved run of off (baseline) and on whose servers start in a random
    order each block, the one started second 3% slower (a start-order effect the report fits
    and adjusts for), `on` at (1 + effect) x off."""
    rng = np.random.default_rng(seed)
    exp = {"name": f"pg-s{seed}", "seed": seed, "baseline": "off", "design": "interleaved",
           "blocks": blocks, "arms": [{"name": "off"}, {"name": "on"}]}
    run_id, _ = st.get_or_create_run(f"pg-req-{seed}", f"pg-s{seed}", exp, facts())
    prov = {"interleaved": {"design": "requests", "servers": 2}}
    trials = []
    for b in range(blocks):
        for pos, arm in enumerate(rng.permutation(["off", "on"])):
            v = 1000.0 * (1 + effect if arm == "on" else 1.0) * (0.97 if pos else 1.0) \
                * math.exp(rng.normal(0, 0.005))
            trials.append(Trial(run_id, b, pos, str(arm), "ok", v, "ops_per_s", "ops/s",
                                "higher", metrics={"ops_per_s": v}, provenance=prov,
                                target="native"))
    st.add_trials(trials)
    st.set_run_status(run_id, "finished")


def test_interleaved_runs_are_pooled_as_their_own_rows_show_them(tmp_path: Path) -> None:
    """A request-interleaved run's own row is start-order adjusted: what --across pools for
    it is that same effect, not the raw ratios'."""
    path = tmp_path / "s.db"
    with Store(path) as st:
        for seed, effect in ((1, 0.05), (2, 0.08), (3, 0.06)):
            _interleaved_run(st, seed, effect)
        report = fleet.FleetReport.from_runs(st, [1, 2, 3])
        single = [analyse(load_run(st, i), Options()).json()["comparisons"][0] for i in (1, 2, 3)]
    c = report.comparisons[0]
    assert all("start order" in " ".join(s["notes"]) for s in single)  # adjusted: the point
    for e, s in zip(c.hosts, single, strict=True):
        assert e.effect_pct == pytest.approx(s["effect_pct"])
        assert 100 * math.expm1(e.log_estimate) == pytest.approx(s["effect_pct"], abs=0.05)


def test_a_run_with_the_other_baseline_is_read_the_other_way_round(tmp_path: Path) -> None:
    """Three runs of 4k and thp (thp 10% fewer ns, lower is better), the second made with thp
    as its baseline: its own row says `4k vs thp`, slower by ~11%; pooled, it is read as
    `thp vs 4k`, faster by ~10%, its interval turned round, and a note says so."""
    from tests.helpers import make_store
    path = tmp_path / "s.db"
    with Store(path) as st:
        for seed in (1, 2, 3):
            make_store(path, store=st, seed=seed, baseline="thp" if seed == 2 else "4k",
                       arms={"4k": 1.0, "thp": 0.90}, noise=0.005)
        single = analyse(load_run(st, 2), Options()).json()["comparisons"][0]
        r = fleet.FleetReport.from_runs(st, [1, 2, 3])
    assert single["name"] == "4k vs thp" and single["verdict"] == "slower"
    assert [c.name for c in r.comparisons] == ["thp vs 4k"]
    c = r.comparisons[0]
    run2 = next(e for e in c.hosts if e.run_id == 2)
    assert run2.verdict == "faster" and run2.pooled
    assert run2.effect_pct == pytest.approx(100 / (1 + single["effect_pct"] / 100) - 100)
    assert run2.ci_low_pct == pytest.approx(100 / (1 + single["ci_high_pct"] / 100) - 100)
    assert run2.ci_high_pct == pytest.approx(100 / (1 + single["ci_low_pct"] / 100) - 100)
    assert c.pooled is not None and c.pooled.k == 3
    assert -11.5 < 100 * math.expm1(c.pooled.estimate) < -8.5
    assert any("run 2" in n and "the other way round" in n for n in r.notes), r.notes
