"""The dry run says when a pool it would grow is unlikely to be reachable in the host's state
now (issue 38 item 3): the pages each pool must grow by against the free blocks of the page's
order in /proc/buddyinfo (order 9 for 2 MiB; for 1 GiB, order 18, only the order-10 blocks
buddyinfo shows as an upper bound) and all free memory (what compaction could make). A fake
/proc tree (tests/fakehost.py) gives the fragmented host; this host's own buddyinfo, read by the
test itself, checks the figures of a real dry run. Nothing changes: the dry run reads only."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from hugelab.cli.main import main
from hugelab.experiment.parse import parse_experiment
from hugelab.host.buddyinfo import pool_reach, snapshot
from hugelab.planning.dryrun import plan
from hugelab.planning.poolreach import reach_plan
from hugelab.workloads.registry import build_for
from tests.fakehost import make_host
from tests.hostguard import host_state

# 2 GiB free, none of it in blocks of order 9 or above: 512 order-8 blocks (1 MiB each) and
# 512 order-7 blocks, plus a little of the small orders
FRAGMENTED = "Node 0, zone   Normal  256 128 64 32 16 8 4 512 1024 0 0\n"
# 2 GiB in order-10 blocks (512 of 4 MiB), 1 GiB in order-9 blocks (512 of 2 MiB)
TOP_ONLY = "Node 0, zone   Normal  0 0 0 0 0 0 0 0 0 512 512\n"
POOLS = [{"size": "2M", "size_kb": 2048, "free": 0, "resv": 0, "nodes": []},
         {"size": "1G", "size_kb": 1048576, "free": 0, "resv": 0, "nodes": []}]


def _free_kb(text: str) -> int:
    """Free KiB of a buddyinfo text, counted here (4 KiB pages)."""
    return sum(int(c) * 4 << o for line in text.splitlines()
               for o, c in enumerate(line.split()[4:]))


def test_fragmented_free_lists_hold_no_2m_page_but_compaction_could_make_them():
    snap = snapshot(FRAGMENTED, 4)
    r = pool_reach(snap, 2048)
    assert (r.order, r.top_order, r.ready) == (9, 10, 0)
    assert r.free_kb == _free_kb(FRAGMENTED) and r.most == _free_kb(FRAGMENTED) // 2048
    big = pool_reach(snap, 1048576)
    assert (big.order, big.seen, big.ready, big.top_kb, big.most) == (18, False, 0, 0, 1)


def test_order_10_blocks_bound_1g_pages_and_count_as_2m_pages():
    snap = snapshot(TOP_ONLY, 4)
    assert pool_reach(snap, 2048).ready == 512 + 2 * 512
    big = pool_reach(snap, 1048576)
    assert (big.ready, big.top_kb, big.most) == (2, 2 * 1048576, 3)
    rows, said = reach_plan({"pools": POOLS}, {("1G", None): 4, ("2M", None): 1536}, snap)
    assert [r["reach"] for r in rows] == ["reclaim", "ready"]
    assert said == ["the 1 GiB pool asks for 4 more pages; free memory has 2.0 GiB in order-10 "
                    "blocks (/proc/buddyinfo shows none larger: whether they lie together as "
                    "1 GiB pages, compaction decides): all 3.0 GiB free, compacted, would make "
                    "only 3: beyond that it grows only as far as the kernel reclaims page cache "
                    "— reserve 1 GiB pages at boot (hugepagesz=1G hugepages=4)"]


def test_pages_already_free_in_the_pool_need_no_growth():
    snap = snapshot(FRAGMENTED, 4)
    pools = [{**POOLS[0], "free": 100, "resv": 10}]
    assert reach_plan({"pools": pools}, {("2M", None): 90}, snap) == ([], [])
    rows, said = reach_plan({"pools": pools}, {("2M", None): 91}, snap)
    assert rows[0]["more"] == 1 and rows[0]["reach"] == "compaction" and len(said) == 1
    assert "it may not grow at run time without compaction" in said[0]


def test_a_node_pool_counts_its_own_nodes_blocks():
    snap = snapshot("Node 0, zone Normal 0 0 0 0 0 0 0 0 0 0 10\n"
                    "Node 1, zone Normal 0 0 0 0 0 0 0 0 0 0 0\n", 4)
    assert pool_reach(snap, 2048, 0).ready == 20 and pool_reach(snap, 2048, 1).ready == 0
    pools = [{**POOLS[0], "nodes": [{"node": 1, "free": 0}]}]
    rows, said = reach_plan({"pools": pools}, {("2M", 1): 2}, snap)
    assert rows[0]["reach"] == "reclaim" and said[0].startswith("the 2 MiB pool on node 1 asks")


EXPERIMENT = """
name = "reach"
blocks = 1
[workload]
kind = "hugelab-mem"
size = "64M"
[[arms]]
name = "4k"
backing = "4k"
[[arms]]
name = "2m"
backing = "hugetlb-2M"
pools = {{ "2M" = {pages_2m} }}
[[arms]]
name = "1g"
backing = "hugetlb-1G"
pools = {{ "1G" = {pages_1g} }}
"""


def _dry_plan(tmp_path: Path, buddyinfo: str, pages_2m: int, pages_1g: int) -> dict:
    paths = make_host(tmp_path / "root", free_kb=8 * 1048576)
    paths.buddyinfo.write_text(buddyinfo)
    before = sorted((p, p.read_bytes()) for p in paths.root.rglob("*") if p.is_file())
    exp = parse_experiment(tomllib.loads(
        EXPERIMENT.format(pages_2m=pages_2m, pages_1g=pages_1g)))
    workload, per_arm = build_for(exp)
    out = plan(exp, workload, per_arm, tmp_path / "none.db", None, paths=paths)
    assert sorted((p, p.read_bytes()) for p in paths.root.rglob("*") if p.is_file()) == before
    assert not (tmp_path / "none.db").exists()
    return out


def test_the_dry_run_warns_on_a_fragmented_host_and_not_on_a_fresh_one(tmp_path):
    frag = _dry_plan(tmp_path / "frag", FRAGMENTED, 64, 1)
    reach = {r["size"]: r for r in frag["pool_reach"]}
    assert reach["2M"]["reach"] == "compaction" and reach["2M"]["ready"] == 0
    assert reach["1G"]["reach"] == "compaction" and reach["1G"]["free_in_top_order_kb"] == 0
    said = [w for w in frag["warnings"] if "reserve" in w and "at boot" in w]
    assert len(said) == 2, frag["warnings"]
    assert said[0].startswith("the 1 GiB pool asks for 1 more page; free memory has 0 KiB in "
                              "order-10 blocks")
    assert "the 2 MiB pool asks for 64 more pages; free memory holds 0 in blocks of order 9 " \
        "or above (0 KiB): it may not grow at run time without compaction" in said[1]
    fresh = _dry_plan(tmp_path / "fresh", TOP_ONLY, 64, 1)
    assert [r["reach"] for r in fresh["pool_reach"]] == ["bound", "ready"]  # 1G, 2M
    assert [w for w in fresh["warnings"] if "at boot" in w] == [
        w for w in fresh["warnings"] if w.startswith("the 1 GiB pool") and "not a promise" in w]


@pytest.mark.host  # reads this host before and after: under the host lock, in the machine's lane
def test_a_real_dry_run_states_this_hosts_free_lists(tmp_path, capsys):
    """`hugelab run --dry-run --json` on this host: a 1 GiB pool larger than all memory is
    beyond reach, in the words and figures of this host's /proc/buddyinfo as the test reads it
    (within 5%: other processes allocate meanwhile); a 2 MiB pool's verdict follows its own
    figures; the host's pools and THP are as they were."""
    total_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal:"))
    pages_1g = total_kb // 1048576 + 2
    path = tmp_path / "reach.toml"
    path.write_text(EXPERIMENT.format(pages_2m=2, pages_1g=pages_1g))
    before = host_state()
    text = Path("/proc/buddyinfo").read_text()
    assert main(["run", str(path), "--dry-run", "--json", "--store", str(tmp_path / "s.db")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert host_state() == before and not (tmp_path / "s.db").exists()
    reach = {r["size"]: r for r in out["pool_reach"]}
    if "1G" not in reach:
        pytest.skip("this host has no 1 GiB pool")
    big = reach["1G"]
    top_kb = sum(int(line.split()[-1]) * 4096 for line in text.splitlines())
    assert big["reach"] == "reclaim" and big["pages"] == pages_1g and 0 < big["more"] <= pages_1g
    assert big["free_in_top_order_kb"] == pytest.approx(top_kb, rel=0.05)
    assert big["free_kb"] == pytest.approx(_free_kb(text), rel=0.05)
    assert any(w.startswith(f"the 1 GiB pool asks for {big['more']} more pages") and
               f"hugepagesz=1G hugepages={pages_1g}" in w for w in out["warnings"])
    small = reach.get("2M")
    if small is not None:  # a pool already holding 2 free pages needs no growth: no row
        want = "ready" if small["more"] <= small["ready"] else \
            "compaction" if small["more"] <= small["most_with_compaction"] else "reclaim"
        assert small["reach"] == want
        assert small["ready"] * 2048 <= small["free_kb"]
