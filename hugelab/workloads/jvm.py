"""A JVM (Debian's OpenJDK 17) running a real Java benchmark, with the JVM's own large-page
switches per arm.

Default benchmark: Sunflow's ray-tracing benchmark from Debian's `sunflow` package (the renderer
DaCapo's `sunflow` uses), `SunflowGUI -nogui -rtbench`: metric "Average FPS" (higher). Or the
user's own `jar` and `args`, with a `regex` (one group) for its metric.

The arm's `app` table holds the JVM's switches:

    app = { UseLargePages = true }                 hugetlb pool (arm backing hugetlb-2M): the
                                                   JVM maps the whole heap (and code cache)
                                                   from the pool up front
    app = { UseLargePages = true, LargePageSizeInBytes = "1G" }      (backing hugetlb-1G)
    app = { UseTransparentHugePages = true }       THP: the JVM madvises its heap (backing thp)
    app = { heap = "1G", gc = "Parallel", AlwaysPreTouch = false, options = ["-XX:..."] }

The command line: `java -Xms<heap> -Xmx<heap> -XX:+Use<gc>GC [-XX:+AlwaysPreTouch]
<switches> -Xlog:pagesize,gc+init:stderr <options> -cp <sunflow jars> SunflowGUI -nogui -rtbench`.
With `threads = N` the JVM runs hugelab's own many-threads program instead
(hugelab.workloads.jvm_threads: N threads with `-Xss<thread_stack>`, parked; metric `rss_mib`,
the JVM's Native Memory Tracking summary in evidence["app_costs"]).
Evidence: the JVM's own report (`-Xlog:pagesize`: the heap's `page_size`, and the warning it
prints when it falls back, `UseLargePages disabled, no large pages configured and available on
the system`; `-Xlog:gc+init`: `Large Page Support: ...`), judged as the app layer by
hugelab.trial.appevidence.check_jvm, beside the tree's smaps (the workload layer). A JVM that
fell back exits 0 and runs at 4 KiB: such a trial is contradicted, never counted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.proc import which
from hugelab.units import page_kb, page_label, parse_size
from hugelab.workloads import jvm_threads
from hugelab.workloads.base import Better, ExecResult, Target, WorkloadResult
from hugelab.workloads.command import check_exit, format_size, tail
from hugelab.workloads.guestside import GUEST_DIR, GuestSide, in_domain, refuse_process_thp
from hugelab.workloads.kind import Key, Kind, Tool
from hugelab.workloads.process_thp import check_mode, target_for

SUNFLOW_JARS = ("/usr/share/java/sunflow.jar", "/usr/share/java/sunflowGUI.jar")
SUNFLOW_MAIN = ("SunflowGUI", "-nogui", "-rtbench")
SUNFLOW_REGEX = r"Average FPS:\s*([0-9.]+)"
GCS = {"G1": "-XX:+UseG1GC", "Parallel": "-XX:+UseParallelGC", "Serial": "-XX:+UseSerialGC",
       "Shenandoah": "-XX:+UseShenandoahGC"}
APP_KEYS: dict[str, type] = {"UseLargePages": bool, "UseTransparentHugePages": bool,
                             "LargePageSizeInBytes": str, "AlwaysPreTouch": bool, "heap": str,
                             "gc": str, "options": tuple}
CODE_CACHE = 240 << 20  # ReservedCodeCacheSize's default with tiered compilation (JDK 17)
_LOG = "-Xlog:pagesize,gc+init:stderr"


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def parse_jvm_report(text: str) -> dict[str, Any]:
    """What the JVM said about its pages (pure): the heap's page size (KiB), `Large Page
    Support`, the usable sizes, and its page-size warnings (fallbacks, failed reservations)."""
    out: dict[str, Any] = {"heap_page_kb": None, "large_page_support": None,
                           "usable_page_sizes": None, "warnings": []}
    for line in text.splitlines():
        if m := re.search(r"\]\s*Heap:.*\bpage_size=(\d+)([KMG])", line):
            out["heap_page_kb"] = page_kb(m.group(1) + m.group(2))
        elif m := re.search(r"Large Page Support:\s*(.+?)\s*$", line):
            out["large_page_support"] = m.group(1)
        elif m := re.search(r"Usable page sizes: ([^.]+)\.", line):
            out["usable_page_sizes"] = m.group(1)
        if ("[warning][pagesize]" in line.replace(" ", "") or
                "Failed to reserve and commit memory" in line or "UseLargePages disabled" in line):
            msg = re.sub(r"^\[[^]]*\](\[[^]]*\])*\s*", "", line).strip()
            if msg not in out["warnings"]:
                out["warnings"].append(msg)
    return out


def jar_problem(path: str) -> str | None:
    """Why `path` is not a jar java could run, or None: checked as the experiment loads (a
    dry run included), not by every trial's java."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if head[:2] != b"PK":
        return "is not a jar (a jar is a zip file; this one does not start like one)"
    return None


@dataclass(frozen=True)
class JvmBenchmark:
    """OpenJDK running Sunflow's benchmark (or the user's jar); primary metric from its output."""

    heap: str = "256M"
    gc: str = "G1"
    pretouch: bool = True       # -XX:+AlwaysPreTouch: the whole heap resident before the run
    options: tuple[str, ...] = ()
    jar: str | None = None      # the user's own benchmark (java -jar JAR ARGS)
    args: tuple[str, ...] = ()
    regex: str | None = None    # the user's metric: one group matching a number
    better: Better = "higher"
    unit: str = "FPS"
    name: str = "fps"
    java: str = "java"
    timeout_s: float = 600.0
    app: tuple[tuple[str, Any], ...] = ()
    process_thp: str | None = None
    threads: int = 0            # >0: hugelab's many-threads program (jvm_threads), not Sunflow
    thread_stack: str | None = None  # its threads' -Xss (None: the JVM's default)
    stack_touch: str = "64K"    # about how much of its stack each thread touches
    hold_s: float = 3.0         # how long the threads stay parked once measured
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
        if self.settings()["gc"] not in GCS:
            raise ExperimentError(f"jvm: gc must be one of {', '.join(GCS)}, not "
                                  f"{self.settings()['gc']!r}")
        self._check_own_benchmark()
        s = self.settings()
        if s["UseLargePages"] and s["UseTransparentHugePages"]:
            raise ExperimentError("jvm: UseLargePages (hugetlb) and UseTransparentHugePages "
                                  "(THP) exclude each other; an arm sets one")

    def _check_own_benchmark(self) -> None:
        """The user's jar: a regex with one group for its metric, and a jar that is one."""
        if self.threads:
            if self.jar is not None or self.regex is not None:
                raise ExperimentError("jvm: threads runs hugelab's own many-threads program; "
                                      "jar and regex run yours: set one or the other")
            jvm_threads.check(self.threads, self.thread_stack, self.stack_touch, self.hold_s)
        if self.jar is not None and not self.regex:
            raise ExperimentError("jvm: a jar needs regex, with one group matching its metric")
        if self.regex is not None:
            try:
                groups = re.compile(self.regex).groups
            except re.error as exc:
                raise ExperimentError(f"jvm: bad regex {self.regex!r}: {exc}") from exc
            if groups != 1:
                raise ExperimentError(f"jvm: regex {self.regex!r} must have exactly one group")
        if self.jar is not None and (why := jar_problem(self.jar)):
            raise ExperimentError(f"jvm: jar {self.jar!r} {why}",
                                  hint="jar = the path of your benchmark's jar on this host "
                                       "(it runs as java -jar JAR ARGS)")

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
        s = self.settings()
        if s["UseLargePages"]:
            size = self.page_size if isinstance(self.page_size, int) else 2 << 20
            return f"hugetlb-{format_size(size)}"
        return "thp" if s["UseTransparentHugePages"] else "4k"

    def hugetlb_bytes_for(self, size: str | None) -> int | None:
        """Pool bytes one JVM takes with pages of `size` ("2M", "1G"): the heap rounded to
        whole pages; with 2 MiB pages also the code cache and G1's two marking bitmaps, which
        the JVM maps from the same pool (measured: a 256 MiB heap takes 252 pages). None
        without a page size (an arm with no hugetlb pool)."""
        if not size:
            return None
        page = parse_size(size)
        heap = self.heap_size
        assert isinstance(heap, int)
        need = _round_up(heap, page)
        if page <= 2 << 20:
            need += _round_up(CODE_CACHE, page) + 2 * _round_up(max(heap // 64, page), page)
        return need

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
        s = self.settings()
        heap = format_size(int(self.heap_size))  # type: ignore[arg-type]
        argv = [self.java, f"-Xms{heap}", f"-Xmx{heap}", GCS[s["gc"]]]
        if s["AlwaysPreTouch"]:
            argv.append("-XX:+AlwaysPreTouch")
        if s["UseLargePages"]:
            argv.append("-XX:+UseLargePages")
            if isinstance(self.page_size, int):
                argv.append(f"-XX:LargePageSizeInBytes={format_size(self.page_size)}")
        if s["UseTransparentHugePages"]:
            argv.append("-XX:+UseTransparentHugePages")
        if self.threads:
            argv += [_LOG, *jvm_threads.jvm_flags(self.thread_stack), *s["options"]]
            return argv + jvm_threads.main_args(self.threads, self.stack_touch, self.hold_s,
                                                jvm_threads.class_dir())
        argv += [_LOG, *s["options"]]
        if self.jar is not None:
            return argv + ["-jar", self.jar, *self.args]
        return argv + ["-cp", ":".join(SUNFLOW_JARS), *SUNFLOW_MAIN]

    @property
    def primary(self) -> str:
        if self.threads:
            return "rss_mib"
        return self.name if self.jar is not None else "fps"

    def _metrics(self, res: ExecResult) -> tuple[dict[str, float], dict[str, Any]]:
        """(metrics, evidence beyond the JVM's report) of a finished run (pure)."""
        if self.threads:
            metrics, costs = jvm_threads.parse_output(res.stdout)
            return {**metrics, "wall_s": res.wall_s}, {"app_costs": costs}
        text = res.stdout + "\n" + res.stderr
        m = re.search(self.regex or SUNFLOW_REGEX, text)
        if m is None:
            raise WorkloadError(f"java: no metric in its output ({self.regex or SUNFLOW_REGEX!r})"
                                f"\n  {tail(text, 5) or '(no output)'}")
        try:
            value = float(m.group(1))
        except ValueError as exc:
            raise WorkloadError(f"java: the metric matched {m.group(1)!r}, not a number") from exc
        metrics = {self.primary: value, "wall_s": res.wall_s}
        if t := re.search(r"Total time:\s*(\d+):(\d+):([0-9.]+)", text):
            metrics["bench_s"] = int(t[1]) * 3600 + int(t[2]) * 60 + float(t[3])
        return metrics, {}

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics, the JVM's report and its app-layer check of one finished run (pure)."""
        check_exit(res, "java")
        metrics, evidence = self._metrics(res)
        report = parse_jvm_report(res.stderr)
        version = re.search(r"Version: (\S+)", res.stderr)
        settings = {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings().items()}
        report["settings"] = settings  # the app evidence rule: hugelab.trial.appevidence
        report["page_size"] = self.page_size if isinstance(self.page_size, int) else None
        bench = ("hugelab threads" if self.threads else
                 "user jar" if self.jar else "sunflow -rtbench")
        info: dict[str, Any] = {"tool": "java", "version": version.group(1) if version else None,
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
                side.workdir()
                guest_jar = f"{GUEST_DIR}/{os.path.basename(self.jar)}"
                with open(self.jar, "rb") as f:
                    side.put_bytes(guest_jar, f.read())
                argv[argv.index(self.jar)] = guest_jar
            return target.exec(argv, timeout=self.timeout_s)


def check_jvm(settings: dict[str, Any], page_size: int | None, report: dict[str, Any]) -> Check:
    """A JVM's own report (-Xlog:pagesize, -Xlog:gc+init) against its switches: the heap's page
    size is the one asked for (hugetlb: LargePageSizeInBytes, default 2 MiB; THP: 2 MiB; neither:
    4 KiB), and a JVM that disabled UseLargePages for want of a pool is contradicted."""
    heap = report.get("heap_page_kb")
    support = report.get("large_page_support") or "not reported"
    if heap is None:
        return Check(NOT_APPLICABLE, "the JVM printed no heap page size (-Xlog:pagesize)", "app")
    if settings.get("UseLargePages"):
        want = (page_size or 2 << 20) // 1024
        fell_back = [w for w in report.get("warnings") or [] if "UseLargePages disabled" in w]
        if fell_back or heap != want:
            why = fell_back[0] if fell_back else f"Large Page Support: {support}"
            return Check(CONTRADICTED, f"asked for UseLargePages with {page_label(want)} pages, "
                                       f"but the heap has {page_label(heap)} pages ({why})", "app")
        return Check(VERIFIED, f"the JVM reports its heap in {page_label(heap)} pages "
                               f"(Large Page Support: {support})", "app")
    want = 2048 if settings.get("UseTransparentHugePages") else 4
    switch = "UseTransparentHugePages" if want == 2048 else "no large-page switch"
    if heap != want:
        return Check(CONTRADICTED, f"asked for {switch}, but the JVM reports its heap in "
                                   f"{page_label(heap)} pages (Large Page Support: {support})",
                     "app")
    return Check(VERIFIED, f"{switch}: the JVM reports its heap in {page_label(heap)} pages "
                           f"(Large Page Support: {support})", "app")


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer from the JVM's own report (evidence["jvm"]) against its switches."""
    jvm = evidence.get("jvm")
    if not isinstance(jvm, dict):
        return None
    return check_jvm(jvm.get("settings") or {}, jvm.get("page_size"), jvm)


ASSUMED_SUNFLOW_S = 30.0  # Sunflow's benchmark (or a user's jar), with the JVM's start


def load_seconds(table: dict[str, Any]) -> float:
    """About how long a trial takes: the threads program's hold plus the JVM's start, or
    ASSUMED_SUNFLOW_S."""
    if int(table.get("threads", 0) or 0) > 0:
        return float(table.get("hold_s", 3.0)) + 5.0
    return ASSUMED_SUNFLOW_S


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('heap', 'bytes', '-Xms and -Xmx'),
    Key('gc', '', 'the collector ("G1", "Parallel", ...)'),
    Key('pretouch', '', '-XX:+AlwaysPreTouch: the whole heap resident before the run'),
    Key('options', '', 'more JVM options'),
    Key('jar', '', 'your own benchmark (java -jar JAR ARGS) instead of Sunflow'),
    Key('args', '', "the jar's arguments"),
    Key('regex', '', "the jar's metric: one group matching a number in its output"),
    Key('better', '', 'whether a lower or higher value is better'),
    Key('unit', '', "the metric's unit, for the report"),
    Key('name', '', "the metric's name, for the report"),
    Key('java', '', 'the java program'),
    Key('timeout_s', 's', 'the longest a run may take'),
    Key('app', '', "the JVM's own switches for the arm (UseLargePages, UseTransparentHugePages)"),
    Key('threads', '', ">0: hugelab's many-threads program instead of Sunflow"),
    Key('thread_stack', 'bytes', "those threads' -Xss (none: the JVM's default)"),
    Key('stack_touch', 'bytes', 'about how much of its stack each thread touches'),
    Key('hold_s', 's', 'how long the threads stay parked once measured'),
)


KIND = Kind(
    keys=KEYS,
    name="jvm", workload=JvmBenchmark,
    summary="OpenJDK running Sunflow's benchmark, your jar or many parked threads (NMT as "
            "reference), with UseLargePages / UseTransparentHugePages per arm",
    where=frozenset({"host", "guest", "domain"}),
    tools=(Tool("java", "openjdk-17-jdk-headless"), Tool("javac", "openjdk-17-jdk-headless"),
           Tool("sunflow", "sunflow")),
    seconds=load_seconds, judge=judge, app=APP_KEYS)
