"""The `hugelab-mem` workload: hugelab's own page-size-sensitive memory micro-benchmark.

`argv` and `parse` are pure so they can be tested without running anything; `run` glues
them to a Target. The C program reports /proc/self/smaps fields for its buffer
("evidence"), which is how a caller proves the requested backing was really used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError, PoolBusyError, WorkloadError
from hugelab.experiment.backings import BACKINGS as BACKINGS
from hugelab.experiment.backings import backing_error, mthp_size_kb
from hugelab.units import parse_size
from hugelab.workloads.base import Better, ExecResult, Target, WorkloadResult
from hugelab.workloads.build import ensure_hugelab_mem
from hugelab.workloads.kind import Key, Kind, Tool

WORKLOADS = ("chase", "random", "seq-read", "seq-write", "populate")
EXIT_BAD_ARGS = 2
EXIT_HUGETLB = 3

def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def backing_problem(backing: str, evidence: dict[str, Any]) -> str | None:
    """Why the smaps evidence contradicts `backing`, or None when it agrees."""
    kps = evidence.get("KernelPageSize_kB")
    anon_huge = evidence.get("AnonHugePages_kB") or 0
    rss = evidence.get("Rss_kB") or 0
    if backing == "4k" and (kps != 4 or anon_huge):
        return f"4k backing but KernelPageSize_kB={kps}, AnonHugePages_kB={anon_huge}"
    if backing in ("thp", "thp-collapse") and anon_huge * 2 <= rss:
        return f"{backing} backing but only {anon_huge} of {rss} KiB resident are huge pages"
    shmem_huge = evidence.get("ShmemPmdMapped_kB") or 0
    if backing == "shmem-thp" and shmem_huge * 2 <= rss:
        return f"shmem-thp backing but only {shmem_huge} of {rss} KiB resident are shmem huge pages"
    if mthp_size_kb(backing) and anon_huge:
        return f"{backing} backing but {anon_huge} KiB are PMD-size (2 MiB) THP"
    want = {"hugetlb-2M": 2048, "hugetlb-1G": 1048576}.get(backing)
    if want is not None and kps != want:
        return f"{backing} backing but KernelPageSize_kB={kps}"
    return None


@dataclass(frozen=True)
class HugelabMem:
    """One configuration of hugelab-mem; `run` executes one trial of it in a Target."""

    kind: str = "hugelab-mem"
    workload: str = "chase"
    size_bytes: int = 1 << 30
    threads: int = 1
    duration_s: float = 1.0
    seed: int = 1
    stride_bytes: int | None = None  # chase slot size; None = the tool's default (64)
    window_ms: float = 20.0  # design 'interleaved': each measurement window
    # design 'interleaved': run, unmeasured, after each switch of buffer (the TLB and caches
    # still hold the other buffer's state); None: the tool's default, a quarter of window_ms
    warmup_ms: float | None = None
    # in each 2 MiB region only the first ceil(f*512) 4 KiB pages are written and visited, so
    # the resident memory each page size costs is computable ("layout" in the evidence);
    # 1: the whole buffer, as without it
    touch_fraction: float = 1.0

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
        data = _decode(result)
        metrics = {k: float(v) for k, v in data["metrics"].items()}
        metrics["setup_s"] = float(data.get("setup_s", 0.0))
        metrics["duration_s"] = float(data.get("duration_s", 0.0))
        metrics["wall_s"] = result.wall_s
        metrics.update(result.rusage)  # minflt, majflt, utime_s, ... of the child itself
        primary = data["primary"]
        better: Better = "higher" if primary.get("better") == "higher" else "lower"
        evidence = dict(data.get("evidence") or {})
        info: dict[str, Any] = {k: data.get(k) for k in (
            "tool", "version", "workload", "backing", "size_bytes", "threads", "seed",
            "checksum", "interrupted")}
        collapse = data.get("collapse")
        if isinstance(collapse, dict):  # thp-collapse: MADV_COLLAPSE's own time and result
            evidence["collapse"] = collapse
            info["collapse"] = {k: v for k, v in collapse.items() if k != "before"}
            metrics["collapse_s"] = float(collapse.get("seconds") or 0.0)
        if data.get("mthp_kb"):
            info["mthp_kb"] = int(data["mthp_kb"])
        if isinstance(data.get("layout"), dict):  # touch_fraction: what it predicts, measured
            evidence["layout"] = layout_evidence(data["layout"], str(data.get("backing")),
                                                 evidence)
        warnings = [ln for ln in result.stderr.splitlines() if ln.strip()]
        problem = backing_problem(str(data.get("backing")), evidence)
        if problem:
            warnings.append(problem)
        info["warnings"] = warnings
        return WorkloadResult(metrics=metrics, primary=primary["name"],
                              unit=str(primary.get("unit", "")), better=better,
                              evidence=evidence, info=info)

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
        """One result per buffer (pure): its value the geometric mean of its windows, so the
        log-ratio of two buffers' values is the mean of their windows' log-ratios; every
        window kept (`reps`, as repetitions within the trial)."""
        data = _decode_interleaved(result)
        primary = data["primary"]
        better: Better = "higher" if primary.get("better") == "higher" else "lower"
        window = float(data.get("window_s", 0.0))
        warmup = float(data.get("warmup_s", 0.0))  # 0: a binary from before warm-ups
        out = []
        for i, buf in enumerate(data["buffers"]):
            windows = [float(w) for w in buf["windows_ns"]]
            metrics = {k: float(v) for k, v in buf["metrics"].items()}
            metrics["ns_per_access_pooled"] = metrics["ns_per_access"]
            metrics["ns_per_access"] = reps_geomean(windows)
            metrics["setup_s"] = float(buf.get("setup_s", 0.0))
            metrics["duration_s"] = float(data.get("duration_s", 0.0))
            metrics["wall_s"] = result.wall_s
            evidence = dict(buf.get("evidence") or {})
            info: dict[str, Any] = {k: data.get(k) for k in (
                "tool", "version", "workload", "size_bytes", "threads", "seed", "interrupted")}
            info.update(backing=buf["backing"], checksum=buf.get("checksum"),
                        interleaved={"buffers": len(data["buffers"]), "index": i,
                                     "window_s": window, "warmup_s": warmup,
                                     "order": data.get("order")},
                        warmup_ms=1000.0 * warmup,
                        # a window of one buffer (and its warm-up) costs a slot of every
                        # buffer's round
                        reps={"n": len(windows), "values": windows, "unit": "window",
                              "wall_s": [(window + warmup) * len(data["buffers"])]
                              * len(windows)})
            if isinstance(buf.get("collapse"), dict):
                evidence["collapse"] = buf["collapse"]
                metrics["collapse_s"] = float(buf["collapse"].get("seconds") or 0.0)
            problem = backing_problem(str(buf["backing"]), evidence)
            info["warnings"] = [ln for ln in result.stderr.splitlines() if ln.strip()] + \
                ([problem] if problem else [])
            out.append(WorkloadResult(metrics=metrics, primary=primary["name"],
                                      unit=str(primary.get("unit", "")), better=better,
                                      evidence=evidence, info=info))
        return out

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


REGION = 2 << 20  # touch_fraction's unit: a PMD-size region


def touched_pages(fraction: float) -> int:
    """4 KiB pages touch_fraction `fraction` writes at the start of each 2 MiB region."""
    return math.ceil(fraction * (REGION // 4096))


def layout_evidence(layout: dict[str, Any], backing: str, evidence: dict[str, Any]
                    ) -> dict[str, Any]:
    """hugelab-mem's sparse layout with what its own smaps read measured at the end: the
    buffer's Rss, or its hugetlb pages for a hugetlb backing (smaps counts those apart from
    Rss), against `expected_kb`, the layout's prediction for this backing's page size."""
    out = dict(layout)
    if backing.startswith("hugetlb-"):
        parts = [p for k in ("Private_Hugetlb_kB", "Shared_Hugetlb_kB")
                 if isinstance(p := evidence.get(k), int)]
        measured = sum(parts) if parts else None
        out["measured_field"] = "Private_Hugetlb_kB + Shared_Hugetlb_kB"
    else:
        measured = evidence.get("Rss_kB")
        out["measured_field"] = "Rss_kB"
    expected = out.get("expected_kb")
    out["measured_kb"] = measured
    out["measured_over_expected"] = (
        measured / expected if isinstance(measured, int) and isinstance(expected, int)
        and expected > 0 else None)
    return out


def reps_geomean(values: list[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise WorkloadError(f"hugelab-mem reported windows without a positive value: {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _decode_interleaved(result: ExecResult) -> dict[str, Any]:
    """The interleaved JSON object, checked for what parse_interleaved relies on."""
    if result.returncode != 0:
        _decode(result)  # raises the same errors (pools, bad arguments)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"hugelab-mem printed no valid JSON ({exc}): "
                            f"{' '.join(result.argv)}") from exc
    bufs = data.get("buffers") if isinstance(data, dict) else None
    if not isinstance(bufs, list) or data.get("mode") != "interleaved" or len(bufs) < 2 or \
            not all(isinstance(b, dict) and b.get("windows_ns") for b in bufs):
        raise WorkloadError(f"not an interleaved hugelab-mem result: {result.stdout[:200]!r}")
    if len({len(b["windows_ns"]) for b in bufs}) != 1:
        raise WorkloadError("interleaved buffers have different numbers of windows")
    return data


def _decode(result: ExecResult) -> dict[str, Any]:
    """The JSON object hugelab-mem printed, checked for the fields parse relies on."""
    cmd = " ".join(result.argv)
    if result.returncode != 0:
        if result.returncode == EXIT_HUGETLB:
            raise PoolBusyError(
                f"hugelab-mem exited with {EXIT_HUGETLB} (no hugetlb pages for its buffer): "
                f"{_tail(result.stderr) or '(no stderr)'}\n  command: {cmd}",
                hint="reserve the pool first (nr_hugepages), and check that no leftover process "
                     "holds its pages (hugelab recover)")
        raise WorkloadError(f"hugelab-mem exited with {result.returncode}: "
                            f"{_tail(result.stderr) or '(no stderr)'}\n  command: {cmd}")
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"hugelab-mem printed no valid JSON ({exc}): {cmd}\n"
                            f"  stdout: {result.stdout[:200]!r}\n"
                            f"  stderr: {_tail(result.stderr) or '(none)'}") from exc
    if not isinstance(data, dict) or data.get("tool") != "hugelab-mem":
        raise WorkloadError(f"output is not a hugelab-mem result: {result.stdout[:200]!r}")
    metrics, primary = data.get("metrics"), data.get("primary")
    if not isinstance(metrics, dict) or not isinstance(primary, dict):
        raise WorkloadError(f"hugelab-mem result lacks metrics/primary: {result.stdout[:200]!r}")
    if primary.get("name") not in metrics:
        raise WorkloadError(f"primary metric {primary.get('name')!r} missing from {metrics}")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()):
        raise WorkloadError(f"hugelab-mem metrics are not all numbers: {metrics}")
    return data


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


INTERLEAVE_BACKINGS = ("4k", "thp", "thp-collapse", "hugetlb-2M", "hugetlb-1G")


def interleave_problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
    """(why, hint) when one hugelab-mem process cannot hold every arm's buffer side by side:
    chase or random, one thread, one set of pools, backings without knobs of their own, and a
    duration that fits a round of windows."""
    if table.get("workload", "chase") not in ("chase", "random") or table.get("threads", 1) != 1:
        return ("it interleaves hugelab-mem's chase or random workload, one thread",
                "workload = \"chase\" or \"random\", threads = 1; other workloads: "
                "design = \"paired\"")
    if table.get("touch_fraction", 1) != 1:
        return ("touch_fraction (a sparse buffer) is measured one buffer to a process",
                "design = \"paired\"")
    if len({a.pools for a in arms}) > 1:
        return ("one process runs under one host setting, so the arms must share thp, "
                "thp_defrag and pools", "use design = \"paired\" to compare pools")
    if bad := [a.backing for a in arms if a.backing not in INTERLEAVE_BACKINGS]:
        return (f"backing {bad[0]} needs host knobs of its own (set per arm), so it cannot "
                "share a process with the others",
                f"interleave {', '.join(INTERLEAVE_BACKINGS)}; use design = \"paired\" for the "
                "rest")
    return _too_short(table, len(arms))


def _too_short(table: dict[str, Any], n_arms: int) -> tuple[str, str] | None:
    """(why, hint) when one round of windows (a window per arm and its mirror) does not fit in
    the duration; None when it fits or the values are not numbers (the dataclass says so)."""
    duration = table.get("duration", table.get("duration_s", 1.0))
    window = table.get("window_ms", 20.0)
    warmup = table.get("warmup_ms")
    if warmup is None and isinstance(window, int | float):
        warmup = window / 4.0  # the tool's default
    if not all(isinstance(v, int | float) and not isinstance(v, bool)
               for v in (duration, window, warmup)):
        return None
    need = 2 * n_arms * (window + warmup) / 1000.0
    if duration >= need:
        return None
    return (f"duration {duration:g} s is shorter than one round of windows ({n_arms} arms x 2 "
            f"x ({window:g} ms + {warmup:g} ms warm-up) = {need:g} s)",
            f"raise duration to at least {need:g} (a few seconds gives dozens of rounds), or "
            "lower window_ms")


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('workload', '',
        'the access pattern: "chase" (dependent loads), "random", "seq-read", "seq-write" or "populate" (fault in only)'),
    Key('size_bytes', 'bytes', 'the buffer hugelab-mem maps (a file may write size = "2G")'),
    Key('threads', '', 'threads walking the buffer'),
    Key('duration_s', 's', 'how long the walk runs (a file may write duration = "500ms")'),
    Key('seed', '', "the random pattern's seed"),
    Key('stride_bytes', 'bytes', "chase only: the slot size (none: the tool's 64)"),
    Key('window_ms', 'ms', 'design "interleaved": each measurement window'),
    Key('warmup_ms', 'ms', "untimed walking before the measurement (none: the tool's default)"),
    Key('touch_fraction', '',
        'the share of the buffer touched (1.0: all; 0.125 leaves it sparse)'),
)


KIND = Kind(
    keys=KEYS,
    name="hugelab-mem", workload=HugelabMem,
    summary="hugelab's own C micro-benchmark: a buffer of each arm's backing, chased or streamed",
    where=frozenset({"host", "guest", "domain", "interleaved"}),
    tools=(Tool("cc", "gcc"),), duration=("duration_s", 1.0),
    file_keys=file_keys, aliases=("duration", "size"), interleave=interleave_problem,
    counts_own_folios=True, asks_own_backing=True, own_programs=("hugelab-mem",))
