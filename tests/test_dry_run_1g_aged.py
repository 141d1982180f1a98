"""The dry run says when a 1 GiB pool will probably not be met on a host that has run a while
(issue 40): its order-10 free blocks, an upper bound, held the pages, so the dry run of
examples/004 said nothing, and the run skipped its 1 GiB arm (this host, up for hours, could not
compact two 1 GiB pages). Free memory in blocks below a 2 MiB page's order shows the scattered
unmovable pages that no compaction moves; the warning names the boot reservation the skip
names. A fake /proc tree (tests/fakehost.py) gives both hosts; the dry run changes none of it."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from hugelab.experiment.parse import parse_experiment
from hugelab.planning.dryrun import plan
from hugelab.workloads.registry import build_for
from tests.fakehost import make_host

# 8 GiB in order-10 blocks (2048 of 4 MiB) and nothing smaller: a fresh boot
FRESH = "Node 0, zone   Normal  0 0 0 0 0 0 0 0 0 0 2048\n"
# the same 8 GiB in order-10 blocks, and 2.7 GiB (25% of free memory) in blocks of orders 0-8,
# as this host's Normal zone showed after 16 h up (17419 14704 7622 3463 3885 3043 2244 1683
# 1361 641 2630)
AGED = "Node 0, zone   Normal  20000 20000 10000 5000 4000 3000 2000 1500 1200 0 2048\n"

EXPERIMENT = """
name = "aged-1g"
blocks = 1
[workload]
kind = "hugelab-mem"
size = "64M"
[[arms]]
name = "thp"
backing = "thp"
[[arms]]
name = "1g"
backing = "hugetlb-1G"
pools = { "1G" = 2 }
"""


def _plan(root: Path, buddyinfo: str) -> dict[str, Any]:
    paths = make_host(root / "root", free_kb=12 * 1048576)
    paths.buddyinfo.write_text(buddyinfo)
    before = sorted((p, p.read_bytes()) for p in paths.root.rglob("*") if p.is_file())
    exp = parse_experiment(tomllib.loads(EXPERIMENT))
    workload, per_arm = build_for(exp)
    out = plan(exp, workload, per_arm, root / "none.db", None, paths=paths)
    assert sorted((p, p.read_bytes()) for p in paths.root.rglob("*") if p.is_file()) == before
    assert not (root / "none.db").exists()
    return out


def _share_below_order_9(text: str) -> float:
    counts = [int(c) for c in text.split()[4:]]
    free = sum(c << o for o, c in enumerate(counts))
    return sum(c << o for o, c in enumerate(counts) if o < 9) / free


def test_an_aged_host_is_told_its_1g_pool_will_probably_not_be_met(tmp_path):
    out = _plan(tmp_path / "aged", AGED)
    reach = {r["size"]: r for r in out["pool_reach"]}
    assert reach["1G"]["reach"] == "aged" and reach["1G"]["ready"] >= 2  # the bound held them
    assert abs(reach["1G"]["unusable_2m"] - _share_below_order_9(AGED)) < 0.001
    said = [w for w in out["warnings"] if "1 GiB pool" in w]
    assert len(said) == 1, out["warnings"]
    assert "will probably not be met" in said[0]
    assert f"{_share_below_order_9(AGED):.0%} of free memory" in said[0]
    assert said[0].endswith("reserve at boot with hugepagesz=1G hugepages=2")


def test_a_fresh_host_gets_no_such_warning_but_the_bound_is_no_promise(tmp_path):
    """No 'probably not met' on fresh free lists; but a bound is not a promise (this VM, 3.75%
    of its free memory below order 9, could not make two 1 GiB pages: 004's vm-1G arm was
    skipped where the dry run had said nothing)."""
    out = _plan(tmp_path / "fresh", FRESH)
    assert [r["reach"] for r in out["pool_reach"]] == ["bound"]
    said = [w for w in out["warnings"] if "1 GiB pool" in w]
    assert len(said) == 1 and "probably not" not in said[0], out["warnings"]
    assert ": free memory's " in said[0] and "not a promise" in said[0]
    assert said[0].endswith("to be sure, reserve at boot (hugepagesz=1G hugepages=2)")
