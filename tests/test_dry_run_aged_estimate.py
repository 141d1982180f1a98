"""The dry run counts the making of an aged host (`host_state = "fragmented"`) in its estimate.
examples/aged-host.toml's dry run said 24 s for six blocks where each block's fragmenting
took a minute here (the holder faults in 95% of free memory: 17.1 GiB in 60 s, 2026-11-30):
now each block adds the fill of each degree's share of the free memory buddyinfo shows, at the
rate this host's earlier holders reached when the store has one, else at the slowest rate
measured. A fake /proc tree gives the free memory; the dry run changes none of it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hugelab.experiment.parse import parse_experiment
from hugelab.planning.cost import FRAGMENT_BYTES_PER_S, FRAGMENT_FIXED_S
from hugelab.planning.dryrun import plan
from hugelab.store import Store, Trial
from hugelab.workloads.registry import build_for
from tests.fakehost import make_host

# 8 GiB free, in order-10 blocks (2048 of 4 MiB)
FREE_KB = 2048 * 4096
BUDDY = "Node 0, zone   Normal  0 0 0 0 0 0 0 0 0 0 2048\n"
AGED = """
name = "aged"
seed = 3
blocks = 4
[workload]
kind = "hugelab-mem"
size = "64M"
duration = 0.5
[factors]
backing = ["4k", "thp"]
[factors.host]
fresh = { host_state = "fresh" }
fragmented = { host_state = "fragmented", fragment = 0.9 }
"""


def _plan(tmp_path: Path, text: str, store: Path) -> dict:
    paths = make_host(tmp_path / "root", free_kb=12 * 1048576)
    paths.buddyinfo.write_text(BUDDY)
    exp = parse_experiment(tomllib.loads(text))
    workload, per_arm = build_for(exp)
    return plan(exp, workload, per_arm, store, None, paths=paths)


def test_each_block_counts_the_fill_of_its_fragmented_degree(tmp_path):
    out = _plan(tmp_path, AGED, tmp_path / "none.db")
    per_block = FRAGMENT_FIXED_S + 0.9 * FREE_KB * 1024 / FRAGMENT_BYTES_PER_S
    assert out["fragment_s"] == pytest.approx(per_block)
    plain = _plan(tmp_path / "p", AGED.replace("fragmented = { host_state = \"fragmented\", "
                                               "fragment = 0.9 }", ""), tmp_path / "none.db")
    assert plain["fragment_s"] == 0.0
    # the same arms but the aged state's: four blocks of the fill beside them
    assert out["estimated_s"] - plain["estimated_s"] == pytest.approx(
        4 * per_block + 4 * 2 * (0.5 + 0.5), rel=0.05)
    assert not (tmp_path / "none.db").exists()


def test_an_earlier_holders_own_rate_is_used(tmp_path):
    """A store whose trials ran on a holder that touched 16 GiB in 40 s (its own report,
    recorded in every fragmented trial's monitors): 0.4 GiB/s, not the assumed rate."""
    db = tmp_path / "s.db"
    held = {"state": "fragmented", "touched_kb": 16 << 20, "seconds": 40.0, "unusable": 0.9}
    with Store(db) as st:
        run_id, _ = st.get_or_create_run("k", "old", {"name": "old"}, {})
        for b in range(3):  # one holder, seen by three trials
            st.add_trial(Trial(run_id, b, 0, "thp", "ok", 1.0, "ns", "ns", "lower",
                               monitors={"host_state": held}))
    out = _plan(tmp_path, AGED, db)
    rate = (16 << 30) / 40.0
    assert out["fragment_s"] == pytest.approx(FRAGMENT_FIXED_S + 0.9 * FREE_KB * 1024 / rate)
