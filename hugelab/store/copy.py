"""`hugelab store copy`: runs from one store into another (SQLite <-> PostgreSQL), each run in
one transaction. A run the destination already has (same key: same experiment, same host
label) gets only the trials it lacks, so copying a resumed run again adds what is new and
never duplicates a trial."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hugelab.errors import StoreError
from hugelab.store.base import RUN_JSON, SqlStore
from hugelab.store.schema import Trial

RUN_COLUMNS = ("key", "name", "experiment", "host", "skipped", "status", "created", "finished",
               "sequential", "label")


@dataclass(frozen=True)
class Copied:
    source_run: int
    dest_run: int
    name: str
    label: str
    new_run: bool
    trials: int    # copied
    present: int   # already in the destination, left as they were


def copy_runs(src: SqlStore, dst: SqlStore, run_ids: Sequence[int] | None = None
              ) -> list[Copied]:
    """Copy the runs `run_ids` (all when None) of `src` into `dst`."""
    runs = src.runs()
    if run_ids:
        have = {r["id"] for r in runs}
        missing = [str(i) for i in run_ids if i not in have]
        if missing:
            raise StoreError(f"no run {', '.join(missing)} in {src.name}")
        runs = [r for r in runs if r["id"] in set(run_ids)]
    return [_copy_run(src, dst, r) for r in runs]


def _copy_run(src: SqlStore, dst: SqlStore, run: dict[str, Any]) -> Copied:
    with dst.transaction():
        dest = dst.run_id_of(run["key"])
        new = dest is None
        if dest is None:
            values = [json.dumps(run[c]) if c in RUN_JSON else run[c] for c in RUN_COLUMNS]
            dest = dst.insert_returning_id(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "  # noqa: S608 - our columns
                f"VALUES ({', '.join('?' * len(RUN_COLUMNS))})", values)
        present = {(b, a, t) for b, a, t, *_ in dst.tuples(
            "SELECT block, arm, target FROM trials WHERE run_id = ?", (dest,))}
        copied = skipped = 0
        for t in src.trials(run["id"]):
            if (t["block"], t["arm"], t["target"]) in present:
                skipped += 1
                continue
            dst.insert_trial_row(_trial(dest, t), t["provenance"], int(t.get("attempts") or 1))
            copied += 1
    return Copied(run["id"], dest, run["name"], run.get("label") or "", new, copied, skipped)


def _trial(run_id: int, t: dict[str, Any]) -> Trial:
    return Trial(run_id, t["block"], t["position"], t["arm"], t["status"], t["value"],
                 t["metric"], t["unit"], t["better"], t["metrics"], t["evidence"],
                 t["monitors"], t["provenance"], t["flag"], t["error"], t["started"],
                 t["ended"], t["target"], t["cause"])
