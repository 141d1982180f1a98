"""The jvm kind: OpenJDK running Sunflow's benchmark with the arm's large-page switches; its
command line, pool sizing, settings checks, the JVM's own page-size report as app evidence, and
for real: a JVM without a pool falls back and is contradicted."""

from __future__ import annotations

import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.experiment import Arm
from hugelab.trial.appevidence import app_check
from hugelab.trial.evidence import CONTRADICTED, NOT_APPLICABLE, VERIFIED
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.jvm import JvmBenchmark, check_jvm, judge, parse_jvm_report
from hugelab.workloads.registry import build_workload, with_arm
from tests.hostguard import host_state, workload_processes

FELL_BACK = """\
[0.001s][info][pagesize] Using the default large page size: 2M
[0.001s][info][pagesize] Large page size (2M) failed sanity check, checking if smaller large page sizes are usable
[0.001s][warning][pagesize] UseLargePages disabled, no large pages configured and available on the system.
[0.001s][info   ][pagesize] Large page support disabled.
[0.005s][info   ][pagesize] Heap:  min=256M max=256M base=0x00000000f0000000 page_size=4K size=256M
[0.016s][info   ][gc,init ] Version: 17.0.15+6-Debian-1deb12u1 (release)
[0.016s][info   ][gc,init ] Large Page Support: Disabled
BENCH  info  :   * Average FPS:         7.73
"""
EXPLICIT = """\
[0.001s][info][pagesize] Large page support enabled. Usable page sizes: 4k, 2M. Default large page size: 2M.
[0.005s][info][pagesize] Heap:  min=256M max=256M base=0x00000000f0000000 page_size=2M size=256M
[0.012s][info][gc,init ] Large Page Support: Enabled (Explicit)
"""


def jvm(**app: object) -> JvmBenchmark:
    return with_arm(build_workload("jvm", {"heap": "256M"}),  # type: ignore[return-value]
                    Arm("x", "4k", app=tuple(app.items())))


def test_argv_carries_the_arms_switches_and_the_page_size_log(tmp_path):
    argv = jvm(UseLargePages=True, LargePageSizeInBytes="1G", heap="1G").argv()
    assert argv[:4] == ["java", "-Xms1G", "-Xmx1G", "-XX:+UseG1GC"]
    assert "-XX:+UseLargePages" in argv and "-XX:LargePageSizeInBytes=1G" in argv
    assert "-Xlog:pagesize,gc+init:stderr" in argv and argv[-3:] == ["SunflowGUI", "-nogui",
                                                                     "-rtbench"]
    thp = jvm(UseTransparentHugePages=True, gc="Parallel", AlwaysPreTouch=False).argv()
    assert "-XX:+UseTransparentHugePages" in thp and "-XX:+UseParallelGC" in thp
    assert "-XX:+AlwaysPreTouch" not in thp and "-XX:+UseLargePages" not in thp
    jar = tmp_path / "x.jar"
    jar.write_bytes(b"PK\x03\x04")
    own = JvmBenchmark(jar=str(jar), args=("-n", "3"), regex=r"score (\d+)", unit="ops/s")
    assert own.argv()[-4:] == ["-jar", str(jar), "-n", "3"]


def test_pool_size_follows_the_heap_and_the_page_size():
    # measured: 256 MiB heap, G1, default code cache -> 252 pages of 2 MiB
    assert jvm(UseLargePages=True).hugetlb_bytes_for("2M") == 252 * (2 << 20)
    assert jvm(UseLargePages=True, heap="1536M").hugetlb_bytes_for("1G") == 2 << 30


@pytest.mark.parametrize("app, words", [
    ({"UseHugePages": True}, "unknown app setting 'UseHugePages'"),
    ({"UseLargePages": "yes"}, "app UseLargePages must be true or false"),
    ({"heap": "lots"}, "heap: invalid size 'lots'"),
    ({"gc": "Z"}, "gc must be one of G1, Parallel, Serial, Shenandoah"),
    ({"UseLargePages": True, "UseTransparentHugePages": True}, "exclude each other"),
])
def test_bad_settings_say_what_is_wrong(app, words):
    with pytest.raises(ExperimentError) as exc:
        jvm(**app)
    assert words in exc.value.message and exc.value.message.startswith("arm 'x': workload 'jvm'")


def test_preflight_refuses_a_backing_the_switches_do_not_give():
    jvm(UseLargePages=True).preflight("hugetlb-2M")
    jvm(UseLargePages=True, LargePageSizeInBytes="1G").preflight("hugetlb-1G")
    jvm(UseTransparentHugePages=True).preflight("thp")
    jvm().preflight("4k")
    with pytest.raises(ExperimentError, match="these give 'hugetlb-2M'") as exc:
        jvm(UseLargePages=True).preflight("thp")
    assert "UseTransparentHugePages" in (exc.value.hint or "")
    with pytest.raises(ExperimentError, match="does not exist") as exc:
        JvmBenchmark(jar="/nonexistent.jar", regex="(x)")  # as the experiment loads
    assert "java -jar JAR" in (exc.value.hint or "")
    with pytest.raises(ExperimentError, match="is not a jar"):
        JvmBenchmark(jar="/etc/hostname", regex="(x)")
    with pytest.raises(ExperimentError, match="needs regex"):
        JvmBenchmark(jar="/x.jar")


def test_the_jvm_report_is_parsed_and_judged():
    report = parse_jvm_report(FELL_BACK)
    assert report["heap_page_kb"] == 4 and report["large_page_support"] == "Disabled"
    assert report["warnings"] == ["UseLargePages disabled, no large pages configured and "
                                  "available on the system."]
    fell = check_jvm({"UseLargePages": True}, None, report)
    assert fell.status == CONTRADICTED and "UseLargePages disabled" in fell.reason
    assert check_jvm({}, None, report).status == VERIFIED  # 4k asked, 4k had
    explicit = parse_jvm_report(EXPLICIT)
    assert check_jvm({"UseLargePages": True}, None, explicit).status == VERIFIED
    one_gig = check_jvm({"UseLargePages": True}, 1 << 30, explicit)
    assert one_gig.status == CONTRADICTED and "1G pages, but the heap has 2M" in one_gig.reason
    assert check_jvm({"UseTransparentHugePages": True}, None, explicit).status == VERIFIED
    assert check_jvm({}, None, explicit).status == CONTRADICTED
    assert check_jvm({}, None, parse_jvm_report("")).status == NOT_APPLICABLE


def test_parse_takes_the_metric_and_hands_over_the_app_check():
    res = ExecResult(["java"], 0, "", FELL_BACK, 12.0)
    out = jvm(UseLargePages=True).parse(res)
    assert out.value == 7.73 and out.primary == "fps" and out.better == "higher"
    assert app_check(out.evidence, judge).status == CONTRADICTED  # type: ignore[union-attr]
    with pytest.raises(WorkloadError, match="no metric"):
        jvm().parse(ExecResult(["java"], 0, "", "nothing", 1.0))
    with pytest.raises(WorkloadError, match="java exited with 1"):
        jvm().parse(ExecResult(["java"], 1, "", "Error: Could not create the JVM", 1.0))


@pytest.mark.host
@pytest.mark.slow
def test_a_jvm_without_a_pool_falls_back_and_is_contradicted():
    """No 1 GiB pool: the JVM runs at 4 KiB and exits 0; the app layer says so. With no pool
    at all the JVM warns that it disabled large pages; beside another user's 2 MiB pool it
    keeps large pages 'enabled' yet the heap still gets 4K pages, which the check reads.
    (Pools on this host stay as found: none of 1 GiB is taken.)"""
    before, procs = host_state(), workload_processes()
    if before.get("pool1048576", "0") != "0":
        pytest.skip("this host keeps a 1 GiB pool")
    w = jvm(UseLargePages=True, LargePageSizeInBytes="1G", heap="128M")
    out = w.run(NativeTarget(), "hugetlb-1G")
    check = app_check(out.evidence, judge)
    assert out.value > 0 and check is not None and check.status == CONTRADICTED
    assert "UseLargePages disabled" in check.reason or "heap has 4K pages" in check.reason
    assert host_state() == before and workload_processes() == procs
