"""The report's effect-against-page-size figure: page sizes from arms' settings, one point per
comparison with a 4 KiB baseline, rendered to a real PNG."""

from __future__ import annotations

import numpy as np
import pytest

from hugelab.experiment import Arm, Experiment, Factor
from hugelab.report import pagesizes, plots
from hugelab.report.analysis import analyse
from hugelab.report.runload import load_run
from hugelab.store import Store, Trial


def test_arm_page_reads_the_size_from_the_backing_or_the_vm_layer():
    assert pagesizes.arm_page({"backing": "mthp-64K"}) == (64, "4 KiB / mTHP")
    assert pagesizes.arm_page({"backing": "4k"}) == (4, "4 KiB / mTHP")
    assert pagesizes.arm_page({"backing": "thp"}) == (2048, "THP")
    assert pagesizes.arm_page({"backing": "hugetlb-1G"}) == (1048576, "hugetlb")
    assert pagesizes.arm_page({"backing": "4k", "vm": {"backing": "anon", "mthp": "1M"}}) == \
        (1024, "4 KiB / mTHP")
    assert pagesizes.arm_page({"backing": "4k", "vm": {"backing": "file", "page_size": "2M"}}) == \
        (2048, "hugetlb")
    assert pagesizes.arm_page({"backing": "4k", "thp": "never", "vm": {"backing": "anon"}}) == \
        (4, "4 KiB / mTHP")
    assert pagesizes.arm_page({"backing": "4k", "vm": {"backing": "anon"}}) is None  # as found
    assert pagesizes.arm_page({"backing": "4k", "vm": {"backing": "memfd"}}) is None


def page_run(path) -> Store:
    """A factorial run, backing x workload, lower is better: chase gains with page size,
    populate loses (made-up values)."""
    factor = {"4k": 1.0, "mthp-16K": 0.97, "mthp-64K": 0.93, "thp": 0.9, "hugetlb-1G": 0.88}
    arms = tuple(Arm(f"backing={b} [workload={w}]", b, levels=(("backing", b), ("workload", w)),
                     workload=(("workload", w),))
                 for w in ("chase", "populate") for b in factor)
    exp = Experiment("pages", arms, blocks=12, baseline=arms[0].name,
                     factors=(Factor("backing", tuple(factor)),
                              Factor("workload", ("chase", "populate"), scenario=True)))
    st = Store(path)
    run_id, _ = st.get_or_create_run("key-pages", "pages", exp.to_dict(), {})
    rng = np.random.default_rng(4)
    for b in range(12):
        for pos, arm in enumerate(arms):
            f = factor[arm.backing] if "chase" in arm.name else 1 / factor[arm.backing]
            st.add_trial(Trial(run_id, b, pos, arm.name, "ok",
                               100.0 * f * float(np.exp(rng.normal(0, 0.01))), "ns_per_load",
                               "ns", "lower", metrics={}, evidence={}, monitors={},
                               provenance={"accel": "native", "target": "native"},
                               target="native"))
    return st


@pytest.mark.slow
def test_page_size_figure_from_a_run(tmp_path):
    st = page_run(tmp_path / "s.db")
    report = analyse(load_run(st))
    st.close()
    points = pagesizes.page_size_points(report)
    chase = {p.kb: p for p in points if p.group == "workload=chase"}
    assert set(chase) == {16, 64, 2048, 1048576}
    c64 = chase[64]
    assert c64.ci_low_pct is not None and c64.effect_pct is not None and c64.ci_high_pct is not None
    assert c64.ci_low_pct <= c64.effect_pct <= c64.ci_high_pct < 0
    assert {p.group for p in points} == {"workload=chase", "workload=populate"}
    png = pagesizes.page_sizes(points)
    out = tmp_path / "pages.png"
    out.write_bytes(png)
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and out.stat().st_size > 10_000
    captions = [c for c, _ in plots.all_figures(report)]
    assert "Effect against page size, vs 4 KiB pages, with intervals" in captions


def test_no_page_size_figure_without_sizes_to_compare(tmp_path):
    from tests.helpers import make_store
    make_store(tmp_path / "s.db", arms={"4k": 1.0, "thp": 0.95})  # one size against 4 KiB
    with Store(tmp_path / "s.db") as st:
        report = analyse(load_run(st))
    assert pagesizes.page_size_points(report) == []
