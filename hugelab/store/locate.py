"""Which store `--store` names: a SQLite file path (the default, ./hugelab.db) or a
postgresql:// URL; `HUGELAB_STORE` when the option is not given. Also the name to show for it:
a URL without its password, so no message, result or run ever holds one."""

from __future__ import annotations

import os
from pathlib import Path

from hugelab.errors import StoreError, UsageError
from hugelab.store.base import SqlStore
from hugelab.store.url import display, is_url

ENV = "HUGELAB_STORE"
DEFAULT = "hugelab.db"


def resolve(spec: str | Path | None) -> str:
    """The store to use: the option's value, else $HUGELAB_STORE, else ./hugelab.db."""
    if spec is not None and str(spec) != "":
        return str(spec)
    return os.environ.get(ENV) or DEFAULT


def shown(spec: str | Path | None) -> str:
    """The store an option names (see `resolve`), as it may be shown (see `display`)."""
    return display(resolve(spec))


def same(a: str | Path, b: str | Path) -> bool:
    """Whether two store names are one store."""
    if is_url(a) or is_url(b):
        return display(a) == display(b)
    return Path(a).resolve() == Path(b).resolve()


def exists(spec: str | Path) -> bool:
    """Whether the store is there to read (a server is asked when opened)."""
    return is_url(spec) or Path(spec).exists()


def open_store(spec: str | Path | None, *, must_exist: bool = False) -> SqlStore:
    """The store `spec` names (see `resolve`). `must_exist`: a missing SQLite file is an
    error rather than a new, empty store."""
    spec = resolve(spec)
    if is_url(spec):
        from hugelab.store.postgres import PostgresStore
        return PostgresStore(spec, display(spec))
    if "://" in spec:
        raise UsageError(f"unknown store URL {display(spec)!r}",
                         hint="a SQLite file path, or postgresql://USER@HOST:PORT/DB")
    if must_exist and not Path(spec).exists():
        raise StoreError(f"no store at {spec}", hint="run an experiment first, or pass --store")
    from hugelab.store.sqlite import Store
    return Store(spec)
