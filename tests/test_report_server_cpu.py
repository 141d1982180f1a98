"""Server CPU per operation in the report (report/servercpu.py): for request-level trials each
comparison is repeated on the server's own CPU per operation and shown beside its round-trip
(primary) effect, so a client that dilutes the server's effect shows; a run without the metric
has no such section (the paired method itself is validated in tests/test_stats_paired.py)."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from hugelab.report import html, markdown, runtables, text
from hugelab.report.analysis import analyse
from hugelab.report.answer import settled_apart
from hugelab.report.model.result import Result
from hugelab.report.runload import ServerCpuData, load_run
from hugelab.report.servercpu import settled
from hugelab.store import Store
from tests.helpers import DAEMONS, requests_run


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Result:
    db = tmp_path_factory.mktemp("cpu") / "r.db"
    requests_run(db)
    with Store(db) as st:
        return analyse(load_run(st)).result


def test_the_server_effect_sits_beside_the_round_trip(result):
    sc = result.server_cpu
    assert sc is not None and sc.holm_family == 1 and sc.better == "lower"
    (e,) = sc.entries
    assert e.comparison == "on vs off" and e.pairs == 10 and e.n_units == 10
    assert e.verdict == "faster" and e.effect_pct == pytest.approx(-10, abs=0.5)
    assert e.round_trip_metric == "ops_per_s"
    assert e.round_trip_effect_pct == pytest.approx(3, abs=0.5)
    assert e.round_trip_effect_pct == result.comparisons[0].effect_pct
    assert e.client_cpu_share == pytest.approx(0.45)
    assert e.settled_pairs == 10 and e.settled_effect_pct == pytest.approx(2, abs=0.2)
    assert e.settled_ci_low_pct is not None and e.settled_ci_high_pct is not None
    assert e.settled_ci_low_pct < e.settled_effect_pct < e.settled_ci_high_pct < 2.5
    assert e.candidate_us_per_op is not None and e.baseline_us_per_op is not None
    assert e.candidate_us_per_op / e.baseline_us_per_op == pytest.approx(0.9, abs=0.05)
    assert [(d.series, d.trials, d.median_cpu_s) for d in sc.thp_daemons] == \
        [("off", 10, DAEMONS), ("on", 10, DAEMONS)]


def test_the_json_carries_the_section(result):
    j = result.to_json()["server_cpu"]
    assert {"holm_family", "better", "entries", "thp_daemons", "method"} <= set(j)
    assert {"comparison", "pairs", "baseline_us_per_op", "candidate_us_per_op",
            "client_cpu_share", "round_trip_metric", "round_trip_effect_pct",
            "round_trip_ci_low_pct", "round_trip_ci_high_pct", "settled_effect_pct",
            "settled_ci_low_pct", "settled_ci_high_pct", "settled_pairs", "verdict", "effect_pct",
            "ci_low_pct", "ci_high_pct", "p_adjusted"} <= set(j["entries"][0])


def test_every_renderer_shows_the_table_after_tail_latency(result):
    keys = [t.key for t in runtables.all_tables(result, full=False)]
    assert keys.index("server_cpu") == keys.index("tail_latency") + 1
    t = next(t for t in runtables.all_tables(result) if t.key == "server_cpu")
    (row,) = t.rows
    assert row[0] == "on vs off" and row[2] == "faster" and row[7] == "0.45" and row[8] == "10"
    assert row[4].startswith("+2.0% [+1.")
    assert any("after 1st s" in n and "fault in its shared buffers" in n for n in t.notes)
    assert float(row[1].split("%")[0]) == pytest.approx(-10, abs=0.5)
    assert float(row[3].split("%")[0]) == pytest.approx(3, abs=0.5)
    assert any("dilutes" in n for n in t.notes)
    assert any("kcompactd0 0 s, khugepaged 0.12 s (the same for every arm" in n
               for n in t.notes)
    buf = io.StringIO()
    text.render(result, Console(file=buf, width=200, color_system=None))
    assert "Server CPU per operation (request-level trials" in buf.getvalue()
    assert "primary effect on ops_per_s" in buf.getvalue()
    md = markdown.esc
    assert f"| on vs off | {md(row[1])} | faster | {md(row[3])} |" in markdown.render(result)
    page = html.render(result)
    assert 'id="server_cpu"' in page and "&#x27;faster&#x27; = less CPU" in page


def test_a_run_without_the_metric_has_no_section(tmp_path):
    db = tmp_path / "plain.db"
    requests_run(db, server_cpu=False)
    with Store(db) as st:
        data = load_run(st)
        result = analyse(data).result
    assert data.server_cpu is None and result.server_cpu is None
    assert result.to_json()["server_cpu"] is None
    assert "server_cpu" not in [t.key for t in runtables.all_tables(result)]


def test_the_settled_effect_against_a_baseline_that_is_not_the_trials_reference():
    # series 0 the trials' reference (it records no settled effect), 1 and 2 against it:
    # 2 vs 1 is their difference per block; a block where 1 has none is left out, not read
    # as the reference's zero
    sc = ServerCpuData()
    for b in range(8):
        sc.settled[(b, 2)] = math.log(1.06)
        if b != 3:
            sc.settled[(b, 1)] = math.log(1.02)
    blocks = list(range(8))
    mid, lo, hi, n = settled(sc, blocks, (0, 2), 0.05)
    assert n == 8 and mid == pytest.approx(6.0) and lo == pytest.approx(6.0)
    mid, lo, hi, n = settled(sc, blocks, (1, 2), 0.05)
    assert n == 7 and mid == pytest.approx(100 * (1.06 / 1.02 - 1))
    assert settled(sc, blocks[:5], (1, 2), 0.05) == (None, None, None, 4)


def test_the_answer_says_the_settled_effect_where_the_round_trip_lies_outside_it(result):
    # the helper's round trip is +3%, its effect after each trial's first second +2%: the
    # answer names both; where the round trip falls inside the settled interval it does not
    (line,) = [a.text for a in result.answer.answers if a.subject == "on vs off"]
    assert line.startswith("on vs off: +3.") and "after each trial's first second +2.0% [" in line
    (e,) = result.server_cpu.entries
    assert settled_apart(result) == {"on vs off": line.split("; ")[-1].rstrip(".")}
    trip, e.round_trip_effect_pct = e.round_trip_effect_pct, e.settled_effect_pct
    try:
        assert settled_apart(result) == {}
    finally:
        e.round_trip_effect_pct = trip
