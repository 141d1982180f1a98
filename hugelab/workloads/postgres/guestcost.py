"""What a PostgreSQL trial in a user's domain builds in the guest before its load, for the cost
model (`run --dry-run`): the cluster is made and filled once per run, in the domain's layer
(indomain.build, hugelab.vm.domains.layer: a boot, initdb, the server started, `pgbench -i` or
the user's dump restored, the server stopped, a power-off), then every trial moves it in,
starts the server, prewarms, warms up and loads; the server stopped and every guest change
undone after. examples/postgres-domain-2x2.toml (the demo domain: Debian 12, 512 MiB,
PostgreSQL 15; scale 1, 3 s of load, no warmup) under TCG, 2026-11-30: the layer 40.8 s, boot
included; a trial over it 29-32 s, 17-20 s of it the boot (35-38 s when every trial made its
own cluster). Reads only a dump's first bytes and size."""

from __future__ import annotations

from typing import Any

from hugelab.workloads.postgres.userdata import dump_recipe
from hugelab.workloads.preview import GuestBuild

FIXED_S = {"kvm": 2.0, "tcg": 8.0}  # a trial: the cluster moved in, the server started and
# stopped, the look, the undo
LAYER_S = {"kvm": 6.0, "tcg": 18.0}  # the layer: initdb, the server started and stopped, the
# power-off (its boot and its data are counted apart)


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
    return GuestBuild("PostgreSQL: the layer's cluster moved in" +
                      (", pg_prewarm" if prewarm else "") + (", the warmup" if warmup else ""),
                      recipe, amount, FIXED_S, reread=prewarm, warmup_s=warmup,
                      layer_s=LAYER_S, layer_what=f"PostgreSQL: initdb, {data}")
