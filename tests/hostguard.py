"""Snapshot of the real host's huge-page state, to prove a test left it as it found it."""

from __future__ import annotations

from pathlib import Path

from hugelab.host.paths import REAL, parse_selected


def host_state() -> dict[str, str]:
    state = {"thp": parse_selected(REAL.thp_enabled.read_text()),
             "defrag": parse_selected(REAL.thp_defrag.read_text())}
    for size in REAL.pool_sizes_kb():
        state[f"pool{size}"] = REAL.pool_file(size).read_text().strip()
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if " hugetlbfs " in line]
    state["hugetlbfs"] = ",".join(sorted(mounts))
    return state
