"""A server's private files kept for the run's next trial instead of copied again.

A server kind whose load only reads its data (PostgreSQL's select-only script) gains nothing
from a fresh copy of that data per trial: what differs between fresh servers is where their
memory lands, not their files. Copying is not free (a scale-5 cluster 0.6-1.0 s a server, a
scale-100 one 2-9 s; docs/benchmarks.md), so a run keeps each stopped server's directory,
cleanly stopped, for the next server of the same kind and source. Inside `kept()` (a run's
trials: hugelab.runner.spine; a `kept()` inside another shares it) `give` keeps a directory
and `take` hands one out, last kept first; outside it nothing is kept, `give` says so and the
caller drops the directory as before. When `kept()` ends, each directory still kept is
dropped by the function given with it; a killed run's directories are owned ones
(hugelab.owned), swept at the next start.

Standard library only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

Drop = Callable[[Path], None]

_lock = threading.Lock()
_kept: dict[str, list[tuple[Path, Drop]]] | None = None  # None: not inside kept()
_depth = 0


def take(key: str) -> Path | None:
    """A directory kept under `key` (the last kept), now the caller's; None: none kept."""
    with _lock:
        if _kept is None or not _kept.get(key):
            return None
        return _kept[key].pop()[0]


def give(key: str, path: Path, drop: Drop) -> bool:
    """Keep `path` under `key` for a later `take`, `drop` removing it if none comes; False
    outside `kept()`: nothing kept, the caller drops it."""
    with _lock:
        if _kept is None:
            return False
        _kept.setdefault(key, []).append((path, drop))
        return True


def held() -> int:
    """How many directories are kept now."""
    with _lock:
        return sum(len(v) for v in (_kept or {}).values())


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Directories given inside are kept for takes inside; when the outermost `kept()` ends,
    each is dropped (every drop runs; the first failure is raised after them). A `kept()`
    inside another shares its directories."""
    global _kept, _depth
    with _lock:
        _depth += 1
        if _kept is None:
            _kept = {}
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            left = [] if _depth or _kept is None else \
                [item for items in _kept.values() for item in items]
            if not _depth:
                _kept = None
        _drop_all(left)


def _drop_all(left: list[tuple[Path, Drop]]) -> None:
    errors: list[BaseException] = []
    for path, drop in left:
        try:
            drop(path)
        except Exception as exc:  # noqa: BLE001 - every directory is dropped first
            errors.append(exc)
    if errors:
        raise errors[0]
