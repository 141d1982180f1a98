"""Statistics for hugelab verdicts: paired robust comparisons, planning, sequential looks, and
the (weaker) unpaired comparison of two runs.

Pure numpy/scipy, no I/O. See /work/shared/STATISTICS.md for the design.
"""

from hugelab.stats._util import StatsInputError
from hugelab.stats.blocks import VarianceComponents, pooling_warning, variance_components
from hugelab.stats.classic import ClassicTable, Normality, classic_table, margin_of_error, normality
from hugelab.stats.drift import Drift, effect_drift
from hugelab.stats.grid import Grid, make_grid, percent_of_native
from hugelab.stats.multiple import adjust, compare_many, holm
from hugelab.stats.paired import Comparison, compare, log_ratios, verdicts
from hugelab.stats.plan import Detectable, Plan, detectable_effect, plan, simulate_power
from hugelab.stats.repeats import Replication
from hugelab.stats.repeats import combine as combine_repeats
from hugelab.stats.sequential import (
    SequentialDecision,
    SequentialPlan,
    run_sequential,
    sequential_decision,
    sequential_plan,
)
from hugelab.stats.tails import TailComparison, compare_tails
from hugelab.stats.unpaired import Unpaired, compare_unpaired, two_sample_shift

__all__ = [
    "ClassicTable",
    "Comparison",
    "Detectable",
    "Drift",
    "Grid",
    "Normality",
    "Plan",
    "Replication",
    "SequentialDecision",
    "SequentialPlan",
    "StatsInputError",
    "TailComparison",
    "Unpaired",
    "VarianceComponents",
    "adjust",
    "classic_table",
    "compare",
    "combine_repeats",
    "compare_many",
    "compare_tails",
    "compare_unpaired",
    "detectable_effect",
    "effect_drift",
    "holm",
    "log_ratios",
    "make_grid",
    "margin_of_error",
    "normality",
    "percent_of_native",
    "plan",
    "pooling_warning",
    "run_sequential",
    "sequential_decision",
    "sequential_plan",
    "simulate_power",
    "two_sample_shift",
    "variance_components",
    "verdicts",
]
