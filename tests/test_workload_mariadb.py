"""kind = "mariadb": pure parts (argv, sysbench's output, the server's own report, the app rule,
the pool need) with plain inputs; and for real: --large-pages with a pool sized from the
server's need puts the buffer pool in 2 MiB pages (verified), without a pool the server falls
back and says so (contradicted), and nothing is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED
from hugelab.errors import ExperimentError
from hugelab.experiment import Arm
from hugelab.host.session import host_session
from hugelab.trial.appevidence import app_check
from hugelab.trial.native import NativeTarget
from hugelab.workloads.mariadb import datadir, oltp, server
from hugelab.workloads.mariadb.workload import Mariadb, check
from hugelab.workloads.registry import build_workload, check_places, lookup
from tests.hostguard import host_state, workload_processes

RUN = """\
SQL statistics:
    transactions:                        8000   (1599.20 per sec.)
    queries:                             128000 (25587.18 per sec.)
    ignored errors:                      0      (0.00 per sec.)
Latency (ms):
         min:                                    0.80
         avg:                                    1.25
Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       0.809 |*                                        10
       1.000 |**********************                   880
       1.500 |****                                     100
       3.000 |*                                        10
sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)
"""


def test_argv_puts_the_trial_in_its_own_directory_and_port():
    a = server.argv(Path("/t"), 3307, "128M", True, (("innodb_io_capacity", 400),))
    assert "--datadir=/t/data" in a and "--port=3307" in a and "--tmpdir=/t" in a
    assert "--innodb-buffer-pool-size=128M" in a and a[-1] == "--large-pages"
    assert "--innodb-io-capacity=400" in a and "--bind-address=127.0.0.1" in a
    assert "--large-pages" not in server.argv(Path("/t"), 1, "64M", False)
    run = oltp.argv("oltp_read_only", 3307, 2, 1000, 4, 5)
    assert run[1] == "/usr/share/sysbench/oltp_read_only.lua" and run[-1] == "run"
    assert "--time=5" in run and "--mysql-port=3307" in run


def test_sysbench_output_gives_tps_and_percentiles_from_its_histogram():
    m = oltp.parse(RUN)
    assert m["tps"] == 1599.20 and m["qps"] == 25587.18 and m["latency_avg_ms"] == 1.25
    assert (m["p50_ms"], m["p95_ms"], m["p99_ms"]) == (1.0, 1.5, 1.5)
    assert oltp.percentile([], 50) is None


def test_the_servers_own_report_and_its_mappings():
    log = ("[Warning] mariadbd: Couldn't allocate 134217728 bytes (Large/HugeTLB memory page "
           "size 2097152); errno 12; continuing to smaller size\n[ERROR] Aborting\n")
    rep = server.report(log)
    assert rep["large_page_failures"] == [{"bytes": 134217728, "page_size": 2097152}]
    assert rep["errors"] == ["[ERROR] Aborting"]
    smaps = ("7f-8f rw-p 0 0 0 /anon_hugepage\nSize: 131072 kB\nKernelPageSize: 2048 kB\n"
             "8f-9f rw-p 0 0 0\nSize: 64 kB\nKernelPageSize: 4 kB\n")
    assert server.hugetlb_mappings(smaps) == [{"size_kb": 131072, "page_kb": 2048}]


def test_the_app_rule_catches_a_fallback_in_the_servers_words():
    pool = {"large_pages": True, "buffer_pool_kb": 131072}
    got = {**pool, "mappings": [{"size_kb": 131072, "page_kb": 2048}]}
    fell = {**pool, "mappings": [{"size_kb": 16384, "page_kb": 2048}],
            "large_page_failures": [{"bytes": 134217728, "page_size": 2097152}]}
    assert check({"mariadb": got}).status == VERIFIED  # type: ignore[union-attr]
    bad = check({"mariadb": fell})
    assert bad is not None and bad.status == CONTRADICTED and "134217728 bytes" in bad.reason
    assert check({"mariadb": {**pool, "mappings": []}}).status == NOT_APPLICABLE  # type: ignore[union-attr]
    off = {"large_pages": False, "buffer_pool_kb": 131072}
    assert check({"mariadb": {**off, "mappings": []}}).status == VERIFIED  # type: ignore[union-attr]
    assert check({"mariadb": got | {"large_pages": False}}).status == CONTRADICTED  # type: ignore[union-attr]
    assert check({}) is None and app_check({"mariadb": got}, lookup("mariadb").judge) is not None


def test_the_arm_decides_large_pages_and_the_pool_follows_the_server():
    w = build_workload("mariadb", {"buffer_pool": "256M"})
    on, off = w.for_arm(Arm("on", "hugetlb-2M")), w.for_arm(Arm("off", "4k"))  # type: ignore[attr-defined]
    assert on.large_pages() and not off.large_pages()
    assert off.hugetlb_bytes_for("2M") == 0
    need = on.hugetlb_bytes_for("2M")  # pool + descriptors + log buffers + caches, whole pages
    assert need % (2 << 20) == 0 and 256 << 20 < need < 320 << 20
    with pytest.raises(ExperimentError, match="does not go with backing"):
        Mariadb(app=(("large_pages", True),)).for_arm(Arm("x", "4k"))
    with pytest.raises(ExperimentError, match="hugelab sets itself"):
        Mariadb(app=(("datadir", "/x"),))
    with pytest.raises(ExperimentError, match="not one the server"):
        w.for_arm(Arm("t", "thp"))  # type: ignore[attr-defined]


def test_places_it_cannot_run_are_refused_before_any_trial():
    from hugelab.experiment import parse_experiment
    exp = parse_experiment({"workload": {"kind": "mariadb"},
                            "arms": [{"name": "a", "backing": "4k"},
                                     {"name": "g", "backing": "4k", "vm": {}}]})
    with pytest.raises(ExperimentError, match="mariadb runs on the host"):
        check_places(exp)


def test_a_dead_runs_datadir_is_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_MARIADB_WORK", str(tmp_path))
    dead, live = tmp_path / "trial-dead", tmp_path / "trial-live"
    from hugelab import identity
    for d, rec in ((dead, {**identity.record(), "owner_pid": 2 ** 22 + 1}),
                   (live, identity.record(os.getpid()))):
        d.mkdir()
        (d / datadir.OWNER_FILE).write_text(json.dumps(rec))
    assert datadir.remove_leftovers() == [str(dead)]
    assert live.is_dir() and not dead.exists()


@pytest.mark.host
@pytest.mark.slow
def test_large_pages_for_real_and_a_fallback_caught(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, procs = host_state(), workload_processes()
    w = Mariadb(tables=1, table_size=2000, threads=1, duration_s=1, warmup_s=0,
                buffer_pool="64M").for_arm(Arm("on", "hugetlb-2M"))
    with host_session(journal_path=tmp_path / "state" / "j") as control:
        control.ensure_free(2048, w.hugetlb_bytes_for("2M") // (2 << 20))
        good = w.run(NativeTarget(), "hugetlb-2M")
        control.reserve_pool(2048, 0)  # what a run beside an empty pool gets
        fell = w.run(NativeTarget(), "hugetlb-2M")
    assert host_state() == before and workload_processes() == procs
    assert good.value > 0 and check(good.evidence).status == VERIFIED, good.evidence  # type: ignore[union-attr]
    bad = check(fell.evidence)
    assert bad is not None and bad.status == CONTRADICTED, fell.evidence
    assert fell.evidence["mariadb"]["large_page_failures"], fell.evidence
    assert not list(Path(datadir.DEFAULT_WORK).glob("trial-*"))


@pytest.mark.host
@pytest.mark.slow
def test_interleaved_servers_each_judged_by_its_own_server(tmp_path, monkeypatch):
    """design "interleaved": both arms' servers up at once, sysbench windows alternated; each
    arm's evidence is its own server's (the on arm's buffer pool in 2 MiB pages, the off arm's
    server without huge pages), and every server and datadir is gone after."""
    import random

    from hugelab.workloads.interleave import serve
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, procs = host_state(), workload_processes()
    w = Mariadb(tables=1, table_size=2000, threads=1, duration_s=2, window_s=1, warmup_s=0,
                buffer_pool="64M")
    on, off = w.for_arm(Arm("on", "hugetlb-2M")), w.for_arm(Arm("off", "4k"))
    with host_session(journal_path=tmp_path / "state" / "j") as control:
        control.ensure_free(2048, on.hugetlb_bytes_for("2M") // (2 << 20))
        r_off, r_on = serve(NativeTarget(), [(off, "4k"), (on, "hugetlb-2M")],
                            random.Random(3))
    assert host_state() == before and workload_processes() == procs
    assert r_on.value > 0 and r_off.value > 0
    assert check(r_on.evidence).status == VERIFIED, r_on.evidence  # type: ignore[union-attr]
    assert check(r_off.evidence).status == VERIFIED, r_off.evidence  # type: ignore[union-attr]
    assert r_on.info["interleaved"]["servers"] == 2 and "p99_ms" in r_on.metrics
    assert not list(Path(datadir.DEFAULT_WORK).glob("trial-*"))
