"""What one request-level PostgreSQL server does before its load, for the cost model (`run
--dry-run`, `plan`: the kind's Kind.fill_seconds): its cluster copied from the template, the
server started, pg_prewarm reading the tables into shared buffers, and the server stopped
after. Sized from the table and the arm's `app`, reading nothing but the size of a user's
dump or data directory.

Fitted on the 2-core AMD EPYC VM (docs/benchmarks.md): scale 5 with 128 MB of shared buffers,
blocks of 8.9 s for 6 s of load (three servers: about 0.8 s each); scale 100 with 2 GB, blocks
of 19.8 s (about 4.4 s each)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from hugelab.workloads.postgres import userdata
from hugelab.workloads.postgres.server import shared_estimate
from hugelab.workloads.preview import BYTES_PER_UNIT

FIXED_S = 0.5               # a server started and stopped
BYTES_PER_S = 1e9           # a cluster copied (page cache to page cache), and prewarm's reads
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
    """Seconds one server takes before its load: the copy, the start and stop and, with
    `prewarm` (the default), the tables read into its shared buffers (at most their size;
    shared_buffers from the arm's `app` over the table's)."""
    data = cluster_bytes(table)
    settings = {**dict(table.get("app") or {}), **app}
    warmed = min(data, float(shared_estimate(settings))) if table.get("prewarm", True) else 0.0
    return FIXED_S + (data + warmed) / BYTES_PER_S
