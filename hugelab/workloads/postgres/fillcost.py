"""What one request-level PostgreSQL server does before its load, for the cost model (`run
--dry-run`, `plan`: the kind's Kind.fill_seconds): its cluster copied from the template, the
server started, pg_prewarm reading the tables into shared buffers, and the server stopped
after. Sized from the table and the arm's `app`, reading nothing but the size of a user's
dump or data directory.

Fitted on the 2-core AMD EPYC VM (docs/benchmarks.md, "A cluster's copy kept between
trials"), three servers a block, 6 s of load: scale 5 with 128 MB of shared buffers, blocks of
6.7 s with kept clusters and 9.4 s with fresh copies (0.6-1.0 s a copy); scale 100 with 2 GB,
blocks of 10-12 s kept (prewarm 2.7-4.4 s for the block's servers at once) and 21-24 s with
fresh copies (2-9 s a copy)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from hugelab.workloads.postgres import userdata
from hugelab.workloads.postgres.rules import keeps_cluster
from hugelab.workloads.postgres.server import shared_estimate
from hugelab.workloads.preview import BYTES_PER_UNIT

FIXED_S = 0.05              # a server started and stopped (beyond a trial's own overhead)
WARM_BYTES_PER_S = 2e9      # prewarm's reads from the page cache, the block's servers at once
COPY_S = 0.6                # a fresh copy: its files made (a scale-5 cluster: 0.6-1.0 s) ...
COPY_BYTES_PER_S = 5e8      # ... and its bytes written (scale 100, 2.5 GB: 2-9 s)
CLUSTER_BYTES_PER_SCALE = 25e6  # the template's size: 2.5 GB at scale 100 (indexes, WAL)


def _tree_bytes(top: str) -> float:
    """The bytes of the files under `top` (a user's data directory), 0 where it cannot be read."""
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return float(total)


def cluster_bytes(table: dict[str, Any]) -> float:
    """The trial's cluster: a user's data directory's size, a user's dump restored (its size
    times its format's growth, as the build's cost counts it), or the template's from its
    scale."""
    if table.get("datadir"):
        return _tree_bytes(str(table["datadir"]))
    if table.get("dump"):  # the restored tables: the dump's bytes grown as its format's restore
        recipe, dump_bytes = userdata.dump_recipe(str(table["dump"]))
        return dump_bytes * BYTES_PER_UNIT[recipe]
    return CLUSTER_BYTES_PER_SCALE * float(table.get("scale", 10))


def fill_seconds(table: dict[str, Any], app: dict[str, Any]) -> float:
    """Seconds one server takes before its load: the copy (none where the run keeps a stopped
    server's cluster for the next: select-only, rules.keeps_cluster; its first copies are the
    first block's only), the start and stop and, with `prewarm` (the default), the tables
    read into its shared buffers (at most their size; shared_buffers from the arm's `app`
    over the table's)."""
    data = cluster_bytes(table)
    settings = {**dict(table.get("app") or {}), **app}
    warmed = min(data, float(shared_estimate(settings))) if table.get("prewarm", True) else 0.0
    kept = keeps_cluster(str(table.get("builtin", "select-only")), table.get("script"),
                         bool(table.get("fresh_copy", False)))
    copy = 0.0 if kept else COPY_S + data / COPY_BYTES_PER_S
    return FIXED_S + copy + warmed / WARM_BYTES_PER_S
