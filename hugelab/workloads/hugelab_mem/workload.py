"""The `hugelab-mem` workload: hugelab's own page-size-sensitive memory micro-benchmark.

`argv` and `parse` are pure so they can be tested without running anything; `run` glues
them to a Target. The C program reports /proc/self/smaps fields for its buffer
("evidence"), which is how a caller proves the requested backing was really used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.experiment.backings import BACKINGS as BACKINGS
from hugelab.experiment.backings import backing_error
from hugelab.units import parse_size
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.build import ensure_hugelab_mem
from hugelab.workloads.hugelab_mem.evidence import REGION, touched_pages
from hugelab.workloads.hugelab_mem.interleave import interleave_problem
from hugelab.workloads.hugelab_mem.output import parse_interleaved_output, parse_output
from hugelab.workloads.kind import Kind, Tool, interleaved, key, keys_of

WORKLOADS = ("chase", "random", "seq-read", "seq-write", "populate")


@dataclass(frozen=True)
class HugelabMem:
    """One configuration of hugelab-mem; `run` executes one trial of it in a Target."""

    kind: str = "hugelab-mem"
    workload: str = key("chase", 'the access pattern: "chase" (dependent loads), "random", '
                                 '"seq-read", "seq-write" or "populate" (fault in only)')
    size_bytes: int = key(1 << 30, "the buffer hugelab-mem maps (a file may write "
                                   'size = "2G")', unit="bytes")
    threads: int = key(1, "threads walking the buffer")
    duration_s: float = key(1.0, "how long the walk runs (a file may write duration = "
                                 '"500ms")', unit="s")
    seed: int = key(1, "the random pattern's seed")
    stride_bytes: int | None = key(None, "chase only: the slot size (none: the tool's 64)",
                                   unit="bytes")
    window_ms: float = key(20.0, interleaved("window_ms", "ms", "each measurement window"))
    # design 'interleaved': run, unmeasured, after each switch of buffer (the TLB and caches
    # still hold the other buffer's state); None: the tool's default, a quarter of window_ms
    warmup_ms: float | None = key(None, "untimed walking before the measurement (none: the "
                                        "tool's default)", unit="ms")
    # in each 2 MiB region only the first ceil(f*512) 4 KiB pages are written and visited, so
    # the resident memory each page size costs is computable ("layout" in the evidence);
    # 1: the whole buffer, as without it
    touch_fraction: float = key(1.0, "the share of the buffer touched (1.0: all; 0.125 leaves "
                                     "it sparse)")

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ExperimentError(f"unknown hugelab-mem workload {self.workload!r}",
                                  hint=f"one of: {', '.join(WORKLOADS)}")
        if self.size_bytes < 4096 or self.threads < 1 or self.duration_s <= 0:
            raise ExperimentError("hugelab-mem needs size_bytes >= 4096, threads >= 1 "
                                  "and duration_s > 0")
        if not 1 <= self.window_ms <= 10000:
            raise ExperimentError(f"window_ms = {self.window_ms:g}: a window is 1 to 10000 ms")
        if self.warmup_ms is not None and not 0 <= self.warmup_ms <= 10000:
            raise ExperimentError(f"warmup_ms = {self.warmup_ms:g}: a warm-up is 0 to 10000 ms")
        if self.stride_bytes is not None and self.workload != "chase":
            raise ExperimentError("stride_bytes applies to the chase workload only")
        self._check_touch_fraction()

    @property
    def sparse(self) -> bool:
        """Whether the buffer is touched sparsely (touch_fraction below 1)."""
        return self.touch_fraction != 1

    def hugetlb_bytes_for(self, size: str | None) -> int:
        """Bytes of huge pages a trial maps: the buffer, whatever the page size."""
        return self.size_bytes

    def _check_touch_fraction(self) -> None:
        f = self.touch_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
            raise ExperimentError(f"touch_fraction = {f!r}: the share of each 2 MiB region "
                                  "touched is a number above 0 and at most 1",
                                  hint="e.g. touch_fraction = 0.25 (1, the default, touches "
                                       "the whole buffer)")
        if not self.sparse:
            return
        if self.workload == "populate":
            raise ExperimentError("touch_fraction applies to chase, random, seq-read and "
                                  "seq-write (populate's buffers come and go)")
        if self.size_bytes % REGION:
            raise ExperimentError(f"touch_fraction needs a size in whole 2 MiB regions, not "
                                  f"{self.size_bytes} bytes",
                                  hint=f"e.g. size = \"{max(1, self.size_bytes // REGION) * 2}M\"")
        touched = touched_pages(f) * 4096
        stride = self.stride_bytes or 64
        if self.workload == "chase" and stride > touched:
            raise ExperimentError(f"stride_bytes {stride} is larger than the {touched} bytes "
                                  f"touch_fraction {f:g} touches per 2 MiB region")

    def argv(self, backing: str, binary: Path) -> list[str]:
        """The command line for one trial with `backing` (pure)."""
        problem = backing_error(backing)
        if problem:
            raise ExperimentError(problem)
        argv = [str(binary), "--workload", self.workload, "--backing", backing,
                "--size", str(self.size_bytes), "--threads", str(self.threads),
                "--duration", f"{self.duration_s:g}", "--seed", str(self.seed)]
        if self.stride_bytes is not None:
            argv += ["--stride", str(self.stride_bytes)]
        if self.sparse:
            argv += ["--touch-fraction", repr(float(self.touch_fraction))]
        return argv

    def timeout_s(self) -> float:
        """Generous: first-touch of a large buffer in a fresh guest can take seconds/GiB."""
        return 60.0 + 2.0 * self.duration_s + 30.0 * self.size_bytes / (1 << 30)

    def parse(self, result: ExecResult) -> WorkloadResult:
        """Turn one finished run into metrics (pure); WorkloadError if it failed."""
        return parse_output(result)

    def argv_interleaved(self, backings: list[str], binary: Path) -> list[str]:
        """One process, one buffer per backing, alternating windows (pure)."""
        for b in backings:
            problem = backing_error(b)
            if problem:
                raise ExperimentError(problem)
        argv = [str(binary), "--workload", self.workload, "--interleave", ",".join(backings),
                "--size", str(self.size_bytes), "--duration", f"{self.duration_s:g}",
                "--window", f"{self.window_ms:g}", "--seed", str(self.seed)]
        if self.warmup_ms is not None:
            argv += ["--warmup", f"{self.warmup_ms:g}"]
        if self.stride_bytes is not None:
            argv += ["--stride", str(self.stride_bytes)]
        return argv

    def parse_interleaved(self, result: ExecResult) -> list[WorkloadResult]:
        """One result per buffer (pure; see output.parse_interleaved_output)."""
        return parse_interleaved_output(result)

    def run_interleaved(self, target: Target, backings: list[str]) -> list[WorkloadResult]:
        """One interleaved trial of every backing (design 'interleaved')."""
        argv = self.argv_interleaved(backings, ensure_hugelab_mem())
        timeout = self.timeout_s() + 30.0 * len(backings) * self.size_bytes / (1 << 30)
        results = self.parse_interleaved(target.exec(argv, timeout=timeout))
        if [r.info["backing"] for r in results] != backings:
            raise WorkloadError(f"hugelab-mem measured {[r.info['backing'] for r in results]}, "
                                f"not {backings}")
        return results

    def run(self, target: Target, backing: str) -> WorkloadResult:
        """One trial: build (cached) -> argv -> target.exec -> parse."""
        argv = self.argv(backing, ensure_hugelab_mem())
        return self.parse(target.exec(argv, timeout=self.timeout_s()))


def file_keys(params: dict[str, Any]) -> dict[str, Any]:
    """An experiment file's `size = "2G"` -> size_bytes (parse_size), `duration` -> duration_s."""
    params = dict(params)
    if "duration" in params:
        if "duration_s" in params:
            raise ExperimentError("give duration or duration_s, not both")
        params["duration_s"] = params.pop("duration")
    if "size" in params:
        if "size_bytes" in params:
            raise ExperimentError("give size or size_bytes, not both")
        size = params.pop("size")
        if isinstance(size, str):
            try:
                size = parse_size(size)
            except ValueError as exc:
                raise ExperimentError(f"key 'size': {exc}") from exc
        elif isinstance(size, bool) or not isinstance(size, int):
            raise ExperimentError(f"key 'size' must be a size like \"2G\" or a byte count, "
                                  f"got {type(size).__name__} {size!r}")
        params["size_bytes"] = size
    return params


KIND = Kind(
    keys=keys_of(HugelabMem),
    name="hugelab-mem", workload=HugelabMem,
    summary="hugelab's own C micro-benchmark: a buffer of each arm's backing, chased or streamed",
    where=frozenset({"host", "guest", "domain", "interleaved"}),
    tools=(Tool("cc", "gcc"),), duration=("duration_s", 1.0),
    file_keys=file_keys, aliases=("duration", "size"), interleave=interleave_problem,
    counts_own_folios=True, asks_own_backing=True, own_programs=("hugelab-mem",))
