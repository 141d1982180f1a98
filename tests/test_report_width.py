"""The terminal report reads well at 80, 120 and 200 columns: no line is wider than the
terminal, no number or interval is broken across lines, each fact is said once, and the compact
default leaves the detail to --full."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from hugelab.report import runtables, text
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests.helpers import make_store

NUMBER = re.compile(r"[-+]?\d[\d,.]*(?:e[-+]?\d+)?%?")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    db = tmp_path_factory.mktemp("w") / "s.db"
    make_store(db, blocks=24, arms={"4k": 1.0, "thp-always-with-a-long-name": 0.95,
                                    "hugetlb-2M": 0.93, "hugetlb-1G": 0.9},
               flagged={"hugetlb-2M": {3}}, failed={"hugetlb-1G": {5}})
    with Store(db) as store:
        return analyse(load_run(store), Options()).result


def rendered(result, width: int, full: bool) -> str:
    buf = io.StringIO()
    text.render(result, Console(file=buf, width=width, color_system=None), full=full)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("full", [False, True])
def test_no_line_too_wide_and_no_number_broken(result, width, full):
    out = rendered(result, width, full)
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    for t in runtables.all_tables(result, full=full):
        for row in t.rows:
            for i, cell in enumerate(row):
                if i == 0 or i in t.right:  # names and numbers stay whole, on one line
                    assert any(cell in line for line in lines), (width, t.key, cell)


def test_numbers_of_wrapping_text_are_whole_too(result):
    out = rendered(result, 80, True)
    joined = " ".join(out.split())
    for line in out.splitlines():
        for m in NUMBER.finditer(line.rstrip()):
            assert m.group() in joined


def test_each_fact_once_and_compact_by_default(result):
    compact, full = rendered(result, 120, False), rendered(result, 120, True)
    assert "Classic table" not in compact and "Classic table" in full
    assert "Tails" not in compact and "Tails" in full
    assert "--full" in compact
    for out in (compact, full):
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        notes = [ln for ln in lines if ln.startswith(("WARNING", "thp", "hugetlb", "4k:"))]
        assert len(notes) == len(set(notes)), "a note or warning is said twice"


def test_too_few_pairs_is_said_once(tmp_path):
    db = tmp_path / "few.db"
    make_store(db, blocks=3)
    with Store(db) as store:
        res = analyse(load_run(store), Options()).result
    out = " ".join(rendered(res, 80, False).split())
    assert out.count("needed for any verdict") == 1 and out.count("too few pairs") == 1


def test_a_stacked_row_leaves_out_its_empty_cells():
    """Too narrow for the table: one block per row, and a baseline's empty effect is no bare
    'effect [95% CI]:' line."""
    from hugelab.report.table import Table
    from hugelab.report.text import print_table
    t = Table("cells", "Cells", ["arm", "ok", "median ns", "effect [95% CI]", "verdict"],
              [["4k (baseline)", "10", "101.3", "", ""],
               ["thp", "10", "70.2", "-30.7% [-33.0, -28.1]", "faster"]])
    buf = io.StringIO()
    print_table(t, Console(file=buf, width=30, color_system=None))
    out = buf.getvalue()
    assert " 4k (baseline)" in out and "effect [95% CI]: -30.7%" in out
    assert out.count("effect [95% CI]:") == 1 and out.count("verdict:") == 1, out
