"""One hook says how many hugetlb bytes a trial's workload maps (issue 37): every kind that
maps hugetlb memory offers `hugetlb_bytes_for(size)`, and the pool planning asks nothing else."""

from __future__ import annotations

import inspect

from hugelab.experiment import Arm
from hugelab.planning import pools
from hugelab.workloads.registry import build_workload, kinds


def test_no_kind_offers_another_hugetlb_hook():
    for name, kind in kinds().items():
        assert not hasattr(kind.workload, "hugetlb_bytes"), name
    src = inspect.getsource(pools.workload_bytes)
    assert "hugetlb_bytes_for" in src and '"hugetlb_bytes"' not in src


def test_the_hook_sizes_the_pool_with_the_arms_page_size():
    mem = build_workload("hugelab-mem", {"size": "64M"})
    assert pools.workload_bytes(mem, Arm("x", "hugetlb-2M")) == 64 << 20
    assert pools.workload_bytes(mem) == 64 << 20
    sb = build_workload("sysbench", {"threads": 2, "scope": "local", "block_size": "4M"})
    one = build_workload("sysbench", {"threads": 1, "scope": "local", "block_size": "4M"})
    assert pools.workload_bytes(sb) == 2 * pools.workload_bytes(one) > 0  # type: ignore[operator]
    jvm = build_workload("jvm", {"heap": "256M"})
    assert pools.workload_bytes(jvm, Arm("x", "hugetlb-2M")) == 252 * (2 << 20)
    assert pools.workload_bytes(jvm, Arm("x", "4k")) is None
    assert pools.workload_bytes(build_workload("command", {"argv": ["true"]})) is None
