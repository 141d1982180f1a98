"""The shared store: PostgreSQL through psycopg 3, the same tables and named migrations as
SQLite (`schema.for_postgres`). Many hosts write at once, each its own run; each trial commits
on its own, so a host that dies loses at most the trial it was running.

Why psycopg and not SQLAlchemy Core: the schema is two tables of plain columns with JSON kept
as text, and every query is already written in the SQL both engines share (`base.py`); the one
difference, the placeholder, is `?` against `%s`. SQLAlchemy would add a layer to learn and pin
for no query it would write better.

Security: the URL's password (or PGPASSWORD, or ~/.pgpass: libpq's usual places) is used to
connect and never kept: `name`, what messages and results show, is the URL without it. TLS is
used whenever the server offers it (sslmode 'prefer' unless the URL asks for more)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hugelab.errors import StoreConnectionLost, StoreError, StoreUnreachable
from hugelab.store.base import SqlStore
from hugelab.store.schema import MIGRATIONS, for_postgres, statements
from hugelab.store.url import split_password

MIGRATION_LOCK = 0x6875_6765  # pg_advisory_xact_lock key: one migrating client at a time
CONNECT_TIMEOUT_S = 10
# SQLSTATE classes of a server that went away: connection exceptions (08), an operator's or a
# crash's shutdown (57P01-57P05: admin shutdown, crash shutdown, cannot connect now...)
LOST_STATES = ("08", "57P")


# what libpq says when no server answers (yet): down, restarting, failing over, cut off;
# an authentication or a missing database is no outage and fails at once
UNREACHABLE = ("connection refused", "timeout expired", "the database system is starting up",
               "the database system is shutting down", "the database system is in recovery",
               "no route to host", "network is unreachable", "connection reset",
               "server closed the connection", "could not receive data")


def _unreachable(exc: Exception) -> bool:
    """Whether a failed connect means the server does not answer (pure)."""
    state = getattr(exc, "sqlstate", None)
    if state:
        return str(state).startswith(LOST_STATES)
    text = str(exc).lower()
    return any(s in text for s in UNREACHABLE)


class Row(tuple[Any, ...]):
    """A row by position and by column name, like sqlite3.Row (dict(row) works)."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Any:
    names = [c.name for c in cursor.description or []]
    index = {n: i for i, n in enumerate(names)}
    return lambda values: Row(values, index)


def _sql(sql: str) -> str:
    return sql.replace("?", "%s")  # our SQL has no other '?' and no literal '%'


class PostgresStore(SqlStore):
    engine = "postgresql"

    def __init__(self, url: str, name: str) -> None:
        """`url` without its password; `password` from it, or libpq finds one (PGPASSWORD,
        ~/.pgpass). Only `name` (no password) ever appears in a message."""
        url, password = split_password(url)
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError("a postgresql:// store needs psycopg",
                             hint="install hugelab's 'fleet' extra: pip install 'hugelab[fleet]' "
                                  "(./bootstrap setup does)") from exc
        self.name = name
        self._psycopg = psycopg
        self._url = url
        self._options: dict[str, Any] = {} if "sslmode" in url else {"sslmode": "prefer"}
        if password is not None:  # kept in memory to reconnect; never written or shown
            self._options["password"] = password
        self._password = password
        try:
            self.db = self._connect()
        except psycopg.Error as exc:
            raise (StoreUnreachable if _unreachable(exc) else StoreError)(
                f"cannot connect to store {name}: {_scrub(exc, password)}",
                hint="check the server, the user and the password (PGPASSWORD or "
                     "~/.pgpass; never in the URL on a shared machine)") from exc
        try:
            self._migrate()
        except psycopg.Error as exc:
            self.db.close()
            raise StoreError(f"{name} cannot hold a hugelab store: {_scrub(exc, password)}",
                             hint="a new database needs a user that may CREATE tables in it; "
                                  "later ones need only read and write") from exc

    def _connect(self) -> Any:
        return self._psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                     application_name="hugelab", **self._options)

    def reconnect(self) -> None:
        """A new connection in place of a lost one: StoreConnectionLost while the server is
        still away."""
        try:
            self.db.close()
        except self._psycopg.Error:
            pass
        try:
            self.db = self._connect()
        except self._psycopg.Error as exc:
            raise StoreConnectionLost(f"store {self.name} is still away: "
                                      f"{_scrub(exc, self._password)}") from exc

    @property
    def tls(self) -> bool:
        """Whether this connection is encrypted."""
        return bool(self.db.pgconn.ssl_in_use)

    def close(self) -> None:
        self.db.close()

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._errors(), self.db.cursor(row_factory=_row_factory) as cur:
            cur.execute(_sql(sql), tuple(params))
            return cur.fetchall() if cur.description else []

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._errors(), self.db.cursor() as cur:
            cur.execute(_sql(sql), tuple(params))
            return cur.fetchall() if cur.description else []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._errors():
            self.db.execute(_sql(sql), tuple(params))

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """A lost connection is StoreConnectionLost, a refused statement a StoreError, both
        naming the store, never a traceback (a run rides out the first: `outage.py`)."""
        try:
            yield
        except self._psycopg.Error as exc:
            if self._lost(exc):
                raise StoreConnectionLost(
                    f"lost the connection to store {self.name}: {_scrub(exc, self._password)}",
                    hint="run the same command again when the server is back: it "
                         "resumes") from exc
            raise StoreError(f"store {self.name} refused a statement: "
                             f"{_scrub(exc, self._password)}") from exc

    def _lost(self, exc: Exception) -> bool:
        """Whether `exc` means the server went away (not that it refused a statement)."""
        if self.db.closed or self.db.broken:
            return True
        state = getattr(exc, "sqlstate", None) or ""
        return isinstance(exc, self._psycopg.OperationalError) and (
            not state or state.startswith(LOST_STATES))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._errors(), self.db.transaction():
            yield

    def json_text(self, column: str, *path: str | int) -> str:
        steps = [str(p) if isinstance(p, int) else f"'{p}'" for p in path]
        inner = "".join(f" -> {s}" for s in steps[:-1])
        return f"(({column})::jsonb{inner} ->> {steps[-1]})"

    def migrations(self) -> list[str]:
        with self._errors():  # its CREATE TABLE IF NOT EXISTS runs outside `_errors` otherwise
            return super().migrations()

    def _applied_migrations(self) -> set[str]:
        self.db.execute("CREATE TABLE IF NOT EXISTS migrations "
                        "(name TEXT PRIMARY KEY, applied DOUBLE PRECISION)")
        return {r[0] for r in self.tuples("SELECT name FROM migrations")}

    def _migrate(self) -> None:
        """Every missing migration in one transaction, under an advisory lock: hosts that
        start at the same time against a new database create the tables once. A store that
        has them all is only read (a user that may not CREATE can use it)."""
        found = self.db.execute("SELECT to_regclass('migrations')").fetchone()
        if found is not None and found[0] is not None:
            done = {r[0] for r in self.db.execute("SELECT name FROM migrations").fetchall()}
            if all(name in done for name, _ in MIGRATIONS):
                return
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            done = self._applied_migrations()
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for stmt in statements(for_postgres(sql)):
                    self.db.execute(stmt)
                self.db.execute("INSERT INTO migrations VALUES (%s, %s)", (name, time.time()))


def _scrub(exc: Exception, password: str | None) -> str:
    """The first line of a driver error, with the password (if it is quoted) blanked."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line.replace(password, "***") if password else line
