"""Riding out a server store that goes away (a PostgreSQL restart, a failover, a network cut)
during a run: `RidingStore` wraps the run's store. A unit's trials that cannot be written are
kept in the local spool (`spool.py`) and the run goes on measuring; each later write first
tries to reconnect (with backoff) and, once the server answers, writes the spool out in order,
exactly once. Reads and the run's own records wait for the server, with the same backoff. When
the server stays away longer than the window (`hugelab run --store-outage`), `StoreOutage`
stops the run cleanly: the trials are in the spool, and `hugelab store flush` or the next run
writes them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from hugelab.errors import StoreConnectionLost, StoreError, StoreUnreachable
from hugelab.store.base import SqlStore
from hugelab.store.schema import Trial
from hugelab.store.spool import Spool

T = TypeVar("T")
Notify = Callable[[str], None]

FIRST_RETRY_S = 0.5
MAX_RETRY_S = 15.0


class StoreOutage(StoreError):
    """The store stayed away past the run's window: the run stopped, its trials spooled."""


def backoff(tries: int) -> float:
    """Seconds before reconnect attempt `tries` + 1: 0.5, 1, 2, 4, ... at most 15."""
    return float(min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** tries))


def window_text(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


class RidingStore(SqlStore):
    """`inner` (a store with `reconnect()`), riding out its outages for `window_s` seconds."""

    def __init__(self, inner: Any, spool: Spool, window_s: float, *,
                 notify: Notify | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.name = inner.name
        self.spool = spool
        self.window_s = window_s
        self.notify = notify or (lambda _msg: None)
        self.clock, self.sleep = clock, sleep
        self.lost_since: float | None = None
        self.tries = 0
        self.next_try = 0.0
        self.flush()  # what an earlier run left behind, before anything reads

    # --- outages -------------------------------------------------------------------------------
    def _lost(self, exc: StoreConnectionLost) -> None:
        if self.lost_since is None:
            self.lost_since = self.clock()
            self.tries, self.next_try = 0, self.lost_since
            self.notify(f"{exc.message}; riding it out for up to {window_text(self.window_s)} "
                        f"(trials are kept in {self.spool.path} meanwhile)")

    def _past_window(self) -> bool:
        return self.lost_since is not None and self.clock() - self.lost_since >= self.window_s

    def _try_back(self) -> bool:
        """One reconnect attempt (when its backoff has passed) and the spool written: whether
        the store is back."""
        if self.lost_since is None:
            return True
        if self.clock() < self.next_try:
            return False
        try:
            self.inner.reconnect()
            self.flush()
        except StoreConnectionLost:
            self.tries += 1
            self.next_try = self.clock() + backoff(self.tries)
            return False
        away = self.clock() - self.lost_since
        self.lost_since = None
        self.notify(f"store {self.name} is back after {away:.0f} s; spooled trials written")
        return True

    def _stop(self) -> StoreOutage:
        n = self.spool.count(self.name)
        return StoreOutage(
            f"store {self.name} was away for more than {window_text(self.window_s)}: the run "
            f"stopped and the host was restored; {n} trial(s) are kept in {self.spool.path}",
            hint="when the server is back, `hugelab store flush` writes them, or run the same "
                 "command again: it writes them and resumes (raise --store-outage to ride out "
                 "longer outages)")

    def _wait_back(self) -> None:
        """Until the store is back (or StoreOutage past the window)."""
        while not self._try_back():
            if self._past_window():
                raise self._stop()
            assert self.lost_since is not None
            self.sleep(max(0.05, min(self.next_try, self.lost_since + self.window_s)
                           - self.clock()))

    def _retry(self, call: Callable[[], T]) -> T:
        """`call` on the inner store once it is there, again after each lost connection."""
        while True:
            self._wait_back()
            try:
                return call()
            except StoreConnectionLost as exc:
                self._lost(exc)

    def flush(self) -> None:
        """Write this store's spooled trials (StoreConnectionLost when it goes away again)."""
        if self.spool.count(self.name):
            done = self.spool.flush(self.name, self.inner)
            if done.written or done.present:
                self.notify(f"wrote {done.written} spooled trial(s) to {self.name}"
                            + (f" ({done.present} were there already)" if done.present else ""))

    # --- trials: never lost, never twice -------------------------------------------------------
    def add_trials(self, trials: list[Trial]) -> int:
        if self.lost_since is None:
            try:
                return int(self.inner.add_trials(trials))
            except StoreConnectionLost as exc:
                self._lost(exc)
        self.spool.add(self.name, trials)
        if not self._try_back() and self._past_window():
            raise self._stop()
        return 0

    # --- the run's own records and every read wait for the store ---------------------------------
    def get_or_create_run(self, *args: Any, **kwargs: Any) -> tuple[int, bool]:
        return self._retry(lambda: self.inner.get_or_create_run(*args, **kwargs))

    def set_run_status(self, *args: Any, **kwargs: Any) -> None:
        self._retry(lambda: self.inner.set_run_status(*args, **kwargs))

    def set_run_sequential(self, *args: Any, **kwargs: Any) -> None:
        self._retry(lambda: self.inner.set_run_sequential(*args, **kwargs))

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._retry(lambda: self.inner.rows(sql, params))

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._retry(lambda: self.inner.tuples(sql, params))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._wait_back()
        self.inner.execute(sql, params)

    def transaction(self) -> AbstractContextManager[Any]:
        self._wait_back()
        return self.inner.transaction()  # type: ignore[no-any-return]

    def json_text(self, column: str, *path: str | int) -> str:
        return self.inner.json_text(column, *path)  # type: ignore[no-any-return]

    def insert_returning_id(self, sql: str, params: Sequence[Any]) -> int:
        self._wait_back()
        return int(self.inner.insert_returning_id(sql, params))

    def migrations(self) -> list[str]:
        return self._retry(self.inner.migrations)

    @property
    def tls(self) -> Any:
        return getattr(self.inner, "tls", None)

    def close(self) -> None:
        self.inner.close()


def riding(store: SqlStore, window_s: float, notify: Notify | None = None,
           spool: Spool | None = None) -> SqlStore:
    """`store` riding out outages when it is a server store (one that can reconnect); a
    SQLite file as it is."""
    if not hasattr(store, "reconnect"):
        return store
    return RidingStore(store, spool or Spool(), window_s, notify=notify)


def open_waiting(opener: Callable[[], T], window_s: float, notify: Notify | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """`opener()`, retried with backoff while the server store does not answer
    (StoreUnreachable), for at most `window_s` seconds: a run started while its store restarts
    or fails over waits for it, before any host change. Past the window the last error, with
    how long it waited."""
    notify = notify or (lambda _msg: None)
    start, tries = clock(), 0
    while True:
        try:
            return opener()
        except StoreUnreachable as exc:
            waited = clock() - start
            if waited >= window_s:
                if not tries:
                    raise
                raise StoreUnreachable(f"{exc.message} (waited {window_text(round(waited))} "
                                       "for it: --store-outage)", hint=exc.hint) from exc
            if tries == 0:
                notify(f"{exc.message}; waiting up to {window_text(window_s)} for it "
                       "(--store-outage), nothing changed on this host yet")
            sleep(min(backoff(tries), max(window_s - waited, 0.0)))
            tries += 1
