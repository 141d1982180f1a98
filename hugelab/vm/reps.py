"""Several trials per guest boot (an arm's vm trials_per_boot = k): the boot is the unit of
analysis, its value the geometric mean of its k trials; the k values themselves are kept (in
the trial's provenance, `reps`) so the report can split the variance between boots and within
them (hugelab.stats.components), and `plan` can say where repetitions pay.

Pure: results in, one result out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hugelab.workloads.base import WorkloadResult


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values; the arithmetic mean where one is not positive."""
    if values and all(v > 0 for v in values):
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return sum(values) / len(values) if values else math.nan


def combine(results: Sequence[WorkloadResult], walls: Sequence[float]) -> WorkloadResult:
    """One boot's result from its trials (in order): every metric's geometric mean, the last
    trial's self-evidence and notes, and `reps` = the trials' primary values and wall times."""
    if not results:
        raise ValueError("a boot without trials has no result")
    last = results[-1]
    metrics = {k: geomean([r.metrics[k] for r in results if k in r.metrics])
               for k in results[0].metrics}
    info = {**last.info, "reps": {"n": len(results), "values": [r.value for r in results],
                                  "wall_s": [round(w, 4) for w in walls]}}
    return WorkloadResult(metrics, results[0].primary, results[0].unit, results[0].better,
                          last.evidence, info)
