"""A factorial run's report on stores built here with known injected effects: main effects,
interactions, the two-way grid, claims no block can estimate, the summary, `plan` against
each scenario's baseline, and cell names shown whole in the terminal."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from hugelab.experiment import parse_experiment
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests.helpers import FACTORIAL_EXP, HUGELAB, factorial_store


def report(path: Path) -> dict:
    with Store(path) as st:
        return analyse(load_run(st, 1), Options()).json()


def test_main_effects_interactions_grid_and_summary(tmp_path):
    factorial_store(tmp_path / "s.db")
    r = report(tmp_path / "s.db")
    f = r["factorial"]
    main = {(e["factor"], e["level"], e["scope"]): e for e in f["main_effects"]}
    thp2 = main[("backing", "thp", "overall")]
    assert thp2["verdict"] == "faster" and abs(thp2["effect_pct"] + 10) < 1
    assert main[("backing", "hugetlb-2M", "size=1G")]["verdict"] == "faster"
    assert main[("thp", "always", "overall")]["verdict"] in ("equivalent", "inconclusive")
    assert {e["factor"] for e in f["main_effects"]} == {"thp", "backing"}  # never size itself
    # every level of a factor is stated, the larger effect first
    s = f["summary"]
    assert s.index("hugetlb-2M vs 4k") < s.index("thp vs 4k") and "always vs never" in s
    # 2 arm factors: a medians grid per scenario, rows thp, columns backing
    grids = {g["scope"]: g for g in f["two_way"]}
    assert set(grids) == {"size=64M", "size=1G"}
    g = grids["size=1G"]
    assert g["row_levels"] == ["never", "always"] and g["column_levels"] == ["4k", "thp",
                                                                          "hugetlb-2M"]
    assert g["medians"][0][2] < g["medians"][0][0]  # hugetlb-2M shortens the time
    # each cell against the baseline cell of its own scenario, one Holm family
    assert all(c["baseline"].split(" [")[1] == c["candidate"].split(" [")[1]
               for c in r["comparisons"])
    assert r["options"]["holm_family"] == len(r["comparisons"]) + len(f["main_effects"]) + \
        len(f["interactions"])


def test_a_cell_with_no_ok_trial_leaves_its_claims_out_of_the_family(tmp_path):
    factorial_store(tmp_path / "s.db", failed={"thp=never,backing=4k [size=64M]",
                                               "thp=never,backing=4k [size=1G]"})
    f = report(tmp_path / "s.db")["factorial"]
    assert f["not_estimable"], f["not_estimable"]
    assert all(e["n_units"] > 0 for e in f["main_effects"] + f["interactions"])


def test_too_few_blocks_say_so_instead_of_an_interval(tmp_path):
    factorial_store(tmp_path / "s.db", blocks=3)
    s = report(tmp_path / "s.db")["factorial"]["summary"]
    assert "too few for an interval" in s and "[-100" not in s


@pytest.mark.slow
def test_plan_compares_each_cell_with_its_scenarios_baseline(tmp_path):
    factorial_store(tmp_path / "s.db")
    r = subprocess.run([*HUGELAB, "plan", "--store", str(tmp_path / "s.db"), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for p in json.loads(r.stdout)["arms"]:
        assert p["arm"].split(" [")[1] == p["baseline"].split(" [")[1], p


@pytest.mark.slow
@pytest.mark.parametrize("cmd", [["show", "1"], ["show"], ["report"]])
def test_cell_names_are_printed_whole(tmp_path, cmd):
    factorial_store(tmp_path / "s.db")
    r = subprocess.run([*HUGELAB, *cmd, "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""})
    assert r.returncode == 0, r.stderr
    if cmd != ["show"]:
        assert "[size=64M]" in r.stdout and "[size=1G]" in r.stdout


def test_run_summary_keeps_the_scenario_in_cell_names():
    from hugelab.cli import runsummary
    exp = parse_experiment(FACTORIAL_EXP)
    from hugelab.report.model.runsummary import ArmRow, RunSummary
    rows = [ArmRow(a.name, 1, 0, 0, 1.0, None, None, None, a.name == exp.baseline_of(a.name))
            for a in exp.arms]
    buf = io.StringIO()
    runsummary.render(exp, RunSummary(run=1, store="s.db", executed=1, arms=rows,
                                      skipped={"x [size=1G]": "why"}),
                      Console(file=buf, width=200))
    out = buf.getvalue()
    # one heading per scenario, each cell by the levels that differ from its baseline cell
    assert "size=1G: each cell against its baseline" in out and "x [size=1G]: why" in out
    assert "size=64M: each cell against its baseline" in out
