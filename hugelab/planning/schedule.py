"""Which of a run's scheduled trials are still to run, and the units they run in: one trial
at a time (paired), or every arm of a block at once (duet, interleaved). Pure: the trials
already done are passed in."""

from __future__ import annotations

from collections.abc import Container

from hugelab.experiment import Experiment, TrialSpec, schedule

TOGETHER = ("duet", "interleaved")  # designs whose blocks run every arm at once


def remaining(exp: Experiment, done: Container[tuple[int, str, str]],
              skipped: Container[str], native_target: str) -> list[TrialSpec]:
    """Trials still to run: those of the schedule with a (block, arm, target) not in `done`
    (each guest of a vm arm is a target; a native arm's is `native_target`), less the
    `skipped` arms. A duet or interleaved block runs whole."""
    targets = {a.name: a.targets() if a.vm else [native_target] for a in exp.arms}
    sched = [t for t in schedule(exp) if t.arm not in skipped]
    todo = [t for t in sched if any((t.block, t.arm, name) not in done
                                    for name in targets[t.arm])]
    if exp.design in TOGETHER:
        blocks = {t.block for t in todo}
        todo = [t for t in sched if t.block in blocks]
    return todo


def units(todo: list[TrialSpec], design: str) -> list[list[TrialSpec]]:
    """paired: each trial alone, in schedule order; duet and interleaved: each block's trials
    together."""
    if design not in TOGETHER:
        return [[t] for t in todo]
    out: list[list[TrialSpec]] = []
    for t in todo:
        if out and out[-1][0].block == t.block:
            out[-1].append(t)
        else:
            out.append([t])
    return out
