"""The jvm kind's many-threads program (`threads`): its keys, command line and report parsing;
for real, examples/jvm-thread-stacks.toml through `hugelab run`, its figures against what this
test reads from each JVM's own smaps while its threads are parked (JDK-8312182's THP stack
bloat: present on this kernel or not)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.experiment import Arm
from hugelab.workloads.base import ExecResult
from hugelab.workloads.jvm import JvmBenchmark
from hugelab.workloads.jvm import threads as jvm_threads
from hugelab.workloads.registry import build_workload, with_arm
from tests.helpers import HUGELAB
from tests.hostguard import host_state, workload_processes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "jvm-thread-stacks.toml"
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

REPORT = """\
hugelab-threads: pid 19599
hugelab-threads: started 3 threads in 27.239177 ms
--- smaps_rollup
00400000-7ffcc39fd000 ---p 00000000 00:00 0                              [rollup]
Rss:               49456 kB
Pss:               47000 kB
Anonymous:         30000 kB
AnonHugePages:      2048 kB
--- native memory

Native Memory Tracking:

Total: reserved=7856279KB, committed=478431KB
       malloc: 11599KB #27217
-                 Java Heap (reserved=6172672KB, committed=397312KB)
                            (mmap: reserved=6172672KB, committed=397312KB)
-                    Thread (reserved=33848KB, committed=1120KB)
                            (thread #21)
                            (stack: reserved=33792KB, committed=1064KB)
                            (malloc=916KB #3125) (peak=929KB #3129)

--- end
hugelab-threads: done
"""


def threads(**keys: object) -> JvmBenchmark:
    return build_workload("jvm", {"heap": "64M", "threads": 500, **keys})  # type: ignore[return-value]


def test_argv_runs_the_thread_program_with_nmt_and_the_stack_size():
    w = threads(thread_stack="2m", stack_touch="64K", hold_s=2.5)
    argv = with_arm(w, Arm("x", "thp", app=(("UseTransparentHugePages", True),))).argv()  # type: ignore[attr-defined]
    assert argv[:3] == ["java", "-Xms64M", "-Xmx64M"] and "-XX:+UseTransparentHugePages" in argv
    assert "-XX:NativeMemoryTracking=summary" in argv and "-Xss2M" in argv
    assert argv[-5:] == [str(jvm_threads.class_dir()), "HugelabThreads", "500", "64", "2500"]
    assert w.primary == "rss_mib" and "-Xss" not in " ".join(threads().argv())
    own = with_arm(w, Arm("x", "4k", app=(("options", ("-Xss8m",)),)))
    assert own.argv().index("-Xss8m") > own.argv().index("-Xss2M")  # the arm's options win  # type: ignore[attr-defined]


@pytest.mark.parametrize("keys, words", [
    ({"threads": -1}, "threads must be a whole number from 1 to 32768"),
    ({"threads": 100000}, "threads must be a whole number"),
    ({"thread_stack": "lots"}, "thread_stack: invalid size 'lots'"),
    ({"thread_stack": "64K"}, "outside what the JVM takes for -Xss (136K to 1G)"),
    ({"thread_stack": "1m", "stack_touch": "1m"}, "leaves a thread less than 64K of its 1M"),
    ({"hold_s": 0}, "hold_s must be seconds above 0"),
    ({"regex": "(x)"}, "threads runs hugelab's own many-threads program"),
])
def test_bad_thread_keys_say_what_is_wrong(keys, words):
    with pytest.raises(ExperimentError) as exc:
        threads(**keys)
    assert words in exc.value.message


def test_the_report_gives_rss_as_the_metric_and_nmt_as_app_costs():
    out = threads().parse(ExecResult(["java"], 0, REPORT, "", 1.5))
    assert out.primary == "rss_mib" and out.better == "lower" and out.unit == "MiB"
    assert out.value == 49456 / 1024 and out.metrics["start_ms"] == 27.239177
    costs = out.evidence["app_costs"]
    assert costs["nmt_thread_committed_kb"] == 1120 and costs["nmt_thread_reserved_kb"] == 33848
    assert costs["nmt_thread_stack_committed_kb"] == 1064 and costs["nmt_thread_count"] == 21
    assert costs["nmt_total_committed_kb"] == 478431 and costs["nmt_heap_committed_kb"] == 397312
    assert costs["jvm_rss_kb"] == 49456 and costs["jvm_anon_huge_kb"] == 2048
    assert all(isinstance(v, float) and v >= 0 for v in costs.values())
    assert out.info["benchmark"] == "hugelab threads"
    no_nmt = REPORT.replace("Thread (", "Threads (").replace("Total:", "Sum:")
    with pytest.raises(WorkloadError, match="NativeMemoryTracking=summary off"):
        threads().parse(ExecResult(["java"], 0, no_nmt, "", 1.0))
    with pytest.raises(WorkloadError, match="printed no report"):
        threads().parse(ExecResult(["java"], 0, "Exception in thread main", "", 1.0))


@pytest.mark.tools
@pytest.mark.slow
def test_the_program_compiles_warning_free_once_per_source():
    first = jvm_threads.ensure_classes()
    built = (first / "HugelabThreads.class").stat().st_mtime_ns
    assert jvm_threads.ensure_classes() == first
    assert (first / "HugelabThreads.class").stat().st_mtime_ns == built  # the stamp matched


# --- for real: the example through `hugelab run`, read beside it ---------------------------

def _thread_jvms() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"HugelabThreads" in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def _smaps(pid: int) -> list[dict[str, int | str]]:
    """Each mapping of `pid`: its size, Rss, AnonHugePages (KiB) and VmFlags."""
    out: list[dict[str, int | str]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if m := re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line):
            out.append({"kb": (int(m[2], 16) - int(m[1], 16)) // 1024})
        elif m := re.match(r"(Rss|AnonHugePages):\s+(\d+) kB", line):
            out[-1][m[1]] = int(m[2])
        elif line.startswith("VmFlags:"):
            out[-1]["flags"] = line.split(":", 1)[1]
    return out


def _sample(pid: int, stack_kb: int) -> dict[str, float]:
    """What this test reads itself of a parked JVM: smaps_rollup's Rss and AnonHugePages, and
    its thread stacks (anonymous mappings of the -Xss size, less the JVM's guard zone)."""
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    stacks = [v for v in _smaps(pid) if stack_kb - 64 <= int(v["kb"]) <= stack_kb]
    return {"rss_kb": float(re.search(r"\nRss:\s+(\d+)", rollup)[1]),  # type: ignore[index]
            "anon_huge_kb": float(re.search(r"AnonHugePages:\s+(\d+)", rollup)[1]),  # type: ignore[index]
            "stacks": float(len(stacks)),
            "stack_rss_kb": float(sum(int(v.get("Rss", 0)) for v in stacks)),
            "stack_huge_kb": float(sum(int(v.get("AnonHugePages", 0)) for v in stacks)),
            "stack_nohugepage": float(sum(" nh" in str(v.get("flags")) for v in stacks))}


def _watch(run: subprocess.Popen[str], threads: int, stack_kb: int) -> dict[str, dict]:
    """Each thread JVM's last reading while its threads were parked, by arm (the host's THP
    mode then, and whether the JVM's own mitigation was switched off)."""
    def parked(pid: int) -> bool:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(re.search(r"Threads:\s+(\d+)", status)[1]) >= threads  # type: ignore[index]

    seen: dict[str, dict] = {}
    while run.poll() is None:
        for pid in _thread_jvms():
            try:
                if not parked(pid):
                    continue
                time.sleep(0.5)  # its own reading is taken the moment the last one parks
                bare = b"-THPStackMitigation" in Path(f"/proc/{pid}/cmdline").read_bytes()
                mode = re.search(r"\[(\w+)\]", THP.read_text())[1]  # type: ignore[index]
                sample = _sample(pid, stack_kb)
                # every thread still there after the read: none had ended before it (a CI run
                # read 232 of 500 stacks from a JVM whose hold had ended during the sleep)
                if parked(pid):
                    seen[f"{mode}{'-bare' if bare else ''}"] = sample
            except (OSError, TypeError):
                continue  # it ended between two reads: its earlier reading stands
        time.sleep(0.05)
    return seen


@pytest.mark.host
@pytest.mark.tools
@pytest.mark.slow
def test_thread_stacks_under_thp_always_against_madvise_with_nmt_as_reference(tmp_path):
    before, procs = host_state(), workload_processes()
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    store = tmp_path / "s.db"
    run = subprocess.Popen([*HUGELAB, "run", str(EXAMPLE), "--blocks", "1", "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           cwd=tmp_path)
    try:
        seen = _watch(run, 500, 2048)
        out = run.communicate(timeout=300)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out
    assert host_state() == before and workload_processes() == procs
    shown = subprocess.run([*HUGELAB, "show", "1", "--store", str(store), "--json"],
                           capture_output=True, text=True, env=env, check=True)
    trials = {t["arm"]: t for t in json.loads(shown.stdout)["trials"]}
    assert set(trials) == set(seen) == {"madvise", "always", "always-bare"}, (seen, out)
    for arm, t in trials.items():
        assert t["status"] == "ok" and t["evidence"]["check"] == "verified", t["evidence"]
        costs, own = t["evidence"]["app_costs"], seen[arm]
        print(arm, {k: costs[k] for k in ("jvm_rss_kb", "jvm_anon_huge_kb",
                                          "nmt_thread_committed_kb",
                                          "nmt_thread_stack_committed_kb",
                                          "nmt_total_committed_kb")}, own)
        # the JVM's own reading and this test's, of the same parked state
        assert abs(costs["jvm_rss_kb"] - own["rss_kb"]) <= 0.05 * own["rss_kb"], arm
        assert abs(costs["jvm_anon_huge_kb"] - own["anon_huge_kb"]) <= 4096, arm
        assert t["metrics"]["rss_mib"] == costs["jvm_rss_kb"] / 1024
        # NMT's stack committed (resident pages, found with mincore) against the stacks' Rss
        # in smaps: the same memory, less the JVM's guard zones that NMT counts committed
        assert costs["nmt_thread_count"] >= 500 and own["stacks"] >= 500, arm
        stack = costs["nmt_thread_stack_committed_kb"]
        assert own["stack_rss_kb"] <= stack * 1.02 and stack - own["stack_rss_kb"] <= 0.2 * stack
    # between arms: RSS moves with the THP in the stacks and nothing else (a bloat, where a
    # kernel has one, is the stacks' huge pages; none is RSS within 5% of madvise's)
    base = seen["madvise"]
    for arm in ("always", "always-bare"):
        grew = trials[arm]["evidence"]["app_costs"]["jvm_rss_kb"] - \
            trials["madvise"]["evidence"]["app_costs"]["jvm_rss_kb"]
        huge = seen[arm]["stack_huge_kb"] - base["stack_huge_kb"]
        assert abs(grew - huge) <= 0.05 * base["rss_kb"], (arm, grew, huge)
