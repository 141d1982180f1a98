"""One trial's evidence judged: the rules for every layer its arm sets (workload, process,
the application's own switch, the guest's RAM on the host, the host state it ran in, and
whether a request-level trial measured enough to count), the verdict they make together, and
the (host, guest) cell of the report's grid it stands in.

    checks = layer_checks(arm, evidence, target, cell(arm)[0], min_fraction, judge)
    checks += host_state_check(monitors) + measurement_check(metrics, monitors)
    status, reason = judge_evidence(evidence, checks)   # evidence gains check/reason/checks
"""

from __future__ import annotations

from typing import Any

from hugelab.experiment import Arm
from hugelab.host.paths import REAL, HostPaths, parse_selected, read_text
from hugelab.trial.appevidence import Judge, app_check, check_process
from hugelab.trial.evidence import (
    CONTRADICTED,
    NOT_APPLICABLE,
    VERIFIED,
    Check,
    check_vm,
    check_workload,
    combine,
)


def cell(arm: Arm, paths: HostPaths = REAL) -> tuple[str, str]:
    """(host backing, guest backing) of an arm, for the report's host x guest grid."""
    if arm.vm is None:
        return arm.backing, "native"
    if arm.vm.page_size:
        return f"hugetlb-{arm.vm.page_size}", arm.backing
    if arm.vm.mthp:
        return f"mthp-{arm.vm.mthp}", arm.backing
    if arm.vm.backing == "memfd":
        return "shmem", arm.backing
    thp = parse_selected(read_text(paths.thp_enabled, "never") or "never")
    return ("4k" if thp == "never" else "thp"), arm.backing


def layer_checks(arm: Arm, evidence: dict[str, Any], target: str, host_backing: str,
                 min_fraction: float, judge: Judge | None) -> list[Check]:
    """The evidence rules (hugelab.trial.evidence) for every layer this arm sets; `judge`:
    the application's own rule, by its workload kind (None: it has none)."""
    where = "host" if arm.vm is None else f"guest {target}"
    checks = [check_workload(arm.backing, evidence, min_fraction, where)]
    if arm.process_thp:
        checks.append(check_process(arm.process_thp, evidence.get("tree") or {}, where))
    app = app_check(evidence, judge)
    if app is not None:
        checks.append(app)
        if app.status == VERIFIED and app.governs and checks[0].status == CONTRADICTED:
            checks[0] = governed(checks[0])
    if arm.vm is not None:
        host_thp = "never" if host_backing == "4k" else "always/madvise"
        checks.append(check_vm(arm.vm.backing, arm.vm.page_size, evidence.get("qemu") or {},
                               host_thp, mthp=arm.vm.mthp, min_fraction=min_fraction))
    return checks


def governed(workload: Check) -> Check:
    """The workload layer where the application's own switch decided its pages (a verified
    app check that `governs`): the arm's backing names what the host offered, so pages that
    differ from it are the switch at work, judged by the app layer, not a contradiction."""
    return Check(NOT_APPLICABLE, f"{workload.reason}, as the application's own switch decided "
                 "(see app)", workload.layer)


def host_state_check(mon: dict[str, Any]) -> list[Check]:
    """A fragmented trial whose measured fragmentation missed its target is contradicted: it
    did not run on the host it asked for (the `host` layer of its evidence)."""
    state = mon.get("host_state") or {}
    if state.get("state") != "fragmented":
        return []
    if state.get("missed"):
        return [Check(CONTRADICTED, f"host: {state['missed']}", layer="host")]
    return [Check(VERIFIED, f"host: fragmented to {state.get('unusable', 0):.2f} of free memory "
                  f"unusable for 2 MiB pages (target {state.get('target')})", layer="host")]


# the fewest paired window blocks whose 95% signed-rank interval is finite
# (hugelab.stats.signedrank.min_pairs(0.05)): the within-trial interval of a request-level trial
MIN_WINDOW_BLOCKS = 6


def measurement_check(metrics: dict[str, Any] | None, mon: dict[str, Any]) -> list[Check]:
    """A request-level trial whose client timed every arm in fewer window blocks than its own
    interval needs measured too little to count (a stalled machine: a collapse of throughput
    under hypervisor steal left 2-3 blocks where ~45 are usual): contradicted, so flagged and
    left out of the analysis whatever its value (the rule reads the count, never the effect,
    so it cannot lean a comparison either way). Other trials: no check."""
    blocks = (metrics or {}).get("window_blocks")
    if not isinstance(blocks, int | float) or blocks >= MIN_WINDOW_BLOCKS:
        return []
    steal = (mon.get("load") or {}).get("steal_share")
    why = (f" (the hypervisor took {steal:.0%} of the CPU)" if isinstance(steal, float) and steal
           else "")
    return [Check(CONTRADICTED, f"the load generator timed every arm in only {blocks:.0f} "
                  f"window block(s), fewer than the {MIN_WINDOW_BLOCKS} a within-trial interval "
                  f"needs: the machine stalled the load{why}, or the load is too short for "
                  "its windows (duration_s, window_ops)", layer="measurement")]


def judge_evidence(evidence: dict[str, Any], checks: list[Check]) -> tuple[str, str]:
    """The trial's verdict from its layers' checks, written into `evidence` (check, reason,
    and each layer's check); returns (status, reason)."""
    status, reason = combine(checks)
    evidence.update(check=status, reason=reason, checks={c.layer: c.to_dict() for c in checks})
    return status, reason
