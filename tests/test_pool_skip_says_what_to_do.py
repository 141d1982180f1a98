"""An arm skipped because its pool cannot be reserved says what to do: the pool's own error
carries the fix (`reserve at boot with hugepagesz=1G hugepages=2`), and the skip kept only
the first half: `skipping arm vm-1G: 1G pool: requested 2 pages, achieved 1 after
compaction for 10s; pool left at 0`, with no word on what to do (issue 40's THP-vs-1 GiB
journey, 004-thp-vs-1g-vms.toml on a host up for hours)."""

from __future__ import annotations

from hugelab.errors import PoolError
from hugelab.experiment import load_experiment
from hugelab.planning.poolkeep import PoolKeeper
from hugelab.workloads.registry import build_for

EXPERIMENT = """name = "one-gig"
blocks = 1

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "256M"
duration = 0.5

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "1g"
backing = "hugetlb-1G"
pools = { "1G" = 2 }
"""


class _Fragmented:
    """A host whose 1 GiB pool cannot grow, in the words HostControl uses."""

    def ensure_free(self, size_kb: int, pages: int, node: int | None = None) -> int:
        raise PoolError(f"1G pool: requested {pages} pages, achieved 1 after compaction for "
                        "10s; pool left at 0",
                        hint=f"memory is too fragmented or too full: free memory, or reserve "
                             f"at boot with hugepagesz=1G hugepages={pages}")


def test_the_skip_reason_carries_the_pools_fix(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENT)
    exp = load_experiment(path)
    workload, per_arm = build_for(exp)
    skipped = PoolKeeper(exp, workload, per_arm).reserve(_Fragmented(),  # type: ignore[arg-type]
                                                         list(exp.arms))
    assert list(skipped) == ["1g"]
    why = skipped["1g"]
    assert why.startswith("1G pool: requested 2 pages, achieved 1 after compaction"), why
    assert "reserve at boot with hugepagesz=1G hugepages=2" in why, why
