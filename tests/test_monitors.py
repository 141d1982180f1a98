"""Monitors: numastat per node, hardware-counter detection, perf stat wrapper (real perf)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hugelab.host.inspect import hardware_counters
from hugelab.trial import load
from hugelab.trial.monitors import delta, snapshot
from hugelab.trial.native import NativeTarget
from hugelab.trial.perfstat import PerfTarget, parse_perf_csv
from tests.fakehost import make_host

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)


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


@pytest.mark.tools
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf not installed")
def test_perf_target_counts_real_page_faults():
    t = PerfTarget(NativeTarget(), events=("page-faults", "dTLB-load-misses"))
    r = t.exec(["python3", "-c", "b = bytearray(32 << 20); print('ok')"])
    assert r.stdout.strip() == "ok" and r.argv[0] == "python3"
    c = t.take_counters()
    assert c["page-faults"] > 32 * 256 / 2  # 32 MiB of 4 KiB pages, zeroed by bytearray
    assert "dTLB-load-misses" in c
    assert t.take_counters() == {}


# --- machine load (hugelab.trial.load) -----------------------------------------------------------

def _write_load(root, cpu, cpu_total_us, mem_total_us, avg10=12.5):
    (root / "proc/pressure").mkdir(parents=True, exist_ok=True)
    (root / "proc/stat").write_text("cpu  " + " ".join(map(str, cpu)) + " 0 0\ncpu0 1 2 3\n")
    (root / "proc/pressure/cpu").write_text(
        f"some avg10={avg10:.2f} avg60=1.00 avg300=0.50 total={cpu_total_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (root / "proc/pressure/memory").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={mem_total_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_load_delta_shares_from_fake_proc_stat_and_pressure(tmp_path):
    host = make_host(tmp_path)
    #                user nice sys idle iowait irq softirq steal
    _write_load(tmp_path, (100, 0, 50, 1000, 0, 0, 0, 10), 0, 0)
    before = load.snapshot(host)
    _write_load(tmp_path, (400, 0, 150, 1450, 0, 0, 50, 110), 300_000, 0)
    after = load.snapshot(host)
    after = load.LoadSnapshot(after.cpu, before.own_s + 1.0, before.t + 2.0, after.psi)
    d = load.load_delta(before, after, clk_tck=100)
    # 1000 jiffies in all: busy 450 (user 300, sys 100, softirq 50), hugelab's own 100, steal 100
    assert d["steal_share"] == 0.1
    assert d["other_busy_share"] == 0.35
    assert d["psi_cpu_some_avg10"] == 12.5 and d["psi_cpu_some_share"] == 0.15
    assert d["psi_memory_some_share"] == 0.0
    assert load.high_load(d) == ["CPU steal 10%", "other processes' CPU 35%", "CPU pressure 15%"]
    assert load.high_load({"steal_share": 0.01, "other_busy_share": 0.1}) == []
    # pressure with no one else's CPU is the trial's own threads contending (measured: 60% in
    # a request-interleaved PostgreSQL trial on an idle 2-core machine, others' CPU 0%)
    own = {"steal_share": 0.0011, "other_busy_share": 0.0, "psi_cpu_some_share": 0.595}
    assert load.high_load(own) == []
    assert load.high_load({**own, "other_busy_share": 0.06}) == ["CPU pressure 60%"]


def test_load_without_pressure_files_records_only_cpu(tmp_path):
    host = make_host(tmp_path)
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc/stat").write_text("cpu  1 0 1 10 0 0 0 0 0 0\n")
    before = snapshot(host)
    (tmp_path / "proc/stat").write_text("cpu  2 0 1 19 0 0 0 0 0 0\n")
    d = delta(before, snapshot(host))["load"]
    assert set(d) == {"steal_share", "other_busy_share"} and d["steal_share"] == 0.0


def test_real_load_is_recorded_and_sees_a_busy_child():
    """Real /proc: a CPU-bound process that hugelab does not wait for counts as other load."""
    before = snapshot()
    spinner = subprocess.Popen(["python3", "-c", "import time\nt = time.time()\n"
                                "while time.time() - t < 1.5: pass"])
    time.sleep(1.2)
    d = delta(before, snapshot())["load"]  # taken before the spinner is waited for
    spinner.wait()
    assert 0.0 <= d["steal_share"] <= 1.0
    assert d["other_busy_share"] > 0.2  # one of this machine's cores spun the whole time
    if Path("/proc/pressure/cpu").exists():
        assert 0.0 <= d["psi_cpu_some_share"] <= 1.0 and d["psi_cpu_some_avg10"] >= 0.0
