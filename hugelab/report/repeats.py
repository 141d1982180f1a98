"""Replication in the report: the effect across a run's repeats, and regimes within a run.

A run of several repeats (`hugelab run --repeats R`) gets, per comparison, each repeat's own
effect and interval and the effect across repeats with the repeat as a random effect
(:mod:`hugelab.stats.repeats`: Paule-Mandel tau, HKSJ interval): the JSON key `replication`
and the "Replication" table (`sections/replication.py`). Every comparison with enough blocks is also checked for two
regimes among its per-block effects (:mod:`hugelab.stats.regimes`): its `regimes` entry, and a
table and a warning when the blocks split. Pure: Paired comparisons in, report parts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from hugelab.report.model.base import clean
from hugelab.report.model.comparison import Comparison, LoadEffect, Regimes
from hugelab.report.model.replicas import Replication
from hugelab.report.runload import RunData
from hugelab.stats import regimes
from hugelab.stats import repeats as stats_repeats
from hugelab.stats._util import StatsInputError
from hugelab.trial.load import LABELS

REGIME_ALPHA = 0.01  # a warning: conservative
LOAD_KEYS = ("steal_share", "other_busy_share", "psi_cpu_some_share", "psi_memory_some_share")
LOAD_MIN_BLOCKS = 10


class PairedLike(Protocol):
    name: str
    baseline: str
    candidate: str
    blocks: NDArray[np.int64]
    better: str

    @property
    def log_ratio(self) -> NDArray[np.float64]: ...


def run_repeats(run: dict[str, Any]) -> tuple[int, int]:
    """(repeats, blocks per repeat) of a stored run; (1, blocks) for a run of one."""
    exp = run.get("experiment") or {}
    return int(exp.get("repeats") or 1), int(exp.get("blocks") or 0)


def replication(ps: Sequence[PairedLike], run: dict[str, Any], *, alpha: float,
                margin: float) -> list[Replication] | None:
    """Per comparison: its repeats combined (None when the run has a single repeat)."""
    reps, per = run_repeats(run)
    if reps < 2 or per < 1:
        return None
    out = []
    for p in ps:
        which = p.blocks // per
        groups = [p.log_ratio[which == r] for r in range(reps)]
        head = {"name": p.name, "baseline": p.baseline, "candidate": p.candidate,
                "repeats_planned": reps}
        try:
            rep = stats_repeats.combine(groups, better=p.better, alpha=alpha, margin=margin)
        except StatsInputError as exc:
            out.append(Replication.from_json({**head, "error": exc.message}))
            continue
        out.append(Replication.from_json(clean({**head, **rep.to_dict()})))
    return out


def regimes_of(p: PairedLike) -> Regimes | None:
    """Two regimes among the comparison's per-block effects, in block order (None: too few)."""
    d = p.log_ratio
    if np.sum(np.isfinite(d)) < regimes.MIN_BLOCKS:
        return None
    return Regimes.from_json(regimes.detect(d[np.argsort(p.blocks)],
                                            alpha=REGIME_ALPHA).to_dict())


def block_load(data: RunData, series: Sequence[str]) -> dict[int, dict[str, float]]:
    """Per sampled block: each load reading (hugelab.trial.load) averaged over the trials of
    `series` in that block."""
    acc: dict[int, dict[str, list[float]]] = {}
    for name in series:
        d = data.details[data.index(name)]
        for block, mon in zip(d.blocks, d.monitors, strict=True):
            load = mon.get("load") or {}
            for k in LOAD_KEYS:
                if isinstance(load.get(k), int | float):
                    acc.setdefault(block, {}).setdefault(k, []).append(float(load[k]))
    return {b: {k: float(np.mean(v)) for k, v in ks.items()} for b, ks in acc.items()}


def load_effect(p: PairedLike, data: RunData, split: Regimes | None) -> LoadEffect | None:
    """The comparison's per-block effect against the machine's load in that block: Spearman's
    rho per reading, and with two regimes each regime's median reading (None: no load data)."""
    per = block_load(data, (p.baseline, p.candidate))
    d = dict(zip(p.blocks.tolist(), p.log_ratio.tolist(), strict=True))
    common = [b for b in d if b in per]
    if len(common) < LOAD_MIN_BLOCKS:
        return None
    out: dict[str, Any] = {"blocks": len(common), "spearman": {}}
    for k in LOAD_KEYS:
        xs = [(per[b][k], d[b]) for b in common if k in per[b]]
        if len(xs) >= LOAD_MIN_BLOCKS and len({x for x, _ in xs}) > 1:
            rho, pv = stats.spearmanr([x for x, _ in xs], [y for _, y in xs])
            out["spearman"][k] = {"rho": float(rho), "p": float(pv), "blocks": len(xs)}
    if split is not None and split.split and split.low is not None:
        cut = sorted(d.values())[split.low.blocks - 1]
        for name, pick in (("low", lambda v: v <= cut), ("high", lambda v: v > cut)):
            mine = [per[b] for b in common if pick(d[b])]
            out[f"{name}_regime_median"] = {k: float(np.median([m[k] for m in mine if k in m]))
                                            for k in LOAD_KEYS if any(k in m for m in mine)}
    strong = [f"{LABELS[k]} (rho {v['rho']:+.2f}, p {v['p']:.2g})"
              for k, v in out["spearman"].items() if v["p"] < REGIME_ALPHA]
    out["reading"] = ("the effect moved with the machine's load: " + ", ".join(strong)
                      if strong else "no link between the effect and the machine's load "
                      f"detected over {len(common)} blocks")
    return LoadEffect.from_json(clean(out))


def warnings(comps: list[Comparison], rep: list[Replication] | None) -> list[str]:
    out = [f"{r.name}: {r.reading}" for r in rep or [] if r.disagree]
    out += [f"{c.name}: {c.regimes.reading}" for c in comps
            if c.regimes is not None and c.regimes.split]
    out += [f"{c.name}: {c.load_effect.reading}" for c in comps
            if c.load_effect is not None and c.load_effect.moved]
    return out
