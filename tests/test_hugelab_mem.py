"""hugelab-mem: the C micro-benchmark, its build cache and its Python workload wrapper.

Unit tests are pure; the rest really run the binary on this host through NativeTarget
and check the /proc/self/smaps evidence it reports for each backing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.host.paths import REAL, parse_selected
from hugelab.trial.native import NativeTarget
from hugelab.units import parse_size
from hugelab.workloads import build
from hugelab.workloads.base import ExecResult
from hugelab.workloads.hugelab_mem import HugelabMem
from hugelab.workloads.hugelab_mem.evidence import backing_problem
from hugelab.workloads.hugelab_mem.workload import BACKINGS, WORKLOADS

MiB = 1 << 20


@pytest.fixture(scope="module")
def binary() -> Path:
    return build.ensure_hugelab_mem()


def _exec(argv: list[str]) -> ExecResult:
    return NativeTarget().exec(argv, timeout=120)


# --- parse_size --------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("4096", 4096), ("4K", 4096), ("4k", 4096), ("4KiB", 4096), ("64M", 64 * MiB),
    ("64MiB", 64 * MiB), ("2G", 2 << 30), ("2GiB", 2 << 30), (" 1g ", 1 << 30),
    ("1T", 1 << 40), ("3MB", 3 * MiB),
])
def test_parse_size_accepts_binary_suffixes(text: str, want: int) -> None:
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "G", "1.5G", "-1M", "12X", "1 G B", "0", "0M", "1Gi"])
def test_parse_size_rejects_junk(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


# --- argv / config -------------------------------------------------------------------

def test_argv_is_a_plain_list() -> None:
    w = HugelabMem(workload="seq-read", size_bytes=64 * MiB, threads=2, duration_s=0.25, seed=7)
    assert w.argv("thp", Path("/opt/hm")) == [
        "/opt/hm", "--workload", "seq-read", "--backing", "thp", "--size", str(64 * MiB),
        "--threads", "2", "--duration", "0.25", "--seed", "7"]


def test_argv_adds_stride_for_chase() -> None:
    argv = HugelabMem(stride_bytes=4096).argv("4k", Path("hm"))
    assert argv[-2:] == ["--stride", "4096"]


def test_argv_rejects_unknown_backing() -> None:
    with pytest.raises(ExperimentError, match="unknown backing"):
        HugelabMem().argv("hugetlb-4M", Path("hm"))


@pytest.mark.parametrize("kwargs", [
    {"workload": "nope"}, {"size_bytes": 10}, {"threads": 0}, {"duration_s": 0},
    {"workload": "random", "stride_bytes": 128},
])
def test_config_is_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ExperimentError):
        HugelabMem(**kwargs)  # type: ignore[arg-type]


# --- parse -------------------------------------------------------------------------------

SAMPLE = {
    "tool": "hugelab-mem", "version": 1, "workload": "chase", "backing": "4k",
    "size_bytes": 64 * MiB, "threads": 1, "seed": 1, "duration_s": 0.2, "setup_s": 0.05,
    "interrupted": False, "checksum": 12345,
    "metrics": {"ns_per_access": 95.5, "accesses": 2000000, "accesses_per_s": 1.0e7},
    "primary": {"name": "ns_per_access", "unit": "ns", "better": "lower"},
    "evidence": {"Size_kB": 65536, "Rss_kB": 65536, "AnonHugePages_kB": 0,
                 "KernelPageSize_kB": 4, "MMUPageSize_kB": 4, "Private_Hugetlb_kB": 0,
                 "Shared_Hugetlb_kB": 0},
}


def _result(stdout: str, rc: int = 0, stderr: str = "") -> ExecResult:
    return ExecResult(["hugelab-mem", "--workload", "chase"], rc, stdout, stderr, 0.3,
                      {"minflt": 16400.0, "majflt": 0.0, "utime_s": 0.2})


def test_parse_sample_json() -> None:
    r = HugelabMem(size_bytes=64 * MiB).parse(_result(json.dumps(SAMPLE)))
    assert (r.primary, r.unit, r.better, r.value) == ("ns_per_access", "ns", "lower", 95.5)
    assert r.metrics["minflt"] == 16400.0 and r.metrics["majflt"] == 0.0
    assert r.metrics["setup_s"] == 0.05 and r.metrics["wall_s"] == 0.3
    assert r.evidence["KernelPageSize_kB"] == 4
    assert r.info["checksum"] == 12345 and r.info["warnings"] == []


def test_parse_flags_evidence_that_contradicts_the_backing() -> None:
    doc = dict(SAMPLE, backing="thp")
    r = HugelabMem().parse(_result(json.dumps(doc)))
    assert any("thp backing" in w for w in r.info["warnings"])


@pytest.mark.parametrize("stdout", ["", "not json", "[1, 2]", '{"tool": "other"}',
                                    json.dumps(dict(SAMPLE, metrics={"x": 1.0})),
                                    json.dumps(dict(SAMPLE, metrics={"ns_per_access": "x"}))])
def test_parse_rejects_bad_output(stdout: str) -> None:
    with pytest.raises(WorkloadError):
        HugelabMem().parse(_result(stdout))


def test_parse_reports_exit_code_and_stderr() -> None:
    res = _result("", rc=3, stderr="hugelab-mem: hugetlb-1G mapping of 1 bytes failed")
    with pytest.raises(WorkloadError, match="exited with 3") as info:
        HugelabMem().parse(res)
    assert "mapping of 1 bytes failed" in info.value.message
    assert info.value.hint and "nr_hugepages" in info.value.hint
    assert info.value.cause == "pool"  # pool not free: retried on resume, with its own reason


def test_parse_failure_of_the_workload_itself_is_not_retried() -> None:
    with pytest.raises(WorkloadError) as info:
        HugelabMem().parse(_result("", rc=2, stderr="bad args"))
    assert info.value.cause == "workload"


def test_backing_problem() -> None:
    assert backing_problem("4k", {"KernelPageSize_kB": 4, "AnonHugePages_kB": 0}) is None
    assert backing_problem("4k", {"KernelPageSize_kB": 4, "AnonHugePages_kB": 2048})
    assert backing_problem("hugetlb-1G", {"KernelPageSize_kB": 1048576}) is None
    assert backing_problem("hugetlb-2M", {"KernelPageSize_kB": 4})


# --- build -----------------------------------------------------------------------------

@pytest.mark.tools
def test_build_once_then_cached(tmp_path: Path) -> None:
    srcs = [tmp_path / f.name for f in build.SOURCES]
    for f, copy in zip(build.SOURCES, srcs, strict=True):
        copy.write_bytes(f.read_bytes())
    out = tmp_path / "bin"
    out.mkdir()
    first = build.build(srcs, out)
    mtime = first.stat().st_mtime_ns
    time.sleep(0.01)
    t0 = time.perf_counter()
    assert build.build(srcs, out) == first
    assert time.perf_counter() - t0 < 0.5
    assert first.stat().st_mtime_ns == mtime, "unchanged source must not rebuild"
    header = next(c for c in srcs if c.suffix == ".h")
    for changed in (header, srcs[0]):  # the shared header, then main's .c file
        changed.write_text(changed.read_text() + "\n/* changed */\n")
        build.build(srcs, out)
        assert first.stat().st_mtime_ns != mtime, f"a changed {changed.name} must rebuild"
        mtime = first.stat().st_mtime_ns
        time.sleep(0.01)
    assert not list(out.glob(".*.tmp")), "no temp files left behind"


def test_the_stamp_covers_every_file_and_its_name(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.c", tmp_path / "b.h", tmp_path / "c.h"
    a.write_text("int a;\n")
    b.write_text("int b;\n")
    c.write_text("int b;\n")
    stamp = build.stamp_text([a, b])
    assert build.stamp_text([a, b]) == stamp
    assert build.stamp_text([a]) != stamp, "a file left out"
    assert build.stamp_text([a, c]) != stamp, "the same bytes under another name"
    b.write_text("int b; \n")
    assert build.stamp_text([a, b]) != stamp, "a changed header"


@pytest.mark.tools
def test_compile_is_warning_free(tmp_path: Path) -> None:
    assert "-Werror" in build.CFLAGS
    stderr = build.compile_binary(build.SOURCES, tmp_path / "hm")
    assert stderr.strip() == ""


def test_missing_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError) as info:
        build.compile_binary(build.SOURCES, tmp_path / "hm")
    assert (info.value.tool, info.value.package) == ("cc", "gcc")


@pytest.mark.tools
def test_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binary: Path) -> None:
    monkeypatch.setenv(build.ENV_OVERRIDE, str(binary))
    assert build.ensure_hugelab_mem() == binary
    monkeypatch.setenv(build.ENV_OVERRIDE, str(tmp_path / "absent"))
    with pytest.raises(Exception, match="not an executable"):
        build.ensure_hugelab_mem()


def test_first_writable_falls_back(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    fallback = tmp_path / "cache" / "hugelab"
    assert build.first_writable([blocker / "_bin", fallback]) == fallback


def test_cache_dir_honours_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.candidate_dirs()[-1] == tmp_path / "hugelab"


@pytest.mark.tools
def test_build_entry_point(binary: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "hugelab.workloads.build"],
                        capture_output=True, text=True, check=True)
    assert [Path(p) for p in cp.stdout.split()] == [binary, build.ensure_hugelab_thp()]


# --- the binary's command line ----------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--workload", "nope", "--backing", "4k", "--size", "1M"],
    ["--workload", "chase", "--backing", "8k", "--size", "1M"],
    ["--workload", "chase", "--backing", "4k", "--size", "1Q"],
    ["--workload", "chase", "--backing", "4k"],
    ["--workload", "chase", "--backing", "4k", "--size", "1M", "--duration"],
    ["--workload", "chase", "--backing", "4k", "--size", "1M", "--threads", "0"],
    ["--workload", "random", "--backing", "4k", "--size", "1M", "--stride", "128"],
    ["--bogus"],
])
@pytest.mark.tools
def test_bad_args_exit_2(binary: Path, args: list[str]) -> None:
    res = _exec([str(binary), *args])
    assert res.returncode == 2
    assert res.stdout == "" and res.stderr.startswith("hugelab-mem: ")


@pytest.mark.tools
def test_help(binary: Path) -> None:
    res = _exec([str(binary), "--help"])
    assert res.returncode == 0 and "--workload" in res.stdout


@pytest.mark.tools
def test_sigint_stops_cleanly(binary: Path) -> None:
    p = subprocess.Popen([str(binary), "--workload", "chase", "--backing", "4k", "--size", "8M",
                          "--duration", "60"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 130
    assert json.loads(out)["interrupted"] is True


# --- real runs ---------------------------------------------------------------------------

@pytest.mark.tools
@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("threads", [1, 2])
def test_every_workload_runs(workload: str, threads: int) -> None:
    w = HugelabMem(workload=workload, size_bytes=16 * MiB, threads=threads, duration_s=0.2)
    r = w.run(NativeTarget(), "4k")
    assert r.value > 0 and r.primary == {"seq-read": "mib_per_s", "seq-write": "mib_per_s",
                                         "populate": "ns_per_page"}.get(workload, "ns_per_access")
    assert r.better == ("higher" if workload.startswith("seq") else "lower")
    assert r.metrics["minflt"] > 0 and "majflt" in r.metrics
    assert r.info["warnings"] == []


@pytest.mark.tools
def test_4k_backing_has_no_huge_pages() -> None:
    r = HugelabMem(size_bytes=64 * MiB, duration_s=0.2).run(NativeTarget(), "4k")
    ev = r.evidence
    assert ev["AnonHugePages_kB"] == 0 and ev["KernelPageSize_kB"] == 4
    assert ev["Size_kB"] == 64 * 1024 and ev["Rss_kB"] >= 64 * 1024 * 0.99
    assert ev["after_populate"]["AnonHugePages_kB"] == 0
    census = ev["folios"]  # pagemap + kpageflags of the buffer, read by hugelab-mem itself
    assert census["available"] and census["source"] == "hugelab-mem"
    assert census["folios_kb"] == {"4K": 65536} and census["present_kb"] == 65536


@pytest.mark.tools
def test_thp_backing_is_mostly_huge() -> None:
    mode = parse_selected(REAL.thp_enabled.read_text()) if REAL.thp_enabled.exists() else "never"
    if mode == "never":
        pytest.skip(f"THP is '{mode}' in {REAL.thp_enabled}: thp backing cannot work")
    r = HugelabMem(size_bytes=64 * MiB, duration_s=0.2).run(NativeTarget(), "thp")
    ev = r.evidence
    assert ev["AnonHugePages_kB"] > 0.5 * ev["Rss_kB"] > 0
    census = ev["folios"]
    assert census["folios_kb"].get("2M", 0) > 0.5 * census["present_kb"] > 0
    # the census agrees with smaps on how much of the buffer is in PMD-size folios
    assert abs(census["folios_kb"].get("2M", 0) - ev["after_populate"]["AnonHugePages_kB"]) \
        <= 0.05 * census["present_kb"]


@pytest.mark.parametrize("workload,size_mib,threads,sampled_mib", [
    ("populate", 16, 2, 8),    # the untimed proof buffer: one worker's share
    ("chase", 256, 1, 64),     # over the budget: 32 evenly spread 2 MiB windows
])
@pytest.mark.tools
def test_folio_census_covers_the_setup_buffer(workload: str, size_mib: int, threads: int,
                                              sampled_mib: int) -> None:
    w = HugelabMem(workload=workload, size_bytes=size_mib * MiB, threads=threads,
                   duration_s=0.1)
    census = w.run(NativeTarget(), "4k").evidence["folios"]
    assert census["sampled_kb"] == census["present_kb"] == sampled_mib * 1024
    assert census["absent_kb"] == 0 and census["folios_kb"] == {"4K": sampled_mib * 1024}


# --- hugetlb pools (real host changes, always restored) ------------------------------------

@pytest.fixture
def hugetlb_pool(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    """Grows the pool of request.param = (page size kB, pages) and restores it afterwards.

    It never shrinks a pool (the host is shared with other test runs that may hold pages);
    it raises it to at least `pages` and always writes the original value back.
    """
    size_kb, pages = request.param
    path = REAL.pool_file(size_kb)
    if not path.exists():
        pytest.skip(f"no {size_kb} kB hugetlb pool on this host ({path})")
    original = int(path.read_text())
    try:
        path.write_text(f"{max(original, pages)}\n")
        free = int(REAL.pool_file(size_kb, "free_hugepages").read_text())
        if free < pages:
            pytest.skip(f"only {free} free pages of {pages} wanted in {path}")
        yield size_kb, pages
    finally:
        path.write_text(f"{original}\n")


@pytest.mark.host
@pytest.mark.parametrize("hugetlb_pool,backing,size", [
    ((2048, 16), "hugetlb-2M", 32 * MiB),
    ((1048576, 1), "hugetlb-1G", 1 << 30),
], indirect=["hugetlb_pool"])
def test_hugetlb_backing_uses_pool_pages(hugetlb_pool: tuple[int, int], backing: str,
                                         size: int) -> None:
    size_kb, _ = hugetlb_pool
    r = HugelabMem(size_bytes=size, duration_s=0.2).run(NativeTarget(), backing)
    ev = r.evidence
    assert ev["KernelPageSize_kB"] == size_kb and ev["MMUPageSize_kB"] == size_kb
    assert ev["Private_Hugetlb_kB"] + ev["Shared_Hugetlb_kB"] == size // 1024
    assert r.value > 0 and r.info["warnings"] == []


@pytest.mark.host
def test_missing_pool_exits_3_with_a_clear_message(binary: Path) -> None:
    path = REAL.pool_file(1048576, "free_hugepages")
    if not path.exists() or int(path.read_text()) != 0:
        pytest.skip(f"the 1 GiB pool has free pages now ({path}); not emptying a shared pool")
    w = HugelabMem(size_bytes=1 << 30, duration_s=0.1)
    res = _exec(w.argv("hugetlb-1G", binary))
    assert res.returncode == 3 and res.stdout == ""
    assert "hugetlb-1G mapping of 1073741824 bytes failed: Cannot allocate memory" in res.stderr
    assert "1 GiB pool large enough" in res.stderr and "/sys/kernel/mm/hugepages" in res.stderr
    with pytest.raises(WorkloadError, match="pool large enough"):
        w.parse(res)


@pytest.mark.tools
def test_backings_constant_matches_the_binary(binary: Path) -> None:
    res = _exec([str(binary), "--help"])
    for name in (*BACKINGS, *WORKLOADS):
        assert name in res.stdout


# --- interleaved windows (design 'interleaved') -------------------------------------

@pytest.mark.tools
def test_interleaved_a_a_buffers_alternate_in_balanced_windows(binary: Path) -> None:
    """Two 4k buffers in one process: equal windows each, every round a random order and its
    mirror (ABBA), each buffer its own evidence; parsed into one result per buffer whose value
    is the geometric mean of its windows."""
    wl = HugelabMem(workload="chase", size_bytes=16 * MiB, duration_s=0.5, window_ms=10)
    res = _exec(wl.argv_interleaved(["4k", "4k"], binary))
    data = json.loads(res.stdout)
    order = data["order"]
    assert len(order) >= 8 and len(order) % 4 == 0
    for r in range(0, len(order), 4):  # a round and its mirror
        first, mirror = order[r:r + 2], order[r + 2:r + 4]
        assert sorted(first) == [0, 1] and mirror == first[::-1]
    a, b = wl.parse_interleaved(res)
    import math
    assert a.info["reps"]["n"] == b.info["reps"]["n"] == len(order) // 2
    w = a.info["reps"]["values"]
    assert a.value == pytest.approx(math.exp(sum(map(math.log, w)) / len(w)))
    for r in (a, b):
        assert r.evidence["KernelPageSize_kB"] == 4 and not r.info["warnings"]
        assert r.info["interleaved"]["buffers"] == 2 and r.primary == "ns_per_access"
    assert 0.5 < a.value / b.value < 2.0  # the same walk over alike memory


@pytest.mark.tools
def test_interleaved_windows_start_with_an_unmeasured_warm_up(binary: Path) -> None:
    """--warmup (default a quarter of the window) runs each buffer unmeasured after a switch:
    recorded in the output and the trial, and it takes its share of every round."""
    wl = HugelabMem(workload="chase", size_bytes=4 * MiB, duration_s=0.5, window_ms=10)
    assert "--warmup" not in wl.argv_interleaved(["4k", "4k"], binary)
    data = json.loads(_exec(wl.argv_interleaved(["4k", "4k"], binary)).stdout)
    assert data["warmup_s"] == pytest.approx(0.0025) and data["window_s"] == pytest.approx(0.01)
    slow = replace(wl, warmup_ms=30)
    argv = slow.argv_interleaved(["4k", "4k"], binary)
    assert argv[argv.index("--warmup") + 1] == "30"
    res = _exec(argv)
    a, _ = slow.parse_interleaved(res)
    assert a.info["warmup_ms"] == pytest.approx(30) and \
        a.info["interleaved"]["warmup_s"] == pytest.approx(0.03)
    assert a.info["reps"]["wall_s"][0] == pytest.approx(2 * (0.01 + 0.03))
    # a round of 4 slots of 10 + 30 ms: at most 3 rounds fit in 0.5 s
    assert 4 <= len(json.loads(res.stdout)["order"]) <= 12
    none = json.loads(_exec(replace(wl, warmup_ms=0).argv_interleaved(["4k", "4k"], binary))
                      .stdout)
    assert none["warmup_s"] == 0.0
    for extra, words in ((["--backing", "4k", "--warmup", "5"], "goes with --interleave"),
                         (["--interleave", "4k,thp", "--warmup", "-1"], "bad warmup"),
                         (["--interleave", "4k,thp", "--duration", "0.1", "--window", "10",
                           "--warmup", "20"], "too short")):
        cp = subprocess.run([str(binary), "--workload", "chase", "--size", "4M", *extra],
                            capture_output=True, text=True)
        assert cp.returncode == 2 and words in cp.stderr, cp.stderr
    with pytest.raises(ExperimentError, match="warm-up"):
        HugelabMem(warmup_ms=-1)


@pytest.mark.tools
def test_interleaved_refuses_what_it_cannot_interleave(binary: Path) -> None:
    for extra, words in ((["--threads", "2"], "one thread"),
                         (["--workload", "seq-read"], "chase and random")):
        argv = [str(binary), "--workload", "chase", "--interleave", "4k,thp", "--size", "4M",
                "--duration", "1", *extra]
        cp = subprocess.run(argv, capture_output=True, text=True)
        assert cp.returncode == 2 and words in cp.stderr, cp.stderr
    cp = subprocess.run([str(binary), "--workload", "chase", "--interleave", "4k", "--size", "4M"],
                        capture_output=True, text=True)
    assert cp.returncode == 2 and "at least two" in cp.stderr
    for argv, words in ((["--interleave", "4k,,thp"], "empty backing"),
                        (["--backing", "4k", "--interleave", "4k,thp"], "exclude each other"),
                        (["--interleave", "4k,thp", "--backing", "4k"], "exclude each other")):
        cp = subprocess.run([str(binary), "--workload", "chase", "--size", "4M", *argv],
                            capture_output=True, text=True)
        assert cp.returncode == 2 and words in cp.stderr, cp.stderr
    with pytest.raises(ExperimentError, match="window"):
        HugelabMem(window_ms=0.1)
