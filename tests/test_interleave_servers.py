"""Interleaved servers (workloads/interleave.py): the window order (a random permutation and
its mirror), windows per arm, the arms' results from their windows, the experiment file's
refusals, and two real PostgreSQL servers up at once, each evidenced from its own postmaster."""

from __future__ import annotations

import os
import random
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.experiment.parse import parse_experiment
from hugelab.workloads import interleave
from hugelab.workloads.postgres.cluster import installed
from hugelab.workloads.postgres.workload import Postgres


def test_order_mirrors_every_permutation():
    plan = interleave.order(3, 6, random.Random(1))
    assert len(plan) == 6
    for a, b in zip(plan[::2], plan[1::2], strict=True):
        assert b == a[::-1] and sorted(a) == [0, 1, 2]
    # over many rounds each arm sits in each position equally often
    many = interleave.order(2, 400, random.Random(2))
    assert sum(p[0] == 0 for p in many) == 200


def test_rounds_are_even_and_at_least_two():
    assert interleave.rounds_for(10, 2) == 6 and interleave.rounds_for(8, 2) == 4
    assert interleave.rounds_for(1, 2) == 2
    assert interleave.geomean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(WorkloadError):
        interleave.geomean([1.0, 0.0])


class Counter:
    """A server workload whose windows report how many windows ran before them: the order."""

    window_s = 1.0
    duration_s = 4.0

    def __init__(self, log):
        self.log, self.stopped = log, []

    def launched(self, backing):
        return backing

    def fill(self, server):
        pass

    def warm(self, target, server):
        pass

    def window(self, target, server, seconds):
        self.log.append(server)
        return {"tps": float(len(self.log))}, np.array([float(len(self.log))])

    def finish(self, server, windows, latencies, backing):
        from hugelab.workloads.base import WorkloadResult
        return WorkloadResult({"tps": interleave.geomean([w["tps"] for w in windows]),
                               "n": float(latencies.size)}, "tps", "tx/s", "higher",
                              info={"backing": backing})

    def stop(self, server):
        self.stopped.append(server)


def test_serve_alternates_windows_and_stops_every_server():
    log: list[str] = []
    a, b = Counter(log), Counter(log)
    out = interleave.serve(SimpleNamespace(name="native"), [(a, "4k"), (b, "hugetlb-2M")],
                           random.Random(3))
    assert [r.info["backing"] for r in out] == ["4k", "hugetlb-2M"]
    assert [r.metrics["n"] for r in out] == [4.0, 4.0] and len(log) == 8
    pairs = [log[i:i + 2] for i in range(0, 8, 2)]
    assert all(sorted(p) == ["4k", "hugetlb-2M"] for p in pairs)
    assert pairs[1] == pairs[0][::-1]  # the mirror
    assert a.stopped == ["4k"] and b.stopped == ["hugetlb-2M"]


def _exp(**over):
    d = {"name": "x", "design": "interleaved", "baseline": "a",
         "workload": {"kind": "postgres", "duration_s": 4, "window_s": 2},
         "arms": [{"name": "a", "backing": "4k"}, {"name": "b", "backing": "hugetlb-2M"}]}
    d.update(over)
    return d


def test_the_experiment_file_takes_servers_and_refuses_what_cannot_share_a_host():
    assert parse_experiment(_exp()).design == "interleaved"
    from hugelab.workloads.registry import check_places
    with pytest.raises(ExperimentError, match="shorter than two windows"):
        check_places(parse_experiment(_exp(workload={"kind": "postgres", "duration_s": 3,
                                                     "window_s": 2})))
    with pytest.raises(ExperimentError, match="one host setting, so the arms must share thp"):
        parse_experiment(_exp(arms=[{"name": "a", "backing": "4k", "thp": "never"},
                                    {"name": "b", "backing": "4k", "thp": "always"}]))
    with pytest.raises(ExperimentError, match="does not run with design") as e:
        check_places(parse_experiment(_exp(workload={"kind": "sysbench"})))
    assert "kinds that interleave: hugelab-mem, mariadb, memcached, postgres, redis, " \
        "varnish" in (e.value.hint or "")
    redis = parse_experiment(_exp(workload={"kind": "redis", "duration_s": 4, "window_s": 1},
                                  arms=[{"name": "a", "backing": "thp", "thp": "always"},
                                        {"name": "b", "backing": "thp", "thp": "always",
                                         "app": {"disable-thp": "yes"}}]))
    assert redis.design == "interleaved"
    requests = parse_experiment(_exp(workload={"kind": "redis", "duration_s": 2,
                                               "window_ops": 200}))
    check_places(requests)  # windows of requests: a short duration still holds many
    with pytest.raises(ExperimentError, match="port of its own"):
        check_places(parse_experiment(_exp(workload={"kind": "redis", "port": 6380})))
    from hugelab.workloads.registry import build_workload
    with pytest.raises(ExperimentError, match="window_s are seconds"):
        build_workload("redis", {"window_s": 0.5})


def test_redis_window_metrics_and_each_servers_own_tree():
    from hugelab.trial.appevidence import check_process
    from hugelab.trial.evidence import CONTRADICTED, VERIFIED, check_tree
    from hugelab.workloads.redis.bench import window_metrics
    from hugelab.workloads.servermem import server_tree
    m = window_metrics([{"get_rps": 2.0, "get_p99_ms": 1.0, "wall_s": 1.0},
                        {"get_rps": 8.0, "get_p99_ms": 3.0, "wall_s": 1.5},
                        {"get_rps": 4.0, "get_p99_ms": 2.0, "wall_s": 1.0}])
    assert m["get_rps"] == pytest.approx(4.0) and m["get_p99_ms"] == 2.0
    assert m["wall_s"] == m["duration_s"] == 3.5
    off = server_tree("redis-server", {"thp_enabled": 0, "anon_kb": 20480, "anon_huge_kb": 0,
                                       "rss_kb": 30000, "madvised_thp_kb": 0})
    on = server_tree("redis-server", {"thp_enabled": 1, "anon_kb": 20480,
                                      "anon_huge_kb": 16384, "madvised_thp_kb": 2048})
    assert check_tree("4k", off).status == VERIFIED and check_tree("thp", on).status == VERIFIED
    assert check_tree("4k", on).status == CONTRADICTED
    assert check_process("never", off).status == VERIFIED
    assert check_process("never", on).status == CONTRADICTED
    assert on["unadvised_thp_kb_by_comm"] == {"redis-server": 14336}
    assert check_process("madvise", on).status == CONTRADICTED


@pytest.mark.server
@pytest.mark.skipif(not installed(), reason="Debian package postgresql not installed")
def test_two_real_servers_at_once_each_with_its_own_evidence():
    from hugelab.trial.native import NativeTarget
    base = Postgres(scale=1, clients=2, threads=1, duration_s=2, window_s=1, warmup_s=0)
    arms = [(base.for_arm(SimpleNamespace(name=n, backing="4k")), "4k") for n in "ab"]
    out = interleave.serve(NativeTarget(), arms, random.Random(1))
    assert len({r.evidence["postmaster_pid"] for r in out}) == 2
    for r in out:
        assert r.evidence["KernelPageSize_kB"] == 4 and r.metrics["tps"] > 0
        assert r.info["reps"]["n"] == 2 and r.metrics["duration_s"] == 2
        assert r.metrics["p50_ms"] > 0


@pytest.mark.server
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_two_real_redis_servers_at_once_each_with_its_own_evidence():
    from hugelab.trial.native import NativeTarget
    from hugelab.workloads.redis import RedisBenchmark
    yes = RedisBenchmark(requests=5000, clients=4, duration_s=2, window_s=1,
                         app=(("disable-thp", "yes"),))
    no = RedisBenchmark(requests=5000, clients=4, duration_s=2, window_s=1)
    out = interleave.serve(NativeTarget(), [(yes, "thp"), (no, "thp")], random.Random(3))
    pids = {r.evidence["server"]["pid"] for r in out}
    assert len(pids) == 2 and all(r.evidence["tree"]["processes"] == 1 for r in out)
    assert out[0].evidence["redis"] == {"disable_thp": True, "process_thp": None}
    assert "redis" not in out[1].evidence  # no app switch set: no app rule to judge
    for r in out:
        assert r.info["reps"]["n"] == 2 and r.metrics["get_rps"] > 0
        # two windows of about 1 s, each sized from the server's last run: a machine whose
        # speed moved (a CI run's: 0.81 s in all) can make the first one short
        assert 0.5 < r.metrics["duration_s"] < 10.0 and r.info["version"]
        assert r.info["interleaved"]["servers"] == 2
    assert not [p for p in pids if os.path.exists(f"/proc/{p}/status") and
                "Z" not in open(f"/proc/{p}/status").read().split("State:")[1][:4]]


def _aa_trial(rng, n_windows=6, drift=0.02):
    """One interleaved A/A trial of two servers: the machine's speed drifts within the trial
    (a random walk plus a trend), each window adds noise; returns each arm's geomean tps."""
    plan = interleave.order(2, n_windows, rng)
    speed, t, per = 1.0, 0, [[], []]
    trend = rng.normal(0, drift)
    for perm in plan:
        for i in perm:
            speed *= np.exp(trend + rng.normal(0, drift))
            per[i].append(1000.0 * speed * np.exp(rng.normal(0, 0.03)))
            t += 1
    return [interleave.geomean(v) for v in per]


@pytest.mark.slow  # a simulation: the Python lane
def test_interleaved_servers_aa_false_positives_at_most_alpha_by_simulation():
    from hugelab.stats import paired
    rng = random.Random(7)
    nrng = np.random.default_rng(7)

    class Both:  # order() takes a random.Random; the noise a numpy generator
        shuffle = rng.shuffle

        def normal(self, *a):
            return nrng.normal(*a)

    gen = Both()
    sims, claims, shifts = 400, 0, []
    for _ in range(sims):
        trials = np.array([_aa_trial(gen) for _ in range(12)])
        c = paired.compare(trials[:, 0], trials[:, 1], better="higher", alpha=0.05)
        claims += c.verdict in ("faster", "slower")
        shifts.append(c.effect_pct)
    se = np.sqrt(0.05 * 0.95 / sims)
    assert claims / sims <= 0.05 + 2.5 * se
    assert abs(float(np.median(shifts))) < 0.5  # drift cancels in the mirrored order
