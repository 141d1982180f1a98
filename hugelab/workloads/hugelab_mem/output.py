"""hugelab-mem's JSON report read: one trial's metrics, evidence and info
(`parse_output`), or one result per buffer of an interleaved trial (`parse_interleaved_output`),
and its failures turned into errors that say what to do. Pure."""

from __future__ import annotations

import json
import math
from typing import Any

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.workloads.base import Better, ExecResult, WorkloadResult
from hugelab.workloads.hugelab_mem.evidence import backing_problem, layout_evidence

EXIT_BAD_ARGS = 2
EXIT_HUGETLB = 3


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def parse_output(result: ExecResult) -> WorkloadResult:
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


def parse_interleaved_output(result: ExecResult) -> list[WorkloadResult]:
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
