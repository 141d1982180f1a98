"""design = "interleaved": what can share one hugelab-mem process (parse), and a real run whose
every arm's trial is ok, evidenced by its own buffer, its windows kept."""

from __future__ import annotations

import json
import subprocess

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import parse_experiment
from hugelab.workloads.registry import check_places
from tests.helpers import HUGELAB
from tests.hostguard import host_state

CHASE = {"kind": "hugelab-mem", "workload": "chase", "size": "16M", "duration": 0.5}


def exp(arms: list[dict], workload: dict | None = None, **top: object) -> dict:
    return {"design": "interleaved", "workload": workload or CHASE, "arms": arms, **top}


def test_arms_that_share_a_process_parse():
    e = parse_experiment(exp([{"name": "a", "backing": "4k"}, {"name": "b", "backing": "4k"},
                              {"name": "t", "backing": "thp"},
                              {"name": "h", "backing": "hugetlb-2M"}]))
    assert e.design == "interleaved" and len(e.arms) == 4


@pytest.mark.parametrize(("arms", "workload", "words"), [
    ([{"name": "a", "backing": "4k", "thp": "never"}, {"name": "t", "backing": "thp",
                                                        "thp": "always"}],
     None, "cannot be interleaved"),
    ([{"name": "a", "backing": "4k"}, {"name": "g", "backing": "4k", "vm": {}}],
     None, "no guest arms"),
    ([{"name": "a", "backing": "4k"}, {"name": "m", "backing": "mthp-64K"}],
     None, "needs host knobs of its own"),
    ([{"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}],
     {**CHASE, "workload": "seq-read"}, "chase or random"),
    ([{"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}],
     {"kind": "sysbench"}, "does not run with design"),
    ([{"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}],
     {**CHASE, "threads": "x"}, "one thread"),
    ([{"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}],
     {**CHASE, "duration": 0.05}, "shorter than one round"),
])
def test_what_cannot_share_a_process_is_refused_with_the_reason(arms, workload, words):
    with pytest.raises(ExperimentError, match=words) as e:
        check_places(parse_experiment(exp(arms, workload)))
    assert "paired" in (e.value.hint or "") or "duration" in (e.value.hint or "")


@pytest.mark.parametrize("backings", [("mthp-16K", "mthp-64K"), ("4k", "mthp-64K"),
                                      ("4k", "shmem-thp")])
def test_a_duet_of_arms_that_set_different_host_knobs_is_refused(backings):
    arms = [{"name": f"a{i}", "backing": b} for i, b in enumerate(backings)]
    with pytest.raises(ExperimentError, match="agree on them"):
        parse_experiment({"design": "duet", "arms": arms})
    parse_experiment({"design": "duet", "arms": [{"name": "a", "backing": "4k"},
                                                 {"name": "b", "backing": "thp"}]})


EXPERIMENT = """\
name = "interleaved-real"
seed = 9
blocks = 3
design = "interleaved"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "32M"
duration = 0.6
window_ms = 10

[[arms]]
name = "a"
backing = "4k"

[[arms]]
name = "a-again"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"

[[arms]]
name = "2M"
backing = "hugetlb-2M"
"""


@pytest.mark.host
def test_a_real_interleaved_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    (tmp_path / "e.toml").write_text(EXPERIMENT)
    r = subprocess.run([*HUGELAB, "run", "e.toml", "--store", "s.db"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", "s.db", "--json"],
                                      cwd=tmp_path, capture_output=True, text=True,
                                      check=True).stdout)
    trials = shown["trials"]
    assert len(trials) == 12
    for t in trials:
        assert t["status"] == "ok", (t["arm"], t["error"], t["flag"])
        assert t["evidence"]["checks"]["workload"]["status"] == "verified", t["evidence"]
        reps = t["provenance"]["reps"]
        assert reps["unit"] == "window" and reps["n"] >= 4
    by_block: dict[int, set[float]] = {}
    for t in trials:  # one process per block: every arm of it started together
        by_block.setdefault(t["block"], set()).add(t["started"])
    assert all(len(starts) == 1 for starts in by_block.values())
    page = {t["arm"]: t["evidence"]["KernelPageSize_kB"] for t in trials}
    assert page == {"a": 4, "a-again": 4, "thp": 4, "2M": 2048}
    report = subprocess.run([*HUGELAB, "report", "--store", "s.db"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert report.returncode == 0 and "Windows within trials" in report.stdout
    assert host_state() == before
