"""Request-level interleaving of servers (hugelab.workloads.requests): pure parts with plain
inputs (pinning, an arm's metrics from the client's windows, a server tree's CPU time from a
fake /proc), and for real: two redis servers A/A, each arm judged by its own server, servers
pinned apart from the client, nothing left running."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import numpy as np
import pytest

from hugelab.errors import WorkloadError
from hugelab.stats.windows import block_log_ratios
from hugelab.workloads.reqmix import parse_output
from hugelab.workloads.requests import arm_metrics, pinning, wants_requests
from hugelab.workloads.servercpu import TICK, core_map, tree, tree_cpu_s
from tests.helpers import reqmix_report as report


def test_the_client_and_the_servers_get_cpus_of_their_own():
    assert pinning([0, 1]) == {"client": [1], "servers": [0]}
    assert pinning([3, 0, 2, 1]) == {"client": [3], "servers": [0, 1, 2]}
    assert pinning([0]) == {"client": [0], "servers": [0]}
    # more servers than the CPUs the client leaves: they share them (this 2-CPU host)
    assert pinning([0, 1], 3) == {"client": [1], "servers": [0]}


def test_with_cpus_enough_each_server_gets_its_own_whole_cores_the_same_number_each():
    """A many-CPU host (which this 2-CPU one cannot be, so its topology is made up): 4 cores
    with two hyperthreads each, CPUs i and i+4 on core i; the client takes CPU 7, whose
    sibling 3 is then no whole core for a server."""
    ht = {c: (0, c % 4) for c in range(8)}
    assert pinning(range(8), 3, ht)["each"] == [[0, 4], [1, 5], [2, 6]]
    assert pinning(range(8), 2, ht)["each"] == [[0, 4], [1, 5]]  # one core each, one idle
    # fewer whole cores than servers: single CPUs, one each
    assert pinning(range(8), 4, ht)["each"] == [[0], [1], [2], [3]]
    # no topology known: every CPU its own core; no server shares a CPU with another
    mine = pinning(range(16), 3)["each"]
    assert [len(c) for c in mine] == [5, 5, 5] and len({c for g in mine for c in g}) == 15
    assert 15 not in {c for g in mine for c in g}  # the client's
    assert "each" not in pinning(range(8), 1, ht)  # one server: every CPU but the client's


def test_cores_are_read_from_sysfs_topology(tmp_path):
    for cpu, (pkg, core) in {0: (0, 0), 1: (0, 0), 2: (1, 0)}.items():
        top = tmp_path / f"cpu{cpu}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text(f"{pkg}\n")
        (top / "core_id").write_text(f"{core}\n")
    assert core_map([0, 1, 2, 3], tmp_path) == {0: (0, 0), 1: (0, 0), 2: (1, 0), 3: (-1, 3)}
    assert pinning([0, 1, 2, 3], 1, core_map([0, 1, 2, 3], tmp_path)) == \
        {"client": [3], "servers": [0, 1, 2]}


def test_an_arms_rate_without_slow_windows_is_the_geometric_mean_and_drift_cancels():
    # the machine's speed drifts by x1.5 from block to block; arm 1 is 2% faster throughout
    speed = [1.0, 1.5, 0.8, 1.2] * 10
    res = parse_output(report([[1000 * s, 1020 * s] for s in speed]))
    base, other = arm_metrics(res, 0), arm_metrics(res, 1)
    assert base["ops_per_s"] == pytest.approx(1000 * math.exp(sum(map(math.log, speed)) / 40))
    assert base["ops_per_s_mean"] == pytest.approx(base["ops_per_s"])
    assert other["window_effect_pct"] == pytest.approx(2.0, abs=1e-6)
    assert other["block_sd_pct"] == pytest.approx(0.0, abs=1e-6)
    assert other["window_effect_lo_pct"] - 1e-6 <= 2.0 <= other["window_effect_hi_pct"] + 1e-6
    assert base["p99_ms"] == pytest.approx(0.3) and base["client_cpu_share"] == pytest.approx(0.25)
    assert "window_effect_pct" not in base


def noisy(blocks: int, arms: int, seed: int, sd: float = 0.01) -> list[list[float]]:
    """Rates per block and arm: a drifting machine, identical arms, log-normal window noise."""
    rng = random.Random(seed)
    return [[1000 * (1 + 0.3 * math.sin(b)) * math.exp(rng.gauss(0, sd)) for _ in range(arms)]
            for b in range(blocks)]


@pytest.mark.parametrize("arms", [2, 3])
def test_a_few_preempted_windows_barely_move_an_arms_rate(arms):
    # 60 blocks; in 4 of them arm 1's window ran at half its rate (its vCPU preempted): the
    # plain geometric mean loses 4/60 of log 2 (-4.5%), the recorded rate should not
    rates = noisy(60, arms, seed=arms)
    hit = [row[:] for row in rates]
    for b in (5, 17, 33, 48):
        hit[b][1] /= 2
    clean, cut = parse_output(report(rates)), parse_output(report(hit))
    for a in range(arms):
        assert arm_metrics(cut, a)["ops_per_s"] == pytest.approx(
            arm_metrics(clean, a)["ops_per_s"], rel=0.004)
    old = arm_metrics(cut, 1)["ops_per_s_mean"] / arm_metrics(clean, 1)["ops_per_s_mean"]
    assert old == pytest.approx(math.exp(-4 * math.log(2) / 60), rel=1e-6)  # what it was


@pytest.mark.parametrize("arms", [2, 3])
def test_an_arms_ratio_to_the_reference_is_the_hodges_lehmann_shift_of_their_blocks(arms):
    res = parse_output(report(noisy(41, arms, seed=7, sd=0.05)))
    m = [arm_metrics(res, a) for a in range(arms)]
    for a in range(1, arms):
        d = block_log_ratios(*res.columns(), a, 0)
        i, j = np.triu_indices(d.size)
        hl = float(np.median((d[i] + d[j]) / 2))
        assert math.log(m[a]["ops_per_s"] / m[0]["ops_per_s"]) == pytest.approx(hl)
        assert m[a]["window_hl_log_ratio"] == pytest.approx(hl)
        assert m[a]["window_median_log_ratio"] == pytest.approx(float(np.median(d)))
        # standard errors of the two shifts against normal theory (sd/sqrt(n) over 0.955
        # and 0.637 efficiency): within a factor 1.6
        sd = float(np.std(d, ddof=1)) / math.sqrt(d.size)
        assert 0.6 < m[a]["window_hl_se_log"] / (sd / math.sqrt(0.955)) < 1.6
        assert 0.6 < m[a]["window_median_se_log"] / (sd / math.sqrt(0.637)) < 1.6
    # still a throughput: the arms' geometric mean near the plain geometric-mean rate
    both = math.exp(sum(math.log(x["ops_per_s"]) for x in m) / arms)
    plain = math.exp(sum(math.log(x["ops_per_s_mean"]) for x in m) / arms)
    assert both == pytest.approx(plain, rel=0.02)


def test_the_reference_need_not_be_the_first_arm():
    rates = [[r * 1.0, r * 1.05, r * 0.9] for r in (1000, 1200, 900, 1100)]
    res = parse_output(report(rates))
    m = [arm_metrics(res, a, reference=2) for a in range(3)]
    assert m[0]["ops_per_s"] / m[2]["ops_per_s"] == pytest.approx(1 / 0.9)
    assert m[1]["ops_per_s"] / m[2]["ops_per_s"] == pytest.approx(1.05 / 0.9)
    assert "window_hl_log_ratio" not in m[2]


def test_the_settled_effect_leaves_out_the_blocks_of_the_trials_first_second():
    # arm 1 is 20% slower while the blocks start within the first second (each window 10 ms,
    # so blocks 0-49) and 5% faster after: the trial's effect mixes both, its settled one is
    # the second alone, counted by the blocks' own start times
    rates = [[10_000.0, 10_000.0 * (0.8 if b < 50 else 1.05)] for b in range(80)]
    res = parse_output(report(rates, timed=True))
    starts = {w.block: w.t_ns for w in res.windows if w.pos == 0}
    late = sorted(b for b, t in starts.items() if t >= 1_000_000_000)
    m = arm_metrics(res, 1)
    assert m["settled_blocks"] == len(late) and 25 <= len(late) <= 35
    assert m["settled_hl_log_ratio"] == pytest.approx(math.log(1.05), abs=1e-6)
    assert m["window_hl_log_ratio"] < math.log(0.95)
    assert "settled_hl_log_ratio" not in arm_metrics(res, 0)


def test_no_settled_effect_without_window_times_or_with_too_few_blocks_after_a_second():
    assert "settled_hl_log_ratio" not in arm_metrics(
        parse_output(report([[10_000.0, 10_500.0]] * 80)), 1)  # an older client's report
    few = parse_output(report([[100.0, 105.0]] * 6, timed=True))  # each block 2 s long
    assert 1 <= len({w.block for w in few.windows if w.pos == 0 and w.t_ns >= 1e9}) < 6
    assert "settled_hl_log_ratio" not in arm_metrics(few, 1)


def test_only_a_server_kind_with_window_ops_asks_for_requests():
    from hugelab.workloads.redis import RedisBenchmark
    assert wants_requests(RedisBenchmark(window_ops=200))
    assert not wants_requests(RedisBenchmark())
    assert not wants_requests(object())


def test_a_server_trees_cpu_time_counts_its_children_and_what_they_reaped(tmp_path):
    def proc(pid: int, ppid: int, ticks: tuple[int, int, int, int]) -> None:
        d = tmp_path / str(pid)
        d.mkdir()
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(t) for t in ticks] + ["0"] * 30
        (d / "stat").write_text(f"{pid} (srv) " + " ".join(fields) + "\n")
    proc(10, 1, (100, 50, 20, 10))     # the postmaster: its own time and its reaped backends'
    proc(11, 10, (30, 10, 0, 0))       # a live backend
    proc(12, 1, (999, 999, 0, 0))      # someone else
    assert sorted(tree(10, tmp_path)) == [10, 11]
    assert tree_cpu_s(10, tmp_path) == pytest.approx(220 / TICK)
    assert tree_cpu_s(os.getpid()) > 0  # this process, for real


@pytest.mark.server
@pytest.mark.slow
def test_two_redis_servers_request_by_request_each_judged_alone():
    from hugelab.trial.appevidence import app_check
    from hugelab.trial.evidence import check_tree
    from hugelab.trial.native import NativeTarget
    from hugelab.workloads.interleave import serve
    from hugelab.workloads.redis import RedisBenchmark, judge
    from tests.hostguard import workload_processes
    procs = workload_processes()
    w = RedisBenchmark(window_ops=100, clients=2, duration_s=2, tests=("get",), keyspace=1000)
    on = RedisBenchmark(window_ops=100, clients=2, duration_s=2, tests=("get",),
                        keyspace=1000, app=(("disable-thp", "yes"),))
    a, b = serve(NativeTarget(), [(w, "4k"), (on, "4k")], random.Random(4))
    assert workload_processes() == procs
    for r in (a, b):
        assert r.primary == "ops_per_s" and r.value > 0 and r.metrics["windows"] >= 4
        assert r.metrics["server_cpu_us_per_op"] > 0 and 0 < r.metrics["client_cpu_share"] < 2
        assert r.info["interleaved"]["design"] == "requests"
        assert r.info["interleaved"]["start_slot"] == r.info["interleaved"]["index"]
        cpus = sorted(os.sched_getaffinity(0))
        pins = pinning(cpus, 2, core_map(cpus))
        assert r.info["interleaved"]["pinning"] == pins
        assert r.info["interleaved"]["cpus"] == \
            (pins.get("each") or [pins["servers"]] * 2)[r.info["interleaved"]["index"]]
        assert check_tree("4k", r.evidence["tree"]).status != "contradicted"
        assert set(r.info["thp_daemons_cpu_s"]) == {"khugepaged", "kcompactd"}
    assert b.metrics["window_effect_lo_pct"] <= b.metrics["window_effect_pct"]
    # the client's own connect order, one slot per server, recorded with each arm's trial
    assert sorted(r.info["interleaved"]["connect_slot"] for r in (a, b)) == [0, 1]
    assert app_check(b.evidence, judge) is not None
    assert Path(f"/proc/{os.getpid()}").exists()


def test_every_server_is_stopped_even_when_one_stop_fails_and_its_error_is_raised():
    import threading

    from hugelab.workloads.requests import stop_all

    stopped: list[str] = []
    all_running = threading.Barrier(3, timeout=10)  # the stops run at once, or this times out

    class Srv:
        def __init__(self, name: str, fails: bool = False) -> None:
            self.name, self.fails = name, fails

        def stop(self, srv: Srv) -> None:
            all_running.wait()
            stopped.append(srv.name)
            if srv.fails:
                raise WorkloadError(f"{srv.name} would not stop")

    servers = [Srv("a"), Srv("b", fails=True), Srv("c")]
    with pytest.raises(WorkloadError, match="b would not stop"):
        stop_all([(s, s) for s in servers])
    assert sorted(stopped) == ["a", "b", "c"]
    stop_all([])


def test_an_arms_slots_name_its_start_and_connect_order():
    from hugelab.workloads.requests import slots
    assert slots(0, (2, 0, 1)) == {"start_slot": 0, "connect_slot": 1}
    assert slots(2, (2, 0, 1)) == {"start_slot": 2, "connect_slot": 0}
    assert slots(1, ()) == {"start_slot": 1}  # a client that does not say: start slot only
