"""The results store: SQLite, one row per run and per trial; schema changes are named migrations."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab.errors import StoreError

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            experiment TEXT NOT NULL,
            host TEXT NOT NULL DEFAULT '{}',
            skipped TEXT NOT NULL DEFAULT '{}',
            status TEXT NOT NULL DEFAULT 'running',
            created REAL NOT NULL,
            finished REAL
        );
        CREATE TABLE trials (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            block INTEGER NOT NULL,
            position INTEGER NOT NULL,
            arm TEXT NOT NULL,
            target TEXT NOT NULL DEFAULT 'native',
            status TEXT NOT NULL,
            value REAL,
            metric TEXT,
            unit TEXT,
            better TEXT,
            metrics TEXT NOT NULL DEFAULT '{}',
            evidence TEXT NOT NULL DEFAULT '{}',
            monitors TEXT NOT NULL DEFAULT '{}',
            provenance TEXT NOT NULL DEFAULT '{}',
            flag TEXT,
            error TEXT,
            started REAL,
            ended REAL,
            UNIQUE (run_id, block, arm, target)
        );
        CREATE INDEX trials_run ON trials(run_id, arm);
    """),
    ("0002_run_sequential", """
        ALTER TABLE runs ADD COLUMN sequential TEXT NOT NULL DEFAULT '{}'
    """),
    # cause of a failed trial ('environment' is retried on resume, 'workload' only with
    # --retry-failed) and how many attempts a trial took (earlier ones in provenance)
    ("0003_trial_cause_attempts", """
        ALTER TABLE trials ADD COLUMN cause TEXT;
        ALTER TABLE trials ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1
    """),
]

TRIAL_STATUSES = ("ok", "flagged", "failed")


@dataclass(frozen=True)
class Trial:
    run_id: int
    block: int
    position: int
    arm: str
    status: str
    value: float | None
    metric: str | None = None
    unit: str | None = None
    better: str | None = None
    metrics: dict[str, Any] | None = None
    evidence: dict[str, Any] | None = None
    monitors: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    flag: str | None = None
    error: str | None = None
    started: float | None = None
    ended: float | None = None
    target: str = "native"
    cause: str | None = None  # failed trials: "environment" | "workload"


JSON_FIELDS = ("metrics", "evidence", "monitors", "provenance")


class Store:
    """A SQLite file. Every trial is committed on its own, before the next one starts."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        new = not self.path.exists()
        try:
            self.db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        if new:
            os.chmod(self.path, 0o600)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a hugelab store: {exc}",
                             hint="name another file with --store") from exc

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL)")
        done = {r[0] for r in self.db.execute("SELECT name FROM migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            self.db.execute("BEGIN")  # sqlite3 opens no transaction for DDL by itself
            try:
                for stmt in [s for s in sql.split(";") if s.strip()]:
                    self.db.execute(stmt)
                self.db.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
            except BaseException:
                self.db.rollback()
                raise
            self.db.commit()

    # --- runs ------------------------------------------------------------------
    def get_or_create_run(self, key: str, name: str, experiment: dict[str, Any],
                          host: dict[str, Any]) -> tuple[int, bool]:
        row = self.db.execute("SELECT id FROM runs WHERE key = ?", (key,)).fetchone()
        if row:
            with self.db:
                self.db.execute("UPDATE runs SET status = 'running' WHERE id = ?", (row["id"],))
            return int(row["id"]), False
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (key, name, experiment, host, created) VALUES (?, ?, ?, ?, ?)",
                (key, name, json.dumps(experiment), json.dumps(host), time.time()))
        return int(cur.lastrowid or 0), True

    def set_run_status(self, run_id: int, status: str, skipped: dict[str, str] | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET status = ?, finished = ? WHERE id = ?",
                            (status, time.time() if status == "finished" else None, run_id))
            if skipped is not None:
                self.db.execute("UPDATE runs SET skipped = ? WHERE id = ?",
                                (json.dumps(skipped), run_id))

    def set_run_sequential(self, run_id: int, info: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET sequential = ? WHERE id = ?", (json.dumps(info), run_id))

    def runs(self, run_id: int | None = None) -> list[dict[str, Any]]:
        where = "WHERE r.id = ?" if run_id is not None else ""
        rows = self.db.execute(f"""
            SELECT r.*, COUNT(t.id) AS trials,
                   SUM(t.status = 'flagged') AS flagged, SUM(t.status = 'failed') AS failed
            FROM runs r LEFT JOIN trials t ON t.run_id = r.id {where}
            GROUP BY r.id ORDER BY r.id""", () if run_id is None else (run_id,))
        out = []
        for r in rows:
            d = dict(r)
            for k in ("experiment", "host", "skipped", "sequential"):
                d[k] = json.loads(d[k])
            d["flagged"] = d["flagged"] or 0
            d["failed"] = d["failed"] or 0
            out.append(d)
        return out

    def run(self, run_id: int | None = None) -> dict[str, Any]:
        if run_id is None:
            last = self.db.execute("SELECT MAX(id) FROM runs").fetchone()[0]
            if last is None:
                raise StoreError(f"{self.path} has no runs", hint="start one with `hugelab run`")
            run_id = int(last)
        found = self.runs(run_id)
        if found:
            return found[0]
        ids = [str(r[0]) for r in self.db.execute("SELECT id FROM runs ORDER BY id")]
        raise StoreError(f"no run {run_id} in {self.path}",
                         hint=f"runs: {', '.join(ids)}" if ids else "the store has no runs")

    # --- trials ----------------------------------------------------------------
    def done_keys(self, run_id: int, *, retry_failed: bool = False) -> set[tuple[int, str, str]]:
        """(block, arm, target) of trials that are final: not failed, or failed because the
        workload itself failed (unless `retry_failed`). The others run again on resume."""
        rows = self.db.execute("SELECT block, arm, target, status, cause FROM trials "
                               "WHERE run_id = ?", (run_id,))
        return {(r[0], r[1], r[2]) for r in rows  # cause NULL: a store older than causes
                if r[3] != "failed" or (r[4] != "environment" and not retry_failed)}

    def add_trial(self, t: Trial) -> None:
        self.add_trials([t])

    def add_trials(self, trials: list[Trial]) -> None:
        """Commit trials together: the guests of one multi-VM trial land all or none."""
        for t in trials:
            if t.status not in TRIAL_STATUSES:
                raise StoreError(f"bad trial status {t.status!r}")
        with self.db:
            for t in trials:
                self._insert(t)

    def _insert(self, t: Trial) -> None:
        """Insert a trial; a retry replaces the earlier attempt, kept in its provenance."""
        key = (t.run_id, t.block, t.arm, t.target)
        old = self.db.execute("SELECT status, error, cause, attempts, provenance FROM trials "
                              "WHERE run_id = ? AND block = ? AND arm = ? AND target = ?",
                              key).fetchone()
        prov = dict(t.provenance or {})
        attempts = 1
        if old is not None:
            earlier = json.loads(old["provenance"]).get("earlier_attempts", [])
            prov["earlier_attempts"] = [*earlier, {"status": old["status"], "error": old["error"],
                                                   "cause": old["cause"]}]
            attempts = int(old["attempts"]) + 1
            self.db.execute("DELETE FROM trials WHERE run_id = ? AND block = ? AND arm = ? "
                            "AND target = ?", key)
        self.db.execute(
            """INSERT INTO trials (run_id, block, position, arm, target, status, value, metric,
               unit, better, metrics, evidence, monitors, provenance, flag, error, started, ended,
               cause, attempts)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (t.run_id, t.block, t.position, t.arm, t.target, t.status, t.value, t.metric,
             t.unit, t.better, json.dumps(t.metrics or {}), json.dumps(t.evidence or {}),
             json.dumps(t.monitors or {}), json.dumps(prov), t.flag, t.error, t.started, t.ended,
             t.cause, attempts))

    def trials(self, run_id: int) -> Iterator[dict[str, Any]]:
        for r in self.db.execute("SELECT * FROM trials WHERE run_id = ? ORDER BY block, position",
                                 (run_id,)):
            d = dict(r)
            for f in JSON_FIELDS:
                d[f] = json.loads(d[f])
            yield d

    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]:
        """(block, position, arm, target, status, value) — the fast path for statistics."""
        cur = self.db.cursor()
        cur.row_factory = None  # plain tuples: no Row objects for a million trials
        return cur.execute(
            "SELECT block, position, arm, target, status, value FROM trials WHERE run_id = ? "
            "ORDER BY block, position", (run_id,)).fetchall()

    def rep_rows(self, run_id: int) -> list[tuple[str, str, int, list[float], list[float],
                                                  float | None, float | None, float | None,
                                                  float | None]]:
        """Ok trials that ran several repetitions in one guest boot (provenance `reps`):
        (arm, target, block, rep values, rep wall times, boot_s, workload_s, started, ended),
        in block order. Empty when no trial has repetitions."""
        cur = self.db.cursor()
        cur.row_factory = None
        out = []
        for arm, target, block, reps, boot_s, work_s, started, ended in cur.execute(
                "SELECT arm, target, block, json_extract(provenance, '$.reps'), "
                "json_extract(provenance, '$.boot_s'), json_extract(provenance, '$.workload_s'), "
                "started, ended FROM trials WHERE run_id = ? AND status = 'ok' AND "
                "json_extract(provenance, '$.reps') IS NOT NULL ORDER BY block, position",
                (run_id,)):
            r = json.loads(reps)
            vals = [float(v) for v in r.get("values") or [] if v is not None]
            walls = [float(w) for w in r.get("wall_s") or [] if w is not None]
            out.append((arm, target, block, vals, walls, boot_s, work_s, started, ended))
        return out
