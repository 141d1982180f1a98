"""Experiments: the model (arms, layers, factors), TOML parsing and the seeded schedule."""

from hugelab.experiment.model import (
    BACKINGS,
    Arm,
    Experiment,
    Factor,
    GuestLayer,
    PoolSpec,
    TrialSpec,
    VmLayer,
    default_experiment,
    schedule,
)
from hugelab.experiment.parse import load_experiment, parse_experiment

__all__ = ["BACKINGS", "Arm", "Experiment", "Factor", "GuestLayer", "PoolSpec", "TrialSpec", "VmLayer",
           "default_experiment", "load_experiment", "parse_experiment", "schedule"]
