"""The report's typed model: every part reads its own JSON back unchanged, the JSON report is
the model's JSON in the report's order, and no two modules of the report share a name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hugelab.report import jsonreport
from hugelab.report.analysis import Options, analyse
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.effects import Factorial
from hugelab.report.model.replicas import Repetition, Replication
from hugelab.report.model.result import BlockVariance, Result
from hugelab.report.model.series import Series
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests import runstores
from tests.helpers import make_store, store_run

ORDER = ["run", "options", "trials", "blocks", "series", "comparisons", "block_variance", "grid",
         "factorial", "provenance", "repetitions", "replication", "tail_latency", "server_cpu", "costs",
         "warnings",
         "answer"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[Result]:
    d = tmp_path_factory.mktemp("model")
    make_store(d / "flat.db", arms={"4k": 1.0, "thp": 0.95}, flagged={"thp": {3}},
               failed={"4k": {5}}, steal={b: 0.3 * (b % 4 == 0) for b in range(30)})
    runstores.fabricate(d / "f.db", runstores.experiment("001-mnstory-factorial.toml"),
                        blocks=12)
    store_run(d / "r.db", [0.87, 0.85, 0.80, 0.82] * 10, blocks=10, repeats=4)
    out = []
    for db in ("flat.db", "f.db", "r.db"):
        with Store(d / db) as st:
            out.append(analyse(load_run(st), Options()).result)
    return out


def test_each_part_reads_its_own_json_back(results):
    for r in results:
        for c in r.comparisons:
            assert Comparison.from_json(c.to_json()).to_json() == c.to_json()
        for s in r.series:
            assert Series.from_json(s.to_json()) == s
        if r.factorial is not None:
            assert Factorial.from_json(r.factorial.to_json()) == r.factorial
        for rep in r.replication or []:
            assert Replication.from_json(rep.to_json()) == rep
    assert any(r.factorial and r.factorial.interactions for r in results)
    assert any(r.replication for r in results)


def test_renderers_read_attributes_and_the_json_is_the_models(results):
    flat, fact, _ = results
    assert isinstance(flat.comparisons[0], Comparison) and flat.comparisons[0].drift is not None
    assert flat.comparisons[0].tails is not None and flat.comparisons[0].tails.quantiles
    assert fact.factorial is not None and fact.factorial.main_effects[0].factor
    for r in results:
        j = r.to_json()
        assert list(j) == ORDER
        assert json.loads(jsonreport.render(r)) == json.loads(json.dumps(j, default=str))
        json.dumps(j, allow_nan=False)
    # a main effect has no interaction keys; an interaction has them
    f = fact.to_json()["factorial"]
    assert "by" not in f["main_effects"][0] and "by" in f["interactions"][0]


def test_parts_that_could_not_be_estimated_keep_their_short_json():
    assert BlockVariance(error="too few").to_json() == {"error": "too few"}
    rep = Repetition("4k", "4k", "vm0", 1, k_run=3.0, error="needs at least 2 boots")
    assert rep.to_json() == {"name": "4k", "arm": "4k", "target": "vm0", "boots": 1,
                             "k_run": 3.0, "error": "needs at least 2 boots"}
    one = Replication("b vs a", "a", "b", 2, error="too few")
    assert one.to_json() == {"name": "b vs a", "baseline": "a", "candidate": "b",
                             "repeats_planned": 2, "error": "too few"}
    assert Replication.from_json(one.to_json()) == one


def test_no_two_modules_of_the_report_share_a_name():
    root = Path(__file__).resolve().parent.parent / "hugelab" / "report"
    names = [p.name for p in root.rglob("*.py") if p.name != "__init__.py"]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_reports_estimate_mirrors_the_stats_comparison_field_for_field():
    """report.model.Estimate is stats.paired.Comparison made JSON-safe (None where a value is
    not estimable): a field added to one and not the other would vanish from every report
    without a word (Model.from_json reads only its own fields)."""
    from dataclasses import fields

    from hugelab.report.model.estimate import Estimate
    from hugelab.stats.paired import Comparison

    assert [f.name for f in fields(Estimate)] == [f.name for f in fields(Comparison)]
