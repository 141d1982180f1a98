"""The matrix -> store -> summary path with a deterministic workload on a fake host."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.experiment import Arm, Experiment, PoolSpec, VmLayer, schedule
from hugelab.host.paths import parse_selected
from hugelab.planning.pools import pool_plan
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.report.summary import arm_summary
from hugelab.runner import Runner
from hugelab.store import Store, Trial
from tests.helpers import DeterministicWorkload, Recorder, experiment
from tests.helpers import env as env  # noqa: F401 - the fake host, its session and a store


def run(env, exp, workload, target=None, **kw):
    host, session, store, _ = env
    target = target or Recorder()
    return (Runner(exp, store, workload, target=target, session=session, paths=host, **kw).run(),
            target)


def test_every_trial_committed_in_schedule_order_and_host_restored(env):
    host, _, store, kernel = env
    exp = experiment()
    out, target = run(env, exp, DeterministicWorkload())
    assert out.executed == 12 and not out.skipped
    assert target.calls == [
        next(a.backing for a in exp.arms if a.name == t.arm) for t in schedule(exp)]
    rows = store.values(out.run_id)
    assert len(rows) == 12 and all(r[4] == "ok" for r in rows)
    # pools were reserved for the hugetlb arms (3 GiB -> 1536 x 2M, 3 x 1G), then released
    written = {(p.split("/")[-2], v) for p, v in kernel.writes if p.endswith("nr_hugepages")}
    assert ("hugepages-2048kB", "1536") in written and ("hugepages-1048576kB", "3") in written
    assert host.pool_file(2048).read_text().strip() == "0"
    assert host.pool_file(1048576).read_text().strip() == "0"


def test_repeats_run_one_after_another_with_a_pause_between_them(env):
    exp = replace(experiment(blocks=2), repeats=3)
    events, slept = [], []
    out, _ = run(env, exp, DeterministicWorkload(), progress=events.append,
                 repeat_pause_s=7.5, sleep=slept.append)
    blocks = sorted({r[0] for r in env[2].values(out.run_id)})
    assert out.executed == 24 and blocks == list(range(6))
    assert slept == [7.5, 7.5]  # between repeats, not before the first or after the last
    said = [e.message for e in events if e.kind == "repeat"]
    assert said == ["repeat 2 of 3 after a 7.5 s pause", "repeat 3 of 3 after a 7.5 s pause"]
    assert [exp.repeat_of(b) for b in blocks] == [0, 0, 1, 1, 2, 2]
    assert "repeats" in exp.to_dict() and "repeats" not in experiment().to_dict()
    assert exp.key() != experiment(blocks=2).key()  # its own run, never a resumed plain one


def test_summary_against_baseline(env):
    exp = experiment()
    out, _ = run(env, exp, DeterministicWorkload())
    rows = arm_summary(env[2].values(out.run_id), [a.name for a in exp.arms], "4k", "lower")
    by = {r.arm: r for r in rows}
    assert by["4k"].baseline and by["4k"].n == 3
    assert by["hugetlb-1G"].speedup == pytest.approx(100 / 70)


def test_contradicting_evidence_is_flagged_and_not_counted(env):
    exp = experiment()
    out, _ = run(env, exp, DeterministicWorkload(lie_for="hugetlb-2M"))
    trials = [t for t in env[2].trials(out.run_id) if t["arm"] == "hugetlb-2M"]
    assert {t["status"] for t in trials} == {"flagged"}
    assert "page size is 4 KiB" in trials[0]["flag"]
    rows = arm_summary(env[2].values(out.run_id), [a.name for a in exp.arms], "4k", "lower")
    assert next(r for r in rows if r.arm == "hugetlb-2M").n == 0


def test_failed_trial_is_recorded_and_the_run_goes_on(env):
    out, _ = run(env, experiment(), DeterministicWorkload(fail_for="thp"))
    failed = [t for t in env[2].trials(out.run_id) if t["status"] == "failed"]
    assert len(failed) == 3 and "boom" in failed[0]["error"]
    assert out.executed == 12


def test_resume_runs_only_what_is_missing(env):
    exp = experiment(blocks=4)

    class Dies(Recorder):
        def __init__(self, after):
            super().__init__()
            self.after = after

    class Crash(BaseException):  # like a kill: nothing of the trial is committed
        pass

    @dataclass(frozen=True)
    class Flaky(DeterministicWorkload):
        def run(self, target, backing):
            if len(target.calls) == target.after:
                raise Crash
            return super().run(target, backing)

    with pytest.raises(Crash):
        run(env, exp, Flaky(), Dies(after=6))
    assert len(env[2].values(1)) == 6
    out, target = run(env, exp, DeterministicWorkload())
    assert out.resumed and out.executed == 10 and len(target.calls) == 10
    keys = [(r[0], r[2]) for r in env[2].values(out.run_id)]
    assert len(keys) == len(set(keys)) == 16


def test_environment_failures_are_retried_on_resume_workload_failures_on_request(env):
    exp = experiment(blocks=2)

    @dataclass(frozen=True)
    class Broken(DeterministicWorkload):
        def run(self, target, backing):
            if backing == "hugetlb-1G":
                raise PoolBusyError("hugelab-mem exited with 3: no pages")
            if backing == "hugetlb-2M":
                raise WorkloadError("tool exited 1: boom")
            if backing == "thp":
                raise KeyError("a bug")  # never a traceback: a failed trial, retried later
            return super().run(target, backing)

    out, _ = run(env, exp, Broken())
    trials = {(t["block"], t["arm"]): t for t in env[2].trials(out.run_id)}
    assert trials[(0, "hugetlb-1G")]["cause"] == "pool"
    assert trials[(0, "hugetlb-2M")]["cause"] == "workload"
    assert "internal error" in trials[(0, "thp")]["error"]
    out, target = run(env, exp, DeterministicWorkload())
    assert sorted(target.calls) == sorted(["hugetlb-1G", "thp"] * 2)  # the 2M failures stay
    trials = {(t["block"], t["arm"]): t for t in env[2].trials(out.run_id)}
    assert trials[(1, "hugetlb-1G")]["status"] == "ok" and trials[(1, "hugetlb-1G")]["attempts"] == 2
    assert trials[(1, "hugetlb-1G")]["provenance"]["earlier_attempts"][0]["cause"] == "pool"
    assert trials[(1, "hugetlb-2M")]["status"] == "failed"
    series = {r["name"]: r for r in analyse(load_run(env[2], out.run_id), Options()).json()["series"]}
    assert series["hugetlb-1G"]["retried"] == 2 and series["4k"]["retried"] == 0
    assert "exited with 3" in series["hugetlb-1G"]["retry_reasons"][0]["reason"]
    out, target = run(env, exp, DeterministicWorkload(), retry_failed=True)
    assert sorted(target.calls) == ["hugetlb-2M"] * 2
    assert all(t["status"] == "ok" for t in env[2].trials(out.run_id))


def test_failed_trials_of_stores_older_than_causes_stay_failed(tmp_path):
    with Store(tmp_path / "s.db") as store:
        run_id, _ = store.get_or_create_run("k", "n", {}, {})
        store.add_trials([Trial(run_id, 0, 0, "a", "failed", None, error="boom"),  # cause NULL
                          Trial(run_id, 0, 1, "b", "failed", None, cause="environment")])
        assert store.done_keys(run_id) == {(0, "a", "native")}
        assert store.done_keys(run_id, retry_failed=True) == set()


def test_arm_thp_mode_applied_per_trial_and_reset_for_arms_without_one(env):
    host = env[0]
    seen: list[str] = []
    exp = experiment(blocks=2, thp={"thp": "always"})
    run(env, exp, DeterministicWorkload(thp_seen=seen, paths=host))
    calls = [next(a.backing for a in exp.arms if a.name == t.arm) for t in schedule(exp)]
    for backing, mode in zip(calls, seen, strict=True):
        assert mode == ("always" if backing == "thp" else "madvise")
    assert parse_selected(host.thp_enabled.read_text()) == "madvise"


def test_pool_that_cannot_be_reserved_skips_its_arms_only(env):
    host, _, store, kernel = env
    kernel.pool_cap[1048576] = 1
    exp = Experiment(**{**experiment().__dict__})
    out, target = run(env, exp, DeterministicWorkload())
    assert "hugetlb-1G" in out.skipped and "achieved 1" in out.skipped["hugetlb-1G"]
    assert "hugetlb-1G" not in target.calls and out.executed == 9


def test_pool_plan_takes_explicit_pools_and_the_largest_need():
    exp = Experiment("p", (Arm("a", "hugetlb-2M", pools=(PoolSpec("2M", 10),)),
                           Arm("b", "hugetlb-2M"), Arm("c", "4k", pools=(PoolSpec("1G", 2, 0),))))
    plan = pool_plan(exp, DeterministicWorkload(size_bytes=64 * 1024**2))
    assert plan == {("2M", None): 32, ("1G", 0): 2}


def test_pool_plan_covers_every_vm_layer_whatever_the_workloads_backing():
    lazy = VmLayer(backing="file", page_size="2M", prealloc=False, mem_mib=1024)
    arms = (Arm("thp-vm", "thp", vm=VmLayer(mem_mib=2048)),
            Arm("vm-1G", "thp", vm=VmLayer(backing="file", page_size="1G", prealloc=True,
                                           mem_mib=3072)),
            Arm("iperf-2M", "4k", vm=lazy), Arm("two-2M", "4k", vm=replace(lazy, vms=2)))
    work = DeterministicWorkload(size_bytes=64 * 1024**2)
    assert pool_plan(Experiment("p", arms), work) == {("1G", None): 3, ("2M", None): 1024}
    duet = Experiment("d", arms[1:3], design="duet")  # both arms of a block at once: summed
    assert pool_plan(duet, work) == {("1G", None): 3, ("2M", None): 512}
    both = Experiment("d", (arms[2], replace(arms[2], name="again")), design="duet")
    assert pool_plan(both, work) == {("2M", None): 1024}


@pytest.mark.slow
def test_until_verdict_stops_at_a_look_when_the_effect_is_large(env):
    from hugelab.stopping import SequentialStopper
    host, session, store, _ = env
    exp = experiment(blocks=30)

    @dataclass(frozen=True)
    class Noisy(DeterministicWorkload):
        def run(self, target, backing):
            r = super().run(target, backing)
            jitter = 1 + 0.01 * ((len(target.calls) * 7919) % 13 - 6) / 6
            r.metrics["ns_per_access"] *= jitter
            return r

    stopper = SequentialStopper(exp, store, looks=5, alpha=0.05)
    runner = Runner(exp, store, Noisy(), target=Recorder(), session=session, paths=host,
                    stopper=stopper)
    out = runner.run()
    info = stopper.describe()
    # O'Brien-Fleming bounds are strict early (no stop is possible with 6 pairs at alpha/3),
    # so 20-30% effects stop at an intermediate look, well before the 30-block maximum.
    assert 1 < info["stopped_at_look"] < 5
    assert out.executed == info["plan"]["look_sizes"][info["stopped_at_look"] - 1] * 4
    assert {d["decision"] for d in info["decided"].values()} == {"faster"}


@pytest.mark.slow
def test_until_verdict_identical_arms_never_claim_a_difference(env):
    from hugelab.stopping import SequentialStopper
    host, session, store, _ = env
    arms = (Arm("a", "4k"), Arm("b", "4k"))
    exp = Experiment("aa", arms, {"kind": "fake"}, seed=1, blocks=30, baseline="a")

    @dataclass(frozen=True)
    class Same(DeterministicWorkload):
        def run(self, target, backing):
            r = super().run(target, backing)
            r.metrics["ns_per_access"] *= 1 + 0.02 * (((len(target.calls) * 48271) % 101) / 100 - 0.5)
            return r

    stopper = SequentialStopper(exp, store, looks=5, alpha=0.05)
    Runner(exp, store, Same(), target=Recorder(), session=session, paths=host,
           stopper=stopper).run()
    decisions = {d["decision"] for d in stopper.decided.values()}
    assert decisions <= {"inconclusive", "equivalent"}


@pytest.mark.slow
def test_until_verdict_with_a_budget_ends_within_it(env):
    """Trials of 5 s on a clock that counts them: a budget of 150 s holds 14 blocks of two,
    the plan's most; the runner stops there, on a cap of 30."""
    from hugelab.planning.blockclock import BlockClock
    from hugelab.stopping import SequentialStopper
    host, session, store, _ = env
    arms = (Arm("a", "4k"), Arm("b", "4k"))
    exp = Experiment("aa", arms, {"kind": "fake"}, seed=1, blocks=30, baseline="a")
    target = Recorder()

    @dataclass(frozen=True)
    class Wavering(DeterministicWorkload):  # ±1.5% a trial: never decides early
        def run(self, target, backing):
            r = super().run(target, backing)
            r.metrics["ns_per_access"] *= 1.015 if len(target.calls) % 4 in (1, 2) else 0.985
            return r

    clock = BlockClock(150.0, now=lambda: 5.0 * len(target.calls))
    stopper = SequentialStopper(exp, store, looks=None, alpha=0.05, clock=clock)
    out = Runner(exp, store, Wavering(), target=target, session=session, paths=host,
                 stopper=stopper).run()
    info = stopper.describe()
    assert info["plan"]["max_blocks"] == 14 and out.executed <= 28
    assert out.executed == 2 * info["plan"]["look_sizes"][info["stopped_at_look"] - 1]
    assert 5.0 * out.executed <= 150.0 and info["budget"]["block_s"] == 10.0


def test_duet_runs_every_arm_of_a_block_at_the_same_time(env):
    import threading
    exp = Experiment(**{**experiment(blocks=3).__dict__, "design": "duet"})
    barrier = threading.Barrier(len(exp.arms), timeout=5)

    @dataclass(frozen=True)
    class Together(DeterministicWorkload):
        def run(self, target, backing):
            barrier.wait()  # raises BrokenBarrierError unless all arms run concurrently
            return super().run(target, backing)

    out, target = run(env, exp, Together())
    assert out.executed == 12
    trials = list(env[2].trials(out.run_id))
    assert all(t["status"] == "ok" for t in trials)
    for b in range(3):
        spans = {(t["started"], t["ended"]) for t in trials if t["block"] == b}
        assert len(spans) == 1  # one unit: started and ended together, committed together
    assert {t["provenance"]["design"] for t in trials} == {"duet"}


def test_duet_needs_shared_thp_modes(tmp_path):
    from hugelab.errors import ExperimentError
    from hugelab.experiment import load_experiment
    f = tmp_path / "d.toml"
    f.write_text('design = "duet"\n[[arms]]\nname = "a"\nbacking = "4k"\nthp = "never"\n'
                 '[[arms]]\nname = "b"\nbacking = "thp"\nthp = "always"\n')
    with pytest.raises(ExperimentError, match="line 1: design 'duet'"):
        load_experiment(f)


def test_until_verdict_on_too_few_blocks_says_what_to_add():
    from hugelab.cli.run import _more_blocks_hint
    assert _more_blocks_hint(4, 5, False).startswith("add --max-blocks 30 ")
    assert "--looks" not in _more_blocks_hint(4, 5, False)  # one look needs 6 blocks
    hint = _more_blocks_hint(12, 5, True)
    assert hint.startswith("raise --max-blocks to 30 ") and hint.endswith("--looks 2 to look "
                                                                          "within 12 blocks")
