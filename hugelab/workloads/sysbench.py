"""sysbench memory (1.0.x): argv builder, output parser, and why it often cannot show a TLB effect.

How sysbench 1.0.20 `memory` works (src/tests/memory/sb_memory.c): each thread owns ONE buffer
of `--memory-block-size` bytes (scope local), or all threads share one such buffer (scope
global). Every event writes/reads that same buffer, sequentially or at random 8-byte slots;
`--memory-total-size` only says how many bytes to move in total, block after block over the
same buffer. So the working set is the block size (1 KiB by default), not the total size: unless
the block is far larger than the TLB reach of 4 KiB pages (1.5-2K STLB entries, about 6-8 MiB
on current x86), every translation stays cached and huge pages have nothing to save.
`--memory-hugetlb=on` allocates the buffer with SysV `shmget(SHM_HUGETLB)` from the pool of the
default huge page size, rounded with a fixed 4 MiB LARGE_PAGE_SIZE: ((block-1) & ~4MiB) + 4MiB
bytes (observed with 1.0.20: 1M -> 5242879, 4M -> 8388607); the run fails if the pool is short.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.units import parse_size
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.kind import Kind, Tool, key, keys_of, program
from hugelab.workloads.process_thp import check_mode, target_for
from hugelab.workloads.toolrun import check_backing, check_exit, first_version, format_size, tail

TLB_REACH_4K = 8 << 20      # ~STLB entries x 4 KiB on current x86 (1536-2048 x 4 KiB)
MIN_USEFUL_BLOCK = 64 << 20  # a buffer this big overflows the 4 KiB TLB reach many times
HUGE_2M = 2 << 20
SYSBENCH_LARGE_PAGE = 4 << 20  # LARGE_PAGE_SIZE in sysbench 1.0.x

Scope = Literal["global", "local"]
Oper = Literal["read", "write", "none"]
Access = Literal["seq", "rnd"]

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_PATTERNS: dict[str, str] = {
    "total_ops": rf"Total operations:\s*{_NUM}",
    "ops_per_s": rf"Total operations:\s*[0-9.]+\s*\(\s*{_NUM} per second\)",
    "mib_transferred": rf"^\s*{_NUM} MiB transferred",
    "mib_per_s": rf"MiB transferred \(\s*{_NUM} MiB/sec\)",
    "total_time_s": rf"total time:\s*{_NUM}s",
    "events": rf"total number of events:\s*{_NUM}",
    "latency_min_ms": rf"^\s*min:\s*{_NUM}",
    "latency_avg_ms": rf"^\s*avg:\s*{_NUM}",
    "latency_max_ms": rf"^\s*max:\s*{_NUM}",
    "latency_p95_ms": rf"95th percentile:\s*{_NUM}",
    "latency_sum_ms": rf"^\s*sum:\s*{_NUM}",
    "events_avg": rf"events \(avg/stddev\):\s*{_NUM}/",
    "events_stddev": rf"events \(avg/stddev\):\s*[0-9.]+/{_NUM}",
    "exec_time_avg_s": rf"execution time \(avg/stddev\):\s*{_NUM}/",
    "exec_time_stddev_s": rf"execution time \(avg/stddev\):\s*[0-9.]+/{_NUM}",
}
_REQUIRED = ("mib_per_s", "total_ops", "total_time_s")
_ECHO = {"block_size_kib": r"block size:\s*(\d+)KiB", "total_size_mib": r"total size:\s*(\d+)MiB",
         "operation": r"operation:\s*(\w+)", "scope": r"scope:\s*(\w+)",
         "threads": r"Number of threads:\s*(\d+)"}


def parse_output(text: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics and echoed settings from sysbench 1.0.x `memory run` output (pure)."""
    metrics: dict[str, float] = {}
    for name, pat in _PATTERNS.items():
        m = re.search(pat, text, re.MULTILINE)
        if m:
            metrics[name] = float(m.group(1))
    missing = [k for k in _REQUIRED if k not in metrics]
    if missing:
        raise WorkloadError(f"sysbench output lacks {', '.join(missing)}; is this sysbench 1.0.x "
                            f"`memory run` output?\n  {tail(text, 5) or '(no output)'}")
    echoed: dict[str, Any] = {}
    for name, pat in _ECHO.items():
        m = re.search(pat, text)
        if m:
            echoed[name] = int(m.group(1)) if m.group(1).isdigit() else m.group(1)
    return metrics, echoed


def hugetlb_request_bytes(block_size: int) -> int:
    """Bytes sysbench 1.0.20's hugetlb_alloc() asks shmget for (its rounding, reproduced)."""
    return ((block_size - 1) & ~SYSBENCH_LARGE_PAGE) + SYSBENCH_LARGE_PAGE


def tlb_warnings(block_size: int, scope: str, threads: int, hugetlb: bool,
                 access_mode: str) -> list[str]:
    """Why this sysbench setup cannot show (or will blur) a TLB effect; empty when it can (pure)."""
    out: list[str] = []
    kib = block_size // 1024
    where = ("one buffer shared by all threads" if scope == "global"
             else f"one buffer per thread ({threads} in all)")
    if block_size < MIN_USEFUL_BLOCK:
        out.append(
            f"sysbench memory touches only --memory-block-size bytes ({kib} KiB, {where}); "
            "every event rewrites that same buffer and --memory-total-size only sets how many "
            "bytes are moved over it. A working set "
            + ("inside" if block_size <= TLB_REACH_4K else "not far beyond")
            + f" the ~{TLB_REACH_4K >> 20} MiB TLB reach of 4 KiB pages keeps its translations "
            "cached, so huge pages cannot show a TLB effect. Use block_size >= "
            f"{MIN_USEFUL_BLOCK >> 20}M with access_mode='rnd', or the hugelab-mem workload.")
    if hugetlb:
        pages = -(-hugetlb_request_bytes(block_size) // HUGE_2M)
        per = " per thread" if scope == "local" else ""
        msg = ("--memory-hugetlb=on allocates the buffer with SysV shmget(SHM_HUGETLB) sized "
               "from the block size (sysbench 1.0.20 rounds it with a fixed 4 MiB: "
               f"{hugetlb_request_bytes(block_size)} bytes, i.e. {pages} free 2 MiB pages{per} "
               "in the default-size hugetlb pool, or the run fails)")
        if block_size < HUGE_2M:
            msg += ("; a block below 2 MiB sits inside a single huge page, and its 4 KiB pages "
                    "fit the TLB just as well, so no difference is expected")
        out.append(msg)
    if access_mode == "seq" and block_size >= MIN_USEFUL_BLOCK:
        out.append("access_mode 'seq' walks each 4 KiB page int by int (1024 accesses in a row), "
                   "so one TLB miss is spread over a whole page; 'rnd' exposes translation "
                   "costs far more")
    return out


@dataclass(frozen=True)
class SysbenchMemory:
    """`sysbench memory run` with explicit options; primary metric MiB/s (higher is better).

    `hugetlb=None` follows the arm's backing (on for 'hugetlb-2M'); True/False force it."""

    block_size: int | str = key("1K", 'sysbench memory\'s --memory-block-size ("1K", "2M")',
                                unit="bytes")
    total_size: int | str = key("100G", "--memory-total-size: how much it reads or writes in "
                                        "all", unit="bytes")
    scope: Scope = key("global", "--memory-scope: one buffer per thread (local) or one shared "
                                 "(global)")
    hugetlb: bool | None = key(None, "--memory-hugetlb (none: from the arm's backing)")
    oper: Oper = key("write", "--memory-oper")
    access_mode: Access = key("seq", "--memory-access-mode: sequential or random")
    threads: int = key(1, "sysbench threads")
    time_s: int = key(10, "--time: how long the load runs", unit="s")
    binary: str = key("sysbench", program("binary", "sysbench"))
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="sysbench", init=False)

    def __post_init__(self) -> None:
        for name in ("block_size", "total_size"):
            try:
                object.__setattr__(self, name, parse_size(getattr(self, name)))
            except ValueError as exc:
                raise ExperimentError(f"sysbench: {name}: {exc}") from exc
        choices = {"scope": ("global", "local"), "oper": ("read", "write", "none"),
                   "access_mode": ("seq", "rnd")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ExperimentError(f"sysbench: {name} must be one of {', '.join(allowed)}, "
                                      f"not {getattr(self, name)!r}")
        if self.threads < 1 or self.time_s < 1:
            raise ExperimentError("sysbench: threads and time_s must be at least 1")
        check_mode("sysbench", self.process_thp)

    def hugetlb_bytes_for(self, size: str | None) -> int:
        """Bytes of hugetlb memory a trial takes with --memory-hugetlb=on: one shmget buffer
        per thread (scope local) or one in all (global), in 2 MiB pages whatever `size`;
        hugelab reserves pools from this."""
        assert isinstance(self.block_size, int)
        per = hugetlb_request_bytes(self.block_size)
        return per * (self.threads if self.scope == "local" else 1)

    def use_hugetlb(self, backing: str) -> bool:
        return self.hugetlb if self.hugetlb is not None else backing == "hugetlb-2M"

    def argv(self, backing: str = "4k") -> list[str]:
        """The sysbench command line for one trial with `backing` (pure)."""
        assert isinstance(self.block_size, int) and isinstance(self.total_size, int)
        return [self.binary, "memory",
                f"--memory-block-size={format_size(self.block_size)}",
                f"--memory-total-size={format_size(self.total_size)}",
                f"--memory-scope={self.scope}",
                f"--memory-hugetlb={'on' if self.use_hugetlb(backing) else 'off'}",
                f"--memory-oper={self.oper}",
                f"--memory-access-mode={self.access_mode}",
                f"--threads={self.threads}",
                f"--time={self.time_s}",
                "run"]

    def warnings(self, backing: str = "4k") -> list[str]:
        assert isinstance(self.block_size, int)
        out = tlb_warnings(self.block_size, self.scope, self.threads, self.use_hugetlb(backing),
                           self.access_mode)
        if backing == "hugetlb-1G":
            out.append("backing 'hugetlb-1G' is not honoured: sysbench's SHM_HUGETLB takes the "
                       "default huge page size (Hugepagesize in /proc/meminfo), so it runs "
                       "with --memory-hugetlb=off unless hugetlb=true is set")
        elif backing == "thp":
            out.append("backing 'thp': sysbench neither madvises nor asks for huge pages, so "
                       "only THP mode 'always' (host or guest) backs its buffer with huge pages")
        return out

    def parse(self, res: ExecResult, backing: str = "4k") -> WorkloadResult:
        """Metrics of one finished run (pure); WorkloadError when it failed."""
        check_exit(res, "sysbench")
        metrics, echoed = parse_output(res.stdout)
        metrics["wall_s"] = res.wall_s
        info: dict[str, Any] = {
            "tool": "sysbench",
            "version": first_version(res.stdout, r"^sysbench (\S+)"),
            "settings": echoed,
            "hugetlb": self.use_hugetlb(backing),
            "backing": backing,
            "warnings": self.warnings(backing),
        }
        return WorkloadResult(metrics=metrics, primary="mib_per_s", unit="MiB/s",
                              better="higher", info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        res = target_for(target, self.process_thp).exec(self.argv(backing), timeout=self.time_s + 60.0)
        return self.parse(res, backing)


KIND = Kind(keys=keys_of(SysbenchMemory), name="sysbench", workload=SysbenchMemory,
            summary="sysbench memory: one buffer per thread, read or written block by block",
            tools=(Tool("sysbench", "sysbench"),), duration=("time_s", 10.0))
