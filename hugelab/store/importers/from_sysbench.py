"""`sysbench memory ... run` text (1.0.x), several runs back to back, pasted or not."""

from __future__ import annotations

import re
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.store.importers.common import (
    Parsed,
    Problem,
    Record,
    check_value,
    line_of,
)
from hugelab.workloads import sysbench

# --- sysbench memory ---------------------------------------------------------------------------

_SB_RUN = re.compile(r"Total operations:\s*(\d+)\s*\(\s*([\d.]+)\s*per second\s*\)")
_SB_START = re.compile(r"sysbench\s+\d+\.\d+(?:\.\d+)?|Running memory speed test")
_SB_FIELDS: dict[str, tuple[str, Any]] = {
    "mib_transferred": (r"([\d.]+)\s*MiB transferred", float),
    "mib_per_s": (r"MiB transferred\s*\(\s*([\d.]+)\s*MiB/sec\s*\)", float),
    "total_time_s": (r"total time:\s*([\d.]+)s", float),
    "events": (r"total number of events:\s*(\d+)", int),
    "latency_min_ms": (r"min:\s*([\d.]+)", float),
    "latency_avg_ms": (r"avg:\s*([\d.]+)", float),
    "latency_max_ms": (r"max:\s*([\d.]+)", float),
    "latency_p95_ms": (r"95th percentile:\s*([\d.]+)", float),
    "latency_sum_ms": (r"\b(?:sum|sun):\s*([\d.]+)", float),
    "threads": (r"Number of threads:\s*(\d+)", int),
}
_SB_SIZE = re.compile(r"block size:\s*(\d+)\s*([KMG])iB")
_SB_INFO = {"version": re.compile(r"sysbench\s+(\d+\.\d+(?:\.\d+)?)"),
            "operation": re.compile(r"operation:\s*(\w+)"),
            "scope": re.compile(r"scope:\s*(\w+)")}


def _sysbench_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, ops_match_pos, end) per run: from its header (if any) to the next run's start."""
    ops = [m.start() for m in _SB_RUN.finditer(text)]
    starts = []
    prev = 0
    for pos in ops:
        heads = [m.start() for m in _SB_START.finditer(text, prev, pos)]
        starts.append(heads[0] if heads else pos)
        prev = pos + 1
    ends = starts[1:] + [len(text)]
    return list(zip(starts, ops, ends, strict=True))


def _sysbench_one(chunk: str) -> tuple[dict[str, float], dict[str, Any]]:
    m = _SB_RUN.search(chunk)
    assert m is not None
    metrics: dict[str, float] = {"total_ops": int(m.group(1)), "ops_per_s": float(m.group(2))}
    for name, (pattern, conv) in _SB_FIELDS.items():
        found = re.search(pattern, chunk)
        if found:
            metrics[name] = conv(found.group(1))
    size = _SB_SIZE.search(chunk)
    if size:
        metrics["block_size_kib"] = int(size.group(1)) * {"K": 1, "M": 1024, "G": 1 << 20}[
            size.group(2)]
    info = {k: r.search(chunk).group(1) for k, r in _SB_INFO.items()  # type: ignore[union-attr]
            if r.search(chunk)}
    return metrics, info


def _sysbench_checks(metrics: dict[str, float], where: str) -> list[str]:
    """Internal consistency of one run: a hand-edited or mis-pasted number shows up here."""
    out = []
    size = metrics.get("block_size_kib")
    moved = metrics.get("mib_transferred")
    if size and moved is not None:
        expect = metrics["total_ops"] * size / 1024.0
        if abs(expect - moved) > max(0.01 * expect, 0.01):
            out.append(f"{where}: {metrics['total_ops']:g} operations x {size:g} KiB = "
                       f"{expect:.2f} MiB, but {moved:.2f} MiB transferred is printed: "
                       "edited or mistyped?")
    rate, secs = metrics.get("mib_per_s"), metrics.get("total_time_s")
    if moved and rate and secs:
        expect = moved / secs
        if abs(expect - rate) > 0.02 * expect:
            out.append(f"{where}: {moved:.2f} MiB in {secs:g}s is {expect:.2f} MiB/sec, but "
                       f"{rate:.2f} MiB/sec is printed: edited or mistyped?")
    return out


def parse_sysbench(text: str, path: str, arm: str) -> Parsed:
    """Every `sysbench memory` run in the text; the primary metric is MiB/sec (higher is better)."""
    out = Parsed(pairing="order")
    spans = _sysbench_spans(text)
    if not spans:
        out.problems.append(Problem(path, 1, "no sysbench memory run found (no 'Total "
                                    "operations:' line)"))
        return out
    for k, (start, _ops, end) in enumerate(spans, 1):
        line = line_of(text, start)
        src = f"{path}:{line}"
        where = f"{src} (run {k} of {len(spans)} in the file)"
        chunk = text[start:end]
        try:  # the workload's parser is the authority on names and required fields
            strict, echoed = sysbench.parse_output(chunk)
        except WorkloadError as exc:
            out.problems.append(Problem(path, line, f"run {k} in the file: "
                                        f"{exc.message.splitlines()[0]}"))
            continue
        # a web paste collapses line breaks: the lenient parse fills what line anchors miss
        metrics, info = _sysbench_one(chunk)
        metrics.update(strict)
        info["settings"] = echoed
        bad = check_value(metrics["mib_per_s"])
        if bad:
            out.problems.append(Problem(path, line, bad))
            continue
        out.warnings.extend(_sysbench_checks(metrics, where))
        out.records.append(Record(arm=arm, value=metrics["mib_per_s"], source=src,
                                  unit="MiB/s", better="higher", metric="mib_per_s",
                                  metrics=metrics,
                                  info={"tool": "sysbench", "run_in_file": k, **info}))
    return out


