"""Bring results that already exist into a store: CSV tables and raw tool outputs pasted by hand.

Formats: ``csv`` (one row per trial: ``arm``, ``value`` required; ``block``, ``order``,
``timestamp``, ``unit``, ``better`` optional), ``sysbench`` (``sysbench memory ... run`` text,
1.0.x; several runs back to back in one file are fine, whitespace may be collapsed as in a web
paste), ``stress-ng`` (``--metrics-brief`` text or ``--yaml`` file) and ``iperf3`` (``-J``
JSON; several objects back to back are fine).

Everything is parsed and validated before the store is opened: a file with any bad row is
reported with the line numbers of its bad rows (up to :data:`MAX_REPORTED`) and nothing is
imported. A valid import is written in one transaction. Without a ``block`` column
(and always for raw tool outputs) the i-th trial of each arm is put in block i, which pairs
the i-th trial of every arm with each other.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from hugelab import __version__
from hugelab.errors import StoreError, UsageError
from hugelab.store.base import SqlStore
from hugelab.store.importers.common import (
    ARM_RE,
    FORMATS,
    MAX_REPORTED,
    ImportRejected,
    ImportResult,
    Parsed,
    Problem,
    Record,
    parse_fraction,
)
from hugelab.store.importers.from_csv import parse_csv
from hugelab.store.importers.from_iperf3 import parse_iperf3
from hugelab.store.importers.from_stressng import (
    parse_stressng,
    parse_stressng_text,
    parse_stressng_yaml,
)
from hugelab.store.importers.from_sysbench import parse_sysbench
from hugelab.store.locate import open_store
from hugelab.store.schema import Trial

__all__ = ["FORMATS", "MAX_REPORTED", "ImportRejected", "ImportResult", "collect", "detect_format",
           "import_files", "parse_csv", "parse_fraction", "parse_iperf3", "parse_stressng",
           "parse_stressng_text", "parse_stressng_yaml", "parse_sysbench", "split_inputs"]


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


def _insert(store: SqlStore, key: str, name: str, experiment: dict[str, Any],
            records: list[Record]) -> int:
    """Run and all its trials in ONE transaction: any failure leaves the store as it was."""
    with store.transaction():
        run_id = store.insert_returning_id(
            "INSERT INTO runs (key, name, experiment, host, status, created, finished) "
            "VALUES (?, ?, ?, ?, 'finished', ?, ?)",
            (key, name, json.dumps(experiment), json.dumps({"imported": True}), time.time(),
             time.time()))
        for t in _trials(run_id, records):
            store.insert_trial_row(t, t.provenance or {}, 1)
    return run_id


def block_count(parsed: Parsed) -> int:
    """How many blocks the records name: their distinct numbers, however numbered (from 0,
    from 1, with gaps)."""
    return len({r.block or 0 for r in parsed.records})


def _experiment(name: str, arms: list[str], baseline: str, parsed: Parsed) -> dict[str, Any]:
    blocks = block_count(parsed)
    kinds = sorted({s["format"] for s in parsed.sources})
    return {"name": name, "arms": [{"name": a, "backing": "unknown"} for a in arms],
            "baseline": baseline, "blocks": blocks, "design": "paired", "seed": None,
            "workload": {"kind": "imported", "format": ",".join(kinds)},
            "imported": True, "pairing": parsed.pairing, "source": parsed.sources}


def import_files(store_path: str | Path | None, items: list[tuple[str | None, Path]], *,
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
    with open_store(store_path) as store:
        found = store.run_id_of(key)
        if found is not None:
            raise StoreError(f"these files were already imported into {store.name} as run "
                             f"{found}", hint=f"see it with: hugelab show {found} "
                             f"--store {store.name}")
        run_id = _insert(store, key, run_name, _experiment(run_name, arms, base, parsed),
                         parsed.records)
        where = store.name
    counts = {a: sum(1 for r in parsed.records if r.arm == a) for a in arms}
    return ImportResult(run_id, where, run_name, len(parsed.records), counts,
                        block_count(parsed), base, parsed.pairing,
                        tuple(parsed.notes), tuple(parsed.warnings))
