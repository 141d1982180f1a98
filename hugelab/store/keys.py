"""The run key: which run of a store an experiment's trials go to. One run per experiment
(its `Experiment.key()`), or one per host (`KEY@LABEL`) when many hosts share a store; the
same key resumes. The store owns this format: nothing else writes or splits it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hugelab.experiment import Experiment

SEP = "@"


def run_key(exp: Experiment, label: str = "") -> str:
    """The run of `exp` in a store: one per experiment, or one per host (`label`) when many
    hosts share the store; the same key resumes."""
    return labelled(exp.key(), label)


def labelled(experiment_key: str, label: str = "") -> str:
    """The run key of an experiment key and a host's label (pure)."""
    return f"{experiment_key}{SEP}{label}" if label else experiment_key


def experiment_key_of(key: str) -> str:
    """The experiment key a run key holds, its label dropped (pure)."""
    return key.split(SEP, 1)[0]


def labelled_pattern(experiment_key: str) -> str:
    """A LIKE pattern for the runs of an experiment that carry a host's label."""
    return f"{experiment_key}{SEP}%"
