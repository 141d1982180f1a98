"""The jvm kind's many-threads program (`threads = N`): what a JVM's thread stacks cost.

    [workload]            # kind jvm
    threads = 500          # hugelab's own program (hugelab/jsrc/HugelabThreads.java) instead
    thread_stack = "2m"    # of Sunflow: N threads with stacks of -Xss<thread_stack> (default:
    stack_touch = "64K"    # the JVM's own, 1 MiB on x86-64), each touching about stack_touch of
    hold_s = 3             # its stack, then all parked for hold_s seconds

The program is compiled once per source version with javac (cached like hugelab's C programs,
beside the package or under $XDG_CACHE_HOME/hugelab) and runs with
`-XX:NativeMemoryTracking=summary`. When every thread has touched its stack it prints, at the
same moment, the JVM's own NMT summary (the VM.native_memory diagnostic command jcmd sends, asked
in-process) and its /proc/self/smaps_rollup. Primary metric: `rss_mib`, the JVM's resident
memory at that moment (lower is better); `start_ms` is the time to start and touch the threads.
The NMT figures go to `evidence["app_costs"]` (nmt_thread_committed_kb, ...), the JVM's own
reference beside the cost record's RSS of the tree; jvm/nmt.py reads the program's report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.proc import run, which
from hugelab.units import parse_size
from hugelab.workloads.build import PACKAGE_DIR, candidate_dirs, first_writable, stamp_text
from hugelab.workloads.toolrun import format_size

SOURCE = PACKAGE_DIR / "jsrc" / "HugelabThreads.java"
MAIN = "HugelabThreads"
CLASS_DIR = "jvm-threads"
JAVAC_FLAGS = ("--release", "17", "-Xlint:all", "-Werror")
MAX_THREADS = 32768
MIN_STACK = 136 << 10  # HotSpot's smallest -Xss on Linux x86-64 (JDK 17)
MAX_STACK = 1 << 30    # HotSpot's largest ThreadStackSize
STACK_MARGIN = 64 << 10  # room a thread keeps beyond its touch (its frames, guard zones)
MAX_HOLD_S = 3600.0


def check(threads: Any, thread_stack: Any, stack_touch: Any, hold_s: Any) -> None:
    """The thread program's keys (threads > 0), ExperimentError naming the key otherwise."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 < threads <= MAX_THREADS:
        raise ExperimentError(f"jvm: threads must be a whole number from 1 to {MAX_THREADS} "
                              f"(0: Sunflow's benchmark), got {threads!r}")
    stack = size_of("thread_stack", thread_stack) if thread_stack is not None else 1 << 20
    if not MIN_STACK <= stack <= MAX_STACK:
        raise ExperimentError(f"jvm: thread_stack {thread_stack!r} is outside what the JVM "
                              f"takes for -Xss ({format_size(MIN_STACK)} to "
                              f"{format_size(MAX_STACK)})")
    touch = size_of("stack_touch", stack_touch)
    if touch + STACK_MARGIN > stack:
        raise ExperimentError(f"jvm: stack_touch {stack_touch!r} leaves a thread less than "
                              f"{format_size(STACK_MARGIN)} of its {format_size(stack)} stack",
                              hint="touch a little of each stack (stack_touch = \"64K\") or "
                                   "give larger stacks (thread_stack = \"2m\")")
    if isinstance(hold_s, bool) or not isinstance(hold_s, (int, float)) \
            or not 0 < hold_s <= MAX_HOLD_S:
        raise ExperimentError(f"jvm: hold_s must be seconds above 0 and at most "
                              f"{MAX_HOLD_S:.0f}, got {hold_s!r}")


def size_of(key: str, value: Any) -> int:
    """A size key in bytes, or ExperimentError naming it."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ExperimentError(f"jvm: {key}: {exc}") from None


def class_dir() -> Path:
    """Where the compiled program lives (created if need be; nothing compiled)."""
    return first_writable(candidate_dirs(), CLASS_DIR, "XDG_CACHE_HOME") / CLASS_DIR


def ensure_classes(javac: str = "javac") -> Path:
    """The directory holding a compiled HugelabThreads for the current source: compiled with
    javac only when the stamp beside it does not match (ToolMissingError naming the JDK
    package when javac is missing)."""
    out = class_dir()
    stamp = out / f"{MAIN}.stamp"
    want = stamp_text((SOURCE,), JAVAC_FLAGS)
    if (out / f"{MAIN}.class").is_file() and stamp.is_file() and stamp.read_text() == want:
        return out
    tmp = out.with_name(f".{CLASS_DIR}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        run([which(javac), *JAVAC_FLAGS, "-d", tmp, SOURCE], timeout=300)
        out.mkdir(exist_ok=True)
        for cls in tmp.glob("*.class"):
            os.replace(cls, out / cls.name)
        part = stamp.with_name(f".{stamp.name}.{os.getpid()}")
        part.write_text(want)
        os.replace(part, stamp)
    finally:
        for leftover in tmp.glob("*"):
            leftover.unlink()
        tmp.rmdir()
    return out


def jvm_flags(thread_stack: str | None) -> list[str]:
    """The JVM options the program needs: NMT on, and the threads' stack size."""
    flags = ["-XX:NativeMemoryTracking=summary"]
    if thread_stack is not None:
        flags.append(f"-Xss{format_size(parse_size(thread_stack))}")
    return flags


def main_args(threads: int, stack_touch: str, hold_s: float, classes: Path) -> list[str]:
    """`-cp DIR HugelabThreads THREADS TOUCH_KB HOLD_MS` (pure)."""
    return ["-cp", str(classes), MAIN, str(threads), str(parse_size(stack_touch) // 1024),
            str(round(hold_s * 1000))]
