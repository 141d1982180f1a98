"""hugelab-mem's sparse buffer (`touch_fraction`): in each 2 MiB region only the first
ceil(f*512) 4 KiB pages are written and visited, so the resident memory of each page size is
computable: the touched pages with 4 KiB pages, every touched region whole with THP or hugetlb.

The pure tests check the key's validation (at experiment parse time too) and the parsing of
the layout; the rest run the binary and compare the prediction with the process's memory as
the test itself reads it from /proc/PID/smaps_rollup while the process runs, and with the
hugetlb pool's own counters.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import parse_experiment
from hugelab.host.paths import REAL, parse_selected
from hugelab.trial.native import NativeTarget
from hugelab.workloads import build
from hugelab.workloads.base import ExecResult
from hugelab.workloads.hugelab_mem import HugelabMem
from hugelab.workloads.hugelab_mem.evidence import layout_evidence, touched_pages
from hugelab.workloads.hugelab_mem.interleave import interleave_problem
from hugelab.workloads.registry import build_for, build_workload, check_places

MiB = 1 << 20
REGION_KB = 2048


def expected_kb(size: int, fraction: float, page_kb: int) -> int:
    """The test's own arithmetic: each page holding a touched 4 KiB page is resident whole."""
    regions = size // (2 * MiB)
    touched_kb = math.ceil(fraction * 512) * 4
    return regions * math.ceil(touched_kb / page_kb) * page_kb


# --- the key, pure ------------------------------------------------------------------------

@pytest.mark.parametrize("fraction,pages", [
    (0.25, 128), (0.1, 52), (1.0, 512), (1, 512), (1 / 512, 1), (1e-9, 1), (0.5 + 1e-12, 257),
])
def test_touched_pages_is_the_ceiling_of_the_share_of_512(fraction: float, pages: int) -> None:
    assert touched_pages(fraction) == pages


@pytest.mark.parametrize("fraction", [0, 0.0, -0.25, 1.0001, 2, float("nan"), float("inf"),
                                      True, "0.5", None])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: object) -> None:
    with pytest.raises(ExperimentError, match="touch_fraction"):
        HugelabMem(size_bytes=64 * MiB, touch_fraction=fraction)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs,words", [
    ({"workload": "populate"}, "populate"),
    ({"size_bytes": 3 * MiB}, "whole 2 MiB regions"),
    ({"size_bytes": 64 * MiB + 4096}, "whole 2 MiB regions"),
    ({"stride_bytes": 8192}, "larger than the 4096 bytes"),  # 0.001 * 512 -> one page
])
def test_combinations_a_sparse_buffer_cannot_take_are_refused(kwargs: dict[str, object],
                                                             words: str) -> None:
    args: dict[str, object] = {"size_bytes": 64 * MiB, "touch_fraction": 0.001, **kwargs}
    with pytest.raises(ExperimentError, match=words):
        HugelabMem(**args)  # type: ignore[arg-type]


def test_a_whole_buffer_keeps_every_size_and_workload() -> None:
    HugelabMem(workload="populate", size_bytes=3 * MiB, touch_fraction=1)
    HugelabMem(size_bytes=3 * MiB + 4096)


def test_argv_is_unchanged_without_the_key_and_exact_with_it() -> None:
    dense = HugelabMem(size_bytes=64 * MiB).argv("4k", Path("hm"))
    assert "--touch-fraction" not in dense
    assert HugelabMem(size_bytes=64 * MiB, touch_fraction=1.0).argv("4k", Path("hm")) == dense
    for f, text in ((0.25, "0.25"), (0.1, "0.1"), (1 / 3, repr(1 / 3))):
        argv = HugelabMem(size_bytes=64 * MiB, touch_fraction=f).argv("thp", Path("hm"))
        assert argv[len(dense):] == ["--touch-fraction", text]


def _experiment(workload: dict[str, object], design: str = "paired") -> dict[str, object]:
    return {"design": design, "arms": [{"name": "a", "backing": "4k"},
                                       {"name": "b", "backing": "thp"}],
            "workload": {"kind": "hugelab-mem", "workload": "chase", "size": "64M",
                         "duration": 1.0, **workload}}


@pytest.mark.parametrize("value,words", [
    (1.5, "above 0 and at most 1"), (0, "above 0 and at most 1"),
    ("a quarter", "must be"),
])
def test_the_key_is_checked_when_the_experiment_is_read(value: object, words: str) -> None:
    with pytest.raises(ExperimentError, match=words) as e:
        build_for(parse_experiment(_experiment({"touch_fraction": value})))
    assert "touch_fraction" in e.value.message


def test_a_sparse_experiment_builds_and_cannot_interleave() -> None:
    default, _ = build_for(parse_experiment(_experiment({"touch_fraction": 0.25})))
    assert isinstance(default, HugelabMem) and default.touch_fraction == 0.25
    assert build_workload("hugelab-mem", {"touch_fraction": 1}).touch_fraction == 1  # type: ignore[attr-defined]
    why = interleave_problem((), {"workload": "chase", "touch_fraction": 0.5})
    assert why is not None and "one buffer to a process" in why[0] and "paired" in why[1]
    with pytest.raises(ExperimentError, match="touch_fraction"):
        check_places(parse_experiment(_experiment({"touch_fraction": 0.5}, "interleaved")))


# --- the layout in the result, pure -----------------------------------------------------------

LAYOUT = {"touch_fraction": 0.25, "regions": 32, "touched_pages_per_region": 128,
          "touched_kb": 16384, "expected_rss_4k_kb": 16384, "expected_rss_thp_kb": 65536,
          "fault_kb": 4, "expected_kb": 16384}


def test_layout_evidence_sets_the_measure_beside_the_prediction() -> None:
    got = layout_evidence(LAYOUT, "4k", {"Rss_kB": 16000, "Private_Hugetlb_kB": 0})
    assert got["measured_kb"] == 16000 and got["measured_field"] == "Rss_kB"
    assert got["measured_over_expected"] == pytest.approx(16000 / 16384)
    huge = dict(LAYOUT, fault_kb=2048, expected_kb=65536)
    got = layout_evidence(huge, "hugetlb-2M", {"Rss_kB": 0, "Private_Hugetlb_kB": 65536,
                                               "Shared_Hugetlb_kB": 0})
    assert got["measured_kb"] == 65536 and got["measured_over_expected"] == 1.0
    assert layout_evidence(huge, "thp", {})["measured_over_expected"] is None


def test_parse_puts_the_layout_in_the_evidence_not_the_costs() -> None:
    doc = {"tool": "hugelab-mem", "workload": "random", "backing": "4k",
           "metrics": {"ns_per_access": 10.0}, "layout": LAYOUT,
           "primary": {"name": "ns_per_access", "unit": "ns", "better": "lower"},
           "evidence": {"Rss_kB": 16384, "AnonHugePages_kB": 0, "KernelPageSize_kB": 4}}
    r = HugelabMem(size_bytes=64 * MiB, touch_fraction=0.25).parse(
        ExecResult(["hm"], 0, json.dumps(doc), "", 0.1, {}))
    assert r.evidence["layout"]["expected_rss_thp_kb"] == 65536
    assert r.evidence["layout"]["measured_over_expected"] == 1.0
    assert "app_costs" not in r.evidence and "expected_kb" not in r.metrics


# --- the binary -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def binary() -> Path:
    return build.ensure_hugelab_mem()


@pytest.mark.tools
@pytest.mark.parametrize("extra,words", [
    (["--touch-fraction", "0"], "bad touch fraction"),
    (["--touch-fraction", "1.5"], "bad touch fraction"),
    (["--touch-fraction", "nan"], "bad touch fraction"),
    (["--touch-fraction", "half"], "bad touch fraction"),
    (["--touch-fraction", "0.5", "--size", "3M"], "whole 2 MiB regions"),
    (["--touch-fraction", "0.5", "--workload", "populate"], "populate"),
    (["--touch-fraction", "0.001", "--stride", "8192"], "larger than the 4096 bytes"),
    (["--touch-fraction", "0.5", "--workload", "seq-read", "--threads", "3", "--size", "4M"],
     "too few"),
    (["--touch-fraction", "0.5", "--interleave", "4k,thp"], "exclude each other"),
])
def test_the_binary_refuses_what_the_layout_cannot_take(binary: Path, extra: list[str],
                                                       words: str) -> None:
    args = ["--workload", "chase", "--size", "8M", "--duration", "1"]
    if "--interleave" not in extra:
        args += ["--backing", "4k"]
    cp = subprocess.run([str(binary), *args, *extra], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and cp.stdout == "" and words in cp.stderr, cp.stderr


@pytest.mark.tools
def test_help_documents_the_key(binary: Path) -> None:
    cp = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30)
    assert "--touch-fraction" in cp.stdout and "ceil(F*512)" in cp.stdout


def _rollup(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def run_sampled(argv: list[str]) -> tuple[ExecResult, dict[str, int]]:
    """Runs `argv`, reading its /proc/PID/smaps_rollup every 20 ms while it runs: the result
    and each field's peak (the buffer is populated in setup and stays until the exit)."""
    peak: dict[str, int] = {}
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sample() -> None:
        while p.poll() is None:
            try:
                for k, v in _rollup(p.pid).items():
                    peak[k] = max(peak.get(k, 0), v)
            except (OSError, ValueError, IndexError):
                pass  # the process is exiting
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, err = p.communicate(timeout=120)
    sampler.join()
    return ExecResult(argv, p.returncode, out, err, time.monotonic() - t0, {}), peak


def thp_usable() -> None:
    mode = parse_selected(REAL.thp_enabled.read_text()) if REAL.thp_enabled.exists() else "never"
    if mode == "never":
        pytest.skip(f"THP is 'never' in {REAL.thp_enabled}: MADV_HUGEPAGE cannot work")


@pytest.mark.tools
@pytest.mark.parametrize("backing,page_kb", [("4k", 4), ("thp", REGION_KB)])
def test_measured_rss_is_within_ten_percent_of_the_layout(binary: Path, backing: str,
                                                          page_kb: int) -> None:
    """256 MiB, a quarter of each region touched: 64 MiB resident with 4 KiB pages, all
    256 MiB with THP (MADV_HUGEPAGE, which the host's `madvise` mode honours)."""
    if backing == "thp":
        thp_usable()
    size, f = 256 * MiB, 0.25
    w = HugelabMem(workload="random", size_bytes=size, duration_s=1.0, touch_fraction=f)
    res, peak = run_sampled(w.argv(backing, binary))
    r = w.parse(res)
    want = expected_kb(size, f, page_kb)
    assert want == {4: 65536, REGION_KB: 262144}[page_kb]
    layout = r.evidence["layout"]
    assert layout["expected_kb"] == want and layout["regions"] == 128
    assert layout["expected_rss_4k_kb"] == 65536 and layout["expected_rss_thp_kb"] == 262144
    # the test's own read of the whole process (its binary and stack besides the buffer)
    assert abs(peak["Rss"] - want) <= 0.1 * want, (peak, want)
    if backing == "4k":
        assert peak["AnonHugePages"] == 0
    else:
        assert peak["AnonHugePages"] >= 0.9 * want, peak
    # hugelab-mem's own read of its buffer's VMA agrees
    assert abs(layout["measured_kb"] - want) <= 0.1 * want
    assert abs(layout["measured_kb"] - peak["Rss"]) <= 0.05 * want
    assert r.info["warnings"] == []


@pytest.mark.tools
@pytest.mark.parametrize("workload,extra", [
    ("seq-write", {"threads": 2}),          # writes: a visit outside the layout would fault
    ("chase", {"stride_bytes": 4096}),      # a slot per page
    ("seq-read", {}), ("chase", {}),
])
def test_the_workloads_visit_only_the_touched_pages(workload: str, extra: dict[str, int]
                                                    ) -> None:
    w = HugelabMem(workload=workload, size_bytes=32 * MiB, duration_s=0.3, touch_fraction=0.1,
                   **extra)  # type: ignore[arg-type]
    r = w.run(NativeTarget(), "4k")
    want = expected_kb(32 * MiB, 0.1, 4)  # 16 regions x 52 pages
    assert want == 16 * 52 * 4
    assert r.evidence["after_populate"]["Rss_kB"] == want
    assert r.evidence["Rss_kB"] == want  # after the measured phase: nothing more resident
    census = r.evidence["folios"]
    assert census["available"] and census["present_kb"] == want
    assert census["absent_kb"] == 32 * 1024 - want
    assert r.value > 0


@pytest.mark.tools
def test_a_collapsed_sparse_buffer_is_every_region_whole(binary: Path) -> None:
    """thp-collapse: populated sparse in 4 KiB pages, then MADV_COLLAPSE (which ignores
    max_ptes_none) makes each touched region one 2 MiB page."""
    thp_usable()
    w = HugelabMem(workload="random", size_bytes=64 * MiB, duration_s=0.2, touch_fraction=0.25)
    res, _ = run_sampled(w.argv("thp-collapse", binary))
    r = w.parse(res)
    collapse = r.evidence["collapse"]
    assert collapse["before"]["Rss_kB"] == expected_kb(64 * MiB, 0.25, 4)
    if collapse["result"] != "0":
        pytest.skip(f"MADV_COLLAPSE failed here ({collapse['result']}): memory too fragmented")
    assert r.evidence["layout"]["expected_kb"] == 65536
    assert r.evidence["layout"]["measured_over_expected"] >= 0.9


@pytest.fixture
def pool_2m() -> Iterator[int]:
    """Raises the 2 MiB pool to 40 pages (never lowers it) and writes the original back."""
    path = REAL.pool_file(2048)
    if not path.exists():
        pytest.skip(f"no 2 MiB hugetlb pool on this host ({path})")
    original = int(path.read_text())
    try:
        path.write_text(f"{max(original, 40)}\n")
        free = int(REAL.pool_file(2048, "free_hugepages").read_text())
        if free < 32:
            pytest.skip(f"only {free} free 2 MiB pages of 32 wanted")
        yield free
    finally:
        path.write_text(f"{original}\n")


@pytest.mark.host
def test_hugetlb_holds_every_touched_region_whole(binary: Path, pool_2m: int) -> None:
    """hugetlb-2M: each touched region faults one pool page, counted by the pool itself."""
    w = HugelabMem(workload="random", size_bytes=64 * MiB, duration_s=0.5, touch_fraction=0.1)
    used: list[int] = []
    argv = w.argv("hugetlb-2M", binary)
    free_path = REAL.pool_file(2048, "free_hugepages")

    def watch() -> None:
        while not done.is_set():
            used.append(pool_2m - int(free_path.read_text()))
            time.sleep(0.02)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        res, peak = run_sampled(argv)
    finally:
        done.set()
        watcher.join()
    r = w.parse(res)
    assert r.evidence["layout"]["expected_kb"] == 32 * REGION_KB
    assert r.evidence["layout"]["measured_kb"] == 32 * REGION_KB
    assert peak["Private_Hugetlb"] == 32 * REGION_KB  # the test's own read of the process
    assert max(used) == 32  # the pool's own count of the pages taken
