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
(hugelab.workloads.jvm.threads: N threads with `-Xss<thread_stack>`, parked; metric `rss_mib`,
the JVM's Native Memory Tracking summary in evidence["app_costs"]).
Evidence: the JVM's own report (`-Xlog:pagesize`: the heap's `page_size`, and the warning it
prints when it falls back, `UseLargePages disabled, no large pages configured and available on
the system`; `-Xlog:gc+init`: `Large Page Support: ...`), judged as the app layer by
jvm/evidence.check_jvm, beside the tree's smaps (the workload layer). A JVM that
fell back exits 0 and runs at 4 KiB: such a trial is contradicted, never counted.

`workload.JvmBenchmark` is the kind's class and `workload.KIND` its declaration, both named
here too; the other modules each do one job: `flags` (the java command line, the backing its
switches give, the pool they take), `output` (the JVM's page report, version and the
benchmark's metric, read), `evidence` (the app-layer judge), `userjar` (the user's jar:
checked, copied into a domain), `threads` (the many-threads program: its keys, its build,
its flags) and `nmt` (its report: NMT summary and smaps_rollup, read).
"""

from hugelab.workloads.jvm.evidence import check_jvm, judge
from hugelab.workloads.jvm.output import parse_jvm_report
from hugelab.workloads.jvm.workload import KIND, JvmBenchmark, load_seconds

__all__ = ["KIND", "JvmBenchmark", "check_jvm", "judge", "load_seconds", "parse_jvm_report"]
