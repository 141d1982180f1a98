"""Pure: /proc/buddyinfo parsing, the unusable free space index, the holder's choice of kept
pages, its fault-in in threads (16 MiB of this process) and the fragmenter's refusals and
verdicts (no process started)."""

from __future__ import annotations

import mmap
import struct

import numpy as np
import pytest

from hugelab.errors import HostError
from hugelab.host import buddyinfo
from hugelab.host.fraghold import PRESENT, Region, choose_kept
from hugelab.host.fragment import FragmentTarget, check_reachable, missed

# This host's own /proc/buddyinfo once, with a stray line that is not a zone's
TEXT = """\
Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3
Node 0, zone    DMA32      1      1      4      2      5      4      3      3      4      2    752
Node 0, zone   Normal   1758    829   7055   3212   1528    578    423    183    105      0    457
Page block order: 9
"""


def test_parse_zones_and_counts():
    zones = buddyinfo.parse(TEXT)
    assert [z.key for z in zones] == ["0/DMA", "0/DMA32", "0/Normal"]
    assert zones[2].counts == (1758, 829, 7055, 3212, 1528, 578, 423, 183, 105, 0, 457)
    assert zones[0].free_pages() == 256 + 512 + 3 * 1024


def test_unusable_index_by_hand():
    snap = buddyinfo.snapshot(TEXT, 4)
    assert snap.order == 9
    normal = buddyinfo.parse(TEXT)[2]
    low = sum(c << o for o, c in enumerate(normal.counts[:9]))
    high = 457 * 1024
    assert normal.free_pages() == low + high
    j = snap.to_json()
    assert j["zones"]["0/Normal"]["unusable"] == round(low / (low + high), 4)
    free = sum(z.free_pages() for z in buddyinfo.parse(TEXT)) * 4
    huge = (3 * 1024 + 512 + 752 * 1024 + 2 * 512 + 457 * 1024) * 4
    assert j["free_kb"] == free and j["free_huge_kb"] == huge
    assert j["unusable"] == round((free - huge) / free, 4)


def test_unusable_edges():
    assert buddyinfo.unusable(0, 0) is None
    assert buddyinfo.unusable(100, 100) == 0.0
    assert buddyinfo.unusable(100, 0) == 1.0
    assert buddyinfo.huge_order(4) == 9 and buddyinfo.huge_order(64, 512 * 1024) == 13


def test_parse_ignores_garbage():
    assert buddyinfo.parse("") == ()
    assert buddyinfo.parse("Node x, zone Normal a b\nnonsense\n") == ()


def test_choose_kept_one_page_per_block_seeded():
    rng = np.random.default_rng(0)
    pfns = rng.permutation(np.arange(4096, 4096 + 3 * 512 + 17, dtype=np.int64))
    kept = choose_kept(pfns, 9, seed=5)
    blocks = pfns[kept] >> 9
    assert sorted(blocks.tolist()) == [8, 9, 10, 11]  # one page in each block touched
    assert list(kept) == sorted(kept)
    assert (choose_kept(pfns, 9, seed=5) == kept).all()
    assert not (choose_kept(pfns, 9, seed=6) == kept).all()
    known = np.array([9, 11])
    assert sorted((pfns[choose_kept(pfns, 9, 5, known)] >> 9).tolist()) == [8, 10]


def test_check_reachable_refuses_out_of_range_and_starving_targets():
    snap = buddyinfo.snapshot(TEXT, 4)
    with pytest.raises(HostError, match="between 0 and 1"):
        check_reachable(FragmentTarget(1.0), 0, snap)
    with pytest.raises(HostError, match="must stay free"):
        check_reachable(FragmentTarget(0.5), 1 << 40, snap)
    check_reachable(FragmentTarget(0.5, max_kb=1024), 0, snap)


def test_missed():
    t = FragmentTarget(0.9)
    assert missed({"after": {"unusable": 0.89}}, t) is None
    assert "below the target" in (missed({"after": {"unusable": 0.7}, "stopped": "reserve"}, t)
                                  or "")
    assert missed({}, t) == "no fragmentation measured"


def test_choose_kept_skips_pages_not_present():
    pfns = np.array([-1, 512, 513, -1, 1024], dtype=np.int64)  # -1: being migrated
    kept = choose_kept(pfns, 9, seed=0)
    assert sorted((pfns[kept] >> 9).tolist()) == [1, 2] and -1 not in pfns[kept]


def _least_key_per_block(pfns: np.ndarray, order: int, seed: int) -> list[int]:
    """The kept pages by definition: in each block, the page of least key (a sort of pages)."""
    key = np.random.default_rng(seed).random(len(pfns))
    best: dict[int, int] = {}
    for i, pfn in enumerate(pfns.tolist()):
        if pfn >= 0 and (pfn >> order not in best or key[i] < key[best[pfn >> order]]):
            best[pfn >> order] = i
    return sorted(best.values())


def test_choose_kept_by_runs_is_the_least_key_page_of_each_block():
    """The pages come in runs of a block (as the allocator hands a split block out); a block
    may come back in a later run, pages may be missing: the same pages as by definition."""
    rng = np.random.default_rng(3)
    for case in range(40):
        runs = [b * 512 + np.arange(rng.integers(1, 513)) for b in rng.integers(0, 30, 25)]
        pfns = np.concatenate(runs).astype(np.int64)
        pfns[rng.random(len(pfns)) < 0.02] = -1
        for seed in (case, case + 100):
            assert choose_kept(pfns, 9, seed).tolist() == _least_key_per_block(pfns, 9, seed)


def _present(region: Region) -> list[bool]:
    """Which of the region's pages are in memory, from /proc/self/pagemap read here."""
    n = len(region.map) // mmap.PAGESIZE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(region.base // mmap.PAGESIZE * 8)
        entries = struct.unpack(f"{n}Q", f.read(n * 8))
    return [bool(e & PRESENT) for e in entries]


def test_grow_in_threads_faults_in_every_page_and_no_more():
    region = Region(24 << 20)
    assert not any(_present(region))
    assert region.grow(16 << 20, threads=4) and region.used == 16 << 20
    present = _present(region)
    pages = (16 << 20) // mmap.PAGESIZE
    assert all(present[:pages]) and not any(present[pages:])
    assert region.grow(16 << 20, threads=3) and region.used == 24 << 20  # to the end
    assert all(_present(region)) and not region.grow(4096)
    region.map.close()
