"""Warnings about hugetlb pools the run shared with other users: who held pages when it
started, how many trials started while others held some, and trials that failed because
another user took the pages (cause "pool"). Pure: facts in, sentences out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hugelab.host.holders import describe


@dataclass(frozen=True)
class SharedPool:
    """A pool the run shared: trials that started while others held its pages, and the most
    pages they held."""

    trials: int = 0
    most_held: int = 0


def shared_pools(monitors: Iterable[Mapping[str, Any]]) -> dict[str, SharedPool]:
    """Pool -> how the run shared it, from trials' monitors (`pools_shared`, recorded by the
    runner)."""
    out: dict[str, SharedPool] = {}
    for mon in monitors:
        for pool, facts in (mon.get("pools_shared") or {}).items():
            was = out.get(pool, SharedPool())
            out[pool] = SharedPool(was.trials + 1,
                                   max(was.most_held, int(facts.get("held_by_others") or 0)))
    return out


def pool_warnings(pool_holders: Iterable[Mapping[str, Any]],
                  shared: Mapping[str, SharedPool],
                  pool_failed: Mapping[str, int]) -> list[str]:
    """`pool_holders`: inspect's entries at the run's start; `shared`: `shared_pools`;
    `pool_failed`: arm -> its trials failed with cause "pool"."""
    out = [f"{describe(e)} when the run started: it grew the pool on top of them"
           for e in pool_holders]
    for pool, sp in sorted(shared.items()):
        out.append(f"{sp.trials} trial(s) started while other users held up to {sp.most_held} "
                   f"pages of the {pool} pool: each got its pages free on top of theirs, but "
                   "those users ran beside it (their memory traffic is part of the measurement)")
    for arm, n in sorted(pool_failed.items()):
        if n:
            out.append(f"{arm}: {n} trial(s) failed because another user took the hugetlb "
                       "pages they needed (cause 'pool'); running the experiment again retries "
                       "them")
    return out
