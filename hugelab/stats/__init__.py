"""Statistics for hugelab verdicts: paired robust comparisons, planning, sequential looks, and
the (weaker) unpaired comparison of two runs.

Pure numpy/scipy, no I/O. The names below load their module on first use (PEP 562), so
importing one submodule (hugelab.stats.windows, as the request client does, in guests too)
does not import every other and scipy with them: under TCG that import was seconds of every
PostgreSQL trial in a guest. `plan` is the module's name too (importing the module sets
the package's attribute), so the function is imported from hugelab.stats.plan. See /work/shared/STATISTICS.md for the design.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hugelab.stats._util import StatsInputError
    from hugelab.stats.blocks import VarianceComponents, pooling_warning, variance_components
    from hugelab.stats.classic import (
        ClassicTable,
        Normality,
        classic_table,
        margin_of_error,
        normality,
    )
    from hugelab.stats.drift import Drift, effect_drift
    from hugelab.stats.grid import Grid, make_grid, percent_of_native
    from hugelab.stats.multiple import adjust, compare_many, holm
    from hugelab.stats.paired import Comparison, compare, log_ratios, verdicts
    from hugelab.stats.plan import Detectable, Plan, detectable_effect, simulate_power
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

# name -> (module, its name there)
_WHERE = {
    "ClassicTable": ("classic", "ClassicTable"),
    "Comparison": ("paired", "Comparison"),
    "Detectable": ("plan", "Detectable"),
    "Drift": ("drift", "Drift"),
    "Grid": ("grid", "Grid"),
    "Normality": ("classic", "Normality"),
    "Plan": ("plan", "Plan"),
    "Replication": ("repeats", "Replication"),
    "SequentialDecision": ("sequential", "SequentialDecision"),
    "SequentialPlan": ("sequential", "SequentialPlan"),
    "StatsInputError": ("_util", "StatsInputError"),
    "TailComparison": ("tails", "TailComparison"),
    "Unpaired": ("unpaired", "Unpaired"),
    "VarianceComponents": ("blocks", "VarianceComponents"),
    "adjust": ("multiple", "adjust"),
    "classic_table": ("classic", "classic_table"),
    "combine_repeats": ("repeats", "combine"),
    "compare": ("paired", "compare"),
    "compare_many": ("multiple", "compare_many"),
    "compare_tails": ("tails", "compare_tails"),
    "compare_unpaired": ("unpaired", "compare_unpaired"),
    "detectable_effect": ("plan", "detectable_effect"),
    "effect_drift": ("drift", "effect_drift"),
    "holm": ("multiple", "holm"),
    "log_ratios": ("paired", "log_ratios"),
    "make_grid": ("grid", "make_grid"),
    "margin_of_error": ("classic", "margin_of_error"),
    "normality": ("classic", "normality"),
    "percent_of_native": ("grid", "percent_of_native"),
    "pooling_warning": ("blocks", "pooling_warning"),
    "run_sequential": ("sequential", "run_sequential"),
    "sequential_decision": ("sequential", "sequential_decision"),
    "sequential_plan": ("sequential", "sequential_plan"),
    "simulate_power": ("plan", "simulate_power"),
    "two_sample_shift": ("unpaired", "two_sample_shift"),
    "variance_components": ("blocks", "variance_components"),
    "verdicts": ("paired", "verdicts"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _WHERE[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value

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
    "pooling_warning",
    "run_sequential",
    "sequential_decision",
    "sequential_plan",
    "simulate_power",
    "two_sample_shift",
    "variance_components",
    "verdicts",
]
