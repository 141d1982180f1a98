"""What one request-level PostgreSQL server does before its load, for the cost model (`run
--dry-run`, `plan`: the kind's Kind.fill_seconds): its cluster copied from the template, the
server started, pg_prewarm reading the tables into shared buffers, and the server stopped
after. Sized from the table and the arm's `app`, reading nothing but a dump's size.

Fitted on the 2-core AMD EPYC VM (docs/benchmarks.md): scale 5 with 128 MB of shared buffers,
blocks of 8.9 s for 6 s of load (three servers: about 0.8 s each); scale 100 with 2 GB, blocks
of 19.8 s (about 4.4 s each)."""

from __future__ import annotations

import os
from typing import Any

from hugelab.workloads.postgres.server import shared_estimate

FIXED_S = 0.5               # a server started and stopped
BYTES_PER_S = 1e9           # a cluster copied (page cache to page cache), and prewarm's reads
CLUSTER_BYTES_PER_SCALE = 25e6  # the template's size: 2.5 GB at scale 100 (indexes, WAL)


def cluster_bytes(table: dict[str, Any]) -> float:
    """The trial's cluster: from its scale, or a user's dump's size (its restored tables are at
    least as large)."""
    dump = table.get("dump")
    if dump:
        try:
            return float(os.path.getsize(str(dump)))
        except OSError:
            return 0.0
    return CLUSTER_BYTES_PER_SCALE * float(table.get("scale", 10))


def fill_seconds(table: dict[str, Any], app: dict[str, Any]) -> float:
    """Seconds one server takes before its load: the copy, the start and stop and, with
    `prewarm` (the default), the tables read into its shared buffers (at most their size)."""
    data = cluster_bytes(table)
    warmed = min(data, float(shared_estimate(app))) if table.get("prewarm", True) else 0.0
    return FIXED_S + (data + warmed) / BYTES_PER_S
