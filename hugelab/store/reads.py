"""What the report and the commands read of a run's trials: their rows, the fast value path for
statistics, repetitions per boot, and the queries behind `hugelab report`, the run summary and a
fleet's progress, written once in the SQL both
engines speak (JSON paths through `json_text`). JSON columns come back as their text (or,
from a JSON path, as text or a number): the reader parses only what it keeps."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from hugelab.store.keys import labelled_pattern
from hugelab.store.schema import JSON_FIELDS

FIRST_COLUMNS = ("unit", "better", "metric")  # columns `first_of` may read
CHUNK = 500  # blocks per query of `sampled_trials` (SQLite allows 999 parameters)


class RunReads:
    """Reads of one run's trials, mixed into `SqlStore`; the dialect comes from there."""

    if TYPE_CHECKING:  # the dialect: `SqlStore`'s engines
        def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

        def json_text(self, column: str, *path: str | int) -> str: ...

        def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    def not_ok_trials(self, run_id: int) -> list[tuple[str, str, str, str | None, str | None,
                                                      str | None]]:
        """(arm, target, status, flag, error, cause) of every trial that is not ok."""
        return self.tuples("SELECT arm, target, status, flag, error, cause FROM trials "
                           "WHERE run_id = ? AND status != 'ok'", (run_id,))

    def retry_errors(self, run_id: int) -> list[tuple[str, str, str | None]]:
        """(arm, target, the last earlier attempt's error) of trials that took more than one
        attempt."""
        last_error = self.json_text("provenance", "earlier_attempts", -1, "error")
        return self.tuples(f"SELECT arm, target, {last_error} "  # noqa: S608 - a JSON path of ours
                           "FROM trials WHERE run_id = ? AND attempts > 1", (run_id,))

    def sampled_trials(self, run_id: int, blocks: Sequence[int]) -> Iterator[tuple[Any, ...]]:
        """(block, arm, target, status, better, metric, unit, monitors, evidence, provenance)
        of the trials in `blocks`, the last four as JSON text."""
        for start in range(0, len(blocks), CHUNK):
            chunk = list(blocks[start:start + CHUNK])
            marks = ",".join("?" * len(chunk))
            yield from self.tuples(
                "SELECT block, arm, target, status, better, metric, unit, monitors, evidence, "
                "provenance "
                f"FROM trials WHERE run_id = ? AND block IN ({marks})",  # noqa: S608 - placeholders
                (run_id, *chunk))

    def accelerators(self, run_id: int) -> list[tuple[str, Any]]:
        """Each distinct (target, accelerator) of the run's trials (provenance `accel`; None
        where a trial recorded none)."""
        accel = self.json_text("provenance", "accel")
        return self.tuples(f"SELECT DISTINCT target, {accel} "  # noqa: S608 - a JSON path of ours
                           "FROM trials WHERE run_id = ?", (run_id,))

    def first_ok_metrics(self, run_id: int) -> str | None:
        """The metrics (JSON text) of one ok trial, None when the run has none."""
        first = self.tuples("SELECT metrics FROM trials WHERE run_id = ? AND status = 'ok' "
                            "LIMIT 1", (run_id,))
        return first[0][0] if first else None

    def ok_metrics(self, run_id: int, *, naming: str | None = None
                   ) -> list[tuple[int, str, str, str]]:
        """(block, arm, target, metrics as JSON text) of ok trials; with `naming`, only those
        whose metrics hold that text (a metric's name)."""
        if naming is None:
            return self.tuples("SELECT block, arm, target, metrics FROM trials "
                               "WHERE run_id = ? AND status = 'ok'", (run_id,))
        return self.tuples("SELECT block, arm, target, metrics FROM trials WHERE run_id = ? "
                           "AND status = 'ok' AND metrics LIKE ?",  # psycopg reads % itself
                           (run_id, f"%{naming}%"))

    def ok_metrics_and(self, run_id: int, naming: str, *path: str
                       ) -> list[tuple[int, str, str, str, Any]]:
        """`ok_metrics(naming=...)` with the provenance's value at `path` (JSON text, or None)."""
        extra = self.json_text("provenance", *path)
        return self.tuples(
            f"SELECT block, arm, target, metrics, {extra} "  # noqa: S608 - a JSON path of ours
            "FROM trials WHERE run_id = ? AND status = 'ok' AND metrics LIKE ?",
            (run_id, f"%{naming}%"))

    def cost_records(self, run_id: int) -> list[tuple[int, str, str, Any]]:
        """(block, arm, target, cost record as JSON text or None) of ok trials: the
        `monitors.costs` each trial recorded (hugelab.trial.costs)."""
        record = self.json_text("monitors", "costs")
        return self.tuples(f"SELECT block, arm, target, {record} "  # noqa: S608 - a JSON path
                           "FROM trials WHERE run_id = ? AND status = 'ok'", (run_id,))

    def first_of(self, run_id: int, column: str) -> str | None:
        """The first trial's non-empty `column` (unit, better or metric), None if none has one."""
        if column not in FIRST_COLUMNS:
            raise ValueError(f"first_of reads {', '.join(FIRST_COLUMNS)}, not {column!r}")
        found = self.tuples(f"SELECT {column} FROM trials WHERE run_id = ? "  # noqa: S608
                            f"AND {column} IS NOT NULL LIMIT 1", (run_id,))  # a column of ours
        return str(found[0][0]) if found else None

    def trials_by_label(self, experiment_key: str) -> dict[str, int]:
        """Each host's trial count in the labelled runs of an experiment (a fleet's hosts)."""
        rows = self.tuples("SELECT r.label, COUNT(t.id) FROM runs r LEFT JOIN trials t "
                           "ON t.run_id = r.id WHERE r.key LIKE ? AND r.label != '' "
                           "GROUP BY r.label", (labelled_pattern(experiment_key),))
        return {str(label): int(n) for label, n in rows}

    def trials(self, run_id: int) -> Iterator[dict[str, Any]]:
        for r in self.rows("SELECT * FROM trials WHERE run_id = ? ORDER BY block, position, target, id",
                           (run_id,)):
            d = dict(r)
            for f in JSON_FIELDS:
                d[f] = json.loads(d[f])
            yield d

    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]:
        """(block, position, arm, target, status, value) — the fast path for statistics."""
        return self.tuples(
            "SELECT block, position, arm, target, status, value FROM trials WHERE run_id = ? "
            "ORDER BY block, position, target, id", (run_id,))

    def trial_metric(self, run_id: int, key: str) -> dict[tuple[int, str], float]:
        """One metric of every ok trial that has it as a number: {(block, arm): value}.
        `key` is one of hugelab's own metric names, never a user's string."""
        col = self.json_text("metrics", key)
        out: dict[tuple[int, str], float] = {}
        for block, arm, value in self.tuples(
                f"SELECT block, arm, {col} FROM trials WHERE run_id = ? "  # noqa: S608
                "AND status = 'ok'", (run_id,)):
            try:
                out[(int(block), str(arm))] = float(value)
            except (TypeError, ValueError):
                continue
        return out

    def rep_rows(self, run_id: int) -> list[tuple[str, str, int, list[float], list[float],
                                                  float | None, float | None, float | None,
                                                  float | None]]:
        """Ok trials that ran several repetitions in one guest boot (provenance `reps`):
        (arm, target, block, rep values, rep wall times, boot_s, workload_s, started, ended),
        in block order. Empty when no trial has repetitions."""
        reps = self.json_text("provenance", "reps")
        out = []
        for arm, target, block, rep, boot_s, work_s, started, ended in self.tuples(
                f"SELECT arm, target, block, {reps}, {self.json_text('provenance', 'boot_s')}, "
                f"{self.json_text('provenance', 'workload_s')}, started, ended FROM trials "
                f"WHERE run_id = ? AND status = 'ok' AND {reps} IS NOT NULL "  # noqa: S608
                "ORDER BY block, position, target, id", (run_id,)):
            r = json.loads(rep)
            vals = [float(v) for v in r.get("values") or [] if v is not None]
            walls = [float(w) for w in r.get("wall_s") or [] if w is not None]
            out.append((arm, target, block, vals, walls, _float(boot_s), _float(work_s),
                        started, ended))
        return out


def _float(v: Any) -> float | None:
    return None if v is None else float(v)
