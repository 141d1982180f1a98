"""The jvm kind's workload and declaration: OpenJDK 17 running Sunflow's benchmark, the user's
jar or hugelab's many-threads program, under the arm's JVM large-page switches (see the
package's docstring); its command line is jvm/flags.py's, its output jvm/output.py's, its
judge jvm/evidence.py's."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.proc import which
from hugelab.units import parse_size
from hugelab.workloads.base import Better, ExecResult, Target, WorkloadResult
from hugelab.workloads.guestside import GuestSide, in_domain, refuse_process_thp
from hugelab.workloads.jvm import threads as jvm_threads
from hugelab.workloads.jvm.evidence import judge
from hugelab.workloads.jvm.flags import (
    GCS,
    SUNFLOW,
    SUNFLOW_JARS,
    backing_of,
    java_argv,
    pool_bytes,
)
from hugelab.workloads.jvm.nmt import parse_output
from hugelab.workloads.jvm.output import (
    SUNFLOW_REGEX,
    benchmark_metrics,
    jvm_version,
    parse_jvm_report,
)
from hugelab.workloads.jvm.userjar import check_jar, put_jar
from hugelab.workloads.kind import METRIC_KEYS, Kind, Tool, key, keys_of, program, timeout
from hugelab.workloads.process_thp import check_mode, target_for
from hugelab.workloads.toolrun import check_exit

APP_KEYS: dict[str, type] = {"UseLargePages": bool, "UseTransparentHugePages": bool,
                             "LargePageSizeInBytes": str, "AlwaysPreTouch": bool, "heap": str,
                             "gc": str, "options": tuple}


def check_gc(s: dict[str, Any]) -> None:
    """An arm's JVM settings name a collector hugelab knows."""
    if s["gc"] not in GCS:
        raise ExperimentError(f"jvm: gc must be one of {', '.join(GCS)}, not {s['gc']!r}")


def check_pages(s: dict[str, Any]) -> None:
    """An arm's JVM settings ask for hugetlb pages or THP, not both."""
    if s["UseLargePages"] and s["UseTransparentHugePages"]:
        raise ExperimentError("jvm: UseLargePages (hugetlb) and UseTransparentHugePages "
                              "(THP) exclude each other; an arm sets one")


@dataclass(frozen=True)
class JvmBenchmark:
    """OpenJDK running Sunflow's benchmark (or the user's jar); primary metric from its output."""

    heap: str = key("256M", "-Xms and -Xmx", unit="bytes")
    gc: str = key("G1", 'the collector ("G1", "Parallel", ...)')
    pretouch: bool = key(True, "-XX:+AlwaysPreTouch: the whole heap resident before the run")
    options: tuple[str, ...] = key((), "more JVM options")
    jar: str | None = key(None, "your own benchmark (java -jar JAR ARGS) instead of Sunflow")
    args: tuple[str, ...] = key((), "the jar's arguments")
    regex: str | None = key(None, "the jar's metric: one group matching a number in its output")
    better: Better = key("higher", METRIC_KEYS["better"])
    unit: str = key("FPS", METRIC_KEYS["unit"])
    name: str = key("fps", METRIC_KEYS["name"])
    java: str = key("java", program("java", "java"))
    timeout_s: float = key(600.0, timeout("a run"))
    app: tuple[tuple[str, Any], ...] = key((), "the JVM's own switches for the arm "
                                               "(UseLargePages, UseTransparentHugePages)")
    process_thp: str | None = None
    # threads > 0: hugelab's many-threads program (threads.py)
    threads: int = key(0, ">0: hugelab's many-threads program instead of Sunflow")
    thread_stack: str | None = key(None, "those threads' -Xss (none: the JVM's default)",
                                   unit="bytes")
    stack_touch: str = key("64K", "about how much of its stack each thread touches",
                           unit="bytes")
    hold_s: float = key(3.0, "how long the threads stay parked once measured", unit="s")
    kind: str = field(default="jvm", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "app", tuple((k, tuple(v) if isinstance(v, list) else v)
                                              for k, v in self.app))
        check_mode("jvm", self.process_thp)
        for what, size in (("heap", self.heap_size), ("LargePageSizeInBytes", self.page_size)):
            if size is not None and not isinstance(size, int):
                raise ExperimentError(f"jvm: {what}: {size}")
        check_gc(self.settings())
        self._check_own_benchmark()
        check_pages(self.settings())

    def for_arm(self, arm: Any) -> JvmBenchmark:
        """The many-threads program runs on the host and in hugelab's own guests only: an arm
        in a user's domain is refused before any trial (not once per trial after its boot)."""
        if self.threads and arm.vm is not None and arm.vm.domain is not None:
            raise ExperimentError(f"arm '{arm.name}': jvm threads runs hugelab's own program, "
                                  "which is not copied into a user's domain",
                                  hint="run it natively or in hugelab's own guests (no domain), "
                                       "or measure your jar there (jar = ...)")
        return self

    def _check_own_benchmark(self) -> None:
        """hugelab's threads program or the user's jar, never both; each checked."""
        if self.threads:
            if self.jar is not None or self.regex is not None:
                raise ExperimentError("jvm: threads runs hugelab's own many-threads program; "
                                      "jar and regex run yours: set one or the other")
            jvm_threads.check(self.threads, self.thread_stack, self.stack_touch, self.hold_s)
        check_jar(self.jar, self.regex)

    # --- settings ---------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The JVM settings of this arm: the workload's defaults, then the arm's `app`."""
        s: dict[str, Any] = {"UseLargePages": False, "UseTransparentHugePages": False,
                             "LargePageSizeInBytes": None, "AlwaysPreTouch": self.pretouch,
                             "heap": self.heap, "gc": self.gc, "options": self.options}
        s.update(dict(self.app))
        return s

    @property
    def heap_size(self) -> int | str:
        """The heap in bytes, or the reason it is not a size."""
        try:
            return parse_size(self.settings()["heap"])
        except ValueError as exc:
            return str(exc)

    @property
    def page_size(self) -> int | str | None:
        value = self.settings()["LargePageSizeInBytes"]
        if value is None:
            return None
        try:
            return parse_size(value)
        except ValueError as exc:
            return str(exc)

    def expected_backing(self) -> str:
        """The arm backing these switches give the heap: hugetlb-<S>, thp or 4k."""
        page = self.page_size
        return backing_of(self.settings(), page if isinstance(page, int) else None)

    def hugetlb_bytes_for(self, size: str | None) -> int | None:
        """Pool bytes one JVM takes with pages of `size` ("2M", "1G"): jvm/flags.pool_bytes.
        None without a page size (an arm with no hugetlb pool)."""
        if not size:
            return None
        heap = self.heap_size
        assert isinstance(heap, int)
        return pool_bytes(heap, parse_size(size))

    # --- before any host change -------------------------------------------------------------
    def preflight(self, backing: str) -> None:
        """Java and the benchmark installed; the arm's backing is what its switches give."""
        which(self.java)  # ToolMissingError naming openjdk-17-jdk-headless
        if self.threads:
            jvm_threads.ensure_classes()  # javac, once per source version
        elif self.jar is None:
            for jar in SUNFLOW_JARS:
                if not os.path.isfile(jar):
                    raise ToolMissingError(os.path.basename(jar), "sunflow")
        elif not os.path.isfile(self.jar):
            raise ExperimentError(f"jvm: jar {self.jar!r} does not exist")
        want = self.expected_backing()
        if backing != want:
            raise ExperimentError(
                f"jvm: an arm with backing {backing!r} must set the JVM switches that give it; "
                f"these give {want!r}",
                hint="hugetlb-2M: app = { UseLargePages = true }; hugetlb-1G: add "
                     "LargePageSizeInBytes = \"1G\"; thp: app = { UseTransparentHugePages = "
                     "true }; 4k: neither")

    # --- one trial --------------------------------------------------------------------------
    def argv(self) -> list[str]:
        """The java command line (pure)."""
        flags: list[str] = []
        if self.threads:
            flags = jvm_threads.jvm_flags(self.thread_stack)
            bench = jvm_threads.main_args(self.threads, self.stack_touch, self.hold_s,
                                          jvm_threads.class_dir())
        elif self.jar is not None:
            bench = ["-jar", self.jar, *self.args]
        else:
            bench = list(SUNFLOW)
        page = self.page_size
        return java_argv(self.java, self.settings(), int(self.heap_size),  # type: ignore[arg-type]
                         page if isinstance(page, int) else None, flags, bench)

    @property
    def primary(self) -> str:
        if self.threads:
            return "rss_mib"
        return self.name if self.jar is not None else "fps"

    def _metrics(self, res: ExecResult) -> tuple[dict[str, float], dict[str, Any]]:
        """(metrics, evidence beyond the JVM's report) of a finished run (pure)."""
        if self.threads:
            metrics, costs = parse_output(res.stdout)
            return {**metrics, "wall_s": res.wall_s}, {"app_costs": costs}
        return benchmark_metrics(res.stdout + "\n" + res.stderr, self.regex or SUNFLOW_REGEX,
                                 self.primary, res.wall_s), {}

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics, the JVM's report and its app-layer check of one finished run (pure)."""
        check_exit(res, "java")
        metrics, evidence = self._metrics(res)
        report = parse_jvm_report(res.stderr)
        settings = {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings().items()}
        report["settings"] = settings  # the app evidence rule: hugelab.trial.appevidence
        report["page_size"] = self.page_size if isinstance(self.page_size, int) else None
        bench = ("hugelab threads" if self.threads else
                 "user jar" if self.jar else "sunflow -rtbench")
        info: dict[str, Any] = {"tool": "java", "version": jvm_version(res.stderr),
                                "benchmark": bench, "jvm_settings": settings,
                                "warnings": report["warnings"]}
        unit, better = self.unit, self.better
        if not self.jar:
            unit, better = ("MiB", "lower") if self.threads else ("FPS", "higher")
        return WorkloadResult(metrics=metrics, primary=self.primary, unit=unit, better=better,
                              evidence={"jvm": report, **evidence}, info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        if backing != self.expected_backing():
            raise WorkloadError(f"jvm: backing {backing!r} needs the JVM switches that give it; "
                                f"this arm's give {self.expected_backing()!r}")
        if self.threads and not in_domain(target):
            jvm_threads.ensure_classes()
        if in_domain(target):
            res = self._run_in_domain(target)
        else:
            res = target_for(target, self.process_thp).exec(self.argv(), timeout=self.timeout_s)
        result = self.parse(res)
        result.info["backing"] = backing
        result.info["argv"] = self.argv()
        return result

    def _run_in_domain(self, target: Target) -> ExecResult:
        """The guest's own java (and Sunflow, or the user's jar, copied in for the trial and
        removed after it) in a user's domain."""
        refuse_process_thp("jvm", self.process_thp)
        if self.threads:
            raise WorkloadError("jvm: threads runs hugelab's own program on the host; it is "
                                "not copied into a user's domain")
        argv = self.argv()
        with GuestSide(target, "jvm") as side:  # type: ignore[arg-type]
            if self.jar is not None:
                argv = put_jar(side, self.jar, argv)
            return target.exec(argv, timeout=self.timeout_s)


ASSUMED_SUNFLOW_S = 30.0  # Sunflow's benchmark (or a user's jar), with the JVM's start


def load_seconds(table: dict[str, Any]) -> float:
    """About how long a trial takes: the threads program's hold plus the JVM's start, or
    ASSUMED_SUNFLOW_S."""
    if int(table.get("threads", 0) or 0) > 0:
        return float(table.get("hold_s", 3.0)) + 5.0
    return ASSUMED_SUNFLOW_S


KIND = Kind(
    keys=keys_of(JvmBenchmark),
    name="jvm", workload=JvmBenchmark,
    summary="OpenJDK running Sunflow's benchmark, your jar or many parked threads (NMT as "
            "reference), with UseLargePages / UseTransparentHugePages per arm",
    where=frozenset({"host", "guest", "domain"}),
    tools=(Tool("java", "openjdk-17-jdk-headless"), Tool("javac", "openjdk-17-jdk-headless"),
           Tool("sunflow", "sunflow")),
    seconds=load_seconds, judge=judge, app=APP_KEYS)
