"""sysbench memory: argv, parser (live output and saved 1.0.20 output), warnings, errors."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.sysbench import (
    SysbenchMemory,
    hugetlb_request_bytes,
    parse_output,
    tlb_warnings,
)

DATA = Path(__file__).parent / "data"
needs_sysbench = pytest.mark.skipif(shutil.which("sysbench") is None,
                                    reason="sysbench not installed (apt-get install sysbench)")


@dataclass
class InjectArg:
    """A Target that adds one argument before sysbench's trailing 'run'."""

    extra: str
    name: str = "native"

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        return NativeTarget().exec([*argv[:-1], self.extra, argv[-1]], timeout=timeout)


def test_argv_is_explicit_and_follows_backing():
    w = SysbenchMemory(block_size="256M", total_size="1T", access_mode="rnd", threads=2, time_s=3)
    argv = w.argv("4k")
    assert argv == ["sysbench", "memory", "--memory-block-size=256M", "--memory-total-size=1T",
                    "--memory-scope=global", "--memory-hugetlb=off", "--memory-oper=write",
                    "--memory-access-mode=rnd", "--threads=2", "--time=3", "run"]
    assert "--memory-hugetlb=on" in w.argv("hugetlb-2M")
    assert "--memory-hugetlb=off" in w.argv("hugetlb-1G")
    assert "--memory-hugetlb=off" in SysbenchMemory(hugetlb=False).argv("hugetlb-2M")
    assert SysbenchMemory(block_size=1536 * 1024).argv()[2] == "--memory-block-size=1536K"


@pytest.mark.parametrize("kwargs", [{"scope": "globl"}, {"access_mode": "rdn"},
                                    {"oper": "copy"}, {"threads": 0}, {"block_size": "2X"}])
def test_bad_options_are_experiment_errors(kwargs):
    with pytest.raises(ExperimentError):
        SysbenchMemory(**kwargs)


def test_parse_saved_rnd_output():
    text = (DATA / "sysbench-1.0.20-memory-rnd.txt").read_text()
    metrics, echoed = parse_output(text)
    assert echoed["block_size_kib"] == 65536 and echoed["scope"] == "global"
    for key in ("mib_per_s", "total_ops", "ops_per_s", "latency_min_ms", "latency_avg_ms",
                "latency_max_ms", "latency_p95_ms", "latency_sum_ms", "total_time_s", "events",
                "mib_transferred", "events_stddev", "exec_time_avg_s"):
        assert key in metrics, key
    assert metrics["mib_per_s"] > 0
    assert metrics["total_ops"] == metrics["events"]
    assert metrics["latency_min_ms"] <= metrics["latency_avg_ms"] <= metrics["latency_max_ms"]
    # MiB/s is MiB transferred over total time
    assert metrics["mib_per_s"] == pytest.approx(
        metrics["mib_transferred"] / metrics["total_time_s"], rel=0.02)


def test_parse_saved_local_scope_output():
    text = (DATA / "sysbench-1.0.20-memory-seq-local-2threads.txt").read_text()
    res = SysbenchMemory(block_size="1K", scope="local", oper="read", threads=2, time_s=1).parse(
        ExecResult(["sysbench"], 0, text, "", 1.0))
    assert res.primary == "mib_per_s" and res.better == "higher" and res.unit == "MiB/s"
    assert res.info["version"] == "1.0.20"
    assert res.info["settings"]["threads"] == 2 and res.info["settings"]["scope"] == "local"
    assert res.value > 0


def test_parse_rejects_foreign_text():
    with pytest.raises(WorkloadError, match="lacks"):
        parse_output("sysbench 1.0.20\nsomething else\n")


def test_warnings_explain_why_small_blocks_show_nothing():
    small = tlb_warnings(1024, "global", 1, False, "seq")
    assert len(small) == 1 and "--memory-block-size" in small[0] and "TLB" in small[0]
    assert "--memory-total-size only sets" in small[0]
    assert tlb_warnings(256 << 20, "global", 1, False, "rnd") == []
    seq = tlb_warnings(256 << 20, "global", 1, False, "seq")
    assert len(seq) == 1 and "rnd" in seq[0]
    huge = tlb_warnings(1024, "local", 4, True, "rnd")
    assert any("SysV shmget(SHM_HUGETLB)" in w and "per thread" in w for w in huge)
    assert any("single huge page" in w for w in huge)


def test_hugetlb_request_matches_what_sysbench_1_0_20_asked_for():
    # seen in sysbench's own FATAL messages on this machine with an empty pool
    assert hugetlb_request_bytes(1 << 20) == 5242879
    assert hugetlb_request_bytes(4 << 20) == 8388607


def test_backing_notes():
    w = SysbenchMemory(block_size="256M", access_mode="rnd")
    assert any("hugetlb-1G" in x for x in w.warnings("hugetlb-1G"))
    assert any("THP mode 'always'" in x for x in w.warnings("thp"))


@pytest.mark.tools
@needs_sysbench
def test_parse_live_output_and_run_end_to_end():
    w = SysbenchMemory(block_size="1M", access_mode="rnd", time_s=1)
    live = NativeTarget().exec(w.argv("4k"))
    metrics, _ = parse_output(live.stdout)
    assert metrics["mib_per_s"] > 0
    res = w.run(NativeTarget(), "4k")
    assert res.value > 0 and res.info["version"] == "1.0.20"
    assert res.info["settings"]["block_size_kib"] == 1024
    assert res.info["warnings"], "a 1 MiB block cannot show a TLB effect: must warn"
    assert res.metrics["wall_s"] >= 1.0


@pytest.mark.tools
@needs_sysbench
def test_invalid_option_is_workload_error_with_stderr():
    with pytest.raises(WorkloadError) as ei:
        SysbenchMemory(time_s=1).run(InjectArg("--memory-blok=1"), "4k")
    assert "invalid option: --memory-blok=1" in ei.value.message
    assert "invalid option" in ei.value.stderr  # type: ignore[attr-defined]


def test_missing_binary_names_the_package():
    with pytest.raises(ToolMissingError) as ei:
        SysbenchMemory(binary="/nonexistent/sysbench", time_s=1).run(NativeTarget(), "4k")
    assert ei.value.package == "sysbench"


def test_unknown_backing():
    with pytest.raises(WorkloadError, match="unknown backing"):
        SysbenchMemory().run(NativeTarget(), "huge")


def test_hugetlb_bytes_is_what_the_pools_must_hold():
    from hugelab.experiment import Arm, Experiment
    from hugelab.planning.pools import pool_plan

    local = SysbenchMemory(block_size="4M", threads=2, scope="local")
    assert local.hugetlb_bytes_for(None) == 2 * hugetlb_request_bytes(4 << 20)
    assert SysbenchMemory(block_size="4M", threads=2, scope="global").hugetlb_bytes_for(None) == \
        hugetlb_request_bytes(4 << 20)
    exp = Experiment("s", (Arm("h", "hugetlb-2M"),))
    assert pool_plan(exp, local) == {("2M", None): 8}  # 2 x 8 MiB - 1 byte -> 8 pages
