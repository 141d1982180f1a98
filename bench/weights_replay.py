"""The looks of kept request-interleaved runs replayed twice, trials ranked and trials weighted
by their own SEs (issue 39): what each statistic decides on the same real blocks.

    .venv/bin/python bench/weights_replay.py STORE...

Each STORE is a run made with `--until-verdict` (a held-out series' kept store). The replay
uses the run's own recorded plan (its looks and boundaries as the budget left them) and the
stopper as it is now (hugelab.stopping.SequentialStopper, start-slot adjustment and futility
stops included), once with `weigh_trials=False` (the signed-rank test on every trial alike)
and once as hugelab runs it. A run stops when every comparison has stopped, so the statistic
that made the run may have stopped it before the other would have decided: such a replay ends
open at the blocks the run made ("open at N"). Read only.
"""

from __future__ import annotations

import argparse
from typing import Any

from hugelab.experiment import Experiment
from hugelab.stats.sequential import SequentialPlan
from hugelab.stopping import SequentialStopper
from hugelab.store.locate import open_store


def replayed(path: str, weigh: bool) -> dict[str, str]:
    """Each comparison's decision, the blocks it came at and its statistic."""
    with open_store(path) as st:
        run = st.run(1)
        seq: dict[str, Any] = run["sequential"]
        exp = Experiment.from_dict(run["experiment"])
        stop = SequentialStopper(exp, st, looks=None, alpha=float(seq["family_alpha"]),
                                 margin=float(seq["plan"]["margin"]), weigh_trials=weigh)
        stop.plan = SequentialPlan(**{k: tuple(v) if isinstance(v, list) else v
                                      for k, v in seq["plan"].items()})
        blocks = max(r[0] for r in st.values(1)) + 1
        for b in range(1, blocks + 1):
            if stop(1, b, {}):
                break
    out = {}
    for arm in stop.comparisons:
        d = stop.decided.get(arm)
        if d is None:
            out[arm] = f"open at {blocks} (the run ended)"
            continue
        at = stop.plan.look_sizes[d["look"] - 1]
        futile = " futile" if "futile" in str(d.get("reason")) else ""
        out[arm] = f"{d['decision']}{futile} ({at}, {d['effect_pct']:+.2f}%)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    args = ap.parse_args()
    print("| store | comparison | ranked (blocks, effect) | weighted (blocks, effect) |")
    print("|---|---|---|---|")
    for path in args.stores:
        ranked, weighed = replayed(path, False), replayed(path, True)
        name = path.rsplit("/", 1)[-1].removesuffix(".db")
        for arm in ranked:
            print(f"| {name} | {arm} | {ranked[arm]} | {weighed[arm]} |", flush=True)


if __name__ == "__main__":
    main()
