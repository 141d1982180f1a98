"""Where in an experiment file an error is: the line of a key, of an arm's key, or of a table
(pure). The parse names the line of its own errors; `locate` names it for errors raised past the
parse, from the key and arm they carry (a workload's key, an arm's `app`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hugelab.errors import ExperimentError


class Locator:
    """Finds the line of a key in a TOML text, so errors can say where to look."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def line_of(self, key: str, arm_index: int | None = None, table: str | None = None) -> int | None:
        current: tuple[str, int] = ("", -1)
        arm_count = -1
        for no, raw in enumerate(self.lines, 1):
            line = raw.strip()
            if line.startswith("[[arms]]"):
                arm_count += 1
                current = ("arms", arm_count)
                continue
            m = re.match(r"\[\s*([A-Za-z0-9_.\-]+)\s*\]", line)
            if m:  # [arms.vm] / [arms.guest] belong to the latest [[arms]]
                sub = m.group(1).startswith("arms.")
                current = (m.group(1), arm_count) if sub else (m.group(1), -1)
                continue
            if not re.match(rf"{re.escape(key)}\s*=", line):
                continue
            if arm_index is not None:
                if current == ("arms" if table is None else f"arms.{table}", arm_index):
                    return no
                continue
            if table is not None and current[0] == table:
                return no
            if arm_index is None and table is None and current[0] == "":
                return no
        return None


    def any_line(self, key: str) -> int | None:
        """The first line that sets `key` anywhere: `key = `, `key.x = ` or inside an inline
        table (`{ key = ` or `, key = `)."""
        pattern = re.compile(rf"(^|[{{,]\s*){re.escape(key)}\s*[=.]")
        return next((no for no, raw in enumerate(self.lines, 1)
                     if pattern.search(raw.split("#", 1)[0].strip())), None)

    def table_line(self, name: str) -> int | None:
        """The line of `[name]`, or of a top-level `name = {...}`."""
        header = re.compile(rf"\[\s*{re.escape(name)}\s*\]")
        found = next((no for no, raw in enumerate(self.lines, 1)
                      if header.match(raw.strip())), None)
        return found or self.line_of(name)


def workload_line(text: str, key: str | None, arm: str | None = None) -> int | None:
    """The line of an experiment file that an error past the parse is about: `key` in arm
    `arm`'s [[arms]] table (its name's line when the key is not there), else `key` in
    [workload], in [scenarios] or anywhere, else the [workload] table's own line (pure)."""
    loc = Locator(text)
    idx = _arm_index(text, arm) if arm is not None else None
    if idx is not None:
        return (loc.line_of(key, idx) if key else None) or loc.line_of("name", idx)
    if key:
        for table in ("workload", "scenarios"):
            if (line := loc.line_of(key, table=table)) is not None:
                return line
        if (line := loc.any_line(key)) is not None:
            return line
    return loc.table_line("workload")


def _arm_index(text: str, name: str) -> int | None:
    """The index of the [[arms]] table named `name` (None: a factorial cell, or none)."""
    try:
        arms = tomllib.loads(text).get("arms")
    except tomllib.TOMLDecodeError:
        return None
    names = [a.get("name") if isinstance(a, dict) else None
             for a in (arms if isinstance(arms, list) else [])]
    return names.index(name) if name in names else None


def locate(exc: ExperimentError, path: Path) -> ExperimentError:
    """An error raised past the parse (building the workloads, an arm's `app`) as
    load_experiment's own: `FILE: line N: ...`, the line found from the key and arm the error
    carries (workload_line)."""
    try:
        line = workload_line(path.read_text(), exc.key, exc.arm)
    except OSError:
        line = None
    where = f"line {line}: " if line else ""
    return ExperimentError(f"{path}: {where}{exc.message}", hint=exc.hint, key=exc.key,
                           arm=exc.arm)
