"""What hugelab's two ways into a user's guest share (qemu-guest-agent, SSH): the workload's
process tree sampled through a file reader while it runs, and hugelab's static tools copied in.

A subclass provides `read(path)` (a small guest file, None when it cannot be opened) and
`_install(guest_path, data)` (write an executable), and runs each program under `_watch`, which
polls for its end every POLL_S and samples its tree every SAMPLE_S, so the evidence rules are
those of hugelab's own guests.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hugelab.errors import CommandError, VMError
from hugelab.trial import procscan
from hugelab.workloads.base import ExecResult
from hugelab.workloads.registry import kinds

SAMPLE_S = 1.0  # each sample is several round trips: keep them rare
POLL_S = 0.05  # the end of a program is seen within POLL_S (its wall time)


def copied_tools() -> set[str]:
    """hugelab's own static programs the kinds run, copied into a user's guest once."""
    return {p for k in kinds().values() for p in k.own_programs}


class RemoteTarget:
    """The Target protocol's shared half for a guest hugelab reaches from outside."""

    place = "domain"  # a guest with files of its own (hugelab.workloads.guestside.in_domain)

    def __init__(self, name: str, *, slack_s: float = 60.0) -> None:
        self.name = name
        self.slack_s = slack_s
        self.trees: list[dict[str, Any]] = []
        self.copied: dict[str, str] = {}

    # --- what a channel provides ------------------------------------------------------------
    def read(self, path: str) -> str | None:
        raise NotImplementedError

    def _install(self, guest_path: str, data: bytes) -> None:
        raise NotImplementedError

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        raise NotImplementedError

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes) -> None:
        """A user's file (a jar, a dump) copied into the guest as it is."""
        try:
            self._install(path, data)
        except VMError as exc:
            raise VMError(f"cannot copy a file into guest {self.name} ({path}): "
                          f"{exc.message}") from exc

    # --- shared ----------------------------------------------------------------------------
    def tree(self) -> dict[str, Any]:
        seen = [t for t in self.trees if t.get("samples")]
        out: dict[str, Any] = {}
        for t in seen:
            out = procscan.merge_peak(out, t)
        if seen:
            out["samples"] = sum(int(t["samples"]) for t in seen)
        return out

    def _members(self, root: int) -> list[int]:
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            text = self.read(f"/proc/{pid}/task/{pid}/children") or ""
            todo += [int(c) for c in text.split() if c.isdigit()]
        return out

    def sample(self, pid: int) -> dict[str, Any]:
        s = procscan.measure(self._members(pid), read=self.read)
        s.pop("walk_cpu_s", None)  # the guest's CPU, not this host's: not a figure here
        return s

    def with_tools(self, argv: list[str]) -> list[str]:
        """argv with hugelab's own static programs (kinds' own_programs) copied in once, named by
        their path in the guest."""
        tool = argv[0]
        if Path(tool).name not in copied_tools() or not Path(tool).is_absolute():
            return argv
        if tool not in self.copied:
            guest = f"/tmp/{Path(tool).name}"
            try:
                self._install(guest, Path(tool).read_bytes())
            except VMError as exc:
                raise VMError(f"cannot copy {Path(tool).name} into the guest: {exc.message}"
                              ) from exc
            self.copied[tool] = guest
        return [self.copied[tool], *argv[1:]]

    def _watch(self, argv: list[str], t0: float, timeout: float | None,
               exited: Callable[[], bool], pid: Callable[[], int | None],
               stop: Callable[[], None]) -> None:
        """Wait for the program's end (`exited`), sampling the tree of `pid()` (None: not yet
        known); past its timeout plus slack, `stop()` it and raise CommandError."""
        deadline = None if timeout is None else t0 + timeout + self.slack_s
        peak: dict[str, Any] = {}
        samples = 0
        next_sample = time.monotonic()  # at once, then every SAMPLE_S
        while not exited():
            now = time.monotonic()
            if deadline is not None and now > deadline:
                stop()
                raise CommandError(argv, -1, f"timed out after {timeout}s (in guest "
                                   f"{self.name})")
            root = pid() if now >= next_sample else None
            if root is not None:
                s = self.sample(root)
                if s.get("processes"):
                    peak, samples = procscan.merge_peak(peak, s), samples + 1
                next_sample = time.monotonic() + SAMPLE_S
            time.sleep(POLL_S)
        if samples:
            self.trees.append({**peak, "samples": samples})

    def explain(self, res: ExecResult) -> ExecResult:
        """A failed program's result with the guest's own account of its end added to its
        stderr: the signal that ended it, and whether the guest's OOM killer has run since the
        guest booted (a transient copy boots for its trial; a killed program says nothing of
        it itself, and the trial's reason would be only 'exited with -9: (no output)')."""
        if res.returncode == 0:
            return res
        notes = []
        if res.returncode < 0:
            notes.append(f"ended by signal {-res.returncode} in guest {self.name}")
        m = re.search(r"^oom_kill (\d+)$", self.read("/proc/vmstat") or "", re.M)
        if m and int(m[1]) > 0:
            notes.append(f"the guest's OOM killer has ended {m[1]} process(es) since it booted "
                         "(oom_kill in its /proc/vmstat): the guest ran out of memory")
        if not notes:
            return res
        said = "\n".join(f"[hugelab: {n}]" for n in notes)
        return dataclasses.replace(res, stderr=f"{res.stderr.rstrip()}\n{said}"
                                   if res.stderr.strip() else said)

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        text = self.read(path)
        if text is None:
            raise VMError(f"guest {self.name} cannot read {path}")
        return text
