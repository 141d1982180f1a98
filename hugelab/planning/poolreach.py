"""Whether the hugetlb pools a run asks for can grow that far in the host's state now (issue 38
item 3): the dry run compares the pages each pool must grow by with the free blocks of the
page's order in /proc/buddyinfo (hugelab.host.buddyinfo.pool_reach), and says so when only
compaction (or reclaim) could make them. It reads only.

A 2 MiB page needs a free block of order 9: buddyinfo shows those, so the pages ready now are
known. A 1 GiB page needs order 18, and buddyinfo shows blocks up to order 10 (4 MiB): free
memory in order-10 blocks is only an upper bound on the 1 GiB pages ready now, and whether they
lie together compaction decides. Pools reserved at boot do not depend on either.

That bound is far off on a host that has run a while: a 1 GiB page needs a whole aligned range
with no unmovable page in it, and the free lists show where those are scattered as free memory
in blocks below a 2 MiB page's order (the unusable free space index, buddyinfo.unusable). Where
that share is above AGED_UNUSABLE, the dry run says the 1 GiB pool will probably not be met even
with compaction. This host, up 16 h with 19 GiB of 24 free and 13 GiB of it in order-10 blocks,
had 22% of its free memory below order 9, and a run could not compact two 1 GiB pages
(examples/004, issue 40); a fresh boot has about none there."""

from __future__ import annotations

from typing import Any

from hugelab.host.buddyinfo import PoolReach, Snapshot, pool_reach, unusable
from hugelab.planning.pools import PoolKey
from hugelab.units import amount, exact


def _grows_by(host: dict[str, Any], size: str, node: int | None, pages: int) -> int | None:
    """Pages pool (size, node) must grow by so that `pages` are free; None for a pool the host
    does not have."""
    pool = next((p for p in host.get("pools", []) if p["size"] == size), None)
    if pool is None:
        return None
    if node is None:
        free = int(pool.get("free") or 0) - int(pool.get("resv") or 0)
    else:
        entry: dict[str, Any] = next((n for n in pool.get("nodes") or []
                                      if n.get("node") == node), {})
        free = int(entry.get("free") or 0)
    return max(pages - max(free, 0), 0)


AGED_UNUSABLE = 0.10  # free memory's share below order 9 past which 1 GiB pages are unlikely


def verdict(more: int, reach: PoolReach, aged: float | None = None) -> str:
    """'ready' (free blocks of the page's order hold them), 'bound' (a page above buddyinfo's
    top order: free memory in top-order blocks bounds them, no more), 'aged' (such a page on
    free lists whose share `aged` below order 9 says unmovable pages are scattered: probably
    not met), 'compaction' (free memory holds them, in smaller blocks) or 'reclaim' (free
    memory does not hold them)."""
    if more <= reach.ready and not reach.seen:
        return "aged" if (aged or 0.0) > AGED_UNUSABLE else "bound"
    if more <= reach.ready:
        return "ready"
    return "compaction" if more <= reach.most else "reclaim"


def _asks(reach: PoolReach, node: int | None, more: int) -> str:
    """'the 1 GiB pool on node 0 asks for 2 more pages'."""
    where = f" on node {node}" if node is not None else ""
    return (f"the {exact(reach.size_kb)} pool{where} asks for {more} more "
            f"page{'s' if more != 1 else ''}")


def _bound_note(size: str, node: int | None, pages: int, more: int, reach: PoolReach) -> str:
    """A page above buddyinfo's top order on free lists that look fresh: the bound is not a
    promise (this 24 GiB VM, 3.75% of free memory below order 9, could not make two 1 GiB pages
    at run time: examples/004's vm-1G arm skipped)."""
    label = exact(reach.size_kb)
    return (f"{_asks(reach, node, more)}: "
            f"free memory's {amount(reach.top_kb)} in order-{reach.top_order} blocks bound it at "
            f"{reach.ready}, not a promise (whether they lie together as {label} pages, "
            "compaction decides at run time; an arm whose pool falls short is skipped, and the "
            f"report says so) — to be sure, reserve at boot (hugepagesz={size} hugepages={pages})")


def _aged_warning(size: str, node: int | None, pages: int, more: int, reach: PoolReach,
                  aged: float) -> str:
    label = exact(reach.size_kb)
    return (f"{_asks(reach, node, more)}, and "
            f"will probably not be met: {aged:.0%} of free memory lies in blocks smaller than "
            f"2 MiB (/proc/buddyinfo), the free lists of a host that has run a while, whose "
            f"unmovable pages sit in most {label} ranges; compaction cannot move them (the "
            f"{amount(reach.top_kb)} in order-{reach.top_order} blocks bound it at "
            f"{reach.ready}) — reserve at boot with hugepagesz={size} hugepages={pages}")


def warning(size: str, node: int | None, pages: int, more: int, reach: PoolReach) -> str:
    """The dry run's words for a pool that may not reach `pages` at run time."""
    label = exact(reach.size_kb)
    asks = _asks(reach, node, more)
    if reach.seen:
        has = (f"free memory holds {reach.ready} in blocks of order {reach.order} or above "
               f"({amount(reach.ready * reach.size_kb)})")
    else:
        has = (f"free memory has {amount(reach.top_kb)} in order-{reach.top_order} blocks "
               f"(/proc/buddyinfo shows none larger: whether they lie together as {label} "
               "pages, compaction decides)")
    if verdict(more, reach) == "compaction":
        then = (f"it may not grow at run time without compaction (all {amount(reach.free_kb)} "
                f"free, compacted, would make {reach.most})")
    else:
        then = (f"all {amount(reach.free_kb)} free, compacted, would make only {reach.most}: "
                "beyond that it grows only as far as the kernel reclaims page cache")
    boot = f"hugepagesz={size} hugepages={pages}"
    return f"{asks}; {has}: {then} — reserve {label} pages at boot ({boot})"


def reach_plan(host: dict[str, Any], pools: dict[PoolKey, int], snap: Snapshot
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """Per pool the run grows: what the free lists hold for it now (JSON), and a warning for
    each that free blocks of its order do not cover."""
    rows, out = [], []
    for (size, node), pages in sorted(pools.items(), key=str):
        more = _grows_by(host, size, node, pages)
        size_kb = next((int(p["size_kb"]) for p in host.get("pools", [])
                        if p["size"] == size), None)
        if more is None or size_kb is None or more == 0:
            continue
        reach = pool_reach(snap, size_kb, node)
        aged = _unusable(snap, node)
        said = verdict(more, reach, aged)
        rows.append({"size": size, "node": node, "pages": pages, "more": more,
                     "reach": said, "unusable_2m": aged, **reach.to_json()})
        if said == "aged":
            out.append(_aged_warning(size, node, pages, more, reach, aged or 0.0))
        elif said == "bound":
            out.append(_bound_note(size, node, pages, more, reach))
        elif said != "ready":
            out.append(warning(size, node, pages, more, reach))
    return rows, out


def _unusable(snap: Snapshot, node: int | None) -> float | None:
    """The share of free memory (node `node`'s zones, or all) in blocks below order 9."""
    zones = [z for z in snap.zones if node is None or z.node == node]
    o = snap.order
    return unusable(sum(z.free_pages() for z in zones), sum(z.free_pages(o) for z in zones))
