"""What the commands that read one stored run share (`compare`, `plan`): opening it, its arms
and baseline."""

from __future__ import annotations

from typing import Any

from hugelab.errors import StoreError
from hugelab.store import SqlStore
from hugelab.store.locate import open_store


def open_run(path: str, run_id: int | None) -> tuple[SqlStore, dict[str, Any]]:
    """The store at `path` (which must exist) and its run `run_id` (None: the latest); the
    caller closes the store."""
    store = open_store(path, must_exist=True)
    try:
        return store, store.run(run_id)
    except BaseException:
        store.close()
        raise


def arms_of(run: dict[str, Any], rows: list[tuple[Any, ...]]) -> tuple[list[str], str]:
    """The run's arms (its experiment's, then any other its values name) and its baseline."""
    exp = run["experiment"]
    names = [a["name"] for a in exp.get("arms", []) if isinstance(a, dict) and "name" in a]
    for r in rows:
        if r[2] not in names:
            names.append(r[2])
    if not names:
        raise StoreError(f"run {run['id']} has no trials")
    return names, str(exp.get("baseline") or names[0])
