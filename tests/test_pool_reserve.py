"""A pool may not take the host's last memory (issue 40 item 5): one that would leave less than
the pool reserve of MemAvailable is refused before any change, naming the reserve."""

from __future__ import annotations

import pytest

from hugelab.errors import PoolError
from hugelab.host.control import POOL_RESERVE_KB, HostControl
from hugelab.host.journal import Journal
from tests.fakehost import make_host


def _control(tmp_path, free_kb):
    host = make_host(tmp_path / "root", free_kb=free_kb)
    return host, HostControl(host, Journal(tmp_path / "state" / "journal.json"))


def test_a_pool_that_fits_memavailable_but_not_the_reserve_is_refused_unchanged(tmp_path):
    host, control = _control(tmp_path, free_kb=1048576)  # 1 GiB available
    pages = (1048576 - POOL_RESERVE_KB) // 2048 + 1  # fits in 1 GiB, not in 1 GiB - reserve
    with pytest.raises(PoolError) as ei:
        control.reserve_pool(2048, pages)
    assert f"hugelab leaves {POOL_RESERVE_KB // 1024} MiB to the host (the pool reserve)" \
        in ei.value.message
    assert host.pool_file(2048).read_text().strip() == "0"  # nothing changed
    assert not (tmp_path / "state" / "journal.json").exists()


def test_a_pool_within_the_reserve_is_let_through(tmp_path):
    _host, control = _control(tmp_path, free_kb=1048576)
    control.check_pool_fits(2048, (1048576 - POOL_RESERVE_KB) // 2048)


def test_the_dry_run_warns_with_the_reserve():
    from hugelab.planning.pools import pool_plan_warnings
    host = {"pools": [{"size": "2M", "size_kb": 2048, "free": 0, "resv": 0}],
            "meminfo_kb": {"MemAvailable": 1048576}}
    fits = (1048576 - POOL_RESERVE_KB) // 2048
    assert pool_plan_warnings(host, {("2M", None): fits}) == []
    said = pool_plan_warnings(host, {("2M", None): fits + 1})
    assert len(said) == 1 and "MiB is left to the host (the pool reserve)" in said[0]


def test_a_run_whose_pools_need_no_more_memory_is_not_warned_on_a_full_host():
    """A host with less than the reserve available: a run whose pool pages are already free
    (or that needs no pool) is told nothing about memory ("0.0 GiB more" was said before)."""
    from hugelab.planning.pools import pool_plan_warnings
    host = {"pools": [{"size": "2M", "size_kb": 2048, "free": 8, "resv": 0}],
            "meminfo_kb": {"MemAvailable": POOL_RESERVE_KB // 2}}
    assert pool_plan_warnings(host, {}) == []
    assert pool_plan_warnings(host, {("2M", None): 8}) == []
    assert len(pool_plan_warnings(host, {("2M", None): 9})) == 1
