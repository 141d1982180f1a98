"""Where results live: one schema with named migrations (`schema.py`) behind one store
(`base.py`) in SQLite (`sqlite.py`, the embedded default) or PostgreSQL (`postgres.py`, shared
by a fleet); `locate.py` opens the one `--store` names, `copy.py` moves runs between stores;
the importers bring in results collected without hugelab (`importers/`)."""

from hugelab.store.base import SqlStore
from hugelab.store.schema import JSON_FIELDS, MIGRATIONS, TRIAL_STATUSES, Trial
from hugelab.store.sqlite import Store

__all__ = ["JSON_FIELDS", "MIGRATIONS", "TRIAL_STATUSES", "SqlStore", "Store", "Trial"]
