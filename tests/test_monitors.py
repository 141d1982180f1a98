"""Monitors: numastat per node, hardware-counter detection, perf stat wrapper (real perf)."""

from __future__ import annotations

import shutil

import pytest

from hugelab.host.inspect import hardware_counters
from hugelab.trial.monitors import delta, snapshot
from hugelab.trial.native import NativeTarget
from hugelab.trial.perfstat import PerfTarget, parse_perf_csv
from tests.fakehost import make_host


def test_numastat_deltas_per_node_on_a_fake_two_node_host(tmp_path):
    host = make_host(tmp_path, nodes=2)
    for n in (0, 1):
        (tmp_path / f"sys/devices/system/node/node{n}/numastat").write_text(
            "numa_hit 100\nnuma_miss 0\nlocal_node 100\nother_node 0\n")
    before = snapshot(host)
    (tmp_path / "sys/devices/system/node/node1/numastat").write_text(
        "numa_hit 150\nnuma_miss 7\nlocal_node 140\nother_node 10\n")
    d = delta(before, snapshot(host))
    assert d["numastat"] == {"0": {}, "1": {"numa_hit": 50, "numa_miss": 7, "local_node": 40,
                                            "other_node": 10}}


def test_real_numastat_moves_when_memory_is_touched():
    before = snapshot()
    NativeTarget().exec(["python3", "-c", "bytearray(64 << 20)"])
    d = delta(before, snapshot())
    assert d["numastat"]["0"].get("numa_hit", 0) > 0


def test_hardware_counters_unavailable_without_a_pmu(tmp_path):
    host = make_host(tmp_path)
    (tmp_path / "sys/bus/event_source/devices/software").mkdir(parents=True)
    info = hardware_counters(host)
    assert info == {"available": False, "reason": info["reason"]}
    assert "not available" in info["reason"]


def test_hardware_counters_with_a_pmu(tmp_path):
    host = make_host(tmp_path)
    (tmp_path / "sys/bus/event_source/devices/cpu").mkdir(parents=True)
    info = hardware_counters(host)
    assert info["available"] is (shutil.which("perf") is not None)


def test_parse_perf_csv_marks_unsupported_events():
    text = "# started\n\n50,,page-faults,665932,100.00,,\n<not supported>,,dTLB-load-misses,0,100.00,,\n"
    assert parse_perf_csv(text) == {"page-faults": 50.0, "dTLB-load-misses": None}


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf not installed")
def test_perf_target_counts_real_page_faults():
    t = PerfTarget(NativeTarget(), events=("page-faults", "dTLB-load-misses"))
    r = t.exec(["python3", "-c", "b = bytearray(32 << 20); print('ok')"])
    assert r.stdout.strip() == "ok" and r.argv[0] == "python3"
    c = t.take_counters()
    assert c["page-faults"] > 32 * 256 / 2  # 32 MiB of 4 KiB pages, zeroed by bytearray
    assert "dTLB-load-misses" in c
    assert t.take_counters() == {}
