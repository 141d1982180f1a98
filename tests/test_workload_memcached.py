"""The memcached kind: memcached with or without -L (its own THP switch) loaded by memcslap;
command lines, settings checks, memcslap's output, the server's own mappings as app evidence,
and for real: -L gets THP under host madvise, and -L under host THP never is contradicted."""

from __future__ import annotations

import subprocess

import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.experiment import Arm
from hugelab.host.session import host_session
from hugelab.trial.appevidence import app_check
from hugelab.trial.evidence import CONTRADICTED, VERIFIED
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.memcached import MemcachedBenchmark, check_memcached, judge
from hugelab.workloads.registry import build_workload, with_arm
from hugelab.workloads.servermem import madvised
from tests.hostguard import host_state, workload_processes
from tests.reqmix_servers import free_port, memcached_stats, server

OUT = """\
--------------------------------------------------------------------
Time to get           80000 keys by    4 threads:     1.494 seconds.
--------------------------------------------------------------------
Time total:                                           2.407 seconds.
"""


def mc(**app: object) -> MemcachedBenchmark:
    return with_arm(build_workload("memcached", {"memory_mb": 64}),  # type: ignore[return-value]
                    Arm("x", "thp", app=tuple(app.items())))


def test_argv_sets_large_pages_only_when_the_arm_asks():
    assert mc().server_argv(1234) == ["memcached", "-u", "nobody", "-l", "127.0.0.1", "-p",
                                      "1234", "-U", "0", "-m", "64", "-t", "2"]
    assert mc(large_pages=True, memory_mb=128).server_argv(1)[-3:] == ["-m", "128", "-t", "2",
                                                                       "-L"][-3:]
    assert mc().client_argv(99) == ["memcslap", "-s", "127.0.0.1:99", "-t", "get", "-c", "4",
                                    "-e", "50000"]


@pytest.mark.parametrize("app, words", [
    ({"large_pages": True, "memory_mb": 32}, "needs memory_mb >= 48; this arm has 32"),
    ({"huge": True}, "unknown app setting 'huge'"),
    ({"memory_mb": "64"}, "app memory_mb must be an integer"),
    ({"threads": 0}, "threads must be at least 1"),
])
def test_bad_settings_say_what_is_wrong(app, words):
    with pytest.raises(ExperimentError) as exc:
        mc(**app)
    assert words in exc.value.message


@pytest.mark.server
def test_default_data_set_is_over_100_mb_and_fits_the_default_memory():
    """The defaults measure a data set where huge pages can matter: memcslap's default load,
    against the default server, leaves >= 100 MB of items in memcached (its own `stats`), and
    -m holds them all (no eviction)."""
    w = MemcachedBenchmark()
    port = free_port()
    with server(w.server_argv(port), port):
        out = subprocess.run(w.client_argv(port), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        stats = memcached_stats(port)
    assert int(stats["curr_items"]) == w.execute_number, stats
    assert int(stats["bytes"]) >= 100_000_000, stats
    assert int(stats["evictions"]) == 0 and int(stats["limit_maxbytes"]) == w.memory_mb << 20


def test_the_dry_run_says_when_large_pages_ask_for_more_memory_than_the_host_has():
    from hugelab.kernel import meminfo_kb
    wl = build_workload("memcached", {})
    host_mib = meminfo_kb("MemTotal") // 1024
    big = with_arm(wl, Arm("x", "thp", app=(("large_pages", True),
                                            ("memory_mb", host_mib + 1024))))
    (said,) = big.settings_warnings("thp")
    assert said.startswith(f"memcached: memory_mb = {host_mib + 1024} with large_pages (-L)")
    assert "this host has" in said
    assert with_arm(wl, Arm("x", "thp", app=(("large_pages", True),))).settings_warnings(
        "thp") == []  # 256 MB fits
    plain = with_arm(wl, Arm("x", "4k", app=(("memory_mb", host_mib + 1024),)))
    assert plain.settings_warnings("4k") == []  # without -L memcached allocates as it stores


def test_preflight_wants_thp_for_large_pages():
    mc(large_pages=True).preflight("thp")
    mc().preflight("4k")
    with pytest.raises(ExperimentError, match="backing is 'thp', not '4k'"):
        mc(large_pages=True).preflight("4k")
    with pytest.raises(ExperimentError, match="not one memcached can have"):
        mc().preflight("hugetlb-2M")


def test_parse_takes_requests_per_second_of_the_test():
    out = mc().parse(ExecResult(["memcslap"], 0, OUT, "", 2.5))
    assert out.primary == "ops_per_s" and out.value == pytest.approx(80000 / 1.494)
    assert out.metrics["total_s"] == 2.407
    with pytest.raises(WorkloadError, match="no 'Time to get' line"):
        mc().parse(ExecResult(["memcslap"], 0, "", "", 1.0))
    with pytest.raises(WorkloadError, match="memcslap exited with 1"):
        mc().parse(ExecResult(["memcslap"], 1, "", "could not connect", 1.0))


def test_server_mapping_rules():
    smaps = ("7f00-7f04 rw-p 0 00:00 0\nSize:  65536 kB\nAnonHugePages: 65536 kB\n"
             "VmFlags: rd wr mr mw me ac hg\n7f04-7f05 rw-p 0 00:00 0\nSize: 2048 kB\n"
             "AnonHugePages: 0 kB\nVmFlags: rd wr\n")
    server = {"anon_huge_kb": 65536, **madvised(smaps)}
    assert server["madvised_kb"] == 65536 and server["madvised_thp_kb"] == 65536
    assert check_memcached(True, 64, server).status == VERIFIED
    assert check_memcached(False, 64, server).status == CONTRADICTED
    none = {"anon_huge_kb": 0, "madvised_kb": 65536, "madvised_thp_kb": 0}
    assert "none of it is in THP" in check_memcached(True, 64, none).reason
    assert check_memcached(True, 64, {"madvised_kb": 0}).status == CONTRADICTED
    assert check_memcached(False, 64, {"madvised_kb": 0}).status == VERIFIED


@pytest.mark.host
@pytest.mark.slow
def test_large_pages_for_real_and_contradicted_when_thp_is_denied(tmp_path, monkeypatch):
    """-L under host madvise: the server's 64 MiB chunk is madvised and in THP (verified); the
    same server under `hugelab-thp never` madvises but gets no THP, and its app check says so;
    under host THP never memcached itself refuses -L, a failed trial with its words."""
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, procs = host_state(), workload_processes()
    w = MemcachedBenchmark(execute_number=2000, app=(("large_pages", True),))
    with host_session(journal_path=tmp_path / "state" / "j") as control:
        control.set_thp("madvise", None)
        good = w.run(NativeTarget(), "thp")
        denied = with_arm(w, Arm("n", "thp", process_thp="never")).run(NativeTarget(), "thp")
        control.set_thp("never", None)
        with pytest.raises(WorkloadError, match="Transparent huge pages support disabled"):
            w.run(NativeTarget(), "thp")
    assert host_state() == before and workload_processes() == procs
    assert good.value > 0 and app_check(good.evidence, judge).status == VERIFIED, good.evidence  # type: ignore[union-attr]
    assert good.evidence["server"]["madvised_kb"] >= 64 * 1024  # THP: as much as the host has
    assert app_check(denied.evidence, judge).status == CONTRADICTED, denied.evidence  # type: ignore[union-attr]
    assert denied.evidence["server"]["thp_enabled"] == 0
    assert denied.evidence["server"]["madvised_kb"] >= 64 * 1024
    assert denied.evidence["server"]["anon_huge_kb"] == 0
