"""A request-interleaved run whose servers outnumbered the CPUs they were pinned to says so
beside its verdicts (hugelab.report.turns): how many servers, which CPUs, and that the effect's
size is for servers sharing CPUs. Measured basis: docs/benchmarks.md, "Request-level at 1 GB:
how many servers share the CPU"."""

from __future__ import annotations

from typing import Any

import numpy as np

from hugelab.report.runload import RunData, SeriesDetails
from hugelab.report.turns import turns_note


def run(*inters: dict[str, Any] | None) -> RunData:
    """A run as the report reads it: one series per trial, with that trial's provenance."""
    none = np.array([], dtype=np.int64)
    return RunData(run={}, series=[], series_arm=[], series_target=[], block=none,
                   code=none.astype(np.int32), status=none.astype(np.int8),
                   value=none.astype(np.float64),
                   details=[SeriesDetails(provenance=[{} if i is None else {"interleaved": i}])
                            for i in inters])


def req(servers: int, cpus: list[int], design: str = "requests") -> dict[str, Any]:
    return {"design": design, "servers": servers, "pinning": {"client": [9], "servers": cpus}}


def test_servers_sharing_a_cpu_are_named():
    note = turns_note(run(req(3, [0]), req(3, [0]), req(3, [0])))
    assert note is not None and note.startswith("3 servers took turns on CPU 0:")
    assert "Servers taking turns" in note
    assert turns_note(run(req(4, [0, 1, 2]))).startswith(  # type: ignore[union-attr]
        "4 servers took turns on CPUs 0,1,2")


def test_no_note_where_each_server_had_a_cpu_or_the_design_is_another():
    assert turns_note(run(req(2, [0, 1]), req(2, [0, 1]))) is None
    assert turns_note(run(req(3, [0], design="buffers"))) is None  # one process, many arms
    assert turns_note(run(None, None)) is None  # paired, client apart or not
    assert turns_note(run({"design": "requests", "servers": 3})) is None  # pinning not recorded
