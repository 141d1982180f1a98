"""The report's context as sentences: block variance, a sequential stop, skipped arms,
accelerators, hardware counters and kernels."""

from __future__ import annotations

from hugelab.report.lead import compared_arms
from hugelab.report.model.result import Result


def _blocks(result: Result) -> list[str]:
    vc = result.block_variance
    if vc is None:
        return []
    if vc.pooling_warning and vc.icc is not None:  # the warning said the rest
        return [f"blocks: ICC {vc.icc:.2f}, design effect {vc.design_effect:.2f}"]
    if vc.error is not None:
        return []
    return [f"blocks: {vc.reading}"] + ([f"blocks: {vc.note}"] if vc.note else [])


def context_lines(result: Result) -> list[str]:
    """Block variance, sequential stop, skipped arms and provenance as sentences."""
    out = _blocks(result)
    seq = result.run.sequential
    if seq:
        at = seq.get("stopped_at_look")
        looks = (seq.get("plan") or {}).get("looks")
        out.append("sequential: " + (f"stopped at look {at} of {looks}" if at
                                     else f"ran every planned look ({looks})"))
    compared = compared_arms(result.comparisons)
    for arm, why in result.run.skipped.items():  # one in no comparison: a warning says so
        if arm in compared:
            out.append(f"skipped arm {arm} (this session; earlier trials compared): {why}")
    acc = result.provenance.accel_by_target
    if acc:
        out.append("accelerator per target: " + ", ".join(f"{t}={'/'.join(a)}"
                                                          for t, a in acc.items()))
    hw = result.run.hardware_counters
    if hw:
        out.append("hardware counters (dTLB misses, page walks): " +
                   ("recorded per trial with perf stat" if hw.get("available")
                    else f"not available: {hw.get('reason')}"))
    kern = result.provenance.kernels
    if kern:
        out.append("kernels: " + ", ".join(sorted(kern)))
    return out
