"""Pure: /proc/buddyinfo parsing, the unusable free space index, the holder's choice of kept
pages and the fragmenter's refusals and verdicts (no process started)."""

from __future__ import annotations

import numpy as np
import pytest

from hugelab.errors import HostError
from hugelab.host import buddyinfo
from hugelab.host.fraghold import choose_kept
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
