"""stress-ng `--metrics-brief` text or its `--yaml` file."""

from __future__ import annotations

import re
from typing import Any

from hugelab.store.importers.common import (
    Parsed,
    Problem,
    Record,
    check_value,
)
from hugelab.workloads import stressng

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


