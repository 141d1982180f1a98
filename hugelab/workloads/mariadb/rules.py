"""A Mariadb workload's rules: its [workload] table checked once, and the arm's backing against
its large_pages (which follows the backing unless an arm's app sets it)."""

from __future__ import annotations

import os
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.units import parse_size
from hugelab.workloads.kind import check_app
from hugelab.workloads.mariadb import oltp, server, userdata

BACKINGS = ("4k", "hugetlb-2M")


def validate(w: Any) -> None:
    """A Mariadb workload `w`'s settings, checked once (ExperimentError naming what is wrong)."""
    if w.script not in oltp.SCRIPTS and not w.script.endswith(".lua"):
        raise ExperimentError(f"mariadb: script {w.script!r}: one of "
                              f"{', '.join(oltp.SCRIPTS)}, or a .lua file")
    for name in ("tables", "table_size", "threads"):
        if getattr(w, name) < 1:
            raise ExperimentError(f"mariadb: {name} must be at least 1")
    if w.duration_s < 1 or w.window_s < 1 or w.warmup_s < 0:
        raise ExperimentError("mariadb: duration_s and window_s are whole seconds, at "
                              "least 1; warmup_s at least 0")
    if w.window_ops is not None and (w.window_ops < 1 or w.warm_ops < 0):
        raise ExperimentError("mariadb: window_ops is at least 1 and warm_ops at least 0")
    object.__setattr__(w, "app", tuple(w.app))
    for key, value in w.app:
        if key.replace("_", "-") in server.RESERVED - {"large-pages"}:
            raise ExperimentError(f"mariadb: app sets {key}, which hugelab sets itself")
        if key == "large_pages":  # hugelab's own key; the others are the server's to judge
            check_app("mariadb", ((key, value),), {"large_pages": bool})
    buffer_pool_bytes(w)
    for key in ("dump", "datadir"):
        if getattr(w, key):
            object.__setattr__(w, key, os.path.abspath(getattr(w, key)))
    userdata.check(w.dump, w.datadir, w.script, w.database, w.tables,
                   w.script in oltp.SCRIPTS or w.window_ops is not None)
    if w.arm_backing is not None:
        check_backing(w, w.arm_backing)


def buffer_pool_bytes(w: Any) -> int:
    """The server's InnoDB buffer pool in bytes: the arm's innodb_buffer_pool_size, else the
    workload's buffer_pool."""
    value = dict(w.app).get("innodb_buffer_pool_size", w.buffer_pool)
    try:
        return parse_size(str(value))
    except ValueError as exc:
        raise ExperimentError(f"mariadb: buffer pool: {exc}") from None


def check_backing(w: Any, backing: str) -> None:
    """ExperimentError unless `w`'s server memory can be given `backing`, as its large_pages
    says."""
    if backing not in BACKINGS:
        raise ExperimentError(f"mariadb: backing {backing!r} is not one the server's "
                              f"memory can be given; use {', '.join(BACKINGS)}",
                              hint="4k without large pages, hugetlb-2M with them")
    if w.large_pages() != (backing == "hugetlb-2M"):
        raise ExperimentError(f"mariadb: large_pages = {w.large_pages()} does not go "
                              f"with backing {backing}",
                              hint="leave large_pages unset: it follows the backing")
