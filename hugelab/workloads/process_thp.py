"""An arm's `process_thp`: the workload's processes get their own THP mode under the host's.

    process_thp = "never"     every process the workload starts runs under
                              `hugelab-thp never` (prctl PR_SET_THP_DISABLE): no THP for it,
                              whatever the host mode
    process_thp = "madvise"   `hugelab-thp madvise` (PR_THP_DISABLE_EXCEPT_ADVISED, Linux 6.18+):
                              THP only in the mappings the program madvises

The setting is inherited over fork and kept across exec, so it covers the whole tree (a
server's children, a client's threads). Evidence: /proc/PID/status `THP_enabled` of every
process of the tree (0 under `never`) and the THP outside madvised mappings (none under
`madvise`), sampled by hugelab.trial.procscan and judged by hugelab.trial.appevidence.
"""

from __future__ import annotations

import functools
import shutil
from typing import Any

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.proc import package_of, run
from hugelab.workloads.base import ExecResult, Place, Target, place_of

MODES = ("never", "madvise")


def check_mode(kind: str, mode: Any) -> None:
    """ExperimentError unless `mode` is None or one of MODES (for a kind's __post_init__)."""
    if mode is not None and mode not in MODES:
        raise ExperimentError(f"{kind}: process_thp must be one of {', '.join(MODES)}, "
                              f"not {mode!r}")


@functools.cache
def unsupported(mode: str) -> str | None:
    """Why this kernel cannot give a process THP mode `mode` (None: it can), asked of the
    kernel itself through `hugelab-thp probe` (a prctl that sets nothing outside it)."""
    from hugelab.workloads.build import ensure_hugelab_thp
    cp = run([ensure_hugelab_thp(), "probe", mode], check=False, timeout=30)
    if cp.returncode == 0:
        return None
    return cp.stderr.strip().removeprefix("hugelab-thp: ") or f"exit {cp.returncode}"


def preflight(kind: str, mode: str | None) -> None:
    """ExperimentError, before any host change, when the kernel lacks `mode`."""
    if mode is None:
        return
    why = unsupported(mode)
    if why:
        raise ExperimentError(f"{kind}: process_thp = {mode!r} is not available here: {why}",
                              hint="process_thp = \"never\" works on every kernel with THP; "
                                   "\"madvise\" needs Linux 6.18 or newer")


def wrap(argv: list[str], mode: str | None, target: Any = None) -> list[str]:
    """`argv` run under `hugelab-thp MODE` (the program resolved first, so a missing one is
    named with its Debian package); `argv` itself when `mode` is None."""
    if mode is None:
        return argv
    if target is not None and place_of(target) is not Place.NATIVE:
        raise WorkloadError(f"process_thp runs natively only; target {target.name!r} is a guest",
                            hint="set THP inside a guest with the arm's guest.thp")
    from hugelab.workloads.build import ensure_hugelab_thp
    program = argv[0]
    if "/" not in program:
        found = shutil.which(program)
        if found is None:
            raise ToolMissingError(program, package_of(program))
        program = found
    return [str(ensure_hugelab_thp()), mode, program, *argv[1:]]


class ThpTarget:
    """A Target whose every process (the workload's helpers too: mktemp, cp, cat) runs under
    `hugelab-thp MODE`; results carry the unwrapped argv."""

    def __init__(self, inner: Target, mode: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.mode = mode

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        r = self.inner.exec(wrap(argv, self.mode, self.inner), timeout=timeout)
        return ExecResult(argv, r.returncode, r.stdout, r.stderr, r.wall_s, r.rusage)


def target_for(target: Target, mode: str | None) -> Target:
    """`target` with every process under `mode`; `target` itself when mode is None."""
    return target if mode is None else ThpTarget(target, mode)
