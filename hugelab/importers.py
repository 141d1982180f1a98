"""Bring results that already exist into a store: CSV tables and raw tool outputs pasted by hand.

Formats: ``csv`` (one row per trial: ``arm``, ``value`` required; ``block``, ``order``,
``timestamp``, ``unit``, ``better`` optional), ``sysbench`` (``sysbench memory ... run`` text,
1.0.x; several runs back to back in one file are fine, whitespace may be collapsed as in a web
paste), ``stress-ng`` (``--metrics-brief`` text or ``--yaml`` file) and ``iperf3`` (``-J``
JSON; several objects back to back are fine).

Everything is parsed and validated before the store is opened: a file with any bad row is
reported with the line numbers of its bad rows (up to :data:`MAX_REPORTED`) and nothing is
imported. A valid import is written in one SQLite transaction. Without a ``block`` column
(and always for raw tool outputs) the i-th trial of each arm is put in block i, which pairs
the i-th trial of every arm with each other.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hugelab import __version__
from hugelab.errors import HugelabError, StoreError, UsageError, WorkloadError
from hugelab.store import JSON_FIELDS, Store, Trial
from hugelab.workloads import iperf3, stressng, sysbench

FORMATS = ("csv", "sysbench", "stress-ng", "iperf3")
MAX_REPORTED = 50
CSV_COLUMNS = ("arm", "value", "block", "order", "timestamp", "unit", "better")
ARM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:@-]*$")


class ImportRejected(HugelabError):
    """Input rows failed validation; nothing was imported. ``problems`` lists them all."""

    exit_code = 2

    def __init__(self, problems: list[Problem], total: int) -> None:
        shown = problems[:MAX_REPORTED]
        lines = [f"  {p}" for p in shown]
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more")
        super().__init__(
            f"{total} bad row(s); nothing was imported:\n" + "\n".join(lines),
            hint="fix the rows named above and import again")
        self.problems = problems
        self.total = total


@dataclass(frozen=True)
class Problem:
    """One bad input row (or record, for raw tool outputs)."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Record:
    """One trial to import, before it has a run id."""

    arm: str
    value: float
    source: str  # "path:line"
    block: int | None = None
    order: int | None = None
    timestamp: float | None = None
    unit: str | None = None
    better: str | None = None
    metric: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Parsed:
    """What the input files hold: records, bad rows, warnings, and where they came from."""

    records: list[Record] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    pairing: str = "block"


@dataclass(frozen=True)
class ImportResult:
    run_id: int
    store: str
    name: str
    trials: int
    arms: dict[str, int]
    blocks: int
    baseline: str
    pairing: str
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "store": self.store, "name": self.name,
                "trials": self.trials, "arms": self.arms, "blocks": self.blocks,
                "baseline": self.baseline, "pairing": self.pairing,
                "notes": list(self.notes), "warnings": list(self.warnings)}


# --- small helpers ---------------------------------------------------------------------------

def parse_fraction(text: str, name: str) -> float:
    """'1%' or '0.01' -> 0.01. Without '%', a value must lie in (0, 1)."""
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
    except ValueError:
        raise UsageError(f"{name} must be a percentage like 1% or a fraction like 0.01, "
                         f"got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} must be positive, got {text!r}")
    if not s.endswith("%") and value >= 1:
        raise UsageError(f"{name} {text!r} is ambiguous",
                         hint=f"write it as a percentage ({s}%) or as a fraction below 1")
    return value


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _timestamp(text: str) -> float:
    try:
        return _number(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"timestamp {text!r} is neither epoch seconds nor ISO 8601") from None


def _int(text: str, name: str) -> int:
    if not text:
        raise ValueError(f"{name} is empty")
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not an integer") from None
    if not f.is_integer() or f < 0:
        raise ValueError(f"{name} {text!r} is not a non-negative integer")
    return int(f)


def check_value(value: float) -> str | None:
    if not math.isfinite(value):
        return f"value {value} is not finite"
    if value <= 0:
        return f"value {value:g} is not positive (comparisons work on log ratios)"
    return None


# --- CSV -------------------------------------------------------------------------------------

def _dialect(text: str) -> type[csv.Dialect] | csv.Dialect:
    head = text.split("\n", 1)[0]
    if "," not in head:
        for delim in ("\t", ";"):
            if delim in head:
                class Custom(csv.excel):
                    delimiter = delim
                return Custom
    return csv.excel


def _csv_value(text: str) -> float:
    if not text:
        raise ValueError("value is empty")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"value {text!r} is not a number") from None
    bad = check_value(value)
    if bad:
        raise ValueError(bad)
    return value


def _csv_extras(row: dict[str, str], rec: Record) -> None:
    """Columns hugelab does not know: numbers go to metrics, text to provenance."""
    for k, v in row.items():
        if k not in CSV_COLUMNS and k and v and v.strip():
            try:
                rec.metrics[k] = _number(v.strip())
            except ValueError:
                rec.info[k] = v.strip()


def _csv_row(row: dict[str, str], arm_default: str | None, src: str) -> Record:
    """One CSV row -> Record; raises ValueError naming what is wrong."""
    def cell(name: str) -> str:
        return (row.get(name) or "").strip()

    arm = cell("arm") or (arm_default or "")
    if not arm:
        raise ValueError("arm is empty")
    if not ARM_RE.match(arm):
        raise ValueError(f"arm {arm!r} is not a valid arm name (letters, digits, _.+:@-)")
    value = _csv_value(cell("value"))
    better = cell("better").lower() or None
    if better not in (None, "lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', got {cell('better')!r}")
    rec = Record(arm=arm, value=value, source=src, unit=cell("unit") or None, better=better,
                 metric="value")
    if "block" in row:
        rec.block = _int(cell("block"), "block")
    if cell("order"):
        rec.order = _int(cell("order"), "order")
    if cell("timestamp"):
        rec.timestamp = _timestamp(cell("timestamp"))
    _csv_extras(row, rec)
    return rec


def parse_csv(text: str, path: str, arm: str | None = None) -> Parsed:
    """One trial per row. ``arm`` names the arm when the file has no ``arm`` column."""
    out = Parsed()
    reader = csv.DictReader(io.StringIO(text), dialect=_dialect(text))
    if reader.fieldnames is None:
        out.problems.append(Problem(path, 1, "empty file: a header row is needed"))
        return out
    reader.fieldnames = [(f or "").strip().lower() for f in reader.fieldnames]
    cols = set(reader.fieldnames)
    missing = [c for c in ("arm", "value") if c not in cols and not (c == "arm" and arm)]
    if missing:
        out.problems.append(Problem(path, 1, f"header lacks column(s) {', '.join(missing)} "
                                    f"(has: {', '.join(reader.fieldnames)})"))
        return out
    if "arm" in cols and arm:
        out.problems.append(Problem(path, 1, f"the file has an arm column: do not also name "
                                    f"arm {arm!r} for it"))
        return out
    if "block" not in cols:
        out.pairing = "order"
    for row in reader:
        start = reader.line_num
        if None in row:
            out.problems.append(Problem(path, start, "more cells than header columns"))
            continue
        if not any((v or "").strip() for v in row.values()):
            continue
        try:
            out.records.append(_csv_row(row, arm, f"{path}:{start}"))
        except ValueError as exc:
            out.problems.append(Problem(path, start, str(exc)))
    if not out.records and not out.problems:
        out.problems.append(Problem(path, 1, "no data rows"))
    return out


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


# --- stress-ng ---------------------------------------------------------------------------------
# Metric names, primary and unit are those of hugelab.workloads.stressng, so imported trials and
# trials hugelab ran itself read the same; its parsers do the parsing, this file only splits a
# log or a YAML stream into runs and keeps line numbers.

_SNG_HEAD = re.compile(r"stressor\s+bogo ops\s+real time", re.I)
# newer stress-ng (0.16+) adds columns after the six the workload parser reads: the first six
# numbers are taken here when that parser finds no row
_SNG_ROW = re.compile(r"stress-ng:\s*(?:metrc|info):\s*\[\d+\]\s+([a-z0-9][\w-]*)\s+"
                      r"((?:[\d.]+\s+){5}[\d.]+)")
_SNG_NAMES = ("bogo_ops", "real_time_s", "usr_time_s", "sys_time_s", "bogo_ops_per_s_real",
              "bogo_ops_per_s_cpu")
SNG_PRIMARY = "bogo_ops_per_s_real"


def _sng_record(path: str, line: int, rows: dict[str, dict[str, float]],
                arm: str, out: Parsed, extra: dict[str, Any]) -> Record | None:
    if not rows:
        out.problems.append(Problem(path, line, "stress-ng metrics without a stressor row"))
        return None
    name, metrics = next(iter(rows.items()))
    if len(rows) > 1:
        out.warnings.append(f"{path}:{line}: {len(rows)} stressors in one run "
                            f"({', '.join(rows)}): {name}'s bogo ops/s is the value; the "
                            "others are kept as metrics")
    allm = dict(metrics)
    for other, m in list(rows.items())[1:]:
        allm.update({f"{other}.{k}": v for k, v in m.items()})
    if SNG_PRIMARY not in metrics:
        out.problems.append(Problem(path, line, f"stress-ng {name}: no bogo ops/s (real time)"))
        return None
    bad = check_value(metrics[SNG_PRIMARY])
    if bad:
        out.problems.append(Problem(path, line, f"stress-ng {name}: {bad}"))
        return None
    rec = Record(arm=arm, value=metrics[SNG_PRIMARY], source=f"{path}:{line}", unit="bogo ops/s",
                 better="higher", metric=SNG_PRIMARY, metrics=allm,
                 info={"tool": "stress-ng", "stressor": name, "note": stressng.BOGO_NOTE,
                       **extra})
    out.records.append(rec)
    return rec


def _sng_rows(chunk: str) -> dict[str, dict[str, float]]:
    rows = stressng.parse_brief(chunk)
    if rows:
        return rows
    for m in _SNG_ROW.finditer(chunk):
        nums = [float(x) for x in m.group(2).split()]
        rows.setdefault(m.group(1), dict(zip(_SNG_NAMES, nums, strict=True)))
    return rows


def parse_stressng_text(text: str, path: str, arm: str) -> Parsed:
    """`--metrics-brief` text; each metrics table header starts one run (one trial)."""
    out = Parsed(pairing="order")
    lines = text.splitlines()
    heads = [i for i, ln in enumerate(lines) if _SNG_HEAD.search(ln)]
    if not heads:
        out.problems.append(Problem(path, 1, "no stress-ng metrics found: run stress-ng with "
                                    "--metrics-brief (or --yaml FILE)"))
    for k, first in enumerate(heads):
        chunk = "\n".join(lines[first:heads[k + 1] if k + 1 < len(heads) else len(lines)])
        _sng_record(path, first + 1, _sng_rows(chunk), arm, out, {})
    return out


def parse_stressng_yaml(text: str, path: str, arm: str) -> Parsed:
    """stress-ng `--yaml` output; several documents ('---') are several runs."""
    out = Parsed(pairing="order")
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("---")] or [0]
    if starts[0] != 0 and any(ln.strip() for ln in lines[:starts[0]]):
        starts.insert(0, 0)
    for k, first in enumerate(starts):
        doc = stressng.parse_yaml("\n".join(lines[first:starts[k + 1] if k + 1 < len(starts)
                                                    else len(lines)]))
        if not doc.get("metrics"):
            continue
        raw_info = doc.get("system-info")
        sysinfo: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        extra: dict[str, Any] = {k2: sysinfo[k2] for k2 in ("stress-ng-version", "hostname", "release")
                 if k2 in sysinfo}
        rec = _sng_record(path, first + 1, stressng.yaml_metrics(doc), arm, out, extra)
        if rec and isinstance(sysinfo.get("epoch-secs"), int | float):
            rec.timestamp = float(sysinfo["epoch-secs"])
    if not out.records and not out.problems:
        out.problems.append(Problem(path, 1, "no stress-ng metrics in this YAML: was it written "
                                    "with --metrics-brief --yaml FILE?"))
    return out


def parse_stressng(text: str, path: str, arm: str) -> Parsed:
    if re.search(r"^metrics:\s*$", text, re.M) and "- stressor:" in text:
        return parse_stressng_yaml(text, path, arm)
    return parse_stressng_text(text, path, arm)


# --- iperf3 -J ----------------------------------------------------------------------------------
# Parsing (and its primary receiver_gbps) is hugelab.workloads.iperf3's; here: many objects.

def _json_objects(text: str) -> list[tuple[int, str, Any, str | None]]:
    """Every top-level JSON value in the text, back to back: (line, its text, value, error)."""
    dec = json.JSONDecoder()
    out: list[tuple[int, str, Any, str | None]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            out.append((line_of(text, pos), "", None, f"not valid JSON: {exc.msg} at line "
                        f"{exc.lineno} column {exc.colno}"))
            return out
        out.append((line_of(text, pos), text[pos:end], obj, None))
        pos = end


def _iperf3_record(line: int, body: str, obj: Any, path: str, arm: str) -> Record:
    """One iperf3 -J object -> Record; ValueError naming what is wrong."""
    try:
        metrics, facts = iperf3.parse_json(body)
    except WorkloadError as exc:
        raise ValueError(exc.message.splitlines()[0]) from None
    value = metrics["receiver_gbps"]
    bad = check_value(value)
    if bad:
        raise ValueError(bad)
    ts = ((obj.get("start") or {}).get("timestamp") or {}).get("timesecs")
    return Record(arm=arm, value=value, source=f"{path}:{line}", unit="Gbit/s",
                  better="higher", metric="receiver_gbps", metrics=metrics,
                  info={"tool": "iperf3", **{k: v for k, v in facts.items() if v is not None}},
                  timestamp=float(ts) if isinstance(ts, int | float) else None)


def parse_iperf3(text: str, path: str, arm: str) -> Parsed:
    """iperf3 -J results (TCP); value = receiver Gbit/s, higher is better."""
    out = Parsed(pairing="order")
    objs = _json_objects(text)
    if not objs:
        out.problems.append(Problem(path, 1, "empty file: no iperf3 -J output"))
    for line, body, obj, err in objs:
        try:
            if err:
                raise ValueError(err)
            out.records.append(_iperf3_record(line, body, obj, path, arm))
        except ValueError as exc:
            out.problems.append(Problem(path, line, str(exc)))
    return out


# --- inputs, format detection, merging ----------------------------------------------------------

def detect_format(path: Path, text: str) -> str:
    """Best guess of a file's format; UsageError if it cannot be told."""
    head = text.lstrip()[:4096]
    if path.suffix.lower() in (".csv", ".tsv"):
        return "csv"
    if head.startswith(("{", "[")):
        return "iperf3"
    if "stress-ng" in head or ("bogo" in head and "stressor" in head):
        return "stress-ng"
    if "sysbench" in head or "Total operations:" in text:
        return "sysbench"
    first = head.split("\n", 1)[0].lower()
    if "arm" in first and "value" in first:
        return "csv"
    raise UsageError(f"cannot tell the format of {path}",
                     hint=f"pass --format ({'|'.join(FORMATS)})")


def split_inputs(items: list[str], arm: str | None) -> list[tuple[str | None, Path]]:
    """FILE or ARM=FILE arguments -> (arm or None, path). A FILE that exists wins over ARM=FILE."""
    out: list[tuple[str | None, Path]] = []
    for item in items:
        name, eq, rest = item.partition("=")
        if eq and not Path(item).exists() and name:
            if not ARM_RE.match(name):
                raise UsageError(f"{name!r} is not a valid arm name in {item!r}")
            out.append((name, Path(rest)))
        else:
            out.append((arm, Path(item)))
    return out


def _parse_one(fmt: str, text: str, path: Path, arm: str | None) -> Parsed:
    if fmt == "csv":
        return parse_csv(text, str(path), arm)
    if not arm:
        raise UsageError(f"which arm is {path}? {fmt} output does not say",
                         hint=f"name it: --arm ARM {path}, or ARM={path}")
    parser = {"sysbench": parse_sysbench, "stress-ng": parse_stressng,
              "iperf3": parse_iperf3}[fmt]
    return parser(text, str(path), arm)


def _check_consistency(records: list[Record]) -> list[Problem]:
    """Duplicate (block, arm); mixed units or better-directions across rows."""
    problems: list[Problem] = []
    seen: dict[tuple[int, str], str] = {}
    first: dict[str, tuple[str, str]] = {}
    for r in records:
        path, _, line = r.source.rpartition(":")
        if r.block is not None:
            key = (r.block, r.arm)
            if key in seen:
                problems.append(Problem(path, int(line), f"block {r.block} of arm {r.arm!r} "
                                        f"was already given at {seen[key]}"))
            else:
                seen[key] = r.source
        for attr in ("unit", "better"):
            v = getattr(r, attr)
            if v is None:
                continue
            if attr not in first:
                first[attr] = (v, r.source)
            elif first[attr][0] != v:
                problems.append(Problem(path, int(line), f"{attr} {v!r} differs from "
                                        f"{first[attr][0]!r} at {first[attr][1]}"))
    return problems


def _number_blocks(parsed: Parsed) -> None:
    """Without a block column: the i-th trial of each arm (in file order) goes to block i."""
    counts: dict[str, int] = {}
    for r in parsed.records:
        r.block = counts.get(r.arm, 0)
        counts[r.arm] = r.block + 1
    if len(counts) > 1:
        sizes = ", ".join(f"{a}: {n}" for a, n in counts.items())
        parsed.notes.append(
            "no block numbers in the input: trials are numbered per arm in file order, so the "
            f"i-th trial of each arm is paired with the i-th of every other ({sizes}). The "
            "pairs mean something only if those trials ran close together in time.")
        if len(set(counts.values())) > 1:
            parsed.warnings.append(f"arms have different numbers of trials ({sizes}): the "
                                   "extra trials have no partner and drop out of paired analyses")


def collect(items: list[tuple[str | None, Path]], fmt: str | None = None) -> Parsed:
    """Parse and validate every input; never touches a store."""
    total = Parsed()
    for arm, path in items:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
        text = raw.decode("utf-8-sig", errors="replace")
        kind = fmt or detect_format(path, text)
        p = _parse_one(kind, text, path, arm)
        total.records.extend(p.records)
        total.problems.extend(p.problems)
        total.warnings.extend(p.warnings)
        if p.pairing == "order":
            total.pairing = "order"
        total.sources.append({"path": str(path.resolve()), "format": kind, "arm": arm,
                              "sha256": hashlib.sha256(raw).hexdigest(),
                              "records": len(p.records)})
    if total.pairing == "order" and any(r.block is not None for r in total.records):
        total.problems.append(Problem(str(items[0][1]), 1, "some inputs have block numbers and "
                                      "some do not: import them separately"))
    total.problems.extend(_check_consistency(total.records))
    if total.pairing == "order" and not total.problems:
        _number_blocks(total)
    return total


# --- writing -------------------------------------------------------------------------------------

def _positions(records: list[Record]) -> dict[int, int]:
    """Position within its block: the `order` column if given, else file order."""
    pos: dict[int, int] = {}
    per_block: dict[int, int] = {}
    for i, r in enumerate(records):
        assert r.block is not None
        n = per_block.get(r.block, 0)
        pos[i] = r.order if r.order is not None else n
        per_block[r.block] = n + 1
    return pos


def _trials(run_id: int, records: list[Record]) -> list[Trial]:
    pos = _positions(records)
    out = []
    for i, r in enumerate(records):
        assert r.block is not None
        prov = {"hugelab": __version__, "accel": "unknown", "target": "unknown",
                "imported": True, "source": r.source, **r.info}
        out.append(Trial(run_id, r.block, pos[i], r.arm, "ok", r.value, r.metric, r.unit,
                         r.better, r.metrics, {"check": "imported"}, {}, prov,
                         started=r.timestamp))
    return out


def _insert(store: Store, key: str, name: str, experiment: dict[str, Any],
            records: list[Record]) -> int:
    """Run and all its trials in ONE transaction: any failure leaves the store as it was."""
    db = store.db
    with db:
        cur = db.execute(
            "INSERT INTO runs (key, name, experiment, host, status, created, finished) "
            "VALUES (?, ?, ?, ?, 'finished', ?, ?)",
            (key, name, json.dumps(experiment), json.dumps({"imported": True}), time.time(),
             time.time()))
        run_id = int(cur.lastrowid or 0)
        for t in _trials(run_id, records):
            db.execute(
                """INSERT INTO trials (run_id, block, position, arm, target, status, value,
                   metric, unit, better, metrics, evidence, monitors, provenance, flag, error,
                   started, ended) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (t.run_id, t.block, t.position, t.arm, t.target, t.status, t.value, t.metric,
                 t.unit, t.better, *(json.dumps(getattr(t, f) or {}) for f in JSON_FIELDS),
                 t.flag, t.error, t.started, t.ended))
    return run_id


def _experiment(name: str, arms: list[str], baseline: str, parsed: Parsed) -> dict[str, Any]:
    blocks = 1 + max(r.block or 0 for r in parsed.records)
    kinds = sorted({s["format"] for s in parsed.sources})
    return {"name": name, "arms": [{"name": a, "backing": "unknown"} for a in arms],
            "baseline": baseline, "blocks": blocks, "design": "paired", "seed": None,
            "workload": {"kind": "imported", "format": ",".join(kinds)},
            "imported": True, "pairing": parsed.pairing, "source": parsed.sources}


def import_files(store_path: Path, items: list[tuple[str | None, Path]], *,
                 name: str | None = None, fmt: str | None = None,
                 baseline: str | None = None) -> ImportResult:
    """Parse, validate, then write one run with all trials in one transaction."""
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint=f"one of: {', '.join(FORMATS)}")
    if not items:
        raise UsageError("name at least one file to import")
    parsed = collect(items, fmt)
    if parsed.problems:
        raise ImportRejected(parsed.problems[:MAX_REPORTED], len(parsed.problems))
    arms = list(dict.fromkeys(r.arm for r in parsed.records))
    base = baseline or arms[0]
    if base not in arms:
        raise UsageError(f"baseline {base!r} is not among the imported arms: {', '.join(arms)}")
    run_name = name or "import: " + ", ".join(Path(s["path"]).name for s in parsed.sources)
    key_src = json.dumps([run_name, base, [(s["arm"], s["format"], s["sha256"])
                                           for s in parsed.sources]])
    key = "import-" + hashlib.sha256(key_src.encode()).hexdigest()[:16]
    with Store(store_path) as store:
        row = store.db.execute("SELECT id FROM runs WHERE key = ?", (key,)).fetchone()
        if row:
            raise StoreError(f"these files were already imported into {store_path} as run "
                             f"{row['id']}", hint=f"see it with: hugelab show {row['id']} "
                             f"--store {store_path}")
        run_id = _insert(store, key, run_name, _experiment(run_name, arms, base, parsed),
                         parsed.records)
    counts = {a: sum(1 for r in parsed.records if r.arm == a) for a in arms}
    return ImportResult(run_id, str(store_path), run_name, len(parsed.records), counts,
                        1 + max(r.block or 0 for r in parsed.records), base, parsed.pairing,
                        tuple(parsed.notes), tuple(parsed.warnings))
