"""The embedded store: one SQLite file (mode 0600, WAL), the default for one host."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hugelab.errors import StoreError
from hugelab.store.base import SqlStore
from hugelab.store.schema import JSON_FIELDS, MIGRATIONS, TRIAL_STATUSES, Trial, statements

__all__ = ["JSON_FIELDS", "MIGRATIONS", "TRIAL_STATUSES", "Store", "Trial"]


def create_private(path: Path) -> None:
    """An empty file only its owner can read (SQLite takes an empty file for a new
    database): created 0600, never readable for a moment by others."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot create store {path}: {exc.strerror}") from exc


class Store(SqlStore):
    """A SQLite file. Every trial is committed on its own, before the next one starts."""

    engine = "sqlite"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        if not self.path.exists():
            create_private(self.path)
        try:
            self.db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
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

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.db.execute(sql, tuple(params)).fetchall()

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.db.cursor()
        cur.row_factory = None  # plain tuples: no Row objects for a million trials
        return cur.execute(sql, tuple(params)).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.db.execute(sql, tuple(params))

    def insert_returning_id(self, sql: str, params: Sequence[Any]) -> int:
        return int(self.db.execute(sql, tuple(params)).lastrowid or 0)  # any SQLite 3

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db:
            yield

    def json_text(self, column: str, *path: str | int) -> str:
        js = "$" + "".join(f"[#{p}]" if isinstance(p, int) and p < 0 else
                           f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        return f"json_extract({column}, '{js}')"

    def _applied_migrations(self) -> set[str]:
        self.db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL)")
        return {r[0] for r in self.db.execute("SELECT name FROM migrations")}

    def _apply_migration(self, name: str, sql: str) -> None:
        self.db.execute("BEGIN")  # sqlite3 opens no transaction for DDL by itself
        try:
            for stmt in statements(sql):
                self.db.execute(stmt)
            self.db.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
        except BaseException:
            self.db.rollback()
            raise
        self.db.commit()
