"""What a PostgreSQL trial in a user's domain builds in the guest before its load, for the cost
model (`run --dry-run`): every trial makes its cluster there (indomain.py): initdb, the server
started, `pgbench -i` or the user's dump restored, pg_prewarm, the warmup, then the load; the
server stopped and every guest change undone after. examples/postgres-domain-2x2.toml (the demo
domain: Debian 12, 512 MiB, PostgreSQL 15; scale 1, 3 s of load, no warmup) took 35-38 s a
trial under TCG, 15-17 s of it the boot: about 17 s of build. Reads only a dump's first bytes
and size."""

from __future__ import annotations

from typing import Any

from hugelab.workloads.postgres.userdata import dump_recipe
from hugelab.workloads.preview import GuestBuild

FIXED_S = {"kvm": 4.0, "tcg": 14.0}  # initdb, the server started and stopped, the undo


def guest_build(table: dict[str, Any]) -> GuestBuild:
    """The build of a trial of `table` (its dataclass's keys) in a user's domain."""
    dump = table.get("dump")
    if dump:
        recipe, amount = dump_recipe(str(dump))
        data = f"{dump} restored"
    else:
        scale = table.get("scale", 10)
        recipe, amount, data = "pgbench_init", float(scale), f"pgbench -i -s {scale}"
    prewarm = bool(table.get("prewarm", True))
    warmup = float(table.get("warmup_s", 2.0) or 0.0)
    return GuestBuild("PostgreSQL: initdb, " + data + (", pg_prewarm" if prewarm else "")
                      + (", the warmup" if warmup else ""), recipe, amount, FIXED_S,
                      reread=prewarm, warmup_s=warmup)
