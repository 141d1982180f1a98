"""What every workload that runs an outside tool shares: the tool's exit judged (`check_exit`,
a WorkloadError carrying its own first error line and its output's tail), its output summed up
(`tail`, `error_summary`, `failure_text`, `first_version`), its rusage as metrics, and what it
can be given (`format_size`, `check_backing`, `THP_ONLY_NOTE`)."""

from __future__ import annotations

import re
import shlex

from hugelab.errors import WorkloadError
from hugelab.experiment.backings import BACKINGS_SELF_REQUESTED, backing_error
from hugelab.workloads.base import ExecResult

THP_ONLY_NOTE = ("this workload cannot request huge pages itself: its backing is set only by "
                 "the host/guest THP mode (and, inside a guest, by the VM's memory backing)")


def tail(text: str, lines: int = 10) -> str:
    """The last `lines` non-empty lines of `text`."""
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


_ERROR_WORDS = re.compile(r"(?i)\b(error|invalid|fatal|fail(ed|ure)?|cannot|can't|unable|"
                          r"unrecognized|unknown|denied|not found)\b")


def error_summary(text: str, lines: int = 8) -> str:
    """The lines of `text` that say what went wrong (first 5), then its last `lines` lines.

    Tools like redis-benchmark print the reason first and a long usage text after it."""
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    key = [ln for ln in kept if _ERROR_WORDS.search(ln)][:5]
    rest = [ln for ln in kept[-lines:] if ln not in key]
    if key and rest and kept.index(rest[0]) > kept.index(key[-1]) + 1:
        key.append("...")
    return "\n".join(key + rest)


def failure_text(tool: str, res: ExecResult) -> str:
    """`tool exited with N: <its own first error line>`, then its other lines, then the
    command: a report's one-line reason (a "why failed" cell) shows what the tool said, not the
    start of a long command line. A tool ended by a signal also gets its stdout's summary: the
    JVM prints its fatal-error report there (a java in a domain ended by SIGABRT said nothing
    on stderr but its GC log, once in a suite run)."""
    err = error_summary(res.stderr) or error_summary(res.stdout) or "(no output)"
    first, *rest = err.splitlines()
    if res.returncode < 0 and res.stderr.strip() and (out := error_summary(res.stdout)):
        rest += ["stdout:", *out.splitlines()]  # a crash report (the JVM's) goes to stdout
    return "\n  ".join([f"{tool} exited with {res.returncode}: {first}", *rest,
                         f"command: {shlex.join(str(a) for a in res.argv)}"])


def check_exit(res: ExecResult, tool: str) -> None:
    """WorkloadError carrying the stderr tail (stdout tail when stderr is empty) on failure."""
    if res.returncode == 0:
        return
    exc = WorkloadError(failure_text(tool, res))
    exc.stderr = res.stderr  # type: ignore[attr-defined]
    exc.stdout = res.stdout  # type: ignore[attr-defined]
    exc.returncode = res.returncode  # type: ignore[attr-defined]
    raise exc


def check_backing(backing: str) -> None:
    """A backing an outside program can have: its memory is set by the host's knobs."""
    problem = backing_error(backing)
    if problem:
        raise WorkloadError(problem)
    if backing in BACKINGS_SELF_REQUESTED:
        raise WorkloadError(f"backing {backing!r} needs a workload that maps its own memory "
                            "that way (hugelab-mem); this program cannot be told to",
                            hint="use hugelab-mem, or thp / mthp-<size> with the arm's "
                                 "thp = \"always\"")


def format_size(n: int) -> str:
    """Bytes -> the shortest exact K/M/G/T form the tools accept ('2M', '1536K', '1000')."""
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def first_version(text: str, pattern: str) -> str | None:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1) if m else None


def rusage_metrics(res: ExecResult) -> dict[str, float]:
    """wall/user/sys time and page faults of one finished process (what the target gave)."""
    out = {"wall_s": res.wall_s}
    names = {"utime_s": "user_s", "stime_s": "sys_s", "minflt": "minflt", "majflt": "majflt",
             "maxrss_kb": "maxrss_kb"}
    for src, dst in names.items():
        if src in res.rusage:
            out[dst] = float(res.rusage[src])
    return out
