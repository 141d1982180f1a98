"""`hugelab store copy`: runs from one store into another (SQLite <-> PostgreSQL), each run in
one transaction. A run the destination already has (same key: same experiment, same host
label) gets the trials it lacks and the source's later attempts of the ones it has (a failed
trial retried since), and the source's run status; copying again never duplicates a trial."""

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
    present: int   # already in the destination as they are in the source, left alone


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
        else:  # the source went on (a resumed run): its state is the newer one
            dst.execute("UPDATE runs SET status = ?, finished = ?, skipped = ?, sequential = ? "
                        "WHERE id = ?", (run["status"], run["finished"],
                                         json.dumps(run["skipped"]),
                                         json.dumps(run["sequential"]), dest))
        present = {(b, a, t): (int(n or 1), st) for b, a, t, n, st in dst.tuples(
            "SELECT block, arm, target, attempts, status FROM trials WHERE run_id = ?", (dest,))}
        copied = kept = 0
        for t in src.trials(run["id"]):
            key = (t["block"], t["arm"], t["target"])
            attempts = int(t.get("attempts") or 1)
            if key in present:
                had, status = present[key]
                if attempts <= had and status == t["status"]:
                    kept += 1
                    continue  # the same trial, or an older attempt of it
                dst.execute("DELETE FROM trials WHERE run_id = ? AND block = ? AND arm = ? "
                            "AND target = ?", (dest, *key))
            dst.insert_trial_row(_trial(dest, t), t["provenance"], attempts)
            copied += 1
    return Copied(run["id"], dest, run["name"], run.get("label") or "", new, copied, kept)


def _trial(run_id: int, t: dict[str, Any]) -> Trial:
    return Trial(run_id, t["block"], t["position"], t["arm"], t["status"], t["value"],
                 t["metric"], t["unit"], t["better"], t["metrics"], t["evidence"],
                 t["monitors"], t["provenance"], t["flag"], t["error"], t["started"],
                 t["ended"], t["target"], t["cause"])
