"""Where results live: one schema with named migrations (SQLite, `sqlite.py`) and the importers
that bring in results collected without hugelab (`importers/`, one module per outside format)."""

from hugelab.store.sqlite import JSON_FIELDS, MIGRATIONS, TRIAL_STATUSES, Store, Trial

__all__ = ["JSON_FIELDS", "MIGRATIONS", "TRIAL_STATUSES", "Store", "Trial"]
