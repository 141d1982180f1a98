"""Host control, journal and inspect on fake sysfs trees: hosts this machine is not."""

from __future__ import annotations

import pytest

from hugelab.errors import HostError, PoolError
from hugelab.experiment import default_experiment
from hugelab.host.control import HostControl
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import Journal
from hugelab.host.paths import parse_selected
from hugelab.host.session import host_session, recover
from hugelab.planning.arms import unsupported_arms
from tests.fakehost import FakeKernel, make_host


@pytest.fixture
def host(tmp_path):
    return make_host(tmp_path / "root", nodes=2)


def control(host, tmp_path, kernel=None, deadline=0.5):
    return HostControl(host, Journal(tmp_path / "state" / "journal.json"),
                       writer=kernel or FakeKernel(), compact_deadline_s=deadline)


def thp(host):
    return parse_selected(host.thp_enabled.read_text())


def test_set_thp_is_journaled_then_restored(host, tmp_path):
    c = control(host, tmp_path)
    c.set_thp("always", "never")
    assert thp(host) == "always"
    assert [e["old"] for e in c.journal.entries] == ["madvise", "madvise"]
    assert c.journal.path.exists()
    assert oct(c.journal.path.stat().st_mode & 0o777) == "0o600"
    c.restore()
    assert thp(host) == "madvise"
    assert parse_selected(host.thp_defrag.read_text()) == "madvise"
    assert not c.journal.path.exists()


def test_invalid_thp_mode_changes_nothing(host, tmp_path):
    c = control(host, tmp_path)
    with pytest.raises(HostError, match="not valid"):
        c.set_thp("sometimes")
    assert thp(host) == "madvise" and len(c.journal) == 0


def test_pool_per_node_and_restore(host, tmp_path):
    c = control(host, tmp_path)
    c.reserve_pool(2048, 100, node=1)
    assert host.pool_file(2048, node=1).read_text().strip() == "100"
    assert host.pool_file(2048).read_text().strip() == "0"
    c.restore()
    assert host.pool_file(2048, node=1).read_text().strip() == "0"


def test_fragmented_pool_compacts_then_gives_up_and_leaves_pool_as_it_was(host, tmp_path):
    kernel = FakeKernel(pool_cap={2048: 10}, grow_on_compact=1)
    c = control(host, tmp_path, kernel, deadline=0.5)
    with pytest.raises(PoolError, match=r"requested 500 pages, achieved 1\d") as exc:
        c.reserve_pool(2048, 500)
    assert "fragmented" in (exc.value.hint or "")
    assert kernel.compactions >= 2
    assert host.pool_file(2048).read_text().strip() == "0"


def test_compaction_lets_a_pool_reach_its_size(host, tmp_path):
    kernel = FakeKernel(pool_cap={2048: 8}, grow_on_compact=1)
    c = control(host, tmp_path, kernel, deadline=5)
    assert c.reserve_pool(2048, 10) == 10
    assert kernel.compactions == 2


def test_pool_larger_than_memory_is_refused_before_any_change(host, tmp_path):
    c = control(host, tmp_path)
    with pytest.raises(PoolError, match="available"):
        c.reserve_pool(1048576, 64)  # 64 GiB on a 16 GiB host
    assert len(c.journal) == 0 and host.pool_file(1048576).read_text().strip() == "0"


def test_journal_left_by_a_killed_process_is_replayed_by_recover(host, tmp_path):
    jpath = tmp_path / "state" / "journal.json"
    c = HostControl(host, Journal(jpath), writer=FakeKernel())
    c.set_thp("never")
    c.reserve_pool(2048, 64)
    del c  # the process "dies": no restore ran
    assert thp(host) == "never" and Journal.load(jpath) is not None
    done = recover(host, jpath)
    assert thp(host) == "madvise"
    assert host.pool_file(2048).read_text().strip() == "0"
    assert len(done) == 2 and not jpath.exists()


def test_host_session_restores_on_exception(host, tmp_path):
    jpath = tmp_path / "state" / "journal.json"
    with pytest.raises(RuntimeError):
        with host_session(host, jpath) as c:
            c.writer = FakeKernel()
            c.set_thp("always")
            raise RuntimeError("trial crashed")
    assert thp(host) == "madvise" and not jpath.exists()


def test_dry_run_prints_commands_and_touches_nothing(host, tmp_path):
    c = HostControl(host, Journal(tmp_path / "j.json"), dry_run=True)
    c.set_thp("always")
    c.reserve_pool(2048, 16)
    assert c.commands[0].startswith("echo always > ") and "nr_hugepages" in c.commands[1]
    assert thp(host) == "madvise" and not (tmp_path / "j.json").exists()


def test_inspect_numa_host_lists_nodes_and_warns(host):
    info = inspect_host(host)
    assert info["numa_nodes"] == [0, 1]
    assert [n["node"] for n in info["pools"][0]["nodes"]] == [0, 1]
    assert any("NUMA" in w for w in info["warnings"])


def test_host_without_pdpe1gb_skips_1g_arms(tmp_path):
    host = make_host(tmp_path / "r", pdpe1gb=False)
    info = inspect_host(host)
    assert any("pdpe1gb" in w for w in info["warnings"])
    skipped = unsupported_arms(default_experiment(), info)
    assert list(skipped) == ["hugetlb-1G"] and "pdpe1gb" in skipped["hugetlb-1G"]


def test_thp_never_skips_thp_arm(tmp_path):
    host = make_host(tmp_path / "r", thp="never")
    skipped = unsupported_arms(default_experiment(), inspect_host(host))
    assert "thp" in skipped


def test_a_signal_during_restore_waits_until_the_restore_is_done(host, tmp_path):
    import os
    import signal
    import threading
    import time

    # Another live thread, as in a real run (output readers, progress bar): the kernel may
    # hand the signal to it, so a per-thread signal mask would not defer it.
    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
    jpath = tmp_path / "state" / "journal.json"
    kernel = FakeKernel()
    seen = []

    class InterruptingKernel(FakeKernel):
        def __call__(self, path, value):
            if value == "madvise" and not seen:  # the restore's first write: Ctrl-C arrives
                seen.append(path)
                os.kill(os.getpid(), signal.SIGINT)
            kernel(path, value)

    # A job started in the background by a non-interactive shell inherits SIGINT as ignored,
    # and then Python raises no KeyboardInterrupt: give this test the interactive default.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with host_session(host, jpath) as c:
                c.writer = kernel
                c.set_thp("always", "never")
                c.writer = InterruptingKernel()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen  # the signal was sent mid-restore ...
    assert thp(host) == "madvise"  # ... yet both settings were put back before it landed
    assert parse_selected(host.thp_defrag.read_text()) == "madvise"
    assert not jpath.exists()
