"""The terminal report (compact and --full) and the run summary of real runs, and of the
factorial examples that need guests (runs fabricated from their real experiment files), at
80, 120 and 200 columns: no line wider than the terminal, no cell name split inside a word,
no number or interval broken, the answer before the runtables. Real runs are cached
(tests/runstores.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hugelab.report import runtables, text
from hugelab.report.analysis import Options, analyse
from hugelab.report.model.result import Result
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests import runstores
from tests.helpers import cell_words, check_layout, printed, result_of

WIDTHS = [80, 120, 200]


def report_text(result: Result, width: int, full: bool) -> str:
    buf = io.StringIO()
    text.render(result, Console(file=buf, width=width, color_system=None), full=full)
    return buf.getvalue()


def check_report(result: Result, exp, width: int) -> None:
    for full in (False, True):
        out = report_text(result, width, full)
        check_layout(out, width, cell_words(exp))
        assert out.index("What matters") < out.index("Details") if "Details" in out else True
        lines = out.splitlines()
        for t in runtables.all_tables(result, full=full):
            for row in t.rows:
                for i, cell in enumerate(row):
                    # names and numbers whole, on one line (a name wider than the terminal
                    # wraps at its spaces: check_layout sees no word split)
                    if (i == 0 or i in t.right) and len(cell) <= width:
                        assert any(cell in line for line in lines), (width, t.key, cell)


def analysed(db) -> Result:
    with Store(db) as st:
        return analyse(load_run(st), Options()).result


@pytest.fixture(scope="module", params=["001-mnstory-factorial.toml",
                                        "002-host-x-guest-2x2.toml"])
def fabricated(request, tmp_path_factory):
    exp = runstores.experiment(request.param)
    db = tmp_path_factory.mktemp("wr") / "s.db"
    runstores.fabricate(db, exp, blocks=12)
    return exp, db


@pytest.mark.parametrize("width", WIDTHS)
def test_guest_factorial_examples_fit(fabricated, width):
    exp, db = fabricated
    check_report(analysed(db), exp, width)
    check_layout(printed(exp, result_of(db, exp), width), width, cell_words(exp))


@pytest.fixture(scope="module")
def real_stores():
    return {"mthp-sizes.toml": runstores.real_run("mthp-sizes.toml", 2),
            None: runstores.real_run(None, 6)}


@pytest.mark.host
@pytest.mark.slow
@pytest.mark.parametrize("example", ["mthp-sizes.toml", None], ids=["mthp-sizes", "default"])
def test_real_runs_fit(real_stores, example):
    exp = runstores.experiment(example)
    db = real_stores[example]
    res = analysed(db)
    summary = result_of(db, exp)
    for width in WIDTHS:
        check_report(res, exp, width)
        out = printed(exp, summary, width)
        check_layout(out, width, cell_words(exp))
        assert out.index("What matters") < out.index("each ")
