"""What every store does, written once in SQL both engines speak (`?` placeholders, no
engine-specific functions but the JSON path `json_text`): runs, trials committed one by one,
resume keys; what is read of a run's trials (rows, the fast value path, repetitions, and what
the report reads beyond values) is `reads.py`, the run key's format `keys.py`. No SQL lives outside this package (tests/test_architecture.py).
`sqlite.py` and `postgres.py` add a connection and a dialect; `locate.py` picks one from
`--store`."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Self

from hugelab.errors import RETRIED_CAUSES, StoreError
from hugelab.store.reads import RunReads
from hugelab.store.schema import MIGRATIONS, TRIAL_STATUSES, Trial

RUN_JSON = ("experiment", "host", "skipped", "sequential")


class SqlStore(RunReads):
    """A results store. Every trial is committed on its own, before the next one starts."""

    name: str = ""  # what messages call it: a path, or a URL without its password
    engine: str = ""  # "sqlite" or "postgresql"

    # --- the dialect: what an engine provides ------------------------------------------------
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows that index by position and by column name (dict(row) works)."""
        raise NotImplementedError

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Plain tuples: the fast path for many rows."""
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Any]:
        """All statements inside commit together, or none on an exception."""
        raise NotImplementedError

    def json_text(self, column: str, *path: str | int) -> str:
        """SQL for the text at `path` inside a JSON column (a negative index counts from the
        end); objects come back as JSON text, numbers as text or numbers."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _applied_migrations(self) -> set[str]:
        raise NotImplementedError

    def _apply_migration(self, name: str, sql: str) -> None:
        raise NotImplementedError

    # --- common ------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def _migrate(self) -> None:
        done = self._applied_migrations()
        for name, sql in MIGRATIONS:
            if name not in done:
                self._apply_migration(name, sql)

    def migrations(self) -> list[str]:
        return sorted(self._applied_migrations())

    def insert_returning_id(self, sql: str, params: Sequence[Any]) -> int:
        row = self.one(sql + " RETURNING id", params)
        return int(row[0]) if row else 0

    # --- runs --------------------------------------------------------------------------------
    def get_or_create_run(self, key: str, name: str, experiment: dict[str, Any],
                          host: dict[str, Any], label: str = "") -> tuple[int, bool]:
        row = self.one("SELECT id FROM runs WHERE key = ?", (key,))
        if row:
            with self.transaction():
                self.execute("UPDATE runs SET status = 'running' WHERE id = ?", (row[0],))
            return int(row[0]), False
        with self.transaction():
            run_id = self.insert_returning_id(
                "INSERT INTO runs (key, name, experiment, host, created, label) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, name, json.dumps(experiment), json.dumps(host), time.time(), label))
        return run_id, True

    def set_run_status(self, run_id: int, status: str,
                       skipped: dict[str, str] | None = None) -> None:
        with self.transaction():
            self.execute("UPDATE runs SET status = ?, finished = ? WHERE id = ?",
                         (status, time.time() if status == "finished" else None, run_id))
            if skipped is not None:
                self.execute("UPDATE runs SET skipped = ? WHERE id = ?",
                             (json.dumps(skipped), run_id))

    def set_run_sequential(self, run_id: int, info: dict[str, Any]) -> None:
        with self.transaction():
            self.execute("UPDATE runs SET sequential = ? WHERE id = ?", (json.dumps(info), run_id))

    def runs(self, run_id: int | None = None) -> list[dict[str, Any]]:
        where = "WHERE r.id = ?" if run_id is not None else ""
        rows = self.rows(f"""
            SELECT r.*, COUNT(t.id) AS trials,
                   SUM(CASE WHEN t.status = 'flagged' THEN 1 ELSE 0 END) AS flagged,
                   SUM(CASE WHEN t.status = 'failed' THEN 1 ELSE 0 END) AS failed
            FROM runs r LEFT JOIN trials t ON t.run_id = r.id {where}
            GROUP BY r.id ORDER BY r.id""", () if run_id is None else (run_id,))  # noqa: S608
        out = []
        for r in rows:
            d = dict(r)
            for k in RUN_JSON:
                d[k] = json.loads(d[k])
            for k in ("trials", "flagged", "failed"):
                d[k] = int(d[k] or 0)
            out.append(d)
        return out

    def run(self, run_id: int | None = None) -> dict[str, Any]:
        if run_id is None:
            last = self.one("SELECT MAX(id) FROM runs")
            if last is None or last[0] is None:
                raise StoreError(f"{self.name} has no runs", hint="start one with `hugelab run`")
            run_id = int(last[0])
        found = self.runs(run_id)
        if found:
            return found[0]
        ids = [str(r[0]) for r in self.tuples("SELECT id FROM runs ORDER BY id")]
        raise StoreError(f"no run {run_id} in {self.name}",
                         hint=f"runs: {', '.join(ids)}" if ids else "the store has no runs")

    def run_id_of(self, key: str) -> int | None:
        row = self.one("SELECT id FROM runs WHERE key = ?", (key,))
        return int(row[0]) if row else None

    # --- trials ------------------------------------------------------------------------------
    def done_keys(self, run_id: int, *, retry_failed: bool = False) -> set[tuple[int, str, str]]:
        """(block, arm, target) of trials that are final: not failed, or failed because the
        workload itself failed (unless `retry_failed`). The others run again on resume."""
        rows = self.tuples("SELECT block, arm, target, status, cause FROM trials "
                           "WHERE run_id = ?", (run_id,))
        return {(r[0], r[1], r[2]) for r in rows  # cause NULL: a store older than causes
                if r[3] != "failed" or (r[4] not in RETRIED_CAUSES and not retry_failed)}

    def add_trial(self, t: Trial) -> None:
        self.add_trials([t])

    def add_trials(self, trials: list[Trial]) -> int:
        """Commit trials together: the guests of one multi-VM trial land all or none. A
        trial whose write id (provenance `write_id`) the store already has is not written
        again: a write the connection lost before its commit was acknowledged, sent again.
        Returns how many were written."""
        for t in trials:
            if t.status not in TRIAL_STATUSES:
                raise StoreError(f"bad trial status {t.status!r}")
        with self.transaction():
            return sum(self._insert(t) for t in trials)

    def _insert(self, t: Trial) -> bool:
        """Insert a trial; a retry replaces the earlier attempt, kept in its provenance; the
        same write again (same write id) changes nothing (False)."""
        key = (t.run_id, t.block, t.arm, t.target)
        old = self.one("SELECT status, error, cause, attempts, provenance FROM trials "
                       "WHERE run_id = ? AND block = ? AND arm = ? AND target = ?", key)
        prov = dict(t.provenance or {})
        attempts = 1
        if old is not None:
            before = json.loads(old["provenance"])
            if prov.get("write_id") and before.get("write_id") == prov["write_id"]:
                return False
            earlier = before.get("earlier_attempts", [])
            prov["earlier_attempts"] = [*earlier, {"status": old["status"], "error": old["error"],
                                                   "cause": old["cause"]}]
            attempts = int(old["attempts"]) + 1
            self.execute("DELETE FROM trials WHERE run_id = ? AND block = ? AND arm = ? "
                         "AND target = ?", key)
        self.insert_trial_row(t, prov, attempts)
        return True

    def insert_trial_row(self, t: Trial, provenance: dict[str, Any], attempts: int) -> None:
        """One INSERT of a trial as it is (no retry bookkeeping): for copies and imports."""
        self.execute(
            """INSERT INTO trials (run_id, block, position, arm, target, status, value, metric,
               unit, better, metrics, evidence, monitors, provenance, flag, error, started, ended,
               cause, attempts)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            no_nul((t.run_id, t.block, t.position, t.arm, t.target, t.status, t.value, t.metric,
                    t.unit, t.better, json.dumps(no_nul(t.metrics or {})),
                    json.dumps(no_nul(t.evidence or {})), json.dumps(no_nul(t.monitors or {})),
                    json.dumps(no_nul(provenance)), t.flag, t.error, t.started, t.ended,
                    t.cause, attempts)))


def no_nul(obj: Any) -> Any:
    """`obj` with every NUL in its strings replaced (U+FFFD): PostgreSQL's text and jsonb
    refuse NUL, and a workload's stderr may hold one. Both engines store the same."""
    if isinstance(obj, str):
        return obj.replace("\x00", "\ufffd")
    if isinstance(obj, dict):
        return {no_nul(k): no_nul(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(no_nul(v) for v in obj)
    return obj
