"""The native Target: runs a workload's argv on this host and measures its resource usage."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from hugelab.errors import CommandError, ToolMissingError
from hugelab.proc import package_of, spawn
from hugelab.trial.procscan import wait_tree
from hugelab.workloads.base import ExecResult

READ_AFTER_EXIT_S = 5.0  # how long output may still arrive once the process has exited


def _drain(stream: IO[bytes], sink: list[bytes]) -> None:
    """Read until EOF in chunks, so what arrived is there even if EOF never comes (a
    background child that inherited the pipe)."""
    fd = stream.fileno()
    while chunk := os.read(fd, 1 << 16):
        sink.append(chunk)


def _text(sink: list[bytes]) -> str:
    return b"".join(sink).decode("utf-8", "replace")


class NativeTarget:
    """Runs processes directly on the host, each through `spawn` (contained in the current trial
    scope); rusage comes from wait4() of the child itself."""

    name = "native"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        t0 = time.perf_counter()
        try:
            p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        except FileNotFoundError as exc:
            tool = Path(argv[0]).name
            raise ToolMissingError(tool, package_of(tool)) from exc
        out: list[bytes] = []
        err: list[bytes] = []
        readers = [threading.Thread(target=_drain, args=(s, sink), daemon=True)
                   for s, sink in ((p.stdout, out), (p.stderr, err))]
        for r in readers:
            r.start()
        p.returncode, usage, timed_out = wait_tree(p.pid, timeout)
        wall = time.perf_counter() - t0
        deadline = time.monotonic() + READ_AFTER_EXIT_S
        for r in readers:  # a child left holding the pipe must not hang the trial: the trial
            r.join(max(0.0, deadline - time.monotonic()))  # scope kills it at the end
        if timed_out:
            raise CommandError(argv, -1, f"timed out after {timeout}s\n{_text(err)}")
        return ExecResult(argv, p.returncode, _text(out), _text(err), wall, usage)
