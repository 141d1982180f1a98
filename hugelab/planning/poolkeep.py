"""Keeping a run's hugetlb pools: every page its arms need made free before the first trial,
made free again before each unit (another user may have taken some meanwhile), and the
hugetlbfs mounts its guests' file-backed RAM lives on.

    keeper = PoolKeeper(exp, workload, workloads)
    skipped.update(keeper.reserve(control, arms))       # arm -> why its pool cannot be had
    why, held = keeper.for_unit(control, unit_arms)     # None, or why the unit's trials fail
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hugelab.errors import PoolError
from hugelab.experiment import Arm, Experiment
from hugelab.host import holders
from hugelab.host.control import HostControl, size_kb_from_name
from hugelab.host.inspect import pools as host_pools
from hugelab.host.paths import REAL, HostPaths
from hugelab.planning.pools import (
    PoolKey,
    arm_pool_need,
    global_first,
    pool_plan,
    workload_bytes,
)
from hugelab.workloads.base import Workload

POOL_ATTEMPTS = 3  # tries to make a unit's pool pages free before its trials fail (cause "pool")
POOL_RETRY_S = 1.0  # pause between them: a holder that is exiting lets go of its pages


class PoolKeeper:
    """The pools of one run of `exp`: `workloads` per arm where a scenario sets its own."""

    def __init__(self, exp: Experiment, workload: Workload,
                 workloads: Mapping[str, Workload] | None = None, *, paths: HostPaths = REAL,
                 retry_s: float = POOL_RETRY_S, sleep: Callable[[float], None] = time.sleep
                 ) -> None:
        self.exp = exp
        self.workload = workload
        self.workloads = dict(workloads or {})
        self.paths = paths
        self.retry_s = retry_s
        self.sleep = sleep

    def reserve(self, control: HostControl, arms: list[Arm]) -> dict[str, str]:
        """Make free, before the first trial, the pages every pool `arms` need (on top of
        what other users hold); an arm whose pool cannot be had is returned with the reason
        (requested vs achieved), to be skipped."""
        needs = {a.name: arm_pool_need(a, workload_bytes(self._workload(a), a)) for a in arms}
        out: dict[str, str] = {}
        for (size, node), pages in global_first(self._plan(arms)):
            try:
                control.ensure_free(size_kb_from_name(size), pages, node)
            except PoolError as exc:
                why = f"{exc.message}; hint: {exc.hint}" if exc.hint else exc.message
                for name, need in needs.items():
                    if (size, node) in need:
                        out[name] = why
        return out

    def for_unit(self, control: HostControl, arms: list[Arm]) -> tuple[str | None, dict[str, Any]]:
        """Before each unit, the pages its arms need free again: a pool is grown on top of
        what is held now, tried POOL_ATTEMPTS times. Returns the reason when the pages cannot
        be had, and per pool the pages others held (for the trials' monitors)."""
        held: dict[str, Any] = {}
        for (size, node), pages in global_first(self._plan(arms)):
            last: PoolError | None = None
            for attempt in range(POOL_ATTEMPTS):
                try:
                    counts = control.ensure_free(size_kb_from_name(size), pages, node)
                    if counts.held:
                        held[size if node is None else f"{size}@{node}"] = {
                            "held_by_others": counts.held, "needed": pages}
                    last = None
                    break
                except PoolError as exc:
                    last = exc
                    if attempt + 1 < POOL_ATTEMPTS:
                        self.sleep(self.retry_s)
            if last is not None:
                where = f" on node {node}" if node is not None else ""
                return (f"the {size} pool{where} could not give this trial its {pages} pages "
                        f"({POOL_ATTEMPTS} attempts): {last.message}"
                        f"{holders_now(self.paths)}"), held
        return None, held

    def held_kb(self, arm: Arm) -> int:
        """KiB of pool pages held for one trial of `arm` (its cost record's pool_held_kb)."""
        need = arm_pool_need(arm, workload_bytes(self._workload(arm), arm))
        return sum(pages * size_kb_from_name(size) for (size, _n), pages in need.items())

    @staticmethod
    def mount_hugetlbfs(control: HostControl, arms: list[Arm], mounts: Mapping[str, Path]
                        ) -> None:
        """hugelab's own guests' file-backed RAM: a hugetlbfs mount per page size (a user's
        domain: libvirt's own mount)."""
        sizes = {a.vm.page_size for a in arms
                 if a.vm and a.vm.backing == "file" and a.vm.page_size and a.vm.domain is None}
        for size in sorted(s for s in sizes if s):
            control.mount_hugetlbfs(size_kb_from_name(size), mounts[size])

    def _plan(self, arms: list[Arm]) -> dict[PoolKey, int]:
        return pool_plan(self.exp, self.workload, arms, self.workloads)

    def _workload(self, arm: Arm) -> Workload:
        return self.workloads.get(arm.name, self.workload)


def holders_now(paths: HostPaths = REAL) -> str:
    """Who holds pool pages now, as lines to add to a trial's error."""
    entries = holders.pool_holders(host_pools(paths), holders.scan(paths))
    return "".join(f"\n  {holders.describe(e, limit=8)}" for e in entries)
