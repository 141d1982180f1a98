"""Pools shared with other users, on fake sysfs trees whose kernel model keeps the pages others
hold: grown on top of them, journaled as pools, put back to the persistent size found."""

from __future__ import annotations

import pytest

from hugelab.errors import PoolError
from hugelab.host.control import HostControl, restore_journal
from hugelab.host.journal import Journal
from hugelab.host.pools import PoolCounts, grow_target, read_counts, stable
from hugelab.host.session import recover
from hugelab.runner import Runner
from tests.fakehost import FakeKernel, hold_pages, make_host
from tests.helpers import DeterministicWorkload, Recorder, experiment
from tests.helpers import env as env  # noqa: F401 - the runner tests' fake host and store

MB2 = 2048


@pytest.fixture
def host(tmp_path):
    return make_host(tmp_path / "root", nodes=2)


def control(host, tmp_path, kernel, deadline=0.3):
    return HostControl(host, Journal(tmp_path / "state" / "journal.json"), writer=kernel,
                       compact_deadline_s=deadline)


def nr(host, size=MB2):
    return int(host.pool_file(size).read_text())


@pytest.mark.parametrize(("counts", "need", "target"), [
    (PoolCounts(0, 0, 0, 0), 10, 10),
    (PoolCounts(100, 0, 0, 0), 10, 110),        # 100 in use by others
    (PoolCounts(100, 30, 0, 0), 10, None),      # 30 free already
    (PoolCounts(100, 30, 25, 0), 10, 105),      # 25 of the free ones are reserved
    (PoolCounts(20, 0, 0, 20), 5, 25),          # 20 surplus pages in use
])
def test_grow_target_counts_what_others_hold(counts, need, target):
    assert grow_target(counts, need) == target


def test_a_pool_is_grown_on_top_of_a_holder_and_put_back_to_what_was_persistent(host, tmp_path):
    kernel = FakeKernel()
    hold_pages(host, kernel, MB2, 100, free=4)
    c = control(host, tmp_path, kernel)
    c.ensure_free(MB2, 10)
    assert nr(host) == 110 and read_counts(host, MB2).available == 10
    [entry] = c.journal.entries
    assert entry["kind"] == "pool" and entry["nr"] == 104 and entry["restore"] == 104
    c.ensure_free(MB2, 10)  # enough free: nothing written, nothing journaled again
    assert nr(host) == 110 and len(c.journal) == 1
    c.restore()
    assert read_counts(host, MB2) == PoolCounts(104, 4, 0, 0)


def test_surplus_pages_in_use_go_back_to_being_surplus(host, tmp_path):
    kernel = FakeKernel()
    hold_pages(host, kernel, MB2, 20, surplus=20)  # lent under nr_overcommit_hugepages
    c = control(host, tmp_path, kernel)
    c.ensure_free(MB2, 5)
    assert read_counts(host, MB2) == PoolCounts(25, 5, 0, 0)
    c.restore()
    assert read_counts(host, MB2) == PoolCounts(20, 0, 0, 20)
    assert not any(p.endswith("nr_overcommit_hugepages") for p, _ in kernel.writes)


def test_reserved_pages_are_not_counted_free(host, tmp_path):
    kernel = FakeKernel()
    hold_pages(host, kernel, MB2, 0, free=40, resv=40)  # mapped, not touched yet
    c = control(host, tmp_path, kernel)
    c.ensure_free(MB2, 8)
    assert nr(host) == 48
    c.restore()
    assert nr(host) == 40


def test_a_pool_that_cannot_grow_is_left_as_found_and_names_the_holders(host, tmp_path):
    kernel = FakeKernel(pool_cap={MB2: 105})
    hold_pages(host, kernel, MB2, 100)
    c = control(host, tmp_path, kernel)
    with pytest.raises(PoolError, match="100 of its 100 pages are held by other users"):
        c.ensure_free(MB2, 10)
    assert read_counts(host, MB2) == PoolCounts(100, 0, 0, 0)
    c.restore()
    assert read_counts(host, MB2) == PoolCounts(100, 0, 0, 0)


def test_a_killed_runs_pool_entry_is_put_back_by_recover(host, tmp_path):
    kernel = FakeKernel()
    hold_pages(host, kernel, MB2, 30, surplus=10)
    c = control(host, tmp_path, kernel)
    c.ensure_free(MB2, 50)  # then SIGKILL: the journal stays
    assert Journal.load(c.journal.path) is not None
    # the holder lets go of what it had: the kernel frees surplus pages at once
    kernel.held[MB2] = 0
    recover(host, c.journal.path, 0.0)
    assert nr(host) == 20  # the persistent pool found, 30 - 10


def test_an_old_journal_write_entry_still_restores(host, tmp_path):
    path = host.pool_file(MB2)
    path.write_text("64\n")
    j = Journal(tmp_path / "j.json")
    j.record({"kind": "write", "path": str(path), "old": "0", "new": "64"})
    restore_journal(j, host, FakeKernel())
    assert nr(host) == 0


def test_a_holder_arriving_mid_run_gets_the_pool_grown_before_the_next_trial(env):  # noqa: F811
    host, _, store, kernel = env
    exp = experiment(blocks=3)

    class Arrives(DeterministicWorkload):
        def run(self, target, backing):
            if len(target.calls) == 4:  # a database starts and takes 700 of the 2M pages
                hold_pages(host, kernel, MB2, 700, free=nr(host) - 700)
            return super().run(target, backing)

    out = Runner(exp, store, Arrives(), target=Recorder(), session=env[1], paths=host).run()
    assert {t["status"] for t in store.trials(out.run_id)} == {"ok"}
    grown = [int(v) for p, v in kernel.writes if "2048kB/nr_hugepages" in p]
    assert grown[0] == 1536 and 1536 + 700 in grown
    assert nr(host) == 700  # put back: the holder's pages stay, as surplus
    assert read_counts(host, MB2).surplus == 700


@pytest.mark.slow
def test_a_holder_that_leaves_no_room_fails_the_trials_with_the_pool_reason(env):  # noqa: F811
    host, _, store, kernel = env
    kernel.pool_cap[MB2] = 1600
    exp = experiment(blocks=2)

    class Arrives(DeterministicWorkload):
        def run(self, target, backing):
            if not target.calls:
                hold_pages(host, kernel, MB2, 1000, free=nr(host) - 1000)
            return super().run(target, backing)

    runner = Runner(exp, store, Arrives(), target=Recorder(), session=env[1], paths=host)
    runner.pool_retry_s = 0.0
    out = runner.run()
    failed = [t for t in store.trials(out.run_id) if t["status"] == "failed"]
    assert failed and {t["arm"] for t in failed} == {"hugetlb-2M"}
    assert {t["cause"] for t in failed} == {"pool"}
    assert "the 2M pool could not give this trial its 1536 pages" in failed[0]["error"]
    assert "held by other users" in failed[0]["error"]
    assert nr(host) == 1000 and read_counts(host, MB2).surplus == 1000
    assert store.done_keys(out.run_id) == {(t["block"], t["arm"], t["target"])
                                           for t in store.trials(out.run_id)
                                           if t["status"] != "failed"}


# ---------------------------------------------------------------- who holds the pages

SMAPS = """7f0000000000-7f0000a00000 rw-s 00000000 00:0f 32768                      /SYSV00000000 (deleted)
Size:              10240 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
Shared_Hugetlb:    10240 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr sh mr mw me ms de ht sd
7f0000a00000-7f0001400000 rw-p 00000000 00:10 99                         /anon_hugepage (deleted)
Size:              10240 kB
KernelPageSize:     2048 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    4096 kB
7f0001400000-7f0001600000 rw-p 00000000 00:00 0
Size:               2048 kB
KernelPageSize:        4 kB
AnonHugePages:      2048 kB
"""

SHM = """       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0      32768   600              10485760   500   500      2     0     0     0     0          0          0 1700000000              10485760                     0
   9961753      32769   600              20971520   501   501      0   101   101   101   101          0          0 1700000000              20971520                     0
"""


def fake_proc(host, pids=(500, 501)):
    for pid in pids:
        d = host.p(f"proc/{pid}")
        d.mkdir(parents=True)
        (d / "status").write_text("Name:\tpostgres\nUid:\t101\t101\t101\t101\n"
                                  "HugetlbPages:\t14336 kB\n")
        (d / "maps").write_text("".join(line + "\n" for line in SMAPS.splitlines()
                                        if line[:1] == "7"))
        (d / "smaps").write_text(SMAPS)
        (d / "cmdline").write_text("postgres\0-D\0/srv/pg\0")
    host.p("proc/sysvipc").mkdir(parents=True)
    host.p("proc/sysvipc/shm").write_text(SHM)


def test_holders_are_named_and_shared_segments_counted_once(host):
    from hugelab.host import holders
    fake_proc(host)
    found = holders.scan(host)
    assert [p["pid"] for p in found["processes"]] == [500, 501]
    assert found["processes"][0]["by_page_kb"] == {"2048": {"mapped_kb": 20480,
                                                            "hugetlb_kb": 14336}}
    assert found["processes"][0]["segments"] == [32768] and found["processes"][0]["uid"] == 101
    # the shared segment once (10 MiB), each process's private 4 MiB: 18 MiB, 9 pages
    assert found["in_processes_kb"] == {"2048": 10240 + 2 * 4096}
    sysv = {s["shmid"]: s for s in found["sysv"]}
    assert sysv[32768]["page_kb"] == 2048 and sysv[32769]["page_kb"] is None
    assert sysv[32769]["key"] == "0x00980119" and sysv[32769]["creator_pid"] == 501
    pools = [{"size": "2M", "size_kb": 2048, "nr": 30, "free": 16, "resv": 2},
             {"size": "1G", "size_kb": 1048576, "nr": 0, "free": 0, "resv": 0}]
    [entry] = holders.pool_holders(pools, found)
    assert (entry["held"], entry["by_processes"], entry["reserved"], entry["unaccounted"]) == \
        (16, 9, 2, 5)
    text = holders.describe(entry)
    assert text.startswith("16 of the 2M pool's 30 pages are held by other users: postgres "
                           "(pid 500, 14 MiB in use of 20 MiB mapped)")
    assert "SysV segment 0x00980119 (shmid 32769" in text and "2 reserved" in text
    assert "5 in use that no process maps" in text


def test_inspect_names_the_holders_and_warns(host):
    from hugelab.cli.host import holder_lines
    from hugelab.host.inspect import inspect_host
    fake_proc(host, pids=(500,))
    for name, value in (("nr_hugepages", 20), ("free_hugepages", 10)):
        host.pool_file(MB2, name).write_text(f"{value}\n")
    info = inspect_host(host)
    assert info["pool_holders"][0]["held"] == 10
    assert any(w.startswith("10 of the 2M pool's 20 pages are held by other users: postgres")
               for w in info["warnings"])
    lines = holder_lines(info)
    assert lines[0] == "2M pool: 10 of 20 pages held by other users"
    assert lines[1].startswith("  postgres (pid 500")


@pytest.mark.slow
def test_the_report_and_the_summary_warn_about_shared_pools(env):  # noqa: F811
    from hugelab.report.analysis import Options, analyse
    from hugelab.report.poolnotes import SharedPool, pool_warnings, shared_pools
    from hugelab.report.runload import load_run
    host, _, store, kernel = env
    kernel.pool_cap[MB2] = 1600

    class Arrives(DeterministicWorkload):
        def run(self, target, backing):
            if not target.calls:
                hold_pages(host, kernel, MB2, 1000, free=nr(host) - 1000)
            return super().run(target, backing)

    def run(workload):
        runner = Runner(experiment(blocks=2), store, workload, target=Recorder(),
                        session=env[1], paths=host)
        runner.pool_retry_s = 0.0
        return runner.run()

    out = run(Arrives())
    failed = sum(t["status"] == "failed" for t in store.trials(out.run_id))
    warnings = analyse(load_run(store, out.run_id), Options()).json()["warnings"]
    assert f"hugetlb-2M: {failed} trial(s) failed because another user took the hugetlb pages " \
        "they needed (cause 'pool'); running the experiment again retries them" in warnings
    assert not out.pool_holders  # nobody held pages when it started
    kernel.pool_cap[MB2] = 5000  # memory freed: the retried trials get their pages
    out = run(DeterministicWorkload())
    assert {t["status"] for t in store.trials(out.run_id)} == {"ok"}
    warnings = analyse(load_run(store, out.run_id), Options()).json()["warnings"]
    assert f"{failed} trial(s) started while other users held up to 1000 pages of the 2M pool: " \
        "each got its pages free on top of theirs, but those users ran beside it (their " \
        "memory traffic is part of the measurement)" in warnings
    assert out.pool_holders and out.pool_holders[0]["held"] == 1000
    assert pool_warnings(out.pool_holders, {}, {})[0].startswith(
        "1000 of the 2M pool's 1000 pages are held by other users")
    assert shared_pools([{"pools_shared": {"2M": {"held_by_others": 5}}}, {}]) == \
        {"2M": SharedPool(1, 5)}


def test_a_reading_is_repeated_until_two_in_a_row_agree():
    readings = iter([(12, 8), (4, 0), (12, 0), (12, 8), (12, 8), (4, 0)])
    assert stable(lambda: next(readings)) == (12, 8)
    calls = iter(range(100))
    assert stable(lambda: next(calls), tries=5) == 5  # never agreeing: the last reading
