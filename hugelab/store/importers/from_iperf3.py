"""iperf3 `-J` JSON, several objects back to back."""

from __future__ import annotations

import json
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.store.importers.common import (
    Parsed,
    Problem,
    Record,
    check_value,
    line_of,
)
from hugelab.workloads import iperf3

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


