"""A request-level trial that a stalled machine left with too few window blocks to measure its
own interval is flagged, and so left out of the analysis (hugelab.trial.judge
measurement_check). Seen on a shared VM under hypervisor steal (memcached-interleaved, seed
964, docs/benchmarks.md): four blocks' trials timed 4-6 windows per arm where ~90 were usual,
their rates 10-30 times below the others', their A/A effects +54%, +46%, +2% and -8%, and they
were counted like any other."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hugelab.report.summary import arm_summary
from hugelab.runner import Runner
from hugelab.stats.signedrank import min_pairs
from hugelab.trial.judge import MIN_WINDOW_BLOCKS, judge_evidence, measurement_check
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.reqmix import parse_output
from hugelab.workloads.requests import arm_metrics
from tests.helpers import DeterministicWorkload, Recorder, experiment, reqmix_report
from tests.helpers import env as env  # noqa: F401 - the fake host, its session and a store


def client_run(blocks: int, arms: int = 3) -> list[dict[str, float]]:
    """Each arm's metrics from a client run with `blocks` complete window blocks, plus one
    block that timed only the first arm (cut short by the trial's end)."""
    rates = [[1000.0 * (1 + 0.01 * ((b * 7 + a) % 5)) for a in range(arms)]
             for b in range(blocks)]
    res = parse_output(reqmix_report(rates + [[900.0] * arms]))
    res = replace(res, windows=tuple(w for w in res.windows if w.block < blocks or w.arm == 0))
    return [arm_metrics(res, a) for a in range(arms)]


def test_the_rule_is_the_count_the_trials_own_interval_needs():
    assert MIN_WINDOW_BLOCKS == min_pairs(0.05)
    short, enough = client_run(MIN_WINDOW_BLOCKS - 1), client_run(MIN_WINDOW_BLOCKS)
    # every arm carries the same count of complete blocks (the cut block is not one)
    assert {m["window_blocks"] for m in short} == {MIN_WINDOW_BLOCKS - 1}
    assert {m["window_blocks"] for m in enough} == {MIN_WINDOW_BLOCKS}
    # one block fewer and the trial's own 95% interval is unbounded: it measured too little
    assert all(math.isinf(m["window_hl_se_log"]) for m in short[1:])
    assert all(math.isfinite(m["window_hl_se_log"]) for m in enough[1:])
    assert [measurement_check(m, {}) for m in enough] == [[], [], []]
    for m in short:
        (check,) = measurement_check(m, {"load": {"steal_share": 0.426}})
        assert check.status == "contradicted" and check.layer == "measurement"
        assert "only 5 window block(s)" in check.reason and "took 43% of the CPU" in check.reason


def test_other_trials_get_no_measurement_check():
    assert measurement_check({"ns_per_access": 80.0}, {}) == []
    assert measurement_check(None, {}) == []
    evidence: dict = {}
    status, reason = judge_evidence(evidence, measurement_check({"window_blocks": 2.0}, {}))
    assert status == "contradicted" and reason.startswith("measurement: the load generator")
    assert "steal" not in reason and "hypervisor" not in reason  # none measured: none said


class Stalled(DeterministicWorkload):
    """Every arm's trial in block 1 timed only two window blocks (the machine stalled)."""

    def run(self, target, backing):
        res = super().run(target, backing)
        block = len(target.calls) > len(experiment().arms) and \
            len(target.calls) <= 2 * len(experiment().arms)
        return WorkloadResult({**res.metrics, "window_blocks": 2.0 if block else 45.0},
                              res.primary, res.unit, res.better, evidence=res.evidence)


def test_a_stalled_blocks_trials_are_flagged_and_not_counted(env):
    host, session, store, _ = env
    exp = experiment(blocks=3)
    out = Runner(exp, store, Stalled(), target=Recorder(), session=session, paths=host).run()
    trials = list(store.trials(out.run_id))
    flagged = [t for t in trials if t["status"] == "flagged"]
    assert {t["block"] for t in flagged} == {1} and len(flagged) == len(exp.arms)
    assert all("window block(s)" in t["flag"] for t in flagged)
    assert {t["status"] for t in trials if t["block"] != 1} == {"ok"}
    rows = arm_summary(store.values(out.run_id), [a.name for a in exp.arms], "4k", "lower")
    assert {r.n for r in rows} == {2}
    assert next(r for r in rows if r.arm == "thp").flagged == 1


@pytest.mark.parametrize("blocks", [2, 5])
def test_a_client_run_with_no_complete_block_counts_none(blocks):
    metrics = client_run(blocks, arms=2)
    assert {m["window_blocks"] for m in metrics} == {blocks}
    assert all(measurement_check(m, {}) for m in metrics)
