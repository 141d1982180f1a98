"""The native Target: runs a workload's argv on this host and measures its resource usage."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from hugelab.errors import CommandError, ToolMissingError
from hugelab.proc import APT_PACKAGES, spawn
from hugelab.workloads.base import ExecResult


def rusage_dict(ru: object) -> dict[str, float]:
    keys = {"minflt": "ru_minflt", "majflt": "ru_majflt", "utime_s": "ru_utime",
            "stime_s": "ru_stime", "maxrss_kb": "ru_maxrss", "nvcsw": "ru_nvcsw",
            "nivcsw": "ru_nivcsw"}
    return {k: float(getattr(ru, attr)) for k, attr in keys.items()}


def _drain(stream: IO[str], sink: list[str]) -> None:
    sink.append(stream.read())


class NativeTarget:
    """Runs processes directly on the host, each through `spawn` (contained in the current trial
    scope); rusage comes from wait4() of the child itself."""

    name = "native"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        t0 = time.perf_counter()
        try:
            p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                      env=self.env)
        except FileNotFoundError as exc:
            tool = Path(argv[0]).name
            raise ToolMissingError(tool, APT_PACKAGES.get(tool, tool)) from exc
        out: list[str] = []
        err: list[str] = []
        readers = [threading.Thread(target=_drain, args=(s, sink), daemon=True)
                   for s, sink in ((p.stdout, out), (p.stderr, err))]
        for r in readers:
            r.start()
        timer = None
        timed_out = threading.Event()
        if timeout is not None:
            def _kill() -> None:
                timed_out.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)  # the whole session: workers too
            timer = threading.Timer(timeout, _kill)
            timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            if timer is not None:
                timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        for r in readers:
            r.join()
        wall = time.perf_counter() - t0
        if timed_out.is_set():
            raise CommandError(argv, -1, f"timed out after {timeout}s\n{''.join(err)}")
        return ExecResult(argv, p.returncode, "".join(out), "".join(err), wall, rusage_dict(ru))
