"""The local spool: trials a run measured while its server store was away, kept in one SQLite
file beside the state journal (`store-spool.db`, mode 0600) until they are written.

Each entry is one unit's trials (what `add_trials` commits together), filed under the store's
shown name (a URL without its password) and keyed by its first trial's write id (provenance
`write_id`, unique per measured trial). `flush` writes a store's entries in the order they
came, then deletes each: a crash between the two writes an entry again, and the store skips a
write id it already has, so every trial lands exactly once. Flushes take the spool's write
lock, so two processes sharing a state directory never write one entry at the same time."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from hugelab.errors import StoreError
from hugelab.host.journal import ensure_private_dir, state_dir
from hugelab.store.base import SqlStore
from hugelab.store.schema import Trial
from hugelab.store.sqlite import create_private

SPOOL_NAME = "store-spool.db"
SCHEMA = """CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    write_id TEXT NOT NULL UNIQUE,
    store TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    trials TEXT NOT NULL,
    created REAL NOT NULL)"""


def spool_path() -> Path:
    return state_dir() / SPOOL_NAME


def write_id() -> str:
    """A new trial's write id."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Flushed:
    store: str
    written: int  # trials the store did not have
    present: int  # trials it had already (a write whose acknowledgement was lost)


class Spool:
    def __init__(self, path: Path | None = None) -> None:
        self.path = spool_path() if path is None else path

    @contextmanager
    def _db(self, create: bool = False) -> Iterator[sqlite3.Connection | None]:
        """The spool's connection (None when there is no spool and `create` is False)."""
        if not self.path.exists():
            if not create:
                yield None
                return
            ensure_private_dir(self.path.parent)
            create_private(self.path)
        try:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store spool {self.path}: {exc}") from exc
        try:
            db.execute(SCHEMA)
            yield db
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the store spool {self.path} is unreadable: {exc}",
                             hint="move it aside; the trials in it are lost") from exc
        finally:
            db.close()

    def add(self, store: str, trials: list[Trial]) -> None:
        """Keep `trials` (one unit, written together later) for `store`, durably."""
        if not trials:
            return
        key = str((trials[0].provenance or {}).get("write_id") or write_id())
        with self._db(create=True) as db:
            assert db is not None
            db.execute("INSERT OR IGNORE INTO entries (write_id, store, run_id, trials, created) "
                       "VALUES (?, ?, ?, ?, ?)", (key, store, trials[0].run_id,
                                                  json.dumps([asdict(t) for t in trials]),
                                                  time.time()))

    def count(self, store: str | None = None) -> int:
        """Trials waiting (for `store`, or for any)."""
        return sum(len(trials) for _seq, trials in self._entries(store))

    def stores(self) -> list[str]:
        """The stores that have trials waiting."""
        with self._db() as db:
            if db is None:
                return []
            return [r[0] for r in db.execute("SELECT DISTINCT store FROM entries ORDER BY store")]

    def _entries(self, store: str | None) -> list[tuple[int, list[Trial]]]:
        with self._db() as db:
            return [] if db is None else _read(db, store)

    def flush(self, store: str, sink: SqlStore) -> Flushed:
        """Write `store`'s entries into `sink` (that store, open), oldest first, deleting each
        once written. A sink error stops there; what was written stays deleted."""
        written = present = 0
        with self._db() as db:
            if db is None:
                return Flushed(store, 0, 0)
            db.execute("BEGIN IMMEDIATE")  # one flusher at a time
            try:
                for seq, trials in _read(db, store):
                    n = sink.add_trials(trials)
                    written, present = written + n, present + len(trials) - n
                    db.execute("DELETE FROM entries WHERE seq = ?", (seq,))
            finally:
                db.execute("COMMIT")
        return Flushed(store, written, present)


def _read(db: sqlite3.Connection, store: str | None) -> list[tuple[int, list[Trial]]]:
    rows = db.execute("SELECT seq, trials FROM entries WHERE ? IS NULL OR store = ? "
                      "ORDER BY seq", (store, store)).fetchall()
    return [(int(seq), [Trial(**t) for t in json.loads(text)]) for seq, text in rows]
