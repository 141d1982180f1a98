"""CSV tables: one row per trial (`arm`, `value`; `block`, `order`, `timestamp`, `unit`,
`better` optional)."""

from __future__ import annotations

import csv
import io

from hugelab.store.importers.common import (
    ARM_RE,
    CSV_COLUMNS,
    Parsed,
    Problem,
    Record,
    check_value,
    parse_count,
    parse_number,
    parse_timestamp,
)

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
                rec.metrics[k] = parse_number(v.strip())
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
        rec.block = parse_count(cell("block"), "block")
    if cell("order"):
        rec.order = parse_count(cell("order"), "order")
    if cell("timestamp"):
        rec.timestamp = parse_timestamp(cell("timestamp"))
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


