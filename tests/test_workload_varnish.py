"""Varnish (hugelab.workloads.varnish): its pure parts, and a real varnishd loaded by wrk whose
figures agree with varnishd's own counters and with smaps read here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.serverside import LocalServer, ServerHandle
from hugelab.workloads.varnish import VarnishBenchmark, check_varnish, judge, vcl
from hugelab.workloads.wrk import parse_wrk, preload_lua

WRK = """Running 2s test @ http://127.0.0.1:4000/
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   850.00us  300.00us   5.00ms   80.00%
  60825 requests in 2.01s, 0.95GB read
Requests/sec:  30293.67
Transfer/sec:    484.00MB
"""


def test_vcl_caches_every_miss_as_an_object_of_the_asked_size():
    text = vcl(2)
    assert "backend default none;" in text and "set beresp.ttl = 1h;" in text
    assert '{"' + "x" * 2048 + '"}' in text
    assert 'return (pass)' in text and 'return (synth(200))' in text


def test_preload_asks_each_path_once_then_ends_wrk():
    lua = preload_lua(10)
    assert "local n, i = 10, -1" in lua and "os.exit(0)" in lua


def test_parse_wrk_takes_its_own_figures_and_refuses_errors():
    m = parse_wrk(WRK)
    assert m["requests"] == 60825 and m["seconds"] == 2.01
    assert m["requests_per_s"] == 30293.67 and m["latency_avg_ms"] == pytest.approx(0.85)
    with pytest.raises(WorkloadError, match="Non-2xx"):
        parse_wrk(WRK + "  Non-2xx or 3xx responses: 3\n")
    with pytest.raises(WorkloadError, match="no result"):
        parse_wrk("unable to connect to 127.0.0.1:4000 Connection refused\n")


def test_a_reading_is_whole_when_every_request_is_counted_as_what_it_was():
    from hugelab.workloads.varnish import Kept
    kept = Kept("varnishstat", "127.0.0.1", "6081", "16", "default")
    whole = {"MAIN.client_req": 89579, "MAIN.cache_hit": 85482, "MAIN.cache_miss": 4096,
             "MAIN.s_synth": 0, "MAIN.s_pass": 1}
    assert kept.settled(whole) and not kept.settled({**whole, "MAIN.s_pass": 0})
    assert kept.settled({}) and not kept.settled({"MAIN.client_req": 1})


def test_settings_that_cannot_work_are_refused_before_a_trial():
    with pytest.raises(ExperimentError, match="do not fit"):
        VarnishBenchmark(storage_mb=64, objects=8192, object_kb=16)
    with pytest.raises(ExperimentError, match="backing is 'thp'"):
        VarnishBenchmark(app=(("jemalloc_thp", "always"),)).admit("4k")
    VarnishBenchmark(app=(("jemalloc_thp", "always"),)).admit("thp")


def test_switch_rules_against_the_cache_process_mappings():
    mine = {"madvised_kb": 150000, "madvised_thp_kb": 100000, "anon_huge_kb": 100000}
    assert check_varnish("always", mine).status == "verified"
    assert check_varnish("always", {**mine, "madvised_thp_kb": 0}).status == "contradicted"
    assert check_varnish("default", mine).status == "contradicted"
    assert check_varnish("never", {"anon_huge_kb": 4096}).status == "verified"
    ev: dict[str, Any] = {"varnish": {"jemalloc_thp": "always"}}
    assert judge(ev).status == "not applicable"  # type: ignore[union-attr]
    assert judge({}) is None


# --- a real varnishd --------------------------------------------------------------------------

def cache_smaps(manager: int) -> dict[str, int]:
    """Read here, independently of servermem: the varnishd cache process under the supervisor
    `manager`'s tree (comm cache-main), its AnonHugePages in all and in `hg` mappings."""
    pids = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    for p in pids:
        try:
            if (p / "comm").read_text().strip() != "cache-main":
                continue
            chain, pid = [], int(p.name)
            while pid > 1:
                chain.append(pid)
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1]
                          .split()[1])
            if manager not in chain:
                continue
            text = (p / "smaps").read_text()
        except OSError:
            continue
        out = {"anon_huge_kb": 0, "madvised_thp_kb": 0}
        huge = 0
        for line in text.splitlines():
            if line.startswith("AnonHugePages:"):
                huge = int(line.split()[1])
                out["anon_huge_kb"] += huge
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                out["madvised_thp_kb"] += huge
        return out
    return {}


@dataclass
class Handle:
    inner: Any
    seen: dict[str, int]

    def __post_init__(self) -> None:
        self.client_port = self.inner.client_port
        self.proc = self.inner.proc

    def stop(self) -> str:
        self.seen.update(cache_smaps(self.proc.pid))  # after the load, before the stop
        return str(self.inner.stop())


@dataclass
class ReadingSide:
    """A local server side whose stop first reads the cache process's smaps itself."""

    seen: dict[str, int] = field(default_factory=dict)

    def start(self, argv_for_port: Any, tool: str) -> ServerHandle:
        return Handle(LocalServer().start(argv_for_port, tool), self.seen)


@pytest.mark.server
@pytest.mark.parametrize("thp", ["always", "default"])
def test_real_varnish_agrees_with_its_own_counters_and_smaps(thp):
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    if "[never]" in mode:
        pytest.skip("host THP is never: jemalloc thp:always cannot get THP")
    side = ReadingSide()
    w = VarnishBenchmark(objects=4096, object_kb=16, storage_mb=128, duration_s=2,
                         connections=8, app=(("jemalloc_thp", thp),), server=side)
    r = w.run(NativeTarget(), "thp")
    stats, server = r.evidence["varnish_stats"], r.evidence["server"]
    # wrk's requests against varnishd's own counters: every object missed once (the preload),
    # every timed request a hit (wrk does not count the <= connections in flight at its end)
    assert stats["MAIN.cache_miss"] == 4096 == stats["MAIN.n_object"]
    assert 0 <= stats["MAIN.cache_hit"] - r.metrics["requests"] <= 8
    assert stats["MAIN.client_req"] == stats["MAIN.cache_hit"] + stats["MAIN.cache_miss"]
    assert stats["SMA.s0.g_bytes"] >= 4096 * 16 * 1024 and r.metrics["requests"] > 1000
    # the supervisor's picture of the cache process against smaps read here (memory is still
    # after the load)
    assert side.seen and abs(server["anon_huge_kb"] - side.seen["anon_huge_kb"]) <= 4096
    assert abs(server["madvised_thp_kb"] - side.seen["madvised_thp_kb"]) <= 4096
    check = judge(r.evidence)
    assert check is not None and check.status == "verified", check
    if thp == "always":
        assert side.seen["madvised_thp_kb"] >= 32 * 1024  # of its 64 MiB of objects
    else:
        assert server["madvised_kb"] == 0 == side.seen["madvised_thp_kb"]


@pytest.mark.server
def test_interleaved_varnishes_each_judged_by_its_own_cache_process_and_counters():
    """Design "interleaved" with window_ops: two varnishd at once under hugelab-reqmix; each
    arm's evidence is its own cache process (not its keeper, not its manager) and its own
    counters, which agree with the client's requests."""
    import random

    from hugelab.workloads import interleave
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    if "[never]" in mode:
        pytest.skip("host THP is never: jemalloc thp:always cannot get THP")
    def arm(thp: str) -> VarnishBenchmark:
        return VarnishBenchmark(objects=2048, object_kb=16, storage_mb=64, duration_s=2,
                                window_ops=100, app=(("jemalloc_thp", thp),))
    arms = [(arm("default"), "4k"), (arm("always"), "thp")]
    out = interleave.serve(NativeTarget(), arms, random.Random(5))
    assert len({r.evidence["server"]["pid"] for r in out}) == 2
    for r in out:
        stats, comm = r.evidence["varnish_stats"], r.evidence["tree"]["thp_enabled_by_comm"]
        assert stats["MAIN.cache_miss"] == 2048 == stats["MAIN.n_object"]
        assert stats["MAIN.cache_hit"] == r.metrics["ops"]
        assert stats["MAIN.client_req"] == r.metrics["ops"] + 2048
        assert set(comm) == {"varnishd"} and r.evidence["server"]["anon_kb"] >= 32 * 1024
        check = judge(r.evidence)
        assert check is not None and check.status == "verified", check
    assert out[0].evidence["server"]["madvised_thp_kb"] == 0
    assert out[1].evidence["server"]["madvised_thp_kb"] >= 16 * 1024
