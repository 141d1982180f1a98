"""A run whose trials all failed: the report says there is nothing to compare, and assumes no
direction (a throughput workload's failed trials carry none)."""

from __future__ import annotations

from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store, Trial


def test_no_ok_trial_says_nothing_to_compare_not_which_direction(tmp_path):
    exp = {"name": "pg", "baseline": "4k", "blocks": 2, "seed": 1,
           "arms": [{"name": "4k", "backing": "4k"}, {"name": "2M", "backing": "hugetlb-2M"}]}
    with Store(tmp_path / "s.db") as st:
        run_id, _ = st.get_or_create_run("k", "pg", exp, {})
        for b in range(2):
            for pos, arm in enumerate(("4k", "2M")):
                st.add_trial(Trial(run_id, b, pos, arm, "failed", None,
                                   error="pgbench exited with 1: pgbench: error: too many clients"))
    with Store(tmp_path / "s.db") as st:
        result = analyse(load_run(st), Options()).json()
    text = repr(result)
    assert "assuming lower" not in text
    assert "no ok trial in either arm: nothing to compare" in text
