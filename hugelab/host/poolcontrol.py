"""Sizing hugetlb pools for HostControl: how many pages a pool has and who holds them, growing
it (compacting memory until a deadline) so that the pages hugelab needs are free on top of
what other users hold, refusing a pool that would leave the host less than the pool reserve,
and journaling each pool as found before its first change, so `restore()` puts it back.
A shortfall puts the pool back at once and says requested vs achieved: nothing half-done."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path

from hugelab.errors import HostError, PoolError
from hugelab.host.journal import Journal
from hugelab.host.paths import HostPaths, parse_kv_kb
from hugelab.host.pools import PoolCounts, grow_target, read_counts, restore_value
from hugelab.units import page_label

POOL_RESERVE_KB = 256 * 1024  # what a pool must leave of MemAvailable (as the fleet's preflight)


class PoolControl:
    """The pool half of HostControl, over its paths, journal, writer and dry-run commands."""

    paths: HostPaths
    journal: Journal
    dry_run: bool
    compact_deadline_s: float
    commands: list[str]
    writer: Callable[[Path, str], None]
    pool_reserve_kb: int

    # --- primitive -----------------------------------------------------------
    def _read(self, path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise HostError(f"cannot read {path}: {exc.strerror}") from exc

    # --- pools ---------------------------------------------------------------
    def pool_pages(self, size_kb: int, node: int | None = None) -> int:
        return int(self._read(self.paths.pool_file(size_kb, node=node)))

    def pool_counts(self, size_kb: int, node: int | None = None) -> PoolCounts:
        self._require_pool(size_kb, node)
        return read_counts(self.paths, size_kb, node)

    def _require_pool(self, size_kb: int, node: int | None) -> None:
        if not self.paths.pool_file(size_kb, node=node).exists():
            sizes = ", ".join(page_label(s) for s in self.paths.pool_sizes_kb()) or "none"
            where = f"node {node}" if node is not None else "this host"
            hint = "1 GiB pages need the pdpe1gb CPU flag" if size_kb == 1048576 else None
            raise PoolError(f"{page_label(size_kb)} huge pages are not supported on {where} "
                            f"(supported sizes: {sizes})", hint=hint)

    def check_pool_fits(self, size_kb: int, pages: int, node: int | None = None) -> None:
        """Refuse, before any change, a pool that cannot fit in available memory."""
        self._require_pool(size_kb, node)
        current = self.pool_pages(size_kb, node)
        extra_kb = (pages - current) * size_kb
        if extra_kb <= 0:
            return
        mem = parse_kv_kb(self.paths.meminfo.read_text())
        avail = mem.get("MemAvailable", mem.get("MemFree", 0))
        if extra_kb > avail - self.pool_reserve_kb:
            raise PoolError(
                f"a pool of {pages} x {page_label(size_kb)} needs {extra_kb / 1048576:.1f} GiB more "
                f"memory, but only {avail / 1048576:.1f} GiB is available, of which hugelab "
                f"leaves {self.pool_reserve_kb // 1024} MiB to the host (the pool reserve)",
                hint="ask for fewer pages, or free memory first")

    def reserve_pool(self, size_kb: int, pages: int, node: int | None = None) -> int:
        """Set a pool to `pages` (`host set --pool`), compacting and retrying until the deadline.

        If the pool cannot reach its size, it is put back as it was and PoolError says
        requested vs achieved: nothing half-done is left.
        """
        if pages < 0:
            raise PoolError(f"a pool cannot have {pages} pages")
        self.check_pool_fits(size_kb, pages, node)
        counts = read_counts(self.paths, size_kb, node)
        if counts.nr == pages and not self.dry_run:
            return pages
        return self._set_pool(size_kb, node, counts, pages)

    def ensure_free(self, size_kb: int, need: int, node: int | None = None) -> PoolCounts:
        """Make `need` pages of a pool free for hugelab on top of what others hold: nr_hugepages
        becomes (pages others use or have reserved) + need, when fewer are free. Returns the
        counters found. PoolError (nothing changed) when the pool cannot grow that far."""
        counts = self.pool_counts(size_kb, node)
        target = grow_target(counts, need)
        if target is None:
            return counts
        try:
            self.check_pool_fits(size_kb, target, node)
        except PoolError as exc:
            raise PoolError(f"{exc.message}{_held_note(counts, size_kb)}", exc.hint) from exc
        self._set_pool(size_kb, node, counts, target)
        return counts

    def _set_pool(self, size_kb: int, node: int | None, counts: PoolCounts, pages: int) -> int:
        """Write nr_hugepages = pages (journaled as a pool, once per session), compacting until
        the deadline; on a shortfall put back the persistent size found and raise PoolError."""
        path = self.paths.pool_file(size_kb, node=node)
        if self.dry_run:
            self.commands.append(f"echo {pages} > {shlex.quote(str(path))}")
            return pages
        self._journal_pool(path, size_kb, node, counts)
        self.writer(path, str(pages))
        achieved = self._grow_with_compaction(path, pages)
        if achieved < pages:
            self.writer(path, str(counts.persistent))
            raise PoolError(
                f"{page_label(size_kb)} pool: requested {pages} pages, achieved {achieved} "
                f"after compaction for {self.compact_deadline_s:.0f}s; pool left at "
                f"{counts.nr}{_held_note(counts, size_kb)}",
                hint="memory is too fragmented or too full: free memory, or reserve at boot "
                f"with hugepagesz={page_label(size_kb)} hugepages={pages}",
            )
        return achieved

    def _journal_pool(self, path: Path, size_kb: int, node: int | None,
                      counts: PoolCounts) -> None:
        """Record a pool as found before its first change in this session; later changes of
        the same pool restore to that first state."""
        if any(e.get("kind") == "pool" and e.get("path") == str(path) for e in self.journal.entries):
            return
        self.journal.record({"kind": "pool", "path": str(path), "size_kb": size_kb, "node": node,
                             "nr": counts.nr, "surplus": counts.surplus,
                             "restore": restore_value(counts.nr, counts.surplus)})

    def _grow_with_compaction(self, path: Path, pages: int) -> int:
        deadline = time.monotonic() + self.compact_deadline_s
        achieved = int(self._read(path))
        while achieved < pages and time.monotonic() < deadline:
            try:
                self.writer(self.paths.compact_memory, "1")
            except HostError:
                pass
            time.sleep(0.2)
            self.writer(path, str(pages))
            achieved = int(self._read(path))
        return achieved


def _held_note(counts: PoolCounts, size_kb: int) -> str:
    if not counts.held:
        return ""
    return (f" ({counts.held} of its {counts.nr} pages are held by other users; "
            f"`hugelab inspect` names them)")
