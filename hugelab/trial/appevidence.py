"""Evidence for an application's own huge-page switches and a process's own THP mode. Pure.

process layer (an arm's `process_thp`; the peak of the tree's per-process samples, see
hugelab.trial.procscan):
    never     every process of the tree shows `THP_enabled: 0` in /proc/PID/status, in every
              sample (harness processes around the workload, such as `perf stat`, aside)
    madvise   no process has THP outside the mappings it madvised (smaps: AnonHugePages only
              in mappings with `hg` in VmFlags)
app layer (the application's own switch, judged by its workload kind from the application's
own report and its mappings, and handed over as `evidence["app"]`: a Check's fields). A switch
the application ignored (a JVM that fell back to 4 KiB pages, a memcached -L that got no THP)
is contradicted and never counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hugelab.trial.evidence import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import amount

Judge = Callable[[Mapping[str, Any]], Check | None]

# hugelab's own wrappers around a workload's processes: `hugelab-thp` is seen under its own
# name only between its exec and its prctl, just before it execs the program (THP_enabled 1
# there is its start, not the workload's: a CI run's redis-persistence sample caught one), and
# `setpriv` (hugelab.proc's parent-death wrapper, outside hugelab-thp) only between the fork and
# its exec of hugelab-thp (a CI run's test_redis_rdb sample caught one): util-linux's setpriv
# always execs its command, so no workload runs under that name
HARNESS_COMMS = frozenset({"perf", "hugelab-thp", "setpriv"})


def _counts(tree: dict[str, Any], key: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in (tree.get(key) or {}).items()
            if v and str(k) not in HARNESS_COMMS}


def _names(counts: dict[str, int]) -> str:
    return ", ".join(sorted(counts))


def check_process(mode: str, tree: dict[str, Any], where: str = "host") -> Check:
    """The per-process THP mode `mode` ("never" or "madvise") against the tree's samples."""
    if not tree or not tree.get("samples"):
        return Check(NOT_APPLICABLE, f"the workload's processes on {where} ended before the "
                                     "first sample", "process")
    on = _counts(tree, "thp_enabled_by_comm")
    off = _counts(tree, "thp_disabled_by_comm")
    if not on and not off:
        return Check(NOT_APPLICABLE, "this kernel does not report THP_enabled per process "
                                     "(Linux 6.0+)", "process")
    if mode == "never":
        if on:
            return Check(CONTRADICTED, "asked for process THP 'never', but THP_enabled is 1 in "
                                       f"{_names(on)}", "process")
        return Check(VERIFIED, f"THP_enabled 0 in every process of the tree ({_names(off)}) "
                               "in every sample", "process")
    stray = _counts(tree, "unadvised_thp_kb_by_comm")
    if stray:
        kb = sum(stray.values())
        return Check(CONTRADICTED, f"asked for process THP 'madvise', but {amount(kb)} of THP "
                                   f"lie outside madvised mappings in {_names(stray)}", "process")
    return Check(VERIFIED, "no THP outside madvised mappings in any process of the tree "
                           f"({_names({**on, **off})})", "process")


def app_check(evidence: dict[str, Any], judge: Judge | None = None) -> Check | None:
    """The application layer's Check: a Check's fields a kind judged itself (evidence["app"]),
    else its kind's own rule (`judge`, from the kind's declaration) over what it recorded (its
    own report, its server's mappings); None for a workload without an application switch."""
    app = evidence.get("app")
    if isinstance(app, dict) and "status" in app:
        return Check(str(app["status"]), str(app.get("reason", "")), "app",
                     governs=bool(app.get("governs")))
    return judge(evidence) if judge is not None else None
